// The collective sweep driver (collective_sweep.h). Every process runs the same loops; rank 0
// decides each step (measure, skip, stop) and broadcasts it, so the processes never disagree
// about which collective comes next even though only rank 0 reads the resume file and the clock.
#include "harness/collective_sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "harness/whole_line.h"

namespace parallax::harness {
namespace {

enum Decision : int64_t { kMeasure = 0, kSkip = 1, kStop = 2 };

enum class SweepEnd { kDone, kFailed, kStopped };

std::string format_us(double us) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f us", us);
  return buf;
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class SweepRunner {
 public:
  explicit SweepRunner(const SweepContext& c)
      : c_(c), o_(*c.options), coord_(*c.coordinator), root_(c.coordinator->is_root()),
        type_size_(nccl_tests_type_size(c.options->dtype).value_or(1)) {}

  SweepSummary run() {
    std::vector<RankGroup> groups;
    for (const auto& name : o_.groups) {
      RankGroup g = form_group(name, c_.places);
      if (!g.why_not.empty()) {
        if (root_) note() << "skipping group " << name << ": " << g.why_not << "\n";
        continue;
      }
      groups.push_back(std::move(g));
    }
    for (const RankGroup& group : groups) total_ += points_of(group) * static_cast<int>(c_.forcings.size());

    for (const RankGroup& group : groups) {
      for (const Forcing& forcing : c_.forcings) {
        const SweepEnd end = run_sweep(group, forcing);
        if (end == SweepEnd::kFailed) ++summary_.failed_sweeps;
        if (end == SweepEnd::kStopped) {
          summary_.stopped = true;
          summary_.stop_reason = c_.clock->stop_reason();
          if (root_) note() << "stopping: " << summary_.stop_reason << "; everything measured so far is written\n";
          return summary_;
        }
      }
    }
    return summary_;
  }

 private:
  WholeLine note() const { return WholeLine(*c_.progress, std::string(c_.harness) + ": "); }

  SweepEnd run_sweep(const RankGroup& group, const Forcing& forcing) {
    if (coord_.broadcast(root_ && c_.clock->must_stop() ? kStop : kMeasure) == kStop) return SweepEnd::kStopped;
    // A sweep whose every point is already in the file needs no communicator (resume after a
    // crash late in a long run should not pay for dozens of communicator set-ups).
    if (coord_.broadcast(root_ && all_resumed(group, forcing) ? 1 : 0) == 1) {
      for (CollectiveOp op : o_.collectives) {
        for (const auto& redop : redops_of(op)) replay_table(group, forcing, op, redop);
      }
      return SweepEnd::kDone;
    }
    std::string error;
    try {
      c_.backend->open(group, forcing, o_.sizes.back());
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (coord_.any(!error.empty())) {
      report_failure(group, forcing, "setting up the group", error);
      c_.backend->close(true);
      return SweepEnd::kFailed;
    }
    SweepEnd end = SweepEnd::kDone;
    for (CollectiveOp op : o_.collectives) {
      for (const auto& redop : redops_of(op)) {
        end = run_op(group, forcing, op, redop);
        if (end != SweepEnd::kDone) break;
      }
      if (end != SweepEnd::kDone) break;
    }
    c_.backend->close(end == SweepEnd::kFailed);
    return end;
  }

  // The points of one sweep of `group` that are measured (or found in the file).
  int points_of(const RankGroup& group) const {
    const int n = static_cast<int>(group.ranks.size());
    int points = 0;
    for (CollectiveOp op : o_.collectives) {
      int per_redop = 0;
      for (int64_t size : o_.sizes) {
        if (size_to_count(op, size, type_size_, n).count == 0) continue;
        for (bool in_place : o_.in_place_modes) per_redop += measures_nothing(op, n, in_place) ? 0 : 1;
      }
      points += per_redop * static_cast<int>(redops_of(op).size());
    }
    return points;
  }

  std::vector<std::string> redops_of(CollectiveOp op) const {
    return reduces(op) ? o_.redops : std::vector<std::string>{"none"};
  }

  int root_of(const RankGroup& group) const { return o_.root % static_cast<int>(group.ranks.size()); }

  nlohmann::ordered_json identity(const RankGroup& group, const Forcing& forcing, CollectiveOp op,
                                  const std::string& redop, const SizedCount& sized, bool in_place) const {
    nlohmann::ordered_json j;
    j["kind"] = "collective";
    j["run"] = c_.run_id;
    j["op"] = std::string(op_name(op));
    j["group"] = group.name;
    j["ranks"] = group.ranks.size();
    j["nodes"] = group.nodes;
    j["ranks_per_node"] = group.ranks_per_node;
    j["members"] = member_labels(group, c_.places);
    j["size_bytes"] = sized.size_bytes;
    j["count"] = sized.count;
    j["dtype"] = o_.dtype;
    j["redop"] = redop;
    j["root"] = has_root(op) ? root_of(group) : -1;
    j["algo"] = forcing.algo;
    j["proto"] = forcing.proto;
    j["in_place"] = in_place;
    return j;
  }

  bool all_resumed(const RankGroup& group, const Forcing& forcing) const {
    if (!c_.log) return false;
    const int n = static_cast<int>(group.ranks.size());
    for (CollectiveOp op : o_.collectives) {
      for (const auto& redop : redops_of(op)) {
        for (int64_t size : o_.sizes) {
          const SizedCount sized = size_to_count(op, size, type_size_, n);
          if (sized.count == 0) continue;
          for (bool in_place : o_.in_place_modes) {
            if (measures_nothing(op, n, in_place)) continue;
            if (!c_.log->find(measurement_key(identity(group, forcing, op, redop, sized, in_place)))) return false;
          }
        }
      }
    }
    return true;
  }

  std::optional<NcclTestsTableWriter> make_table(const RankGroup& group, const Forcing& forcing, CollectiveOp op,
                                                 const std::string& redop) const {
    NcclTestsTableOptions t;
    t.op = op;
    t.dtype = o_.dtype;
    t.redop = reduces(op) ? redop : "sum";
    t.root = root_of(group);
    t.ranks = static_cast<int>(group.ranks.size());
    if (!c_.devices.empty()) {
      for (size_t i = 0; i < group.ranks.size(); ++i) {
        NcclTestsDevice d = c_.devices.at(static_cast<size_t>(group.ranks[i]));
        d.rank = static_cast<int>(i);
        t.devices.push_back(d);
      }
    }
    t.min_bytes = o_.sizes.front();
    t.max_bytes = o_.sizes.back();
    t.step_factor = o_.step_factor;
    std::string members;
    for (const auto& m : member_labels(group, c_.places)) members += (members.empty() ? "" : " ") + m;
    t.title_comment = c_.harness + ": group " + group.name + " (" + members + "), algo " + forcing.algo + ", proto " +
                      forcing.proto + "\ntime: mean of the timed iterations on the slowest rank; #wrong: not checked";
    try {
      return NcclTestsTableWriter(t);
    } catch (const std::exception& e) {
      note() << "no table for " << op_name(op) << " on " << group.name << ": " << e.what() << "\n";
      return std::nullopt;
    }
  }

  void print_header(const std::optional<NcclTestsTableWriter>& table) {
    if (!table) return;
    // The writer prints a prediction's header (one untimed iteration); say what was measured.
    std::string header = table->header();
    header = replace_once(header, "warmup iters: 0 iters: 1",
                          "warmup iters: " + std::to_string(o_.warmup) + " iters: " + std::to_string(o_.iters));
    *c_.table << header << std::flush;
  }

  // Prints a table from the file alone: a sweep that resumed with nothing left to measure.
  void replay_table(const RankGroup& group, const Forcing& forcing, CollectiveOp op, const std::string& redop) {
    if (!root_) return;
    auto table = make_table(group, forcing, op, redop);
    if (!table) return;
    print_header(table);
    std::vector<NcclTestsRow> rows;
    for (int64_t size : o_.sizes) {
      const SizedCount sized = size_to_count(op, size, type_size_, static_cast<int>(group.ranks.size()));
      if (sized.count == 0) continue;
      NcclTestsRow row = empty_row(group, op, redop, sized);
      for (bool in_place : o_.in_place_modes) {
        if (measures_nothing(op, static_cast<int>(group.ranks.size()), in_place)) continue;
        ++index_;
        ++summary_.resumed;
        if (const auto* done = c_.log->find(measurement_key(identity(group, forcing, op, redop, sized, in_place)))) {
          set_block(row, in_place, op, group, sized, done->value("time_us", 0.0));
        }
      }
      print_row(table, row, rows);
    }
    *c_.table << table->footer(average_busbw(rows)) << std::flush;
  }

  NcclTestsRow empty_row(const RankGroup& group, CollectiveOp op, const std::string& redop,
                         const SizedCount& sized) const {
    NcclTestsRow row;
    row.size_bytes = sized.size_bytes;
    row.count = sized.count;
    row.type = o_.dtype;
    row.redop = reduces(op) ? redop : "none";
    row.root = has_root(op) ? root_of(group) : -1;
    return row;
  }

  void set_block(NcclTestsRow& row, bool in_place, CollectiveOp op, const RankGroup& group, const SizedCount& sized,
                 double time_us) const {
    if (!(time_us > 0)) return;
    auto block = make_result(op, static_cast<int>(group.ranks.size()), sized.size_bytes, time_us);
    (in_place ? row.in_place : row.out_of_place) = block;
  }

  void print_row(const std::optional<NcclTestsTableWriter>& table, const NcclTestsRow& row,
                 std::vector<NcclTestsRow>& rows) {
    if (!table || (!row.out_of_place && !row.in_place)) return;
    *c_.table << table->row(row) << std::flush;
    rows.push_back(row);
  }

  SweepEnd run_op(const RankGroup& group, const Forcing& forcing, CollectiveOp op, const std::string& redop) {
    const int n = static_cast<int>(group.ranks.size());
    std::optional<NcclTestsTableWriter> table;
    if (root_) {
      table = make_table(group, forcing, op, redop);
      print_header(table);
      if (measures_nothing(op, n, true) && o_.in_place_modes.back()) {
        note() << op_name(op) << " in place on one rank moves nothing (send and receive buffers are one); "
               << "in-place points skipped\n";
      }
    }
    std::vector<NcclTestsRow> rows;
    // The cost of the next point is guessed from the last one of this op, scaled by size: a
    // bandwidth-bound point doubles with the size, a latency-bound one costs less than that.
    double last_cost_s = 0;
    int64_t last_size = 0;
    SweepEnd end = SweepEnd::kDone;
    for (int64_t size : o_.sizes) {
      const SizedCount sized = size_to_count(op, size, type_size_, n);
      NcclTestsRow row = empty_row(group, op, redop, sized);
      for (bool in_place : o_.in_place_modes) {
        if (sized.count > 0 && !measures_nothing(op, n, in_place)) ++index_;
        nlohmann::ordered_json line;
        int64_t decision = kMeasure;
        if (root_) {
          line = identity(group, forcing, op, redop, sized, in_place);
          const nlohmann::json* done = nullptr;
          const double guess = last_size > 0 ? last_cost_s * static_cast<double>(sized.size_bytes) /
                                                   static_cast<double>(last_size)
                                             : 0.0;
          if (sized.count == 0) {
            decision = kSkip;
            if (in_place == o_.in_place_modes.front()) {
              note() << op_name(op) << " on " << n << (n == 1 ? " rank: " : " ranks: ") << size << " B is less than "
                     << (size_is_total_buffer(op) ? "16 B" : "one " + o_.dtype) << " per rank; skipped\n";
            }
          } else if (measures_nothing(op, n, in_place)) {
            decision = kSkip;
          } else if (c_.log && (done = c_.log->find(measurement_key(line))) != nullptr) {
            decision = kSkip;
            ++summary_.resumed;
            set_block(row, in_place, op, group, sized, done->value("time_us", 0.0));
          } else if (c_.clock->must_stop(guess)) {
            decision = kStop;
          }
        }
        decision = coord_.broadcast(decision);
        if (decision == kStop) {
          end = SweepEnd::kStopped;
          break;
        }
        if (decision == kSkip) continue;

        CollectivePoint point;
        point.op = op;
        point.dtype = o_.dtype;
        point.redop = redop;
        point.root = root_of(group);
        point.count = sized.count;
        point.in_place = in_place;
        point.warmup = o_.warmup;
        point.iters = o_.iters;
        const auto started = std::chrono::steady_clock::now();
        std::optional<TimeStats> local;
        std::string error;
        bool peer_failed = false;
        try {
          local = c_.backend->measure(point);
        } catch (const PeerFailure&) {
          peer_failed = true;
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (coord_.any(peer_failed || !error.empty())) {
          std::ostringstream what;
          what << op_name(op) << " " << sized.size_bytes << " B " << (in_place ? "in-place" : "out-of-place");
          report_failure(group, forcing, what.str(), error);
          end = SweepEnd::kFailed;
          break;
        }
        const std::vector<double> combined =
            coord_.reduce_max(local ? std::vector<double>{local->mean_us, local->min_us, local->max_us, local->median_us}
                                    : std::vector<double>{0.0, 0.0, 0.0, 0.0});
        if (!root_) continue;
        last_cost_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        last_size = sized.size_bytes;
        write_point(line, op, group, sized, TimeStats{combined[0], combined[1], combined[2], combined[3]});
        set_block(row, in_place, op, group, sized, combined[0]);
      }
      if (root_) print_row(table, row, rows);
      if (end != SweepEnd::kDone) break;
    }
    if (root_ && table) *c_.table << table->footer(average_busbw(rows)) << std::flush;
    return end;
  }

  void write_point(nlohmann::ordered_json& line, CollectiveOp op, const RankGroup& group, const SizedCount& sized,
                   const TimeStats& t) {
    const int n = static_cast<int>(group.ranks.size());
    if (const std::string via = c_.backend->implementation(op); !via.empty()) line["via"] = via;
    line["warmup"] = o_.warmup;
    line["iters"] = o_.iters;
    line["time_us"] = round_decimals(t.mean_us, 3);
    line["time_us_min"] = round_decimals(t.min_us, 3);
    line["time_us_max"] = round_decimals(t.max_us, 3);
    line["time_us_median"] = round_decimals(t.median_us, 3);
    // nccl-tests: algbw = size / time (B/µs ÷ 1e3 = GB/s), busbw = algbw × its factor.
    const double algbw = t.mean_us > 0 ? static_cast<double>(sized.size_bytes) / t.mean_us / 1e3 : 0.0;
    line["algbw_gbs"] = round_decimals(algbw, 6);
    line["busbw_gbs"] = round_decimals(algbw * busbw_factor(op, n), 6);
    if (c_.log) c_.log->append(line);
    ++summary_.measured;
    if (!o_.quiet) {
      char bw[64];
      std::snprintf(bw, sizeof bw, "busbw %.3f GB/s", algbw * busbw_factor(op, n));
      note() << "[" << index_ << "/" << total_ << "] " << group.name << " " << line["algo"].get<std::string>() << "/"
             << line["proto"].get<std::string>() << " " << op_name(op) << " " << sized.size_bytes << " B "
             << (line["in_place"].get<bool>() ? "in-place" : "out-of-place") << ": " << format_us(t.mean_us) << ", "
             << bw << "\n";
    }
  }

  void report_failure(const RankGroup& group, const Forcing& forcing, const std::string& what,
                      const std::string& error) {
    // Each process reports its own error (the root may not have one); the sweep is abandoned.
    if (!error.empty()) {
      WholeLine(std::cerr) << c_.harness << ": group " << group.name << ", algo " << forcing.algo << ", proto " << forcing.proto
                << ": " << what << " failed: " << error << "\n";
    }
    if (root_) note() << "abandoning group " << group.name << " (algo " << forcing.algo << ", proto " << forcing.proto
                      << "); the next sweep follows\n";
  }

  const SweepContext& c_;
  const SweepOptions& o_;
  Coordinator& coord_;
  const bool root_;
  const int type_size_;
  int total_ = 0;
  int index_ = 0;
  SweepSummary summary_;
};

}  // namespace

TimeStats summarize(const std::vector<double>& iteration_us) {
  if (iteration_us.empty()) throw std::invalid_argument("summarize: no iterations");
  TimeStats t;
  double sum = 0;
  t.min_us = iteration_us.front();
  t.max_us = iteration_us.front();
  for (double v : iteration_us) {
    sum += v;
    t.min_us = std::min(t.min_us, v);
    t.max_us = std::max(t.max_us, v);
  }
  t.mean_us = sum / static_cast<double>(iteration_us.size());
  std::vector<double> sorted = iteration_us;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median_us = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  return t;
}

TimeStats slowest(const TimeStats& a, const TimeStats& b) {
  return TimeStats{std::max(a.mean_us, b.mean_us), std::max(a.min_us, b.min_us), std::max(a.max_us, b.max_us),
                   std::max(a.median_us, b.median_us)};
}

SizedCount size_to_count(CollectiveOp op, int64_t requested_bytes, int type_size, int ranks) {
  if (type_size < 1 || ranks < 1) throw std::invalid_argument("size_to_count: type size and ranks must be positive");
  const bool total = size_is_total_buffer(op);
  const int64_t parts = total ? ranks : 1;
  SizedCount s;
  s.count = requested_bytes / type_size / parts;
  // nccl-tests: base = (count / nranks) & ~(16 / eltSize − 1), so that every rank's block starts
  // 16-byte aligned; types wider than 16 B (none today) keep whole elements.
  if (total && type_size <= 16) s.count &= ~(int64_t{16 / type_size} - 1);
  s.size_bytes = s.count * type_size * parts;
  return s;
}

bool measures_nothing(CollectiveOp op, int ranks, bool in_place) {
  if (ranks != 1 || !in_place) return false;
  switch (op) {
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kReduce:
      return true;
    default:
      return false;
  }
}

namespace {

// PARALLAX_BENCH_FAULT=warmup:R: the world rank whose warm-up is made to fail, or -1.
int injected_warmup_fault() {
  const char* spec = std::getenv("PARALLAX_BENCH_FAULT");
  if (!spec) return -1;
  const std::string text = spec;
  const std::string prefix = "warmup:";
  if (text.rfind(prefix, 0) != 0) return -1;
  const std::string rank = text.substr(prefix.size());
  if (rank.empty() || rank.find_first_not_of("0123456789") != std::string::npos || rank.size() > 9) return -1;
  return std::stoi(rank);
}

}  // namespace

void warm_up_together(Coordinator& coordinator, const std::vector<int>& world_ranks,
                      const std::function<void()>& warmup) {
  std::string error;
  try {
    if (warmup) warmup();
    const int fault = injected_warmup_fault();
    if (fault >= 0 && std::find(world_ranks.begin(), world_ranks.end(), fault) != world_ranks.end()) {
      throw std::runtime_error("warm-up of rank " + std::to_string(fault) +
                               ": fault injected by PARALLAX_BENCH_FAULT");
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  // The agreement is the barrier before the timed loop: every process reaches it, failed or not.
  if (coordinator.any(!error.empty())) {
    if (!error.empty()) throw std::runtime_error(error);
    throw PeerFailure("another rank's warm-up failed");
  }
}

SweepSummary run_collective_sweeps(const SweepContext& context) {
  if (!context.options || !context.coordinator || !context.backend || !context.clock) {
    throw std::invalid_argument("run_collective_sweeps: options, coordinator, backend and clock are required");
  }
  if (context.coordinator->is_root() && (!context.table || !context.progress)) {
    throw std::invalid_argument("run_collective_sweeps: the root needs table and progress streams");
  }
  return SweepRunner(context).run();
}

}  // namespace parallax::harness
