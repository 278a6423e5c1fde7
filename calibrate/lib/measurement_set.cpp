// Reading measurement files: JSON lines (calibrate/FORMAT.md) and nccl-tests logs, both into a
// MeasurementSet. A bad JSON line is skipped and reported, and every good line around it kept;
// an nccl-tests log stops at its first bad row.
#include "measurement_set.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "io/input_error.h"
#include "io/json_reader.h"

namespace parallax {

Flops GemmMeasurement::flops() const {
  return Flops(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
               static_cast<double>(batch));
}

FlopRate GemmMeasurement::achieved() const { return FlopRate(flops().value() / time.seconds()); }

Bandwidth MemcpyMeasurement::achieved() const {
  return Bandwidth((what == "d2d" ? 2.0 : 1.0) * size.value() / time.seconds());
}

void MeasurementSet::append(MeasurementSet other) {
  auto move_all = [](auto& into, auto& from) {
    into.insert(into.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  move_all(collectives, other.collectives);
  move_all(gemms, other.gemms);
  move_all(memcpys, other.memcpys);
  move_all(runs, other.runs);
  move_all(files, other.files);
}

std::string ReadProblem::message() const {
  return file + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + reason;
}

namespace {
// Times are integer picoseconds: a shorter one would be read as zero, which the fit (relative
// to each time) cannot take.
constexpr double kShortestMicroseconds = 1e-6;
constexpr const char* kBelowResolution = "is below one picosecond, the resolution of times";

std::string read_whole_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path, "", "is a directory, not a measurement file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path, "", "read failed");
  return text.str();
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

bool looks_like_json_lines(const std::string& text) {
  auto first = std::find_if_not(text.begin(), text.end(), is_blank);
  // An empty file is what a harness leaves when it was stopped before its first line: an empty
  // set, not an nccl-tests log without rows.
  return first == text.end() || *first == '{';
}

// A problem found inside one line; the line reader turns it into a ReadProblem.
struct LineError {
  std::string reason;
};

[[noreturn]] void reject(const JsonReader& r, const std::string& reason) {
  throw LineError{(r.pointer().empty() ? "" : r.pointer() + ": ") + reason};
}

// Accessors that check the value as well as its type, so that every bad value names its key.
// JsonReader's own failures (wrong type, missing key) arrive as InputError and are rewrapped.
class LineFields {
 public:
  explicit LineFields(JsonReader& object) : object_(object) {}

  JsonReader at(const std::string& key) { return object_.at(key); }
  std::optional<JsonReader> find(const std::string& key) { return object_.find(key); }

  std::string string_or(const std::string& key, const std::string& fallback) {
    auto v = find(key);
    return v ? v->as_string() : fallback;
  }
  std::string required_string(const std::string& key) {
    std::string s = at(key).as_string();
    if (s.empty()) reject(at(key), "must not be empty");
    return s;
  }
  int64_t integer_at_least(const std::string& key, int64_t least) {
    JsonReader v = at(key);
    int64_t x = v.as_int();
    if (x < least) reject(v, "must be at least " + std::to_string(least) + ", found " + std::to_string(x));
    return x;
  }
  std::optional<int64_t> optional_integer_at_least(const std::string& key, int64_t least) {
    if (!object_.has(key)) return std::nullopt;
    return integer_at_least(key, least);
  }
  std::optional<int> optional_small_integer_at_least(const std::string& key, int least) {
    auto v = optional_integer_at_least(key, least);
    if (v && *v > std::numeric_limits<int>::max()) reject(at(key), "is too large");
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }
  int small_integer_at_least(const std::string& key, int least) {
    int64_t v = integer_at_least(key, least);
    if (v > std::numeric_limits<int>::max()) reject(at(key), "is too large");
    return static_cast<int>(v);
  }
  // A duration in microseconds: finite and strictly positive (a zero or negative time is a
  // broken timer, never a measurement).
  Time microseconds(const std::string& key) {
    JsonReader v = at(key);
    double us = v.as_number();
    if (!std::isfinite(us) || !(us > 0)) reject(v, "must be a positive time in microseconds, found " + v.raw().dump());
    if (us > 1e12) reject(v, "is beyond any plausible time (more than 11 days)");
    if (us < kShortestMicroseconds) reject(v, kBelowResolution);
    return Time::us(us);
  }
  std::optional<Time> optional_microseconds(const std::string& key) {
    if (!object_.has(key)) return std::nullopt;
    return microseconds(key);
  }
  Bytes size_bytes(const std::string& key) {
    return Bytes(static_cast<double>(integer_at_least(key, 0)));
  }
  std::vector<std::string> strings(const std::string& key) {
    std::vector<std::string> out;
    if (auto v = find(key)) {
      for (const JsonReader& e : v->elements()) out.push_back(e.as_string());
    }
    return out;
  }

 private:
  JsonReader& object_;
};

void check_min_max(const JsonReader& line, std::optional<Time> min, std::optional<Time> max) {
  if (min && max && *min > *max) reject(line, "time_us_min is greater than time_us_max");
}

// The run a record belongs to: its own "run", else the latest meta line's of the same file.
std::string run_of(LineFields& f, const std::string& latest_meta_run) {
  return f.string_or("run", latest_meta_run);
}

CollectiveMeasurement read_collective(LineFields& f, JsonReader& line, const std::string& latest_run,
                                      const MeasurementSource& source) {
  CollectiveMeasurement c;
  JsonReader op_value = f.at("op");
  std::optional<CollectiveOp> op = parse_op(op_value.as_string());
  if (!op) reject(op_value, "unknown collective \"" + op_value.as_string() + "\"");
  c.op = *op;
  c.group = f.required_string("group");
  c.ranks = f.small_integer_at_least("ranks", 1);
  c.nodes = f.small_integer_at_least("nodes", 1);
  if (c.nodes > c.ranks) reject(f.at("nodes"), "more nodes than ranks (" + std::to_string(c.ranks) + ")");
  const int fewest_per_node = (c.ranks + c.nodes - 1) / c.nodes;
  c.ranks_per_node = f.optional_small_integer_at_least("ranks_per_node", 1).value_or(fewest_per_node);
  if (c.ranks_per_node < fewest_per_node || c.ranks_per_node > c.ranks) {
    reject(f.at("ranks_per_node"), std::to_string(c.ranks_per_node) + " cannot hold " + std::to_string(c.ranks) +
                                       " ranks on " + std::to_string(c.nodes) + " node(s)");
  }
  c.members = f.strings("members");
  if (!c.members.empty() && c.members.size() != static_cast<size_t>(c.ranks)) {
    reject(f.at("members"), "lists " + std::to_string(c.members.size()) + " members for " +
                                std::to_string(c.ranks) + " ranks");
  }
  c.size = f.size_bytes("size_bytes");
  c.count = f.optional_integer_at_least("count", 0);
  c.dtype = f.string_or("dtype", "");
  c.redop = f.string_or("redop", "");
  c.root = f.optional_small_integer_at_least("root", -1);
  if (c.root == -1) c.root.reset();  // nccl-tests' "no root", as its logs print it
  if (c.root && *c.root >= c.ranks) reject(f.at("root"), "is not one of the " + std::to_string(c.ranks) + " ranks");
  c.algo = f.string_or("algo", "auto");
  c.proto = f.string_or("proto", "auto");
  if (c.algo.empty()) reject(f.at("algo"), "must not be empty (\"auto\" when not forced)");
  if (c.proto.empty()) reject(f.at("proto"), "must not be empty (\"auto\" when not forced)");
  if (auto v = f.find("in_place")) c.in_place = v->as_bool();
  c.warmup = f.optional_small_integer_at_least("warmup", 0);
  c.iters = f.optional_small_integer_at_least("iters", 1);
  c.time = f.microseconds("time_us");
  c.time_min = f.optional_microseconds("time_us_min");
  c.time_max = f.optional_microseconds("time_us_max");
  check_min_max(line, c.time_min, c.time_max);
  c.time_median = f.optional_microseconds("time_us_median");
  c.run = run_of(f, latest_run);
  c.source = source;
  return c;
}

GemmMeasurement read_gemm(LineFields& f, JsonReader& line, const std::string& latest_run,
                          const MeasurementSource& source) {
  GemmMeasurement g;
  g.dtype = f.required_string("dtype");
  g.m = f.integer_at_least("m", 1);
  g.n = f.integer_at_least("n", 1);
  g.k = f.integer_at_least("k", 1);
  g.batch = f.optional_integer_at_least("batch", 1).value_or(1);
  if (auto v = f.find("fast_accum")) g.fast_accum = v->as_bool();
  g.label = f.string_or("label", "");
  g.warmup = f.optional_small_integer_at_least("warmup", 0);
  g.iters = f.optional_small_integer_at_least("iters", 1);
  g.time = f.microseconds("time_us");
  g.time_min = f.optional_microseconds("time_us_min");
  g.time_max = f.optional_microseconds("time_us_max");
  check_min_max(line, g.time_min, g.time_max);
  if (auto v = f.find("peak_tflops")) {
    double peak = v->as_number();
    if (!std::isfinite(peak) || !(peak > 0)) reject(*v, "must be a positive rate in TFLOP/s");
    g.peak = teraflops_per_second(peak);
  }
  g.run = run_of(f, latest_run);
  g.source = source;
  return g;
}

MemcpyMeasurement read_memcpy(LineFields& f, JsonReader& line, const std::string& latest_run,
                              const MeasurementSource& source) {
  MemcpyMeasurement c;
  c.what = f.required_string("what");
  c.size = f.size_bytes("size_bytes");
  c.warmup = f.optional_small_integer_at_least("warmup", 0);
  c.iters = f.optional_small_integer_at_least("iters", 1);
  c.time = f.microseconds("time_us");
  c.time_min = f.optional_microseconds("time_us_min");
  c.time_max = f.optional_microseconds("time_us_max");
  check_min_max(line, c.time_min, c.time_max);
  c.run = run_of(f, latest_run);
  c.source = source;
  return c;
}

RunMetadata read_meta(LineFields& f, const MeasurementSource& source) {
  RunMetadata m;
  m.run = f.required_string("run");
  m.harness = f.string_or("harness", "");
  m.harness_version = f.string_or("harness_version", "");
  m.date = f.string_or("date", "");
  m.hosts = f.strings("hosts");
  m.ranks = f.optional_small_integer_at_least("ranks", 1);
  m.nodes = f.optional_small_integer_at_least("nodes", 1);
  m.gpu = f.string_or("gpu", "");
  m.gpu_count = f.optional_small_integer_at_least("gpu_count", 0);
  m.cpu = f.string_or("cpu", "");
  m.driver = f.string_or("driver", "");
  m.cuda_runtime = f.string_or("cuda_runtime", "");
  m.nccl = f.string_or("nccl", "");
  m.mpi = f.string_or("mpi", "");
  m.command = f.string_or("command", "");
  if (auto env = f.find("env")) {
    for (const std::string& name : env->keys()) {
      JsonReader value = env->at(name);
      // FORMAT.md lists a variable the harness looked at but found unset as null.
      m.env[name] = value.raw().is_null() ? std::nullopt : std::optional<std::string>(value.as_string());
    }
  }
  m.source = source;
  return m;
}

// Parses one non-blank line into `set`; throws LineError or InputError on a bad line.
void read_line(const std::string& text, const std::string& file, int line_number, std::string& latest_run,
               MeasurementSet& set) {
  nlohmann::json value;
  try {
    value = parse_json_text(text, file);
  } catch (const InputError& e) {
    // The text is one line, so nlohmann's "line 1, " says nothing.
    std::string reason = e.reason();
    if (auto at = reason.find("at line 1, "); at != std::string::npos) reason.replace(at, 11, "at ");
    throw LineError{reason};
  }
  JsonReader line(value, file);
  if (!line.is_object()) throw LineError{std::string("expected a JSON object, found ") + value.type_name()};
  LineFields f(line);
  const std::string kind = f.at("kind").as_string();
  const MeasurementSource source{file, line_number};
  if (kind == "collective") {
    set.collectives.push_back(read_collective(f, line, latest_run, source));
  } else if (kind == "gemm") {
    set.gemms.push_back(read_gemm(f, line, latest_run, source));
  } else if (kind == "memcpy") {
    set.memcpys.push_back(read_memcpy(f, line, latest_run, source));
  } else if (kind == "meta") {
    set.runs.push_back(read_meta(f, source));
    latest_run = set.runs.back().run;
  } else if (kind != "attention") {
    // Attention lines (calibrate/scripts/attention-bench.py) are the compute model's
    // (sim/compute/measured_attention_table.h, through --gemm-table); no fit here uses them.
    throw LineError{"/kind: unknown kind \"" + kind + "\" (expected meta, collective, gemm, memcpy or attention)"};
  }
  // Unknown keys are accepted on purpose: a newer harness may add fields, and an old reader
  // should still use the lines. Every field the fit depends on is required above.
}

// ---- nccl-tests logs ------------------------------------------------------------------------

int line_of(const InputError& e) {
  const std::string& p = e.pointer();
  if (p.rfind("line ", 0) != 0) return 0;
  return std::atoi(p.c_str() + 5);
}

// The first `lines` lines of `text`.
std::string first_lines(const std::string& text, int lines) {
  size_t end = 0;
  for (int i = 0; i < lines && end != std::string::npos; ++i) {
    end = text.find('\n', end);
    if (end != std::string::npos) ++end;
  }
  return end == std::string::npos ? text : text.substr(0, end);
}

// The log's ranks, nodes and op, each from the options or else the log, refusing an option that
// contradicts what the log's device lines (or its stated op) say.
struct LogShape {
  int ranks = 0;
  int nodes = 0;
  CollectiveOp op = CollectiveOp::kAllReduce;
};

LogShape shape_of(const NcclTestsLog& log, const std::string& path, const MeasurementReadOptions& options) {
  LogShape s;
  const bool lists_devices = !log.devices.empty();
  if (options.ranks && lists_devices && log.ranks && *options.ranks != *log.ranks) {
    throw InputError(path, "", "--gpus " + std::to_string(*options.ranks) + " contradicts the log's " +
                                   std::to_string(*log.ranks) + " device lines");
  }
  if (options.nodes && lists_devices && log.nodes && *options.nodes != *log.nodes) {
    throw InputError(path, "", "--nodes " + std::to_string(*options.nodes) + " contradicts the log's " +
                                   std::to_string(*log.nodes) + " hosts");
  }
  if (options.op && log.op && *options.op != *log.op) {
    throw InputError(path, "", "--op " + std::string(op_name(*options.op)) + " contradicts the log's " +
                                   std::string(op_name(*log.op)));
  }
  std::optional<int> ranks = options.ranks ? options.ranks : log.ranks;
  std::optional<int> nodes = options.nodes ? options.nodes : log.nodes;
  if (options.ranks_per_node && *options.ranks_per_node < 1) {
    throw InputError(path, "", "--gpus-per-node must be at least 1, found " + std::to_string(*options.ranks_per_node));
  }
  if (!nodes && ranks && options.ranks_per_node) nodes = (*ranks + *options.ranks_per_node - 1) / *options.ranks_per_node;
  std::optional<CollectiveOp> op = options.op ? options.op : log.op;
  if (!ranks) throw InputError(path, "", "the log does not list its ranks: give --gpus (and --nodes)");
  if (!nodes) throw InputError(path, "", "the log does not say how many nodes it ran on: give --nodes");
  if (!op) throw InputError(path, "", "the log does not say which collective it measured: give --op");
  if (*ranks < 1 || *nodes < 1 || *nodes > *ranks) {
    throw InputError(path, "", std::to_string(*ranks) + " rank(s) on " + std::to_string(*nodes) +
                                   " node(s) is not a placement");
  }
  if (options.ranks_per_node && (*options.ranks_per_node * *nodes < *ranks || *options.ranks_per_node > *ranks)) {
    throw InputError(path, "", std::to_string(*ranks) + " rank(s) on " + std::to_string(*nodes) + " node(s) cannot have " +
                                   std::to_string(*options.ranks_per_node) + " on the fullest (--gpus-per-node)");
  }
  s.ranks = *ranks;
  s.nodes = *nodes;
  s.op = *op;
  return s;
}

int ranks_on_fullest_node(const NcclTestsLog& log, const LogShape& shape) {
  if (!log.devices.empty() && static_cast<int>(log.devices.size()) == shape.ranks) {
    std::map<std::string, int> per_host;
    for (const NcclTestsDevice& d : log.devices) ++per_host[d.host];
    int most = 0;
    for (const auto& [host, n] : per_host) most = std::max(most, n);
    return most;
  }
  // nccl-tests under mpirun/srun fills node after node.
  return (shape.ranks + shape.nodes - 1) / shape.nodes;
}

RunMetadata metadata_of(const NcclTestsLog& log, const std::string& path, const LogShape& shape) {
  RunMetadata m;
  m.run = path;
  m.harness = "nccl-tests";
  std::set<std::string> seen;
  for (const NcclTestsDevice& d : log.devices) {
    if (seen.insert(d.host).second) m.hosts.push_back(d.host);
  }
  m.ranks = shape.ranks;
  m.nodes = shape.nodes;
  if (!log.devices.empty()) {
    m.gpu = log.devices.front().name;
    m.gpu_count = static_cast<int>(log.devices.size());
  }
  m.nccl = log.nccl_version;
  m.command = std::string(nccl_tests_binary_name(shape.op));
  m.devices = log.devices;
  m.source = MeasurementSource{path, 0};
  return m;
}

// Converts the log's rows, stopping at the first with a time that is not a measurement.
std::optional<ReadProblem> add_log_rows(const NcclTestsLog& log, const std::string& path,
                                        const MeasurementReadOptions& options, MeasurementSet& set) {
  const LogShape shape = shape_of(log, path, options);
  set.runs.push_back(metadata_of(log, path, shape));
  const int listed = ranks_on_fullest_node(log, shape);
  const bool lists_devices = !log.devices.empty() && static_cast<int>(log.devices.size()) == shape.ranks;
  if (options.ranks_per_node && lists_devices && *options.ranks_per_node != listed) {
    throw InputError(path, "", "--gpus-per-node " + std::to_string(*options.ranks_per_node) + " contradicts the log's " +
                                   std::to_string(listed) + " devices on its fullest host");
  }
  const int per_node = options.ranks_per_node.value_or(listed);
  for (const NcclTestsRow& row : log.rows) {
    for (bool in_place : {false, true}) {
      const std::optional<NcclTestsResult>& block = in_place ? row.in_place : row.out_of_place;
      if (!block) continue;
      if (!std::isfinite(block->time_us) || !(block->time_us > 0)) {
        return ReadProblem{path, row.line, std::string(in_place ? "in-place" : "out-of-place") +
                                               " time must be positive, found " + std::to_string(block->time_us)};
      }
      if (block->time_us < kShortestMicroseconds) {
        return ReadProblem{path, row.line, std::string(in_place ? "in-place" : "out-of-place") + " time " +
                                               kBelowResolution};
      }
      CollectiveMeasurement c;
      c.op = shape.op;
      c.group = "all";
      c.ranks = shape.ranks;
      c.nodes = shape.nodes;
      c.ranks_per_node = per_node;
      c.size = Bytes(static_cast<double>(row.size_bytes));
      c.count = row.count;
      c.dtype = row.type;
      c.redop = row.redop;
      if (row.root >= 0) c.root = row.root;
      c.in_place = in_place;
      c.time = Time::us(block->time_us);
      c.run = path;
      c.source = MeasurementSource{path, row.line};
      set.collectives.push_back(std::move(c));
    }
  }
  return std::nullopt;
}

ReadOutcome read_nccl_log_text(const std::string& text, const std::string& path, const MeasurementReadOptions& options) {
  ReadOutcome out;
  out.set.files.push_back(path);
  NcclTestsLog log;
  try {
    log = parse_nccl_tests_log(text, path);
  } catch (const InputError& e) {
    const int bad_line = line_of(e);
    out.problems.push_back(ReadProblem{path, bad_line, e.reason()});
    // The parser reads the whole text or nothing; the rows before the bad line are what an
    // nccl-tests run that died there would have left, so parse those again.
    if (bad_line <= 1) return out;
    try {
      log = parse_nccl_tests_log(first_lines(text, bad_line - 1), path);
    } catch (const InputError&) {
      return out;  // nothing usable before the bad line (no rows yet)
    }
  }
  if (auto problem = add_log_rows(log, path, options, out.set)) {
    // A row's own problem comes first in the file, so it is the one to report.
    out.problems.insert(out.problems.begin(), *problem);
    out.problems.resize(1);
  }
  return out;
}

}  // namespace

ReadOutcome parse_measurement_lines(const std::string& text, const std::string& file) {
  ReadOutcome out;
  out.set.files.push_back(file);
  std::string latest_run;
  std::istringstream in(text);
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (std::all_of(line.begin(), line.end(), is_blank)) continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Each record goes into a scratch set first, so that a line that fails halfway adds nothing.
    MeasurementSet parsed;
    std::string run = latest_run;
    try {
      read_line(line, file, line_number, run, parsed);
    } catch (const LineError& e) {
      out.problems.push_back(ReadProblem{file, line_number, e.reason});
      continue;
    } catch (const InputError& e) {
      // JsonReader's own failures (missing key, wrong type) carry the key's pointer.
      out.problems.push_back(
          ReadProblem{file, line_number, (e.pointer().empty() ? "" : e.pointer() + ": ") + e.reason()});
      continue;
    }
    latest_run = run;
    parsed.files.clear();
    out.set.append(std::move(parsed));
  }
  return out;
}

ReadOutcome read_measurements(const std::string& path, const MeasurementReadOptions& options) {
  const std::string text = read_whole_file(path);
  if (looks_like_json_lines(text)) return parse_measurement_lines(text, path);
  return read_nccl_log_text(text, path, options);
}

ReadOutcome read_measurements(const std::vector<std::string>& paths, const MeasurementReadOptions& options) {
  ReadOutcome all;
  for (const std::string& path : paths) {
    ReadOutcome one = read_measurements(path, options);
    all.set.append(std::move(one.set));
    all.problems.insert(all.problems.end(), one.problems.begin(), one.problems.end());
  }
  return all;
}

}  // namespace parallax
