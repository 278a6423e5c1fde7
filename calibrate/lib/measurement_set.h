// Measurements as the calibration loop reads them: the JSON-lines files of our harnesses
// (calibrate/FORMAT.md) and nccl-tests logs, turned into one typed MeasurementSet.
//
// A harness flushes one line per measurement, so an interrupted or still-running sweep leaves a
// file whose last line may be cut short, and one bad point (a zero time) must not cost the
// points after it. The reader therefore never throws away what it has: a bad JSON line is
// skipped with a "FILE:LINE: reason" problem and every good line before and after it is kept
// (an nccl-tests log, whose rows are one table, stops at its first bad row), and the caller
// decides whether to warn or to refuse. Only a file that cannot be read at all (or an
// nccl-tests log whose ranks, nodes or operation nobody can tell) is an InputError.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/nccl_tests_log.h"
#include "units/units.h"

namespace parallax {

/// Where a measurement or a meta line came from: its file and 1-based line (0 when the record
/// was synthesised for the whole file, e.g. the metadata of an nccl-tests log).
struct MeasurementSource {
  std::string file;
  int line = 0;
};

/// One measured (collective, group, size) point: `kind: "collective"`, or one block
/// (out-of-place or in-place) of an nccl-tests row.
struct CollectiveMeasurement {
  CollectiveOp op = CollectiveOp::kAllReduce;
  /// Which ranks took part, chosen to isolate a link class: "all", "node", "pair-intra",
  /// "one-per-node", "rail", "self" (FORMAT.md). nccl-tests logs are always "all".
  std::string group = "all";
  int ranks = 1;           ///< ranks in the communicator (≥ 1)
  int nodes = 1;           ///< distinct nodes among them (1 ≤ nodes ≤ ranks)
  int ranks_per_node = 1;  ///< ranks on the fullest node; ranks_per_node × nodes ≥ ranks
  /// `host:local_index` per rank, in rank order; empty when the source does not list them.
  std::vector<std::string> members;
  /// nccl-tests' size: the per-rank buffer for all-reduce, broadcast, reduce, send/recv; the
  /// total (gathered) buffer for all-gather, reduce-scatter, all-to-all (size_is_total_buffer).
  Bytes size;
  std::optional<int64_t> count;  ///< elements, as nccl-tests counts them, when given
  std::string dtype;             ///< nccl-tests type name: "float", "bfloat16", …
  std::string redop;             ///< "sum", …, "none"; empty when not given
  std::optional<int> root;       ///< for rooted ops, when given (nccl-tests' -1 reads as none)
  std::string algo = "auto";     ///< forced through NCCL_ALGO, or "auto"
  std::string proto = "auto";    ///< forced through NCCL_PROTO, or "auto"
  bool in_place = false;
  std::optional<int> warmup, iters;
  Time time;                      ///< mean time per operation (> 0)
  std::optional<Time> time_min;   ///< fastest iteration, when reported
  std::optional<Time> time_max;   ///< slowest iteration, when reported
  std::optional<Time> time_median;  ///< median iteration, when reported
  /// The time a fit trusts: the median iteration when reported (robust to a descheduled
  /// iteration), else the mean.
  Time typical_time() const { return time_median.value_or(time); }
  std::string run;                ///< the run id: the meta line's "run", or the log's path
  MeasurementSource source;
};

/// One cuBLASLt matrix product shape (`kind: "gemm"`): 2·m·n·k·batch FLOP in `time`.
struct GemmMeasurement {
  std::string dtype;  ///< "bf16", "fp8", …
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;        ///< products in one strided-batched call (a balanced grouped GEMM)
  bool fast_accum = false;  ///< fp8 with cuBLASLt's fast accumulation (forward GEMMs in TE)
  std::string label;  ///< what the shape stands for ("mlp_up"); empty when not given
  std::optional<int> warmup, iters;
  Time time;  ///< mean time per product (> 0)
  std::optional<Time> time_min, time_max;
  /// The datasheet dense peak the harness knew for the GPU, when it knew one.
  std::optional<FlopRate> peak;
  std::string run;
  MeasurementSource source;

  Flops flops() const;
  /// flops() / time.
  FlopRate achieved() const;
};

/// A device memory bandwidth point (`kind: "memcpy"`).
struct MemcpyMeasurement {
  std::string what;  ///< "d2d", "h2d", …
  Bytes size;        ///< the buffer copied
  std::optional<int> warmup, iters;
  Time time;  ///< mean time per copy (> 0)
  std::optional<Time> time_min, time_max;
  std::string run;
  MeasurementSource source;

  /// As FORMAT.md counts it: bytes read plus bytes written (2 × size) over time for d2d, and
  /// the one-way bytes over the link (size) for h2d and d2h.
  Bandwidth achieved() const;
};

/// What one harness start (a `kind: "meta"` line) or one nccl-tests log says about the run.
/// Fields that the source does not state are empty or nullopt.
struct RunMetadata {
  std::string run;      ///< run id; an nccl-tests log's path
  std::string harness;  ///< "parallax-nccl-bench", "parallax-mpi-bench", or "nccl-tests"
  std::string harness_version;
  std::string date;  ///< ISO 8601, as written
  std::vector<std::string> hosts;
  std::optional<int> ranks, nodes;
  std::string gpu;  ///< "NVIDIA H200"; an nccl-tests log's first device name
  std::optional<int> gpu_count;
  std::string cpu;  ///< the MPI harness's CPU model
  std::string driver, cuda_runtime;
  std::string nccl;  ///< NCCL version, "2.28.3"
  std::string mpi;
  /// NCCL_* / OMPI_* / UCX_* variables; nullopt for a variable listed as null (unset).
  std::map<std::string, std::optional<std::string>> env;
  std::string command;
  /// nccl-tests logs only: the device lines, in rank order (empty when the log has none).
  std::vector<NcclTestsDevice> devices;
  MeasurementSource source;
};

/// Everything read from one or more files, in file order and, within a file, in line order.
struct MeasurementSet {
  std::vector<CollectiveMeasurement> collectives;
  std::vector<GemmMeasurement> gemms;
  std::vector<MemcpyMeasurement> memcpys;
  std::vector<RunMetadata> runs;
  std::vector<std::string> files;  ///< every input file, in the order read

  bool empty() const { return collectives.empty() && gemms.empty() && memcpys.empty(); }
  /// Appends `other`'s records and files after this set's.
  void append(MeasurementSet other);
};

/// A line that stopped a reader: message() is "FILE:LINE: reason" ("FILE: reason" when line is 0).
struct ReadProblem {
  std::string file;
  int line = 0;
  std::string reason;

  std::string message() const;
};

/// What a read produced: every good record, and a problem per skipped line (JSON lines) or per
/// log cut short (nccl-tests), in file and line order. A caller may warn and still use the set.
struct ReadOutcome {
  MeasurementSet set;
  std::vector<ReadProblem> problems;

  bool ok() const { return problems.empty(); }
};

/// What to assume about an nccl-tests log that does not say it itself, as the CLI's --gpus,
/// --nodes and --op. JSON-lines files state all of it on every line and ignore these.
struct MeasurementReadOptions {
  std::optional<int> ranks;         ///< --gpus
  std::optional<int> nodes;         ///< --nodes
  std::optional<CollectiveOp> op;   ///< --op
  /// --gpus-per-node: ranks on the fullest node of a log that does not list its devices (nodes,
  /// when not given, follow as ⌈ranks / per node⌉); default: ranks spread node after node.
  std::optional<int> ranks_per_node;
};

/// Reads one file, JSON lines when its first non-blank character is '{', else an nccl-tests
/// log (one CollectiveMeasurement per printed out-of-place and in-place block, group "all").
/// Blank lines are skipped. A JSON line that does not parse, lacks a required field or holds a
/// bad value adds nothing and one problem; the lines after it are still read. In an nccl-tests
/// log the first bad row ends the read, with every row before it kept.
///
/// For an nccl-tests log, ranks, nodes and op come from the options when given, else from the
/// log; an option that contradicts the log's own device lines (or its stated op) is refused.
///
/// Throws InputError(path, "", reason) when the file cannot be opened or read, is a directory,
/// or is an nccl-tests log whose ranks, nodes or op are neither stated nor given.
ReadOutcome read_measurements(const std::string& path, const MeasurementReadOptions& options = {});

/// Reads every file in order and merges them; problems are collected in order.
/// Throws InputError as the one-file form does, at the first unreadable file.
ReadOutcome read_measurements(const std::vector<std::string>& paths, const MeasurementReadOptions& options = {});

/// Parses JSON-lines `text` as if read from `file` (tests, and callers that already hold it).
ReadOutcome parse_measurement_lines(const std::string& text, const std::string& file);

}  // namespace parallax
