// The serving fleet simulation (fleet.h).
#include "serving/fleet.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <stdexcept>

#include "engine/engine.h"
#include "serving/data_parallel_scheduler.h"
#include "serving/rate_bound.h"
#include "network/network_model.h"
#include "topology/router.h"

namespace parallax {
namespace {

constexpr double kItlBase = 1e-6;  // the first bucket ends at 1 µs
constexpr double kItlGrowth = 1.01;
constexpr size_t kItlBuckets = 2400;  // up to 1e-6 · 1.01^2400 ≈ 2·10⁴ s

size_t itl_bucket(double seconds) {
  if (!(seconds > kItlBase)) return 0;
  const double i = std::floor(std::log(seconds / kItlBase) / std::log(kItlGrowth)) + 1;
  return static_cast<size_t>(std::min(i, static_cast<double>(kItlBuckets - 1)));
}

struct Instance {
  Instance(int pool_index, PoolRole pool_role, std::vector<DeviceId> placed, std::unique_ptr<InstanceScheduler> batching,
           std::unique_ptr<StepTimer> step_timer, int stages)
      : pool(pool_index), role(pool_role), gpus(std::move(placed)), scheduler(std::move(batching)),
        timer(std::move(step_timer)), depth(stages) {}

  int pool = 0;
  PoolRole role = PoolRole::kColocated;
  std::vector<DeviceId> gpus;
  std::unique_ptr<InstanceScheduler> scheduler;
  std::unique_ptr<StepTimer> timer;
  enum class State : uint8_t { kServing, kStarting, kDraining, kOff };
  State state = State::kServing;
  uint64_t generation = 0;       ///< bumped by every start: a cancelled start's wake-up is stale
  Time held_since;               ///< when it last took its GPUs
  Time held;                     ///< time it held them before that
  Time running_since;            ///< when it last began serving
  Time running;                  ///< time it served (or drained) before that
  int depth = 1;                 ///< steps it can keep in flight (its PP stages)
  std::deque<StepPlan> flight;   ///< steps started and not completed, in start order
  Time swap_per_block;           ///< PCIe time to copy one KV block to or from the host
  Bytes swap_block;              ///< one block's bytes over all the instance's GPUs
  Time next_start;               ///< when its first stage takes the next batch
  Time last_done;                ///< when the latest step started completes
  bool wake_pending = false;     ///< a poke is scheduled at next_start
  Time busy_time;
  int64_t steps = 0;
  double sequences = 0, tokens = 0;
  double kv_area = 0;  // used blocks × seconds
  Time kv_since;
};

// A router and the fleet-wide indices of the instances it chooses among.
struct RouterSet {
  std::unique_ptr<RequestRouter> router;
  std::vector<int> members;
  std::vector<EngineReport> reports;  ///< one per member, as last refreshed
};

class Simulation {
 public:
  Simulation(const FleetConfig& config, const StepTimerFactory& timers)
      : c_(config), traffic_rng_(config.seed), think_rng_(config.seed ^ 0x7417ULL) {
    build_instances(timers);
    for (size_t k = 0; k < instances_.size(); ++k) {
      (instances_[k].role == PoolRole::kDecode ? decode_ : front_).members.push_back(static_cast<int>(k));
    }
    disaggregated_ = !decode_.members.empty();
    if (disaggregated_ && front_.members.empty()) throw std::invalid_argument("decode pools need a prefill pool");
    for (size_t k = 0; k < instances_.size() && disaggregated_; ++k) {
      if (instances_[k].role == PoolRole::kColocated) {
        throw std::invalid_argument("a fleet with decode pools has only prefill and decode pools");
      }
    }
    if (!disaggregated_) {
      for (const Instance& in : instances_) {
        if (in.role == PoolRole::kPrefill) throw std::invalid_argument("prefill pools need a decode pool");
      }
    }
    front_.router = std::make_unique<RequestRouter>(c_.router, static_cast<int>(front_.members.size()), c_.seed ^ 0x5e1ec7ULL,
                                                    c_.router_index_blocks);
    front_.reports.resize(front_.members.size());
    if (disaggregated_) {
      decode_.router = std::make_unique<RequestRouter>(c_.decode_router, static_cast<int>(decode_.members.size()),
                                                       c_.seed ^ 0xdec0deULL);
      decode_.reports.resize(decode_.members.size());
      path_router_ = std::make_unique<Router>(*c_.topology);
      network_ = make_network_model(c_.kv_network, engine_, *c_.topology, *path_router_);
    }
    if (c_.router == RoutingPolicy::kLeastTime) front_.router->set_rates(member_rates(front_));
    if (disaggregated_ && c_.decode_router == RoutingPolicy::kLeastTime) decode_.router->set_rates(member_rates(decode_));
    set_up_scalers();
  }

  FleetResult run() {
    start_traffic();
    if (c_.refresh_interval > Time::zero()) refresh();
    if (!scalers_.empty()) sample_load();
    engine_.run();
    return result();
  }

 private:
  void build_instances(const StepTimerFactory& timers) {
    if (c_.pools.empty()) throw std::invalid_argument("the fleet has no pool");
    int gpus = 0;
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      const PoolConfig& pool = c_.pools[p];
      if (pool.count < 1) throw std::invalid_argument("pool " + pool.name + ": count must be at least 1");
      gpus += pool.count * pool.shape.gpus();
    }
    if (gpus > static_cast<int>(c_.topology->gpu_count())) {
      throw std::invalid_argument("the pools need " + std::to_string(gpus) + " GPUs; the topology has " +
                                  std::to_string(c_.topology->gpu_count()));
    }
    total_gpus_ = gpus;
    owner_.assign(c_.topology->gpu_count(), -1);
    int cursor = 0;
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      const PoolConfig& pool = c_.pools[p];
      try {
        pool_topology(c_, pool);  // on node groups: placed, or refused with the reason
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("pool " + pool.name + ": " + e.what());
      }
      const BatchingConfig batching = pool_batching(pool);
      batchings_.push_back(batching);
      const Bytes block = swap_block_bytes(pool, batching.block_size);
      const Time per_block = batching.preemption == PreemptionMode::kSwap || batching.host_cache_blocks > 0
                                 ? Time::from_seconds(block.value() / swap_bandwidth(pool).value())
                                 : Time::zero();
      if (pool.first_gpu) cursor = *pool.first_gpu;
      std::map<int, std::shared_ptr<const StepModel>> models;  // by the first GPU's place in its node
      for (int k = 0; k < pool.count; ++k) {
        const int index = static_cast<int>(instances_.size());
        std::vector<DeviceId> placed = place(pool, k, cursor, static_cast<int>(p));
        const int offset = c_.topology->device(placed.front()).local_index;
        std::unique_ptr<StepTimer> timer = timers ? timers(pool, index) : nullptr;
        if (!timer) {
          std::shared_ptr<const StepModel>& model = models[offset];
          if (!model) {
            try {
              model = std::make_shared<const StepModel>(c_.model, pool_topology(c_, pool), pool.shape, pool.step, offset);
            } catch (const std::invalid_argument& e) {
              throw std::invalid_argument("pool " + pool.name + ": " + e.what());
            }
          }
          timer = std::make_unique<ModelStepTimer>(model);
        }
        instances_.emplace_back(static_cast<int>(p), pool.role, std::move(placed), make_scheduler(pool, batching),
                                std::move(timer), pool.shape.pp);
        instances_.back().swap_per_block = per_block;
        instances_.back().swap_block = block * static_cast<double>(pool.shape.tp * pool.shape.pp);
      }
      pool_models_.push_back(models.empty() ? nullptr : models.begin()->second);
    }
  }

  // The requests/s an instance of each pool sustains at full batches at the traffic's mean
  // lengths (rate_bound.h; a prefill pool's prefill, a decode pool's decode, the smaller of the
  // two colocated; the decode side without the TPOT objective, which would give 0 to a pool that
  // misses it; the prefill side without its prefix cache, whose savings the bound cannot count);
  // 1 where a custom timer hides the model. least_time's weights and the arrival_rate metric's
  // unit, computed once.
  const std::vector<double>& pool_rates() {
    if (pool_rates_) return *pool_rates_;
    const TrafficMeans means = traffic_means(c_);
    std::vector<double>& rates = pool_rates_.emplace(c_.pools.size(), 1.0);
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      if (!pool_models_[p]) continue;
      const PoolConfig& pool = c_.pools[p];
      BatchingConfig b = instance_batching(pool);
      b.prefix_caching = false;  // the bound cannot count what a cache spares: the cold rate
      const double prefill = prefill_rate_bound(*pool_models_[p], b, means);
      const double decode = decode_rate_bound(*pool_models_[p], b, block_counts_[p], means, Time::zero());
      const double rate =
          pool.role == PoolRole::kPrefill ? prefill : pool.role == PoolRole::kDecode ? decode : std::min(prefill, decode);
      if (rate > 0 && std::isfinite(rate)) rates[p] = rate;
    }
    return rates;
  }

  std::vector<double> member_rates(const RouterSet& set) {
    const std::vector<double>& pool_rate = pool_rates();
    std::vector<double> rates;
    for (const int k : set.members) rates.push_back(pool_rate[static_cast<size_t>(instances_[static_cast<size_t>(k)].pool)]);
    return rates;
  }

  // Data-parallel attention ranks each schedule their own sequences; else one scheduler.
  static std::unique_ptr<InstanceScheduler> make_scheduler(const PoolConfig& pool, const BatchingConfig& batching) {
    if (pool.shape.dp > 1) {
      try {
        return std::make_unique<DataParallelScheduler>(batching, pool.shape.dp);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("pool " + pool.name + ": " + e.what());
      }
    }
    return std::make_unique<BatchScheduler>(batching);
  }

  // The pool's batching with its KV capacity (derived from memory unless given) and swap space.
  BatchingConfig pool_batching(const PoolConfig& pool) {
    BatchingConfig batching = pool.batching;
    batching.hold_finished = pool.role == PoolRole::kPrefill;
    if (pool.role != PoolRole::kColocated && batching.policy == BatchingPolicy::kStatic) {
      throw std::invalid_argument("pool " + pool.name + ": static batching has no place in a disaggregated fleet");
    }
    KvCapacity capacity;
    try {
      if (batching.kv_blocks <= 0) {
        capacity = pool_kv_capacity(c_, pool);
        batching.kv_blocks = capacity.blocks;
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("pool " + pool.name + ": " + e.what());
    }
    if (batching.preemption == PreemptionMode::kSwap) {
      batching.swap_blocks =
          static_cast<int64_t>(pool.swap_space.value() / swap_block_bytes(pool, batching.block_size).value());
    }
    if (pool.host_cache.value() > 0) {
      batching.host_cache_blocks =
          static_cast<int64_t>(pool.host_cache.value() / swap_block_bytes(pool, batching.block_size).value());
    }
    capacities_.push_back(capacity);
    block_counts_.push_back(batching.kv_blocks);
    return batching;
  }

  // Instance k of pool p takes tp·pp consecutive GPUs from `cursor`: packed, it first moves to
  // the next node when its TP groups would straddle one (placement_problem); placed by the
  // pool, its first instance must fit where it was put. No GPU goes to two instances.
  std::vector<DeviceId> place(const PoolConfig& pool, int k, int& cursor, int p) {
    const int per_node = gpus_per_node(*c_.topology);
    const int n = pool.shape.gpus();
    const auto gpu_name = [&](int g) { return c_.topology->device(c_.topology->gpus()[static_cast<size_t>(g)]).name; };
    if (std::string why = placement_problem(pool.shape, per_node, cursor % per_node); !why.empty()) {
      if (pool.first_gpu && k == 0) throw std::invalid_argument("pool " + pool.name + ": at " + gpu_name(cursor) + ", " + why);
    }
    cursor = packed_start(pool.shape, per_node, cursor);
    if (cursor + n > static_cast<int>(c_.topology->gpu_count())) {
      throw std::invalid_argument("pool " + pool.name + ": instance " + std::to_string(k) + " needs " + std::to_string(n) +
                                  " GPUs from GPU " + std::to_string(cursor) + "; the topology has " +
                                  std::to_string(c_.topology->gpu_count()) + " (TP groups are kept inside nodes)");
    }
    std::vector<DeviceId> placed;
    for (int g = cursor; g < cursor + n; ++g) {
      if (const std::string why = outside_group(pool, g); !why.empty()) {
        throw std::invalid_argument("pool " + pool.name + ": instance " + std::to_string(k) + " " + why);
      }
      if (owner_[static_cast<size_t>(g)] >= 0) {
        throw std::invalid_argument("pool " + pool.name + ": GPU " + gpu_name(g) + " is already pool " +
                                    c_.pools[static_cast<size_t>(owner_[static_cast<size_t>(g)])].name + "'s");
      }
      owner_[static_cast<size_t>(g)] = p;
      placed.push_back(c_.topology->gpus()[static_cast<size_t>(g)]);
    }
    cursor += n;
    return placed;
  }

  // On a cluster of node groups: why GPU g is not the pool's group's (empty when it is).
  std::string outside_group(const PoolConfig& pool, int g) const {
    const TopologyInfo& info = c_.topology->info();
    if (info.node_groups.empty()) return {};
    const auto node_of = [&](int gpu) { return c_.topology->device(c_.topology->gpus()[static_cast<size_t>(gpu)]).node; };
    const NodeGroup* own = node_group_of(info, node_of(*pool.first_gpu));
    const NodeGroup* here = node_group_of(info, node_of(g));
    if (own == here) return {};
    return "would run on " + c_.topology->device(c_.topology->gpus()[static_cast<size_t>(g)]).name + ", in group " +
           here->name + ", past its group " + own->name + "'s nodes";
  }

  // One KV block on one GPU of the stage with the most layers (every GPU copies its own shard
  // over its own link at once).
  Bytes swap_block_bytes(const PoolConfig& pool, int64_t block_size) const {
    const std::vector<int> layers = split_layers(c_.model.layers, pool.shape.pp);
    const Bytes draft = pool.step.draft_model
                            ? draft_footprint(*pool.step.draft_model, pool.shape.tp, precision_of(pool)).kv_per_token
                            : Bytes(0.0);
    return (kv_bytes_per_token(c_.model, pool.shape.tp, 0, layers.front(), pool.step.kv_cache_dtype) + draft) *
           static_cast<double>(block_size);
  }

  Bandwidth swap_bandwidth(const PoolConfig& pool) const {
    if (pool.swap_bandwidth) return *pool.swap_bandwidth;
    constexpr double kPciePayload = 0.85;  // 256-byte payloads in ~300-byte packets
    const Bandwidth link = pool_topology(c_, pool).info().gpu_host_link;
    if (!(link.value() > 0)) {
      throw std::invalid_argument("pool " + pool.name +
                                  ": the topology gives its GPUs no PCIe link; set kv_cache.swap_bandwidth");
    }
    return link * kPciePayload;
  }

  // ---- traffic ----------------------------------------------------------------------------
  void start_traffic() {
    if (!c_.replay && c_.traffic.arrival == TrafficSpec::Arrival::kClosedLoop) {
      const int users = static_cast<int>(std::min<int64_t>(c_.traffic.users, c_.traffic.requests));
      for (int u = 0; u < users; ++u) issue(static_cast<uint64_t>(u), Time::zero());
      return;
    }
    requests_ = c_.replay ? *c_.replay : open_loop_requests(c_.traffic, traffic_rng_);
    records_.resize(requests_.size());
    last_token_.assign(requests_.size(), Time::zero());
    schedule_next_arrival();
  }

  void schedule_next_arrival() {
    if (next_arrival_ >= requests_.size()) return;
    const size_t i = next_arrival_++;
    engine_.schedule_at(requests_[i].arrival, [this, i] {
      arrive(i);
      schedule_next_arrival();
    });
  }

  // A closed-loop user's next request, at `at`.
  void issue(uint64_t user, Time at) {
    if (static_cast<int64_t>(requests_.size()) >= c_.traffic.requests) return;
    const auto id = static_cast<int64_t>(requests_.size());
    requests_.push_back(closed_loop_request(c_.traffic, traffic_rng_, id, at, user));
    records_.emplace_back();
    last_token_.push_back(Time::zero());
    const auto i = static_cast<size_t>(id);
    engine_.schedule_at(at, [this, i] { arrive(i); });
  }

  void arrive(size_t i) {
    const Request& r = requests_[i];
    RequestRecord& rec = records_[i];
    rec.id = r.id;
    rec.arrival = r.arrival;
    rec.prompt_tokens = r.prompt_tokens;
    rec.output_tokens = r.output_tokens;
    if (!front_.router->any_available()) {
      // Every instance scaled to zero: the request waits at the gateway (Knative's activator)
      // and asks for an instance at once (a draining one serves again at once), unless no
      // instance could ever take it.
      if (std::string why = never_fits_front(r); !why.empty()) {
        reject(i, why);
        return;
      }
      population(+1);
      activator_.push_back(i);
      scale_from_zero();
      if (front_.router->any_available()) release_activator();
      return;
    }
    dispatch(i, false);
  }

  // Why instance `in` (of the front pools) could never take `r`, else empty. A prefill instance
  // computes the prompt and samples the first token only.
  std::string never_fits(const Instance& in, const Request& r) const {
    const int64_t output_here = in.role == PoolRole::kPrefill ? 1 : r.output_tokens;
    std::string why = in.scheduler->never_fits(r.prompt_tokens, output_here);
    if (why.empty() && disaggregated_) why = fits_a_decode_instance(r);
    return why;
  }

  // The same for the front pool at zero (the only pool behind its router: set_up_scalers).
  std::string never_fits_front(const Request& r) const {
    return never_fits(instances_[static_cast<size_t>(front_.members.front())], r);
  }

  // Request i refused; `in_system` when it had been counted in (population() then reports it).
  void reject(size_t i, const std::string& why, bool in_system = false) {
    RequestRecord& rec = records_[i];
    rec.rejected = true;
    rec.rejection = why;
    if (in_system) {
      population(-1);
    } else {
      report_progress();
    }
    if (closed_loop()) next_of_user(requests_[i]);
  }

  // Routes request i to an instance of the front pools; `waited` when it comes from the
  // activator's queue (already counted in the system).
  void dispatch(size_t i, bool waited) {
    const Request& r = requests_[i];
    RequestRecord& rec = records_[i];
    const int local = choose(front_, r);
    const int target = front_.members[static_cast<size_t>(local)];
    rec.instance = target;
    Instance& in = instances_[static_cast<size_t>(target)];
    if (std::string why = never_fits(in, r); !why.empty()) {
      reject(i, why, waited);  // not after a wait: never_fits_front checked it first
      return;
    }
    const int64_t output_here = in.role == PoolRole::kPrefill ? 1 : r.output_tokens;
    front_.router->sent(local, r);
    count_sent(static_cast<size_t>(target));
    if (!waited) population(+1);
    in.scheduler->enqueue(r.id, r.prompt_tokens, output_here, r.prefix_blocks, r.prefix_block_tokens);
    poke(static_cast<size_t>(target));
  }

  int choose(RouterSet& set, const Request& r) {
    if (c_.refresh_interval == Time::zero()) {
      for (size_t m = 0; m < set.members.size(); ++m) set.reports[m] = report(static_cast<size_t>(set.members[m]));
    }
    return set.router->choose(r, set.reports);
  }

  int local_index(const RouterSet& set, size_t instance) const {
    return static_cast<int>(std::find(set.members.begin(), set.members.end(), static_cast<int>(instance)) -
                            set.members.begin());
  }

  std::string fits_a_decode_instance(const Request& r) const {
    std::string why;
    for (int k : decode_.members) {
      why = instances_[static_cast<size_t>(k)].scheduler->never_fits(r.prompt_tokens, r.output_tokens);
      if (why.empty()) return {};
    }
    return "on every decode instance: " + why;
  }

  // ---- prefill/decode disaggregation ---------------------------------------------------------
  // A prefill instance finished request `id`'s prompt.
  void prefill_done(size_t k, size_t id) {
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
  void route_to_decode(size_t k, size_t id) {
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
  void stream_from(size_t k, const StepPlan& plan) {
    for (const PlannedChunk& chunk : plan.chunks) {
      const Request& r = requests_[static_cast<size_t>(chunk.request)];
      if (r.output_tokens > 1 && !transfers_.contains(r.id)) route_to_decode(k, static_cast<size_t>(r.id));
    }
  }

  // Blocks for `id`'s KV are allocated on its decode instance: send it.
  void start_transfer(int64_t id) {
    Transfer& t = transfers_.at(id);
    const Instance& from = instances_[t.from];
    const Instance& to = instances_[t.to];
    const PoolConfig& pool = c_.pools[static_cast<size_t>(from.pool)];
    // The prompt's KV, and a hybrid model's Mamba state of the sequence.
    const int layers = c_.model.layers;
    const double total = (static_cast<double>(requests_[static_cast<size_t>(id)].prompt_tokens) *
                              kv_bytes_per_token(c_.model, pool.shape.tp, 0, layers, pool.step.kv_cache_dtype).value() +
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
  std::vector<DeviceId> attention_rank_gpus(const Instance& instance, int64_t id) const {
    const InstanceShape shape = c_.pools[static_cast<size_t>(instance.pool)].shape;
    if (shape.dp == 1) return instance.gpus;
    const size_t per_rank = static_cast<size_t>(shape.tp * shape.pp);
    const size_t first = static_cast<size_t>(instance.scheduler->rank_of(id)) * per_rank;
    return {instance.gpus.begin() + static_cast<std::ptrdiff_t>(first),
            instance.gpus.begin() + static_cast<std::ptrdiff_t>(first + per_rank)};
  }

  // The last byte was sent and the prompt computed. Streamed, a layer's KV cannot leave before
  // it is computed: the last layer's share (1/L of the transfer's time) follows the prefill.
  void land(int64_t id) {
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

  void transfer_done(int64_t id) {
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

  void next_of_user(const Request& r) {
    const Time think = c_.traffic.think_time > Time::zero()
                           ? Time::from_seconds(think_rng_.exponential(c_.traffic.think_time.seconds()))
                           : Time::zero();
    issue(r.session, engine_.now() + think);
  }

  // ---- engine steps -----------------------------------------------------------------------
  EngineReport report(size_t k) const {
    const Instance& in = instances_[k];
    // Unpinned cached blocks count as free, as vLLM reports its cache use.
    return EngineReport{static_cast<int64_t>(in.scheduler->waiting()),
                        static_cast<double>(in.scheduler->used_blocks() - in.scheduler->evictable_blocks()) /
                            static_cast<double>(in.scheduler->kv_blocks())};
  }

  void refresh() {
    for (RouterSet* set : {&front_, &decode_}) {
      for (size_t m = 0; m < set->members.size(); ++m) set->reports[m] = report(static_cast<size_t>(set->members[m]));
    }
    // Nothing else pending means nothing will change: refreshing on would never end.
    if (work_remains()) schedule_periodic(c_.refresh_interval, [this] { refresh(); });
  }

  // Events besides the periodic ones (refreshes, autoscaler samples) are pending, and requests
  // remain: the periodic ones alone would keep each other going for ever.
  bool work_remains() const {
    return engine_.pending_events() > periodic_pending_ && (arrivals_remain() || in_system_ > 0 || !activator_.empty());
  }

  void schedule_periodic(Time in, std::function<void()> run) {
    ++periodic_pending_;
    engine_.schedule_in(in, [this, run = std::move(run)] {
      --periodic_pending_;
      run();
    });
  }

  bool closed_loop() const { return !c_.replay && c_.traffic.arrival == TrafficSpec::Arrival::kClosedLoop; }

  bool arrivals_remain() const {
    return closed_loop()
               ? static_cast<int64_t>(requests_.size()) < c_.traffic.requests
               : next_arrival_ < requests_.size();
  }

  void account_kv(Instance& in) {
    const Time now = engine_.now();
    in.kv_area += static_cast<double>(in.scheduler->used_blocks()) * (now - in.kv_since).seconds();
    in.kv_since = now;
  }

  // Starts a step on instance k if it can take one now, or wakes it when its first stage frees.
  void poke(size_t k) {
    Instance& in = instances_[k];
    if (static_cast<int>(in.flight.size()) >= in.depth) return;
    if (engine_.now() >= in.next_start) {
      start_step(k);
    } else if (!in.wake_pending) {
      in.wake_pending = true;
      engine_.schedule_at(in.next_start, [this, k] {
        instances_[k].wake_pending = false;
        poke(k);
      });
    }
  }

  // Forms the next batch; a plan that only preempted admits nothing by design, so plan again
  // so that the instance does not idle with work queued (at most once per sequence it holds).
  StepPlan form_batch(Instance& in) {
    StepPlan plan = in.scheduler->plan();
    int64_t swapped_out = 0;  // by plans that only preempted: copied before the step that runs
    for (size_t tries = 0;
         plan.empty() && plan.receiving.empty() && !plan.preempted.empty() && tries <= in.scheduler->waiting(); ++tries) {
      count_preemptions(plan);
      swapped_out += plan.swapped_out_blocks;
      plan = in.scheduler->plan();
    }
    plan.swapped_out_blocks += swapped_out;
    count_preemptions(plan);
    for (const PrefixHit& hit : plan.hits) {
      RequestRecord& rec = records_[static_cast<size_t>(hit.request)];
      rec.prefix_matched_blocks = hit.matched_blocks;
      rec.prefix_blocks = hit.total_blocks;
      rec.prefix_hit_tokens = hit.skipped_tokens;
      rec.prefix_host_blocks = hit.host_blocks;
    }
    return plan;
  }

  void count_preemptions(const StepPlan& plan) {
    for (int64_t r : plan.preempted) {
      ++records_[static_cast<size_t>(r)].preemptions;
      ++preemptions_;
    }
    swaps_ += plan.swaps;
  }

  void start_step(size_t k) {
    Instance& in = instances_[k];
    account_kv(in);
    StepPlan plan = form_batch(in);
    for (const int64_t id : plan.receiving) start_transfer(id);
    if (plan.empty()) return;
    const Time now = engine_.now();
    for (const PlannedChunk& chunk : plan.chunks) {
      RequestRecord& rec = records_[static_cast<size_t>(chunk.request)];
      if (!rec.scheduled) {  // a request arriving at 0 and scheduled at once still counts
        rec.scheduled = true;
        rec.first_scheduled = now;
      }
    }
    StepTiming t = in.timer->timing(plan.batch());
    // vLLM's swap mode copies the blocks before the step's forward, on the step's critical path;
    // so do prefix-cache blocks coming back from the host tier. Data-parallel ranks copy over
    // their own GPUs' links at once: the step waits for the rank with the most.
    const auto swapped = [](const StepPlan& p) { return p.swapped_out_blocks + p.swapped_in_blocks; };
    const auto loaded = [](const StepPlan& p) { return p.host_loaded_blocks; };
    if (const int64_t copied = swapped(plan); copied > 0) {
      const Time swap = in.swap_per_block * critical_blocks(plan, swapped);
      t.latency += swap;
      t.interval += swap;
      swap_time_ += swap;
      swap_bytes_ += in.swap_block * static_cast<double>(copied);
    }
    if (plan.host_loaded_blocks > 0) {
      const Time load = in.swap_per_block * critical_blocks(plan, loaded);
      t.latency += load;
      t.interval += load;
      host_cache_time_ += load;
      host_cache_bytes_ += in.swap_block * static_cast<double>(plan.host_loaded_blocks);
    }
    if (c_.record_steps) record_step(k, now, t.latency, plan);
    in.busy_time += t.interval;
    ++in.steps;
    in.sequences += static_cast<double>(plan.chunks.size());
    for (const PlannedChunk& chunk : plan.chunks) in.tokens += static_cast<double>(chunk.q_len);
    // Steps leave the last stage in the order they entered the first.
    in.last_done = std::max(now + t.latency, in.last_done);
    in.next_start = now + std::min(t.interval, t.latency);
    in.flight.push_back(std::move(plan));
    engine_.schedule_at(in.last_done, [this, k] { end_step(k); });
    if (c_.kv_streaming && in.role == PoolRole::kPrefill) stream_from(k, in.flight.back());
    poke(k);  // with room for another step in flight, wake when the first stage frees
  }

  // The blocks `count` gives a plan that the step waits for: all of them, or with data-parallel
  // ranks the most of one rank's part, plus what replans before it carried into the whole.
  template <typename Count>
  static int64_t critical_blocks(const StepPlan& plan, const Count& count) {
    if (plan.parts.empty()) return count(plan);
    int64_t most = 0, sum = 0;
    for (const StepPlan& part : plan.parts) {
      most = std::max(most, count(part));
      sum += count(part);
    }
    return most + (count(plan) - sum);
  }

  void record_step(size_t k, Time start, Time duration, const StepPlan& plan) {
    StepRecord rec{static_cast<int>(k), start, duration, static_cast<int>(plan.chunks.size()), 0, 0};
    for (const PlannedChunk& chunk : plan.chunks) {
      // Past its prompt a sequence decodes; before, it prefills (a chunk or all of it).
      const bool decoding = chunk.kv_len - chunk.q_len >= requests_[static_cast<size_t>(chunk.request)].prompt_tokens;
      (decoding ? rec.decode_tokens : rec.prefill_tokens) += chunk.q_len;
    }
    steps_.push_back(rec);
  }

  void end_step(size_t k) {
    Instance& in = instances_[k];
    account_kv(in);
    const StepPlan plan = std::move(in.flight.front());
    in.flight.pop_front();
    const StepOutcome out = in.scheduler->complete(plan);
    const Time now = engine_.now();
    if (in.role == PoolRole::kPrefill) {
      for (const int64_t id : out.finished) prefill_done(k, static_cast<size_t>(id));
      poke(k);
      maybe_release(k);
      return;
    }
    for (size_t j = 0; j < out.sampled.size(); ++j) {
      const int64_t id = out.sampled[j];
      const auto i = static_cast<size_t>(id);
      RequestRecord& rec = records_[i];
      const int produced = out.produced[j];
      rec.tokens_out += produced;
      if (std::find(out.first_token.begin(), out.first_token.end(), id) != out.first_token.end()) {
        rec.first_token = now;
        first_token_seen(rec);
        front_.router->first_token(local_index(front_, k), requests_[i]);
      } else {
        const Time gap = now - last_token_[i];
        rec.max_gap = std::max(rec.max_gap, gap);
        ++itl_[itl_bucket(gap.seconds())];
        ++itl_count_;
        itl_sum_ += gap.seconds();
      }
      // Tokens accepted from a speculated step arrive with the first: no gap between them.
      itl_[itl_bucket(0.0)] += produced - 1;
      itl_count_ += produced - 1;
      last_token_[i] = now;
    }
    for (const int64_t id : out.finished) {
      const auto i = static_cast<size_t>(id);
      RequestRecord& rec = records_[i];
      rec.completion = now;
      rec.completed = true;
      RouterSet& set = in.role == PoolRole::kDecode ? decode_ : front_;
      set.router->finished(local_index(set, k), requests_[i]);
      population(-1);
      last_completion_ = std::max(last_completion_, now);
      if (closed_loop()) next_of_user(requests_[i]);
    }
    poke(k);
    maybe_release(k);
  }

  void report_progress() {
    if (!c_.progress) return;
    ++finished_;
    const auto total = static_cast<int64_t>(closed_loop() ? c_.traffic.requests : static_cast<int64_t>(requests_.size()));
    if (finished_ == total || finished_ % std::max<int64_t>(1, total / 100) == 0) c_.progress(finished_, total);
  }

  void population(int delta) {
    if (delta < 0) report_progress();
    const Time now = engine_.now();
    population_area_ += static_cast<double>(in_system_) * (now - population_since_).seconds();
    population_since_ = now;
    in_system_ += delta;
  }

  // ---- autoscaling (autoscaler.h) -------------------------------------------------------------
  struct PoolScaler {
    size_t pool = 0;
    Autoscaler scaler;
    std::vector<size_t> members;  ///< the pool's instances, fleet-wide
    double load_sum = 0;          ///< samples since the last decision
    int samples = 0;
    double ttft_sum = 0;          ///< first tokens since the last decision (the ttft metric)
    int64_t ttfts = 0;
    int64_t sent = 0;             ///< requests its instances were sent since (arrival_rate)
    Time last_decision;           ///< when the sums above began
    double instance_rate = 1;     ///< requests/s an instance sustains (arrival_rate's unit)
    Time next_decision;
    PoolScaling stats;
  };

  const AutoscaleConfig& config_of(const PoolScaler& s) const { return *c_.pools[s.pool].autoscale; }

  RouterSet& set_of(const Instance& in) { return in.role == PoolRole::kDecode ? decode_ : front_; }
  const RouterSet& set_of(const Instance& in) const { return in.role == PoolRole::kDecode ? decode_ : front_; }

  // Instances past the pool's initial count start off, unavailable to the router.
  void set_up_scalers() {
    scaler_of_pool_.assign(c_.pools.size(), -1);
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      const PoolConfig& pool = c_.pools[p];
      if (!pool.autoscale) continue;
      const AutoscaleConfig& a = *pool.autoscale;
      if (a.min < 0 || a.max < 1 || a.max != pool.count || a.initial_instances() < a.min || a.initial_instances() > a.max) {
        throw std::invalid_argument("pool " + pool.name + ": autoscaling needs 0 <= min <= initial <= max = count, max >= 1");
      }
      if (a.min == 0 && pool.role == PoolRole::kDecode) {
        throw std::invalid_argument("pool " + pool.name + ": a decode pool cannot scale to zero (min 0): prefilled requests "
                                    "would have nowhere to go");
      }
      const auto front = std::count_if(c_.pools.begin(), c_.pools.end(), [](const PoolConfig& q) { return q.role != PoolRole::kDecode; });
      if (a.min == 0 && front > 1) {
        throw std::invalid_argument("pool " + pool.name + ": a pool scales to zero (min 0) only as the one pool behind its "
                                    "router (with others beside it, nothing would send it load to wake it)");
      }
      PoolScaler s{p, Autoscaler(a), {}, 0, 0, 0, 0, 0, Time::zero(), 1, a.interval, {}};
      if (a.metric == AutoscaleMetric::kArrivalRate) s.instance_rate = pool_rates()[p];
      const std::vector<Bytes> weights = stage_weight_bytes(c_.model, pool.shape, pool.step.dtype);
      s.stats.startup = startup_time(a, *std::max_element(weights.begin(), weights.end()));
      for (size_t k = 0; k < instances_.size(); ++k) {
        if (instances_[k].pool == static_cast<int>(p)) s.members.push_back(k);
      }
      for (size_t m = static_cast<size_t>(a.initial_instances()); m < s.members.size(); ++m) {
        Instance& in = instances_[s.members[m]];
        in.state = Instance::State::kOff;
        set_of(in).router->set_available(local_index(set_of(in), s.members[m]), false);
      }
      s.stats.timeline.push_back({Time::zero(), a.initial_instances(), 0, 0});
      s.stats.peak = a.initial_instances();
      sample_period_ = std::min(sample_period_, a.interval);
      scaler_of_pool_[p] = static_cast<int>(scalers_.size());
      scalers_.push_back(std::move(s));
    }
  }

  // Every sample period: each scaler's metric, and its decision when an interval has passed.
  void sample_load() {
    const Time now = engine_.now();
    for (PoolScaler& s : scalers_) {
      s.load_sum += pool_load(s);
      ++s.samples;
      if (now >= s.next_decision) {
        rescale(s);
        s.next_decision += config_of(s).interval;  // on its own grid, not drifting with the samples'
      }
    }
    if (work_remains()) schedule_periodic(sample_period_, [this] { sample_load(); });
  }

  double pool_load(const PoolScaler& s) const {
    // Requests at the activator are in flight and queued for the front pools (Knative's
    // activator reports them as the revision's concurrency).
    const AutoscaleMetric metric = config_of(s).metric;
    double load = (metric == AutoscaleMetric::kConcurrency || metric == AutoscaleMetric::kWaiting) &&
                          c_.pools[s.pool].role != PoolRole::kDecode
                      ? static_cast<double>(activator_.size())
                      : 0.0;
    for (size_t k : s.members) {
      const Instance& in = instances_[k];
      if (in.state != Instance::State::kServing) continue;
      switch (config_of(s).metric) {
        case AutoscaleMetric::kConcurrency:
          load += static_cast<double>(set_of(in).router->in_flight(local_index(set_of(in), k)));
          break;
        case AutoscaleMetric::kWaiting: load += static_cast<double>(in.scheduler->waiting()); break;
        case AutoscaleMetric::kKvCache: load += report(k).kv_utilization; break;
        case AutoscaleMetric::kTtft: break;  // per request, at its first token (first_token_seen)
        case AutoscaleMetric::kArrivalRate: break;  // per request, as it is sent (count_sent)
      }
    }
    return load;
  }

  // The interval's load for the scaler: its metric summed over the serving instances, averaged
  // over the samples; for a latency, the interval's mean as the sum that gives ⌈current × mean /
  // target⌉ (no change without a first token).
  double interval_load(const PoolScaler& s, int current) const {
    if (config_of(s).metric == AutoscaleMetric::kArrivalRate) {
      const Time since = engine_.now() - s.last_decision;
      return since > Time::zero() ? static_cast<double>(s.sent) / since.seconds() / s.instance_rate : 0.0;
    }
    if (config_of(s).metric != AutoscaleMetric::kTtft) return s.load_sum / s.samples;
    return s.ttfts > 0 ? current * s.ttft_sum / static_cast<double>(s.ttfts) : current * config_of(s).target;
  }

  // The scaler's instances serving or starting: HPA's current count.
  int serving_or_starting(const PoolScaler& s) const {
    return static_cast<int>(std::count_if(s.members.begin(), s.members.end(), [this](size_t k) {
      return instances_[k].state == Instance::State::kServing || instances_[k].state == Instance::State::kStarting;
    }));
  }

  void rescale(PoolScaler& s) {
    int current = serving_or_starting(s);
    const double load = interval_load(s, current);
    // The next interval's sums start now (what the scaling below sends counts there).
    s.load_sum = 0;
    s.samples = 0;
    s.ttft_sum = 0;
    s.ttfts = 0;
    s.sent = 0;
    s.last_decision = engine_.now();
    // Never none while requests wait at the activator.
    const int wanted = s.scaler.decide(engine_.now(), current, load, activator_.empty() ? 0 : 1);
    if (wanted == current) return;
    // Up: draining instances first (warm, still holding their GPUs), then instances off.
    while (current < wanted && (revive_draining(s) || start_instance(s))) ++current;
    if (!activator_.empty() && front_.router->any_available()) release_activator();
    for (; current > wanted; --current) {
      if (!cancel_start(s)) drain_instance(s);
    }
    record_scaling(s);
  }

  // The draining instance holding the most requests serves again; false when none drains.
  bool revive_draining(PoolScaler& s) {
    size_t chosen = s.members.size();
    int64_t most = -1;
    for (size_t m = 0; m < s.members.size(); ++m) {
      const Instance& in = instances_[s.members[m]];
      if (in.state != Instance::State::kDraining) continue;
      const int64_t held = set_of(in).router->in_flight(local_index(set_of(in), s.members[m]));
      if (held > most) {
        most = held;
        chosen = m;
      }
    }
    if (chosen == s.members.size()) return false;
    const size_t k = s.members[chosen];
    Instance& in = instances_[k];
    in.state = Instance::State::kServing;
    set_of(in).router->set_available(local_index(set_of(in), k), true);
    --s.stats.drained;
    return true;
  }

  // The first instance off starts: a fresh engine, serving after the start-up time. False when
  // every instance holds its GPUs.
  bool start_instance(PoolScaler& s) {
    const auto off = std::find_if(s.members.begin(), s.members.end(),
                                  [this](size_t m) { return instances_[m].state == Instance::State::kOff; });
    if (off == s.members.end()) return false;
    const size_t k = *off;
    Instance& in = instances_[k];
    in.state = Instance::State::kStarting;
    in.held_since = engine_.now();
    in.kv_since = engine_.now();
    const uint64_t generation = ++in.generation;
    in.scheduler = make_scheduler(c_.pools[s.pool], batchings_[s.pool]);
    set_of(in).router->forget(local_index(set_of(in), k));
    ++s.stats.started;
    engine_.schedule_in(s.stats.startup, [this, k, generation] {
      Instance& ready = instances_[k];
      if (ready.generation != generation || ready.state != Instance::State::kStarting) return;
      ready.state = Instance::State::kServing;
      ready.running_since = engine_.now();
      set_of(ready).router->set_available(local_index(set_of(ready), k), true);
      record_scaling(*scaler_of(k));
      if (ready.role != PoolRole::kDecode) release_activator();
    });
    return true;
  }

  // A request at the activator: every front pool scaled to zero that is not already starting an
  // instance starts one now, as Knative's activator wakes the autoscaler.
  void scale_from_zero() {
    for (PoolScaler& s : scalers_) {
      if (c_.pools[s.pool].role == PoolRole::kDecode) continue;
      if (serving_or_starting(s) == 0 && (revive_draining(s) || start_instance(s))) record_scaling(s);
    }
  }

  // An instance serves again: the requests waiting at the activator go to the router, in order.
  void release_activator() {
    std::deque<size_t> waiting;
    waiting.swap(activator_);
    for (const size_t i : waiting) dispatch(i, true);
  }

  // The latest start not yet serving is called off; false when there is none.
  bool cancel_start(PoolScaler& s) {
    Instance* latest = nullptr;
    for (size_t k : s.members) {
      Instance& in = instances_[k];
      if (in.state == Instance::State::kStarting && (!latest || in.held_since >= latest->held_since)) latest = &in;
    }
    if (!latest) return false;
    latest->state = Instance::State::kOff;
    latest->held += engine_.now() - latest->held_since;
    ++s.stats.cancelled;
    return true;
  }

  // The serving instance holding the fewest requests (the latest on a tie) stops taking new
  // ones and is released once it has finished them.
  void drain_instance(PoolScaler& s) {
    size_t chosen = s.members.front();
    int64_t fewest = INT64_MAX;
    for (size_t k : s.members) {
      const Instance& in = instances_[k];
      if (in.state != Instance::State::kServing) continue;
      const int64_t held = set_of(in).router->in_flight(local_index(set_of(in), k));
      if (held <= fewest) {
        fewest = held;
        chosen = k;
      }
    }
    Instance& in = instances_[chosen];
    in.state = Instance::State::kDraining;
    set_of(in).router->set_available(local_index(set_of(in), chosen), false);
    ++s.stats.drained;
    maybe_release(chosen);
  }

  // A draining instance with nothing left (no request, step or KV transfer) gives its GPUs back.
  void maybe_release(size_t k) {
    Instance& in = instances_[k];
    if (in.state != Instance::State::kDraining) return;
    const RouterSet& set = set_of(in);
    if (set.router->in_flight(local_index(set, k)) > 0 || !in.flight.empty()) return;
    for (const auto& [id, t] : transfers_) {
      if (t.from == k || t.to == k) return;
    }
    account_kv(in);
    in.state = Instance::State::kOff;
    in.held += engine_.now() - in.held_since;
    in.running += engine_.now() - in.running_since;
    record_scaling(*scaler_of(k));
  }

  void record_scaling(PoolScaler& s) {
    InstanceCountPoint point{engine_.now(), 0, 0, 0};
    for (size_t k : s.members) {
      switch (instances_[k].state) {
        case Instance::State::kServing: ++point.serving; break;
        case Instance::State::kStarting: ++point.starting; break;
        case Instance::State::kDraining: ++point.draining; break;
        case Instance::State::kOff: break;
      }
    }
    std::vector<InstanceCountPoint>& line = s.stats.timeline;
    if (line.back().at == point.at) {
      line.back() = point;
    } else {
      line.push_back(point);
    }
    s.stats.peak = std::max(s.stats.peak, point.serving + point.starting + point.draining);
  }

  // The scaler of instance k's pool, or null when that pool does not autoscale.
  PoolScaler* scaler_of(size_t k) {
    if (scalers_.empty()) return nullptr;
    const int scaler = scaler_of_pool_[static_cast<size_t>(instances_[k].pool)];
    return scaler >= 0 ? &scalers_[static_cast<size_t>(scaler)] : nullptr;
  }

  // A request sent to instance k counts for its pool's scaler (the arrival_rate metric).
  void count_sent(size_t k) {
    if (PoolScaler* s = scaler_of(k)) ++s->sent;
  }

  // A request's first token: its TTFT counts for the scaler of the pool it entered.
  void first_token_seen(const RequestRecord& rec) {
    if (PoolScaler* s = scaler_of(static_cast<size_t>(rec.instance))) {
      s->ttft_sum += rec.ttft().seconds();
      ++s->ttfts;
    }
  }

  // The time instance k held its GPUs, and the part of it it ran (served or drained), to `end`.
  static double held_seconds(const Instance& in, Time end) {
    Time held = in.held;
    if (in.state != Instance::State::kOff) held += std::max(Time::zero(), end - in.held_since);
    return held.seconds();
  }
  static double running_seconds(const Instance& in, Time end) {
    Time running = in.running;
    if (in.state == Instance::State::kServing || in.state == Instance::State::kDraining) {
      running += std::max(Time::zero(), end - in.running_since);
    }
    return running.seconds();
  }

  // ---- results ----------------------------------------------------------------------------
  FleetResult result() {
    FleetResult r;
    r.duration = last_completion_;
    r.preemptions = preemptions_;
    r.swaps = swaps_;
    r.swap_bytes = swap_bytes_;
    r.swap_time = swap_time_;
    r.host_cache_bytes = host_cache_bytes_;
    r.host_cache_time = host_cache_time_;
    r.total_gpus = total_gpus_;
    population(0);
    const double seconds = r.duration.seconds();
    r.mean_in_system = seconds > 0 ? population_area_ / seconds : 0;
    double e2e = 0;
    int64_t completed = 0;
    for (const RequestRecord& rec : records_) {
      if (!rec.completed) continue;
      e2e += rec.e2e().seconds();
      ++completed;
    }
    r.arrival_rate_times_mean_e2e = seconds > 0 ? e2e / seconds : 0;  // (n / T) · (Σ e2e / n)
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      PoolStats s;
      s.name = c_.pools[p].name;
      s.role = c_.pools[p].role;
      s.gpus_per_instance = c_.pools[p].shape.gpus();
      s.kv_blocks = block_counts_[p];
      s.capacity = capacities_[p];
      double busy = 0, kv = 0, sequences = 0, tokens = 0, held = 0, running = 0;
      for (Instance& in : instances_) {
        if (in.pool != static_cast<int>(p)) continue;
        if (in.state != Instance::State::kOff) account_kv(in);
        held += held_seconds(in, r.duration);
        running += running_seconds(in, r.duration);
        ++s.instances;
        s.steps += in.steps;
        busy += in.busy_time.seconds();
        kv += in.kv_area / static_cast<double>(in.scheduler->kv_blocks());
        sequences += in.sequences;
        tokens += in.tokens;
      }
      if (scaler_of_pool_[p] >= 0) {
        s.mean_instances = seconds > 0 ? held / seconds : 0;
        s.gpu_hours = held * s.gpus_per_instance / 3600.0;
        if (running > 0) {
          s.busy_fraction = busy / running;
          s.kv_occupancy = kv / running;
        }
        s.scaling = scalers_[static_cast<size_t>(scaler_of_pool_[p])].stats;
      } else {
        s.mean_instances = s.instances;
        s.gpu_hours = seconds * s.instances * s.gpus_per_instance / 3600.0;
        if (seconds > 0) {
          s.busy_fraction = busy / seconds / s.instances;
          s.kv_occupancy = kv / seconds / s.instances;
        }
      }
      if (s.steps > 0) {
        s.mean_batch = sequences / static_cast<double>(s.steps);
        s.mean_tokens = tokens / static_cast<double>(s.steps);
      }
      r.pools.push_back(s);
    }
    r.requests = std::move(records_);
    r.steps = std::move(steps_);
    for (const Instance& in : instances_) {
      r.instance_pool.push_back(in.pool);
      r.instance_gpus.push_back(in.gpus);
    }
    r.itl_histogram = std::move(itl_);
    r.itl_count = itl_count_;
    r.itl_sum_s = itl_sum_;
    return r;
  }

  const FleetConfig& c_;
  Engine engine_;
  Rng traffic_rng_, think_rng_;
  struct Transfer {
    size_t from = 0, to = 0;
    int flows_left = 0;
    Time start;                 ///< when its flows started
    bool flows_done = false;
    Time flows_end;
    bool prefill_done = false;  ///< streaming: the prompt is computed
    Time prefill_end;
  };
  RouterSet front_, decode_;
  bool disaggregated_ = false;
  std::unique_ptr<Router> path_router_;
  std::unique_ptr<NetworkModel> network_;
  std::map<int64_t, Transfer> transfers_;
  std::vector<Instance> instances_;
  std::vector<int> owner_;  ///< the pool each GPU went to, −1 for none
  std::vector<KvCapacity> capacities_;
  std::vector<BatchingConfig> batchings_;  ///< per pool, its KV capacity derived
  std::vector<std::shared_ptr<const StepModel>> pool_models_;  ///< per pool (null under custom timers)
  std::deque<size_t> activator_;  ///< requests waiting for a pool scaled to zero to start an instance
  std::optional<std::vector<double>> pool_rates_;  ///< pool_rates(), once computed
  std::vector<PoolScaler> scalers_;
  std::vector<int> scaler_of_pool_;        ///< index into scalers_, −1 for a fixed pool
  Time sample_period_ = Time::from_seconds(1);
  size_t periodic_pending_ = 0;  ///< refreshes and samples scheduled
  std::vector<int64_t> block_counts_;
  std::vector<Request> requests_;
  std::vector<RequestRecord> records_;
  std::vector<Time> last_token_;
  std::vector<int64_t> itl_ = std::vector<int64_t>(kItlBuckets, 0);
  std::vector<StepRecord> steps_;
  int64_t finished_ = 0;
  int64_t itl_count_ = 0;
  double itl_sum_ = 0;
  size_t next_arrival_ = 0;
  int64_t preemptions_ = 0;
  int64_t swaps_ = 0;
  Bytes swap_bytes_;
  Time swap_time_;
  Bytes host_cache_bytes_;
  Time host_cache_time_;
  int64_t in_system_ = 0;
  double population_area_ = 0;
  Time population_since_;
  Time last_completion_;
  int total_gpus_ = 0;
};

}  // namespace

const char* to_string(PoolRole r) {
  switch (r) {
    case PoolRole::kColocated: return "colocated";
    case PoolRole::kPrefill: return "prefill";
    case PoolRole::kDecode: return "decode";
  }
  return "?";
}

double itl_bucket_start(size_t i) { return i == 0 ? 0.0 : kItlBase * std::pow(kItlGrowth, static_cast<double>(i - 1)); }

double itl_quantile(const FleetResult& r, double q) {
  if (r.itl_count == 0) return 0;
  const auto rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(r.itl_count)));
  int64_t seen = 0;
  for (size_t i = 0; i < r.itl_histogram.size(); ++i) {
    seen += r.itl_histogram[i];
    if (seen >= rank) return i == 0 ? kItlBase / 2 : std::sqrt(itl_bucket_start(i) * itl_bucket_start(i + 1));
  }
  return itl_bucket_start(r.itl_histogram.size());
}

int packed_start(InstanceShape shape, int per_node, int cursor) {
  if (placement_problem(shape, per_node, cursor % per_node).empty()) return cursor;
  return cursor + per_node - cursor % per_node;
}

int packed_end(InstanceShape shape, int count, int per_node, int cursor) {
  for (int k = 0; k < count; ++k) cursor = packed_start(shape, per_node, cursor) + shape.gpus();
  return cursor;
}

KvCapacity pool_kv_capacity(const FleetConfig& c, const PoolConfig& pool) {
  const BatchingConfig& b = pool.batching;
  const DraftFootprint draft =
      pool.step.draft_model ? draft_footprint(*pool.step.draft_model, pool.shape.tp, precision_of(pool)) : DraftFootprint{};
  const Topology& gpus = pool_topology(c, pool);
  return kv_capacity(c.model, gpus.gpu_spec_of(gpus.gpus().front()), pool.shape, b.block_size,
                     pool.memory_reserve,
                     pool.workspace.value_or(instance_workspace(c.model, pool.shape, b.token_budget, b.max_sequences)),
                     b.max_sequences, precision_of(pool), draft);
}

void check_pool_shape(const FleetConfig& c, const PoolConfig& pool) {
  const StepModel probe(c.model, pool_topology(c, pool), pool.shape, pool.step);
  if (pool.batching.kv_blocks <= 0) pool_kv_capacity(c, pool);
}

const Topology& pool_topology(const FleetConfig& c, const PoolConfig& pool) {
  const TopologyInfo& info = c.topology->info();
  if (info.node_groups.empty()) return *c.topology;
  if (!pool.first_gpu) {
    std::string names;
    for (const NodeGroup& g : info.node_groups) names += (names.empty() ? "" : ", ") + g.name;
    throw std::invalid_argument("on a cluster of node groups (" + names + ") every pool is placed on its group's nodes " +
                                "(\"placement\": {\"node\": N})");
  }
  const int node = c.topology->device(c.topology->gpus()[static_cast<size_t>(*pool.first_gpu)]).node;
  return *node_group_of(info, node)->alone;
}

bool has_autoscaled_pool(const FleetResult& result) {
  return std::any_of(result.pools.begin(), result.pools.end(), [](const PoolStats& p) { return p.scaling.has_value(); });
}

void check_searchable(const FleetConfig& config, const std::string& what) {
  for (const PoolConfig& pool : config.pools) {
    if (pool.autoscale) {
      throw std::invalid_argument("pool " + pool.name + " autoscales, and " + what +
                                  " chooses fixed counts: give the pool a count instead of \"autoscale\"");
    }
  }
}

FleetResult simulate_fleet(const FleetConfig& config, const StepTimerFactory& timers) {
  if (!config.topology) throw std::invalid_argument("the fleet has no topology");
  Simulation sim(config, timers);
  return sim.run();
}

}  // namespace parallax
