// The fleet simulation's FleetResult (fleet_simulation.h): latencies, throughput, SLO
// attainment, per pool and per instance use, GPU-hours.
#include "serving/fleet_simulation.h"

namespace parallax::fleet_detail {

// The time instance k held its GPUs, and the part of it it ran (served or drained), to `end`.
double Simulation::held_seconds(const Instance& in, Time end) {
  Time held = in.held;
  if (in.state != Instance::State::kOff) held += std::max(Time::zero(), end - in.held_since);
  return held.seconds();
}

double Simulation::running_seconds(const Instance& in, Time end) {
  Time running = in.running;
  if (in.state == Instance::State::kServing || in.state == Instance::State::kDraining) {
    running += std::max(Time::zero(), end - in.running_since);
  }
  return running.seconds();
}

FleetResult Simulation::result() {
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

}  // namespace parallax::fleet_detail
