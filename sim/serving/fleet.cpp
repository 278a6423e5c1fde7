// The serving fleet simulation (fleet.h).
#include "serving/fleet.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/engine.h"

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
  int pool = 0;
  BatchScheduler scheduler;
  std::unique_ptr<StepTimer> timer;
  bool busy = false;
  StepPlan plan;
  Time busy_time;
  int64_t steps = 0;
  double sequences = 0, tokens = 0;
  double kv_area = 0;  // used blocks × seconds
  Time kv_since;
};

class Simulation {
 public:
  Simulation(const FleetConfig& config, const StepTimerFactory& timers)
      : c_(config), traffic_rng_(config.seed), think_rng_(config.seed ^ 0x7417ULL) {
    build_instances(timers);
    router_ = std::make_unique<RequestRouter>(c_.router, static_cast<int>(instances_.size()), c_.seed ^ 0x5e1ec7ULL);
    reports_.resize(instances_.size());
  }

  FleetResult run() {
    start_traffic();
    if (c_.refresh_interval > Time::zero()) refresh();
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
      gpus += pool.count * pool.shape.tp * pool.shape.pp;
    }
    if (gpus > static_cast<int>(c_.topology->gpu_count())) {
      throw std::invalid_argument("the pools need " + std::to_string(gpus) + " GPUs; the topology has " +
                                  std::to_string(c_.topology->gpu_count()));
    }
    total_gpus_ = gpus;
    const GpuSpec& gpu = c_.topology->gpu_spec_of(c_.topology->gpus().front());
    for (size_t p = 0; p < c_.pools.size(); ++p) {
      const PoolConfig& pool = c_.pools[p];
      BatchingConfig batching = pool.batching;
      KvCapacity capacity;
      try {
        if (batching.kv_blocks <= 0) {
          const Bytes workspace = pool.workspace.value_or(activation_workspace(
              c_.model, pool.shape.tp, batching.token_budget, batching.max_sequences));
          capacity = kv_capacity(c_.model, gpu, pool.shape, batching.block_size, pool.memory_reserve, workspace);
          batching.kv_blocks = capacity.blocks;
        }
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("pool " + pool.name + ": " + e.what());
      }
      capacities_.push_back(capacity);
      block_counts_.push_back(batching.kv_blocks);
      std::shared_ptr<const StepModel> model;
      for (int k = 0; k < pool.count; ++k) {
        const int index = static_cast<int>(instances_.size());
        std::unique_ptr<StepTimer> timer = timers ? timers(pool, index) : nullptr;
        if (!timer) {
          if (!model) {
            try {
              model = std::make_shared<const StepModel>(c_.model, *c_.topology, pool.shape, pool.step);
            } catch (const std::invalid_argument& e) {
              throw std::invalid_argument("pool " + pool.name + ": " + e.what());
            }
          }
          timer = std::make_unique<ModelStepTimer>(model);
        }
        instances_.push_back(Instance{static_cast<int>(p), BatchScheduler(batching), std::move(timer), false, {},
                                      Time::zero(), 0, 0, 0, 0, Time::zero()});
      }
    }
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
    if (c_.refresh_interval == Time::zero()) {
      for (size_t k = 0; k < instances_.size(); ++k) reports_[k] = report(k);
    }
    const int target = router_->choose(r, reports_);
    rec.instance = target;
    Instance& in = instances_[static_cast<size_t>(target)];
    if (std::string why = in.scheduler.never_fits(r.prompt_tokens, r.output_tokens); !why.empty()) {
      rec.rejected = true;
      rec.rejection = why;
      if (closed_loop()) next_of_user(r);
      return;
    }
    router_->sent(target, r);
    population(+1);
    in.scheduler.enqueue(r.id, r.prompt_tokens, r.output_tokens, r.prefix_blocks, r.prefix_block_tokens);
    if (!in.busy) start_step(static_cast<size_t>(target));
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
    return EngineReport{static_cast<int64_t>(in.scheduler.waiting()),
                        static_cast<double>(in.scheduler.used_blocks()) / in.scheduler.config().kv_blocks};
  }

  void refresh() {
    for (size_t k = 0; k < instances_.size(); ++k) reports_[k] = report(k);
    if (arrivals_remain() || in_system_ > 0) engine_.schedule_in(c_.refresh_interval, [this] { refresh(); });
  }

  bool closed_loop() const { return !c_.replay && c_.traffic.arrival == TrafficSpec::Arrival::kClosedLoop; }

  bool arrivals_remain() const {
    return closed_loop()
               ? static_cast<int64_t>(requests_.size()) < c_.traffic.requests
               : next_arrival_ < requests_.size();
  }

  void account_kv(Instance& in) {
    const Time now = engine_.now();
    in.kv_area += static_cast<double>(in.scheduler.used_blocks()) * (now - in.kv_since).seconds();
    in.kv_since = now;
  }

  void start_step(size_t k) {
    Instance& in = instances_[k];
    account_kv(in);
    in.plan = in.scheduler.plan();
    for (int64_t r : in.plan.preempted) {
      ++records_[static_cast<size_t>(r)].preemptions;
      ++preemptions_;
    }
    for (const PrefixHit& hit : in.plan.hits) {
      RequestRecord& rec = records_[static_cast<size_t>(hit.request)];
      rec.prefix_matched_blocks = hit.matched_blocks;
      rec.prefix_blocks = hit.total_blocks;
      rec.prefix_hit_tokens = hit.skipped_tokens;
    }
    if (in.plan.empty()) return;
    const Time now = engine_.now();
    for (const PlannedChunk& chunk : in.plan.chunks) {
      RequestRecord& rec = records_[static_cast<size_t>(chunk.request)];
      if (!rec.completed && rec.first_scheduled == Time::zero() && rec.first_token == Time::zero()) {
        rec.first_scheduled = now;
      }
    }
    in.busy = true;
    const Time t = in.timer->step_time(in.plan.batch());
    in.busy_time += t;
    ++in.steps;
    in.sequences += static_cast<double>(in.plan.chunks.size());
    for (const PlannedChunk& chunk : in.plan.chunks) in.tokens += static_cast<double>(chunk.q_len);
    engine_.schedule_in(t, [this, k] { end_step(k); });
  }

  void end_step(size_t k) {
    Instance& in = instances_[k];
    account_kv(in);
    const StepOutcome out = in.scheduler.complete(in.plan);
    const Time now = engine_.now();
    for (const int64_t id : out.sampled) {
      const auto i = static_cast<size_t>(id);
      RequestRecord& rec = records_[i];
      ++rec.tokens_out;
      if (rec.first_token == Time::zero() && std::find(out.first_token.begin(), out.first_token.end(), id) != out.first_token.end()) {
        rec.first_token = now;
        router_->first_token(static_cast<int>(k), requests_[i]);
      } else {
        const Time gap = now - last_token_[i];
        rec.max_gap = std::max(rec.max_gap, gap);
        ++itl_[itl_bucket(gap.seconds())];
        ++itl_count_;
        itl_sum_ += gap.seconds();
      }
      last_token_[i] = now;
    }
    for (const int64_t id : out.finished) {
      const auto i = static_cast<size_t>(id);
      RequestRecord& rec = records_[i];
      rec.completion = now;
      rec.completed = true;
      router_->finished(static_cast<int>(k), requests_[i]);
      population(-1);
      last_completion_ = std::max(last_completion_, now);
      if (closed_loop()) next_of_user(requests_[i]);
    }
    in.busy = false;
    start_step(k);
  }

  void population(int delta) {
    const Time now = engine_.now();
    population_area_ += static_cast<double>(in_system_) * (now - population_since_).seconds();
    population_since_ = now;
    in_system_ += delta;
  }

  // ---- results ----------------------------------------------------------------------------
  FleetResult result() {
    FleetResult r;
    r.duration = last_completion_;
    r.preemptions = preemptions_;
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
      s.gpus_per_instance = c_.pools[p].shape.tp * c_.pools[p].shape.pp;
      s.kv_blocks = block_counts_[p];
      s.capacity = capacities_[p];
      double busy = 0, kv = 0, sequences = 0, tokens = 0;
      for (Instance& in : instances_) {
        if (in.pool != static_cast<int>(p)) continue;
        account_kv(in);
        ++s.instances;
        s.steps += in.steps;
        busy += in.busy_time.seconds();
        kv += in.kv_area / static_cast<double>(in.scheduler.config().kv_blocks);
        sequences += in.sequences;
        tokens += in.tokens;
      }
      if (seconds > 0) {
        s.busy_fraction = busy / seconds / s.instances;
        s.kv_occupancy = kv / seconds / s.instances;
      }
      if (s.steps > 0) {
        s.mean_batch = sequences / static_cast<double>(s.steps);
        s.mean_tokens = tokens / static_cast<double>(s.steps);
      }
      r.pools.push_back(s);
    }
    r.requests = std::move(records_);
    r.itl_histogram = std::move(itl_);
    r.itl_count = itl_count_;
    r.itl_sum_s = itl_sum_;
    return r;
  }

  const FleetConfig& c_;
  Engine engine_;
  Rng traffic_rng_, think_rng_;
  std::unique_ptr<RequestRouter> router_;
  std::vector<Instance> instances_;
  std::vector<KvCapacity> capacities_;
  std::vector<int64_t> block_counts_;
  std::vector<EngineReport> reports_;
  std::vector<Request> requests_;
  std::vector<RequestRecord> records_;
  std::vector<Time> last_token_;
  std::vector<int64_t> itl_ = std::vector<int64_t>(kItlBuckets, 0);
  int64_t itl_count_ = 0;
  double itl_sum_ = 0;
  size_t next_arrival_ = 0;
  int64_t preemptions_ = 0;
  int64_t in_system_ = 0;
  double population_area_ = 0;
  Time population_since_;
  Time last_completion_;
  int total_gpus_ = 0;
};

}  // namespace

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

FleetResult simulate_fleet(const FleetConfig& config, const StepTimerFactory& timers) {
  if (!config.topology) throw std::invalid_argument("the fleet has no topology");
  Simulation sim(config, timers);
  return sim.run();
}

}  // namespace parallax
