// Prefill/decode disaggregation in the fleet simulation (fleet_simulation.h): a prefilled
// request goes to a decode instance and its KV cache crosses the network as flows.
#include "serving/fleet_simulation.h"

#include <algorithm>

namespace parallax::fleet_detail {

// A prefill instance finished request `id`'s prompt.
void Simulation::prefill_done(size_t k, size_t id) {
  const Request& r = requests_[id];
  RequestRecord& rec = records_[id];
  const int local = local_index(front_, k);
  front_.router->first_token(local, r);
  front_.router->finished(local, r);
  if (r.output_tokens == 1) {  // nothing to decode: done here
    instances_[k].scheduler->release_held(r.id);
    rec.first_token = rec.completion = engine_.now();
    first_token_seen(rec);
    rec.completed = true;
    rec.tokens_out = 1;
    population(-1);
    last_completion_ = std::max(last_completion_, engine_.now());
    if (closed_loop()) next_of_user(r);
    return;
  }
  if (!c_.kv_streaming) {
    route_to_decode(k, id);
    return;
  }
  Transfer& t = transfers_.at(r.id);  // routed when its prefill began
  t.prefill_done = true;
  t.prefill_end = engine_.now();
  if (t.flows_done) land(r.id);
}

// Picks request `id`'s decode instance and queues it there for blocks; the KV moves from
// prefill instance k once they are allocated.
void Simulation::route_to_decode(size_t k, size_t id) {
  const Request& r = requests_[id];
  int d_local = choose(decode_, r);
  // A router may pick an instance too small for this request (pools of different sizes):
  // then the first decode instance it fits on.
  if (!instances_[static_cast<size_t>(decode_.members[static_cast<size_t>(d_local)])]
           .scheduler->never_fits(r.prompt_tokens, r.output_tokens)
           .empty()) {
    for (size_t m = 0; m < decode_.members.size(); ++m) {
      if (decode_.router->available(static_cast<int>(m)) &&
          instances_[static_cast<size_t>(decode_.members[m])].scheduler->never_fits(r.prompt_tokens, r.output_tokens).empty()) {
        d_local = static_cast<int>(m);
        break;
      }
    }
  }
  const auto d = static_cast<size_t>(decode_.members[static_cast<size_t>(d_local)]);
  decode_.router->sent(d_local, r);
  count_sent(d);
  decode_.router->first_token(d_local, r);  // no prefill there
  records_[id].decode_instance = static_cast<int>(d);
  Transfer t;
  t.from = k;
  t.to = d;
  transfers_[r.id] = t;
  instances_[d].scheduler->enqueue_prefilled(r.id, r.prompt_tokens, r.output_tokens);
  poke(d);
}

// Layer-wise streaming: the prefill step that starts a prompt routes it at once, so that its
// KV can flow while the prompt is computed.
void Simulation::stream_from(size_t k, const StepPlan& plan) {
  for (const PlannedChunk& chunk : plan.chunks) {
    const Request& r = requests_[static_cast<size_t>(chunk.request)];
    if (r.output_tokens > 1 && !transfers_.contains(r.id)) route_to_decode(k, static_cast<size_t>(r.id));
  }
}

// Blocks for `id`'s KV are allocated on its decode instance: send it.
void Simulation::start_transfer(int64_t id) {
  Transfer& t = transfers_.at(id);
  const Instance& from = instances_[t.from];
  const Instance& to = instances_[t.to];
  const PoolConfig& pool = c_.pools[static_cast<size_t>(from.pool)];
  // The prompt's KV, and a hybrid model's Mamba state of the sequence. Under a hybrid allocator
  // the decode instance keeps only the last window's (or chunk's) blocks on those layers: only
  // they are sent (s: the windowed layers' share of the model's KV bytes; the pool's own share is
  // its tightest stage's, less a draft model's KV beside it).
  const int layers = c_.model.layers;
  const BatchingConfig& kept = batchings_[static_cast<size_t>(to.pool)];
  const double prompt = static_cast<double>(requests_[static_cast<size_t>(id)].prompt_tokens);
  const double s = kept.bounded_kv_share > 0 ? stage_bounded_share(c_.model, layers) : 0.0;
  const double tokens = (1.0 - s) * prompt + s * std::min(prompt, static_cast<double>(kept.bounded_kv_span));
  const double total = (tokens * kv_bytes_per_token(c_.model, pool.shape.tp, 0, layers, pool.step.kv_cache_dtype).value() +
                        mamba_state_bytes(c_.model, pool.shape.tp, 0, layers).value()) *
                       pool.shape.tp;
  // With data-parallel attention the sequence's KV sits on one rank of each instance.
  const std::vector<DeviceId> senders = attention_rank_gpus(from, id), receivers = attention_rank_gpus(to, id);
  const size_t flows = std::max(senders.size(), receivers.size());
  t.flows_left = static_cast<int>(flows);
  t.start = engine_.now();
  for (size_t f = 0; f < flows; ++f) {
    network_->start_flow(senders[f % senders.size()], receivers[f % receivers.size()],
                         Bytes(total / static_cast<double>(flows)), [this, id](const FlowCompletion&) {
                           Transfer& done = transfers_.at(id);
                           if (--done.flows_left > 0) return;
                           done.flows_done = true;
                           done.flows_end = engine_.now();
                           if (!c_.kv_streaming || done.prefill_done) land(id);
                         });
  }
}

// The GPUs of the attention rank of `instance` that holds request `id` (the whole instance
// without data-parallel attention): the rank its scheduler dispatched it to, tp·pp GPUs each.
std::vector<DeviceId> Simulation::attention_rank_gpus(const Instance& instance, int64_t id) const {
  const InstanceShape shape = c_.pools[static_cast<size_t>(instance.pool)].shape;
  if (shape.dp == 1) return instance.gpus;
  const size_t per_rank = static_cast<size_t>(shape.tp * shape.pp);
  const size_t first = static_cast<size_t>(instance.scheduler->rank_of(id)) * per_rank;
  return {instance.gpus.begin() + static_cast<std::ptrdiff_t>(first),
          instance.gpus.begin() + static_cast<std::ptrdiff_t>(first + per_rank)};
}

// The last byte was sent and the prompt computed. Streamed, a layer's KV cannot leave before
// it is computed: the last layer's share (1/L of the transfer's time) follows the prefill.
void Simulation::land(int64_t id) {
  const Transfer& t = transfers_.at(id);
  Time at = engine_.now();
  if (c_.kv_streaming) {
    at = std::max(t.flows_end, t.prefill_end + Time::ps((t.flows_end - t.start).picoseconds() / c_.model.layers));
  }
  if (at > engine_.now()) {
    engine_.schedule_at(at, [this, id] { transfer_done(id); });
  } else {
    transfer_done(id);
  }
}

void Simulation::transfer_done(int64_t id) {
  const Transfer t = transfers_.at(id);
  transfers_.erase(id);
  const auto i = static_cast<size_t>(id);
  RequestRecord& rec = records_[i];
  const Time now = engine_.now();
  rec.kv_transfer = now - t.start;
  rec.first_token = now;
  first_token_seen(rec);
  last_token_[i] = now;
  ++rec.tokens_out;
  account_kv(instances_[t.to]);
  account_kv(instances_[t.from]);
  instances_[t.to].scheduler->kv_arrived(id);
  instances_[t.from].scheduler->release_held(id);
  poke(t.from);
  poke(t.to);
  maybe_release(t.from);
  maybe_release(t.to);
}

}  // namespace parallax::fleet_detail
