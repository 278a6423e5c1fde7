// The fluid flow-level network: concurrent flows share every link max-min fairly.
//
// A flow first waits its path latency α (sum of per-hop latencies, SimGrid's convention: no
// bandwidth is used meanwhile), then enters the fluid system. Rates are re-solved only when a
// flow enters or leaves, at most once per timestamp (the solve runs in the engine's late
// phase, after every other event of that instant), and only for the affected flows (below);
// the others keep their rates and predicted finishes. One engine event is pending at any time: the
// earliest predicted finish. A lone flow finishes at α + size/β_bottleneck, exactly as in the
// analytical model (same transfer_time rounding).
//
// Re-solving is local: only the new flows and those held by a link that changed are solved
// again at first (with the flows that their links hold in turn), and the set grows only as far
// as the max-min optimality condition (every flow has a bottleneck) is found broken — see
// solve() in flow_network.cpp. The result is the exact max-min allocation (to a relative
// tolerance of 1e-9) at a cost that follows the size of the perturbation, not of the network.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/batched_events.h"
#include "network/completion_queue.h"
#include "network/max_min_solver.h"
#include "network/network_model.h"

namespace parallax {

class FlowNetwork final : public NetworkModel {
 public:
  struct Options {
    /// Check after every solve that no link is over capacity, and at every completion that
    /// the bytes delivered equal the size (for tests; costs time).
    bool audit = false;
    /// Leave out of the sharing the links that can never be a flow's only bottleneck (see
    /// redundant_resources() in flow_network.cpp); off only to test that it changes nothing.
    bool skip_redundant_links = true;
  };
  /// What the audit saw: the worst relative overload of a link and the worst relative
  /// mismatch between bytes delivered and bytes sent.
  struct Audit {
    double worst_overload = 0.0;
    double worst_bytes_error = 0.0;
    uint64_t flows_without_bottleneck = 0;  ///< summed over checks; 0 = always max-min
    uint64_t wrong_recorded_bottlenecks = 0;  ///< recorded bottleneck that does not hold
    uint64_t stale_maxima = 0;              ///< a link's maintained fastest rate was wrong
    double worst_aggregate_error = 0.0;     ///< maintained load vs recomputed, / capacity
    uint64_t solves_checked = 0;
  };

  FlowNetwork(Engine& engine, const Topology& topo, const Router& router)
      : FlowNetwork(engine, topo, router, Options{}) {}
  FlowNetwork(Engine& engine, const Topology& topo, const Router& router, Options options);

  std::string_view name() const override { return "flow"; }

  /// The current rate of a flow in the fluid phase, or nullopt (still in latency, or done).
  std::optional<Bandwidth> rate_of(uint64_t flow_id) const;
  size_t active_flows() const { return active_; }
  /// How many capacity resources the sharing leaves out as redundant.
  size_t redundant_resource_count() const;
  /// Number of re-solves, the total number of flows they covered, and how many times a
  /// subset had to grow (incrementality figures).
  uint64_t solves() const { return solves_; }
  uint64_t solved_flow_count() const { return solved_flow_count_; }
  uint64_t repairs() const { return repairs_; }
  const Audit& audit() const { return audit_; }

 protected:
  void begin(const FlowStart& flow) override;

 private:
  // Fields in the order the solve touches them: the first 64 bytes of each record hold what
  // every repair round reads, the rest what only starts, completions and audits use.
  // Resources held in the record itself: a two-tier fabric's flows cross at most 4 once the
  // redundant links are left out (GPU–NIC attach dropped for the NIC's line); a longer path
  // (an explicit topology's) takes a block of its own.
  static constexpr size_t kInlinePath = 4;
  struct Flow {
    uint8_t path_size = 0;           // routes are shortest paths: hop counts fit (begin checks)
    uint8_t weight = 1;              // equal flows it stands for; `rate` is each one's
    bool has_bottleneck = false;     // listed in resources_[bottleneck].bottlenecked
    bool in_fluid = false;
    std::array<uint32_t, kInlinePath> short_path{};  // the path's resources, when it fits
    uint32_t tag = 0;                // what the sink hears back
    uint32_t in_subset = 0;          // the low half of a solve's mark (see next_mark)
    uint32_t bottleneck = 0;         // resource where the last solve froze it
    double rate = 0;                 // bytes/s, of each of the `weight` flows
    uint32_t bottleneck_pos = 0;     // index of this flow in that resource's bottlenecked list
    // Index of this flow in each resource's list, when the path fits.
    std::array<uint32_t, kInlinePath> short_position{};
    uint32_t long_index = 0;         // a longer path and its positions: long_paths_[long_index]
    double remaining = 0;            // bytes left at last_update
    Time last_update;
    uint64_t id = 0;                 // the completion order among equal finishes
    FlowSink* sink = nullptr;
    // 96 bytes: an all-to-all holds millions of records at once. The finish lives in the
    // completion heap, a solve's proposed rates in its own scratch.
  };
  static_assert(sizeof(void*) != 8 || sizeof(Flow) <= 96, "a flow record grew: see the note closing Flow");
  std::span<const uint32_t> path(const Flow& f) const {
    return f.path_size <= kInlinePath ? std::span<const uint32_t>(f.short_path.data(), f.path_size)
                                      : std::span<const uint32_t>(long_paths_[f.long_index].get(), f.path_size);
  }
  uint32_t& position(Flow& f, size_t i) {
    return f.path_size <= kInlinePath ? f.short_position[i] : long_paths_[f.long_index][f.path_size + i];
  }
  // What only the audit reads, per slot, kept apart from the records.
  struct AuditBytes {
    double size = 0;
    double delivered = 0;
  };
  // Per-link aggregates of the committed rates are kept up to date as rates change, so that a
  // solve reads a link's load and fastest flow without walking its flow list. The load is a
  // fixed-point integer sum (kRateScale units per byte/s): adding and removing rates millions
  // of times leaves no rounding drift.
  struct Resource {
    uint64_t touched = 0;                // marks
    uint64_t expanded = 0;               // marks: its held flows are in the subset
    // Scratch of the solve in progress (valid where touched == the solve's subset mark).
    int64_t subset_committed_fixed = 0;  // Σ committed rates of subset flows on this link
    uint32_t local = 0;                  // index in the round's subproblem
    bool max_stale = false;
    bool dirty = false;                  // listed in dirty_ since the last solve
    int64_t load_fixed = 0;              // Σ committed rates, fixed point
    double capacity = 0;
    double max_rate = 0;                 // fastest committed rate, exact unless max_stale
    std::vector<uint32_t> bottlenecked;  // flows whose recorded bottleneck is this link
    std::vector<uint32_t> flows;
    uint32_t shares = 0;                 // Σ weights of `flows`
    uint64_t outside_max_mark = 0;
    double outside_max = 0;              // fastest committed rate of flows outside the subset
    uint64_t level_mark = 0;             // the solve whose seeding computed `level`
    double level = 0;                    // water level a new flow would reach here
    uint64_t givers_mark = 0;            // the solve that seeded this link's givers
  };

  uint32_t allocate_slot();
  void enter(uint32_t slot);
  void leave(uint32_t slot);
  void mark_dirty(uint32_t resource);
  void request_solve();
  void solve();
  uint64_t next_mark();
  void add_to_subset(uint32_t slot, uint64_t subset_mark);
  void add_held(Resource& res, uint64_t subset_mark);
  void add_predicted_givers(uint32_t slot, uint64_t subset_mark);
  double predicted_level(uint32_t r, uint64_t subset_mark);
  static int64_t fixed(double rate);
  double committed_max(uint32_t r);
  double outside_max(uint32_t r, uint64_t subset_mark, uint64_t round_mark);
  bool holds_tentative(uint32_t r, double rate, uint64_t subset_mark, uint64_t round_mark);
  void commit_rate(Flow& f, double rate);
  void set_bottleneck(uint32_t slot, uint32_t r);
  void drop_bottleneck(uint32_t slot);
  void settle(uint32_t slot);
  void on_completion_event();
  void reschedule_completion();
  void check_allocation();

  Options options_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_slots_;
  // Paths longer than kInlinePath, each with its positions after it; reused by index.
  std::vector<std::unique_ptr<uint32_t[]>> long_paths_;
  std::vector<uint32_t> free_long_paths_;
  std::vector<Resource> resources_;
  // The audit's own sums per resource, apart so that the records the solves walk stay small.
  struct AuditTotals {
    double load = 0;
    double max = 0;
  };
  std::vector<AuditTotals> audit_totals_;
  std::vector<AuditBytes> audit_bytes_;  // per slot, with options_.audit only
  std::vector<uint8_t> redundant_;  // per resource: never a flow's only bottleneck
  std::vector<uint32_t> path_scratch_;  // begin() builds a path here
  std::vector<uint32_t> dirty_;
  std::vector<uint32_t> entering_;
  CompletionQueue due_;  // every fluid flow's predicted finish
  BatchedEvents<uint32_t> entering_at_{engine_, [this](uint32_t slot) { enter(slot); }};  // after α
  EventId completion_event_;
  Time completion_at_ = Time::max();
  bool solve_pending_ = false;
  uint64_t mark_ = 0;
  size_t active_ = 0;
  uint64_t solves_ = 0;
  uint64_t solved_flow_count_ = 0;
  uint64_t repairs_ = 0;
  Audit audit_;

  // Scratch, reused between solves.
  MaxMinSolver solver_;
  MaxMinSolver::Problem problem_;
  std::vector<double> rates_;         // the rate the solve proposes, by subset index
  std::vector<uint32_t> bottlenecks_;  // the link that holds it there, by subset index
  std::vector<uint32_t> subset_;
  std::vector<uint32_t> touched_;  // one slot per resource and one spare (written branch-free)
};

}  // namespace parallax
