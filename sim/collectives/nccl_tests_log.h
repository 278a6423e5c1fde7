// nccl-tests' text output, both ways: a reader for measured logs and a writer that prints
// Parallax's predictions in the same table layout, so the two can be read, diffed and parsed
// alike. algbw = size / time (GB = 1e9 B; size is the total buffer for AG/RS/A2A) and
// busbw = algbw × busbw_factor(op, n) (shared/reference/nccl-cost-model.md §3).
// Three generations of the layout are read (nccl-tests src/common.cu, src/util.cu):
//   legacy   (before the 2022 resync, 51af557): no root column (broadcast printed the root in
//            the redop's place), a max-delta "error" per block, "#  Rank  0 Pid …" device lines;
//   classic  (2022–2025): root column; time %.2f below 100 µs, %.1f below 10 ms, else %.0f;
//            bandwidths %6.2f; #wrong %5g;
//   current  (2025–): each number the first of %.2f, %.1f, %.0f, %.1e that fits its column;
//            #wrong %6g; `-I 1` adds i_min i_max i_p99 i_cv% to each block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/collective.h"

namespace parallax {

/// One timed block of a row (out-of-place or in-place), as printed.
struct NcclTestsResult {
  double time_us = 0;    ///< µs per operation
  double algbw_gbs = 0;  ///< GB/s (1e9 B/s)
  double busbw_gbs = 0;  ///< GB/s (1e9 B/s)
  std::string wrong;     ///< the #wrong text: "0", "N/A", or a legacy max-delta such as "0e+00"
};

/// One data row of an nccl-tests table.
struct NcclTestsRow {
  int64_t size_bytes = 0;  ///< nccl-tests "size": the total buffer for AG/RS/A2A
  int64_t count = 0;       ///< elements per rank (per peer for all-to-all)
  std::string type;        ///< "float", "half", "bfloat16", ...
  std::string redop;       ///< "sum", ..., "none"; empty when the layout has no redop column
  int root = -1;           ///< -1 where the op has no root (or the layout no root column)
  std::optional<NcclTestsResult> out_of_place, in_place;
  /// Values of the columns after the in-place block, e.g. Parallax's "algo proto" or `-S 1`'s
  /// timestamp (one value, its date and time joined by a space).
  std::vector<std::string> extra;
  int line = 0;  ///< 1-based line in the log; 0 for rows not read from a log
};

/// One "#  Rank  N Group  G Pid  P on HOST device  D [BUSID] NAME" line.
struct NcclTestsDevice {
  int rank = 0;
  std::string host;
  int device = 0;       ///< CUDA device index on its host
  std::string bus_id;   ///< as printed, without brackets: "0000:19:00", or legacy "0x19"
  std::string name;     ///< "NVIDIA H100 80GB HBM3"
};

enum class NcclTestsLayout {
  kCurrent,  ///< size count type redop root, then time algbw busbw #wrong twice (2022 on)
  kLegacy,   ///< no root column; the last column of a block is a max-delta "error" (pre-2022)
};

/// What one nccl-tests run printed, with what could be learnt about where it ran.
struct NcclTestsLog {
  std::string source;  ///< the file path, or the name given to parse_nccl_tests_log
  /// From "# Collective test starting: all_reduce_perf", else a "collective: X" comment, else
  /// the file name ("…-allreduce.txt", "alltoall_perf.log", …); nullopt if none says.
  std::optional<CollectiveOp> op;
  /// The number of device lines, else "ranks: N" comments or NCCL's "nranks N", else nullopt.
  std::optional<int> ranks;
  /// Distinct hosts of the device lines, else "N node(s)"/"Nnode" in comments, NCCL's
  /// "nNodes N", or the file name, else nullopt.
  std::optional<int> nodes;
  std::vector<NcclTestsDevice> devices;
  /// "2.18.5": from "nccl-library=21805", else "NCCL version 2.18.5+cuda12.2" or an
  /// "nccl-version: 2.18.5" comment; empty when not stated.
  std::string nccl_version;
  NcclTestsLayout layout = NcclTestsLayout::kCurrent;
  /// Names of the columns after the in-place block, from the column header (see Row::extra).
  std::vector<std::string> extra_columns;
  std::vector<NcclTestsRow> rows;
};

/// Parses nccl-tests output. Tolerates comment and header lines, blank lines, other program
/// output (NCCL INFO lines, `mpirun --tag-output` and `srun -l` prefixes), `-I 1` and other
/// per-block columns named in the header, a missing block, sizes as integers or "%e", and every
/// number style listed above. Rows are recognised by shape (integer size and count, then a type
/// word); the layout comes from the column header, else from the first row's field count.
/// Throws InputError(source, "line N", reason) for a row-shaped line that does not parse, for a
/// second run in the same text, and when there are no data rows at all.
NcclTestsLog parse_nccl_tests_log(std::string_view text, const std::string& source);
/// Reads and parses the file at `path`. Throws InputError naming the path if it cannot be read.
NcclTestsLog read_nccl_tests_log(const std::string& path);

/// How the writer prints numbers (see the top of this file).
enum class NcclTestsNumberStyle {
  kCurrent,  ///< nccl-tests 2025 on: %.2f, else %.1f, %.0f, %.1e, whichever fits; #wrong %6
  kClassic,  ///< nccl-tests 2022–2025: time by magnitude, bandwidths %6.2f; #wrong %5
};

/// The 7-wide time column text (µs) in the given style, e.g. 31307.4 → "31307.4" (current),
/// "  31307" (classic). Wider than 7 only where nccl-tests' own output would be.
std::string format_nccl_tests_time(double time_us, NcclTestsNumberStyle style);
/// The 6-wide bandwidth column text (GB/s) in the given style.
std::string format_nccl_tests_bandwidth(double gbs, NcclTestsNumberStyle style);

/// "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf",
/// "broadcast_perf", "reduce_perf", "sendrecv_perf".
std::string_view nccl_tests_binary_name(CollectiveOp op);
/// Bytes per element of an nccl-tests type name ("float" 4, "half" 2, "int8" 1, …), or nullopt.
std::optional<int> nccl_tests_type_size(std::string_view type);

/// A predicted block: algbw = size / time (GB = 1e9 B; size is what nccl-tests prints, so the
/// total buffer for AG/RS/A2A), busbw = algbw × busbw_factor(op, ranks), #wrong "N/A".
/// A zero size gives zero bandwidths. Throws std::invalid_argument if ranks < 1, size < 0, or
/// time is not positive.
NcclTestsResult make_result(CollectiveOp op, int ranks, int64_t size_bytes, double time_us);

/// nccl-tests' "Avg bus bandwidth": the mean busbw over every printed block (out-of-place and
/// in-place) of every row; 0 when there are none.
double average_busbw(const std::vector<NcclTestsRow>& rows);

/// What a table is about; the writer checks it once, in its constructor.
struct NcclTestsTableOptions {
  CollectiveOp op = CollectiveOp::kAllReduce;  ///< names the binary ("all_reduce_perf") and busbw
  std::string dtype = "float";                 ///< an nccl-tests type name (see nccl_tests_type_size)
  std::string redop = "sum";  ///< printed for reducing ops; the others print "none"
  int root = 0;               ///< printed for broadcast and reduce; the others print -1
  int ranks = 1;  ///< ranks in the communicator (busbw factor, count of AG/RS/A2A)
  /// One per rank, in rank order; or empty, and "#  ranks: N (devices not listed)" stands in.
  std::vector<NcclTestsDevice> devices;
  int64_t min_bytes = 8;  ///< the sweep's bounds as printed in the nThread line, in bytes
  int64_t max_bytes = 8;
  /// nccl-tests' `-f`: an integer, printed as "step: 2(factor)".
  int64_t step_factor = 2;
  /// Printed first, one line per line, each given a leading "# " unless it starts with '#'.
  std::string title_comment;
  /// Column names appended after the in-place block, e.g. {"algo", "proto"}; values must not
  /// contain whitespace, so that the table still parses.
  std::vector<std::string> extra_columns;
  NcclTestsNumberStyle numbers = NcclTestsNumberStyle::kCurrent;
};

/// Prints a table in nccl-tests' layout: header(), then row() per size, then footer().
/// Everything it prints parses back with parse_nccl_tests_log.
class NcclTestsTableWriter {
 public:
  /// Throws std::invalid_argument if ranks < 1, the devices are neither empty nor one per
  /// rank, min_bytes > max_bytes, step_factor < 2, or a name contains whitespace.
  explicit NcclTestsTableWriter(NcclTestsTableOptions options);

  /// The preamble: title comment, "# Collective test starting", the nThread line, the device
  /// lines and the three-line column header; '\n'-terminated.
  std::string header() const;
  /// One row, '\n'-terminated. An empty type or redop, or a root < 0 for a rooted op, is filled
  /// from the options; redop is "none" and root -1 where the op has none. A missing
  /// out-of-place block is printed blank, as nccl-tests does; a missing in-place block is left
  /// out. `extra` (or, when empty, row.extra) must hold one value per extra column; throws
  /// std::invalid_argument otherwise or if a value contains whitespace.
  std::string row(const NcclTestsRow& row, const std::vector<std::string>& extra = {}) const;
  /// "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : X", "#",
  /// "# Collective test concluded: …"; '\n'-terminated.
  std::string footer(double avg_busbw_gbs) const;

  /// A prediction's row: count = size / type size (÷ ranks for AG/RS/A2A), type, redop and root
  /// from the options, and the same make_result block for out-of-place and in-place. Throws
  /// std::invalid_argument if dtype is not an nccl-tests type or make_result does.
  NcclTestsRow predicted_row(int64_t size_bytes, double time_us) const;

  const NcclTestsTableOptions& options() const { return options_; }

 private:
  NcclTestsTableOptions options_;
};

}  // namespace parallax
