// The serving fleet simulation (fleet.h): construction, traffic, routing and engine steps
// (fleet_simulation.h has the state and says where the other parts live).
#include "serving/fleet.h"

#include <stdexcept>

#include "serving/data_parallel_scheduler.h"
#include "serving/fleet_simulation.h"
#include "serving/rate_bound.h"

namespace parallax::fleet_detail {

Simulation::Simulation(const FleetConfig& config, const StepTimerFactory& timers)
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

FleetResult Simulation::run() {
  start_traffic();
  if (c_.refresh_interval > Time::zero()) refresh();
  if (!scalers_.empty()) sample_load();
  engine_.run();
  return result();
}

void Simulation::build_instances(const StepTimerFactory& timers) {
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
const std::vector<double>& Simulation::pool_rates() {
  if (pool_rates_) return *pool_rates_;
  const TrafficMeans means = traffic_means(c_);
  std::vector<double>& rates = pool_rates_.emplace(c_.pools.size(), 1.0);
  for (size_t p = 0; p < c_.pools.size(); ++p) {
    if (!pool_models_[p]) continue;
    const PoolConfig& pool = c_.pools[p];
    BatchingConfig b = instance_batching(pool);
    b.prefix_caching = false;  // the bound cannot count what a cache spares: the cold rate
    b.bounded_kv_share = batchings_[p].bounded_kv_share;  // as the instances hold their blocks
    b.bounded_kv_span = batchings_[p].bounded_kv_span;
    const double prefill = prefill_rate_bound(*pool_models_[p], b, means);
    const double decode = decode_rate_bound(*pool_models_[p], b, block_counts_[p], means, Time::zero());
    const double rate =
        pool.role == PoolRole::kPrefill ? prefill : pool.role == PoolRole::kDecode ? decode : std::min(prefill, decode);
    if (rate > 0 && std::isfinite(rate)) rates[p] = rate;
  }
  return rates;
}

std::vector<double> Simulation::member_rates(const RouterSet& set) {
  const std::vector<double>& pool_rate = pool_rates();
  std::vector<double> rates;
  for (const int k : set.members) rates.push_back(pool_rate[static_cast<size_t>(instances_[static_cast<size_t>(k)].pool)]);
  return rates;
}

// Data-parallel attention ranks each schedule their own sequences; else one scheduler.
std::unique_ptr<InstanceScheduler> Simulation::make_scheduler(const PoolConfig& pool, const BatchingConfig& batching) {
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
BatchingConfig Simulation::pool_batching(const PoolConfig& pool) {
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
  apply_hybrid_kv_allocator(c_.model, pool, batching);
  capacities_.push_back(capacity);
  block_counts_.push_back(batching.kv_blocks);
  return batching;
}

// Instance k of pool p takes tp·pp consecutive GPUs from `cursor`: packed, it first moves to
// the next node when its TP groups would straddle one (placement_problem); placed by the
// pool, its first instance must fit where it was put. No GPU goes to two instances.
std::vector<DeviceId> Simulation::place(const PoolConfig& pool, int k, int& cursor, int p) {
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
std::string Simulation::outside_group(const PoolConfig& pool, int g) const {
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
Bytes Simulation::swap_block_bytes(const PoolConfig& pool, int64_t block_size) const {
  const std::vector<int> layers = split_layers(c_.model.layers, pool.shape.pp);
  const Bytes draft = pool.step.draft_model
                          ? draft_footprint(*pool.step.draft_model, pool.shape.tp, precision_of(pool)).kv_per_token
                          : Bytes(0.0);
  return (kv_bytes_per_token(c_.model, pool.shape.tp, 0, layers.front(), pool.step.kv_cache_dtype) + draft) *
         static_cast<double>(block_size);
}

Bandwidth Simulation::swap_bandwidth(const PoolConfig& pool) const {
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
void Simulation::start_traffic() {
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

void Simulation::schedule_next_arrival() {
  if (next_arrival_ >= requests_.size()) return;
  const size_t i = next_arrival_++;
  engine_.schedule_at(requests_[i].arrival, [this, i] {
    arrive(i);
    schedule_next_arrival();
  });
}

// A closed-loop user's next request, at `at`.
void Simulation::issue(uint64_t user, Time at) {
  if (static_cast<int64_t>(requests_.size()) >= c_.traffic.requests) return;
  const auto id = static_cast<int64_t>(requests_.size());
  requests_.push_back(closed_loop_request(c_.traffic, traffic_rng_, id, at, user));
  records_.emplace_back();
  last_token_.push_back(Time::zero());
  const auto i = static_cast<size_t>(id);
  engine_.schedule_at(at, [this, i] { arrive(i); });
}

void Simulation::arrive(size_t i) {
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
std::string Simulation::never_fits(const Instance& in, const Request& r) const {
  const int64_t output_here = in.role == PoolRole::kPrefill ? 1 : r.output_tokens;
  std::string why = in.scheduler->never_fits(r.prompt_tokens, output_here);
  if (why.empty() && disaggregated_) why = fits_a_decode_instance(r);
  return why;
}

// The same for the front pool at zero (the only pool behind its router: set_up_scalers).
std::string Simulation::never_fits_front(const Request& r) const {
  return never_fits(instances_[static_cast<size_t>(front_.members.front())], r);
}

// Request i refused; `in_system` when it had been counted in (population() then reports it).
void Simulation::reject(size_t i, const std::string& why, bool in_system) {
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
void Simulation::dispatch(size_t i, bool waited) {
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

int Simulation::choose(RouterSet& set, const Request& r) {
  if (c_.refresh_interval == Time::zero()) {
    for (size_t m = 0; m < set.members.size(); ++m) set.reports[m] = report(static_cast<size_t>(set.members[m]));
  }
  return set.router->choose(r, set.reports);
}

int Simulation::local_index(const RouterSet& set, size_t instance) const {
  return static_cast<int>(std::find(set.members.begin(), set.members.end(), static_cast<int>(instance)) -
                          set.members.begin());
}

std::string Simulation::fits_a_decode_instance(const Request& r) const {
  std::string why;
  for (int k : decode_.members) {
    why = instances_[static_cast<size_t>(k)].scheduler->never_fits(r.prompt_tokens, r.output_tokens);
    if (why.empty()) return {};
  }
  return "on every decode instance: " + why;
}

void Simulation::next_of_user(const Request& r) {
  const Time think = c_.traffic.think_time > Time::zero()
                         ? Time::from_seconds(think_rng_.exponential(c_.traffic.think_time.seconds()))
                         : Time::zero();
  issue(r.session, engine_.now() + think);
}

// ---- engine steps -----------------------------------------------------------------------
EngineReport Simulation::report(size_t k) const {
  const Instance& in = instances_[k];
  // Unpinned cached blocks count as free, as vLLM reports its cache use.
  return EngineReport{static_cast<int64_t>(in.scheduler->waiting()),
                      static_cast<double>(in.scheduler->used_blocks() - in.scheduler->evictable_blocks()) /
                          static_cast<double>(in.scheduler->kv_blocks())};
}

void Simulation::refresh() {
  for (RouterSet* set : {&front_, &decode_}) {
    for (size_t m = 0; m < set->members.size(); ++m) set->reports[m] = report(static_cast<size_t>(set->members[m]));
  }
  // Nothing else pending means nothing will change: refreshing on would never end.
  if (work_remains()) schedule_periodic(c_.refresh_interval, [this] { refresh(); });
}

// Events besides the periodic ones (refreshes, autoscaler samples) are pending, and requests
// remain: the periodic ones alone would keep each other going for ever.
bool Simulation::work_remains() const {
  return engine_.pending_events() > periodic_pending_ && (arrivals_remain() || in_system_ > 0 || !activator_.empty());
}

void Simulation::schedule_periodic(Time in, std::function<void()> run) {
  ++periodic_pending_;
  engine_.schedule_in(in, [this, run = std::move(run)] {
    --periodic_pending_;
    run();
  });
}

bool Simulation::arrivals_remain() const {
  return closed_loop()
             ? static_cast<int64_t>(requests_.size()) < c_.traffic.requests
             : next_arrival_ < requests_.size();
}

void Simulation::account_kv(Instance& in) {
  const Time now = engine_.now();
  in.kv_area += static_cast<double>(in.scheduler->used_blocks()) * (now - in.kv_since).seconds();
  in.kv_since = now;
}

// Starts a step on instance k if it can take one now, or wakes it when its first stage frees.
void Simulation::poke(size_t k) {
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
StepPlan Simulation::form_batch(Instance& in) {
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

void Simulation::count_preemptions(const StepPlan& plan) {
  for (int64_t r : plan.preempted) {
    ++records_[static_cast<size_t>(r)].preemptions;
    ++preemptions_;
  }
  swaps_ += plan.swaps;
}

void Simulation::start_step(size_t k) {
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

void Simulation::record_step(size_t k, Time start, Time duration, const StepPlan& plan) {
  StepRecord rec{static_cast<int>(k), start, duration, static_cast<int>(plan.chunks.size()), 0, 0};
  for (const PlannedChunk& chunk : plan.chunks) {
    // Past its prompt a sequence decodes; before, it prefills (a chunk or all of it).
    const bool decoding = chunk.kv_len - chunk.q_len >= requests_[static_cast<size_t>(chunk.request)].prompt_tokens;
    (decoding ? rec.decode_tokens : rec.prefill_tokens) += chunk.q_len;
  }
  steps_.push_back(rec);
}

void Simulation::end_step(size_t k) {
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

void Simulation::report_progress() {
  if (!c_.progress) return;
  ++finished_;
  const auto total = static_cast<int64_t>(closed_loop() ? c_.traffic.requests : static_cast<int64_t>(requests_.size()));
  if (finished_ == total || finished_ % std::max<int64_t>(1, total / 100) == 0) c_.progress(finished_, total);
}

void Simulation::population(int delta) {
  if (delta < 0) report_progress();
  const Time now = engine_.now();
  population_area_ += static_cast<double>(in_system_) * (now - population_since_).seconds();
  population_since_ = now;
  in_system_ += delta;
}

}  // namespace parallax::fleet_detail

namespace parallax {

using fleet_detail::kItlBase;
using fleet_detail::kItlGrowth;
using fleet_detail::Simulation;


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
