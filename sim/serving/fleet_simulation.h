// The fleet simulation's state and its parts (internal to the serving library): the instances
// and routers, and the Simulation that plays a fleet (fleet.h describes the model). Its member
// functions live in four files by concern: fleet.cpp (construction, traffic, routing, engine
// steps), fleet_transfers.cpp (prefill/decode disaggregation's KV transfers),
// fleet_autoscaling.cpp (scalers, starts and drains, the activator) and fleet_result.cpp (the
// FleetResult).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "network/network_model.h"
#include "serving/fleet.h"
#include "serving/random.h"
#include "topology/router.h"

namespace parallax::fleet_detail {

inline constexpr double kItlBase = 1e-6;  // the first bucket ends at 1 µs
inline constexpr double kItlGrowth = 1.01;
inline constexpr size_t kItlBuckets = 2400;  // up to 1e-6 · 1.01^2400 ≈ 2·10⁴ s

inline size_t itl_bucket(double seconds) {
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
  Simulation(const FleetConfig& config, const StepTimerFactory& timers);
  FleetResult run();

 private:
  // ---- construction (fleet.cpp) -------------------------------------------------------------
  void build_instances(const StepTimerFactory& timers);
  const std::vector<double>& pool_rates();
  std::vector<double> member_rates(const RouterSet& set);
  static std::unique_ptr<InstanceScheduler> make_scheduler(const PoolConfig& pool, const BatchingConfig& batching);
  BatchingConfig pool_batching(const PoolConfig& pool);
  std::vector<DeviceId> place(const PoolConfig& pool, int k, int& cursor, int p);
  std::string outside_group(const PoolConfig& pool, int g) const;
  Bytes swap_block_bytes(const PoolConfig& pool, int64_t block_size) const;
  Bandwidth swap_bandwidth(const PoolConfig& pool) const;
  // ---- traffic and routing (fleet.cpp) ------------------------------------------------------
  void start_traffic();
  void schedule_next_arrival();
  void issue(uint64_t user, Time at);
  void arrive(size_t i);
  std::string never_fits(const Instance& in, const Request& r) const;
  std::string never_fits_front(const Request& r) const;
  void reject(size_t i, const std::string& why, bool in_system = false);
  void dispatch(size_t i, bool waited);
  int choose(RouterSet& set, const Request& r);
  int local_index(const RouterSet& set, size_t instance) const;
  std::string fits_a_decode_instance(const Request& r) const;
  void next_of_user(const Request& r);
  // ---- prefill/decode disaggregation (fleet_transfers.cpp) ------------------------------------
  void prefill_done(size_t k, size_t id);
  void route_to_decode(size_t k, size_t id);
  void stream_from(size_t k, const StepPlan& plan);
  void start_transfer(int64_t id);
  std::vector<DeviceId> attention_rank_gpus(const Instance& instance, int64_t id) const;
  void land(int64_t id);
  void transfer_done(int64_t id);
  // ---- engine steps (fleet.cpp) -------------------------------------------------------------
  EngineReport report(size_t k) const;
  void refresh();
  bool work_remains() const;
  void schedule_periodic(Time in, std::function<void()> run);
  bool closed_loop() const { return !c_.replay && c_.traffic.arrival == TrafficSpec::Arrival::kClosedLoop; }
  bool arrivals_remain() const;
  void account_kv(Instance& in);
  void poke(size_t k);
  StepPlan form_batch(Instance& in);
  void count_preemptions(const StepPlan& plan);
  void start_step(size_t k);

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

  void record_step(size_t k, Time start, Time duration, const StepPlan& plan);
  void end_step(size_t k);
  void report_progress();
  void population(int delta);

  // ---- autoscaling (fleet_autoscaling.cpp) ---------------------------------------------------
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

  void set_up_scalers();
  void sample_load();
  double pool_load(const PoolScaler& s) const;
  double interval_load(const PoolScaler& s, int current) const;
  int serving_or_starting(const PoolScaler& s) const;
  void rescale(PoolScaler& s);
  bool revive_draining(PoolScaler& s);
  bool start_instance(PoolScaler& s);
  void scale_from_zero();
  void release_activator();
  bool cancel_start(PoolScaler& s);
  void drain_instance(PoolScaler& s);
  void maybe_release(size_t k);
  void record_scaling(PoolScaler& s);
  PoolScaler* scaler_of(size_t k);
  void count_sent(size_t k);
  void first_token_seen(const RequestRecord& rec);

  // ---- results (fleet_result.cpp) ------------------------------------------------------------
  static double held_seconds(const Instance& in, Time end);
  static double running_seconds(const Instance& in, Time end);
  FleetResult result();

  // ---- state ---------------------------------------------------------------------------------
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

}  // namespace parallax::fleet_detail
