// Autoscaling in the fleet simulation (fleet_simulation.h, autoscaler.h): each scaler samples
// its metric, decides, and starts, cancels or drains instances; requests for a pool scaled to
// zero wait at the activator.
#include "serving/fleet_simulation.h"

namespace parallax::fleet_detail {

// Instances past the pool's initial count start off, unavailable to the router.
void Simulation::set_up_scalers() {
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
void Simulation::sample_load() {
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

double Simulation::pool_load(const PoolScaler& s) const {
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
double Simulation::interval_load(const PoolScaler& s, int current) const {
  if (config_of(s).metric == AutoscaleMetric::kArrivalRate) {
    const Time since = engine_.now() - s.last_decision;
    return since > Time::zero() ? static_cast<double>(s.sent) / since.seconds() / s.instance_rate : 0.0;
  }
  if (config_of(s).metric != AutoscaleMetric::kTtft) return s.load_sum / s.samples;
  return s.ttfts > 0 ? current * s.ttft_sum / static_cast<double>(s.ttfts) : current * config_of(s).target;
}

// The scaler's instances serving or starting: HPA's current count.
int Simulation::serving_or_starting(const PoolScaler& s) const {
  return static_cast<int>(std::count_if(s.members.begin(), s.members.end(), [this](size_t k) {
    return instances_[k].state == Instance::State::kServing || instances_[k].state == Instance::State::kStarting;
  }));
}

void Simulation::rescale(PoolScaler& s) {
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
bool Simulation::revive_draining(PoolScaler& s) {
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
bool Simulation::start_instance(PoolScaler& s) {
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
void Simulation::scale_from_zero() {
  for (PoolScaler& s : scalers_) {
    if (c_.pools[s.pool].role == PoolRole::kDecode) continue;
    if (serving_or_starting(s) == 0 && (revive_draining(s) || start_instance(s))) record_scaling(s);
  }
}

// An instance serves again: the requests waiting at the activator go to the router, in order.
void Simulation::release_activator() {
  std::deque<size_t> waiting;
  waiting.swap(activator_);
  for (const size_t i : waiting) dispatch(i, true);
}

// The latest start not yet serving is called off; false when there is none.
bool Simulation::cancel_start(PoolScaler& s) {
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
void Simulation::drain_instance(PoolScaler& s) {
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
void Simulation::maybe_release(size_t k) {
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

void Simulation::record_scaling(PoolScaler& s) {
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
Simulation::PoolScaler* Simulation::scaler_of(size_t k) {
  if (scalers_.empty()) return nullptr;
  const int scaler = scaler_of_pool_[static_cast<size_t>(instances_[k].pool)];
  return scaler >= 0 ? &scalers_[static_cast<size_t>(scaler)] : nullptr;
}

// A request sent to instance k counts for its pool's scaler (the arrival_rate metric).
void Simulation::count_sent(size_t k) {
  if (PoolScaler* s = scaler_of(k)) ++s->sent;
}

// A request's first token: its TTFT counts for the scaler of the pool it entered.
void Simulation::first_token_seen(const RequestRecord& rec) {
  if (PoolScaler* s = scaler_of(static_cast<size_t>(rec.instance))) {
    s->ttft_sum += rec.ttft().seconds();
    ++s->ttfts;
  }
}

}  // namespace parallax::fleet_detail
