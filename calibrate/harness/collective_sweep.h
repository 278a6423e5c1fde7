// The collective sweep both harnesses run: groups × forced algorithm/protocol × collectives ×
// reduction operators × sizes × out-of-place/in-place. It owns everything that is not how a
// collective is called: which points to measure (resume, sizes rounded as nccl-tests rounds
// them, in-place points that measure nothing left out), when to stop (time limit, signals), how
// the ranks agree (every decision is rank 0's, broadcast; a warm-up that fails on one rank is
// agreed on by all), the JSON line of each point and the nccl-tests table.
// A program supplies a Coordinator (one process, or MPI) and a CollectiveBackend (NCCL or MPI).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/nccl_tests_log.h"
#include "harness/measurement_log.h"
#include "harness/rank_groups.h"
#include "harness/run_context.h"
#include "harness/sweep_options.h"

namespace parallax::harness {

/// How the processes of a run agree. A process drives one or more ranks; the process of world
/// rank 0 is the root: it reads the resume file, decides what is measured next, and writes.
class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual bool is_root() const = 0;
  /// The root's value, on every process.
  virtual int64_t broadcast(int64_t value) = 0;
  virtual std::string broadcast(const std::string& bytes) = 0;
  /// True on every process when `local` is true on any.
  virtual bool any(bool local) = 0;
  /// Element-wise maximum over processes, valid on the root.
  virtual std::vector<double> reduce_max(const std::vector<double>& local) = 0;
  /// Every process's string, in process order, on every process.
  virtual std::vector<std::string> all_gather(const std::string& local) = 0;
  virtual void barrier() = 0;
};

/// The coordinator of a run in one process.
class SingleProcess final : public Coordinator {
 public:
  bool is_root() const override { return true; }
  int64_t broadcast(int64_t value) override { return value; }
  std::string broadcast(const std::string& bytes) override { return bytes; }
  bool any(bool local) override { return local; }
  std::vector<double> reduce_max(const std::vector<double>& local) override { return local; }
  std::vector<std::string> all_gather(const std::string& local) override { return {local}; }
  void barrier() override {}
};

/// Thrown by a backend on the processes whose own part of a point went well when another
/// process's part failed: the point is abandoned everywhere and only the failing process says why.
class PeerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs `warmup` (a point's untimed iterations and the wait for them) and then makes every
/// process agree on its outcome, so that a process whose warm-up failed still meets the others
/// before the timed loop instead of leaving them in a barrier it never enters. Processes that
/// drive no member of the group call it too, with an empty `warmup`. Rethrows this process's
/// error, or throws PeerFailure when only another process failed.
///
/// Fault injection for tests of this path: PARALLAX_BENCH_FAULT=warmup:R makes the warm-up of
/// world rank R fail (R among `world_ranks`, the ranks this process drives in the group).
void warm_up_together(Coordinator& coordinator, const std::vector<int>& world_ranks,
                      const std::function<void()>& warmup);

/// Times of one point, in µs: the mean of the timed iterations, their min and max, and their
/// median (what a fit should trust on a noisy machine: one descheduled iteration moves the mean,
/// not the median).
struct TimeStats {
  double mean_us = 0;
  double min_us = 0;
  double max_us = 0;
  double median_us = 0;
};

/// The stats of one rank's per-iteration times (µs). Requires at least one time.
TimeStats summarize(const std::vector<double>& iteration_us);
/// Combines ranks: field by field the slowest, since a collective ends with its last rank.
TimeStats slowest(const TimeStats& a, const TimeStats& b);

/// An algorithm/protocol forced for a sweep. `algo`/`proto` are what the JSON line records
/// ("auto" when not forced); the backend turns them into its own settings.
struct Forcing {
  std::string algo = "auto";
  std::string proto = "auto";
  std::string nccl_algo;   ///< NCCL_ALGO's value, empty to leave it unset
  std::string nccl_proto;  ///< NCCL_PROTO's value, empty to leave it unset
};

/// One point of a sweep, as the backend needs it.
struct CollectivePoint {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string dtype = "float";  ///< nccl-tests type name
  std::string redop = "sum";    ///< "none" for ops that do not reduce
  int root = 0;                 ///< index into the group; meaningful for broadcast and reduce
  int64_t count = 0;            ///< elements per rank (per peer for all-to-all), as nccl-tests
  bool in_place = false;
  int warmup = 0;
  int iters = 1;
};

/// How a harness runs collectives. Every process calls every method in the same order.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  /// Creates the communicator of `group` over the ranks this process drives, with `forcing`
  /// applied, and buffers for `max_bytes` per rank. Throws std::runtime_error naming the
  /// failing call.
  virtual void open(const RankGroup& group, const Forcing& forcing, int64_t max_bytes) = 0;
  /// Runs `warmup` then `iters` timed iterations. Processes that drive no member also call it
  /// (they join warm_up_together before the timed loop) and get nullopt; the others get the
  /// slowest of their ranks. Throws std::runtime_error naming the failing call, or PeerFailure.
  virtual std::optional<TimeStats> measure(const CollectivePoint& point) = 0;
  /// Releases the group. `failed`: a call failed, so communicators are aborted, not drained.
  virtual void close(bool failed) noexcept = 0;
  /// The library call that runs `op` when there is a choice (recorded as the line's "via"),
  /// or empty.
  virtual std::string implementation(CollectiveOp) const { return ""; }
};

/// Everything a sweep needs; the references must outlive run_collective_sweeps.
struct SweepContext {
  std::string harness;  ///< program name: progress prefix and table title
  std::string run_id;
  const SweepOptions* options = nullptr;
  std::vector<Forcing> forcings{Forcing{}};
  std::vector<RankPlace> places;          ///< one per world rank
  std::vector<NcclTestsDevice> devices;   ///< one per world rank for the table, or empty
  Coordinator* coordinator = nullptr;
  CollectiveBackend* backend = nullptr;
  MeasurementLog* log = nullptr;          ///< root only; null: no file
  RunClock* clock = nullptr;
  std::ostream* table = nullptr;          ///< nccl-tests tables (root only)
  std::ostream* progress = nullptr;       ///< notes and progress (root only)
};

struct SweepSummary {
  int measured = 0;        ///< points measured and written now
  int resumed = 0;         ///< points skipped because the file already held them
  int failed_sweeps = 0;   ///< (group, forcing) sweeps cut short by an error
  bool stopped = false;    ///< the time limit or a signal ended the run early
  std::string stop_reason;
};

/// Runs the sweep on every process. Errors of one (group, forcing) sweep are reported (rank and
/// failing call) and the next sweep runs; only an error outside a sweep (writing the file)
/// throws.
SweepSummary run_collective_sweeps(const SweepContext& context);

/// The elements per rank (per peer for all-to-all) of an nccl-tests size on `ranks` ranks, and
/// the size actually moved. As current nccl-tests does, a total-buffer size (all-gather,
/// reduce-scatter, all-to-all) is divided among the ranks and each rank's share rounded down to
/// a multiple of 16 bytes (count & ~(16/type_size − 1)); the other ops take whole elements.
/// Count 0: the point is skipped.
struct SizedCount {
  int64_t count = 0;
  int64_t size_bytes = 0;
};
SizedCount size_to_count(CollectiveOp op, int64_t requested_bytes, int type_size, int ranks);

/// True for the points a sweep leaves out because they time no GPU work: on one rank, NCCL's
/// in-place all-reduce, all-gather, reduce-scatter, broadcast and reduce have nothing to move
/// (send and receive buffers are one), so their time is the host gap between two events.
bool measures_nothing(CollectiveOp op, int ranks, bool in_place);

}  // namespace parallax::harness
