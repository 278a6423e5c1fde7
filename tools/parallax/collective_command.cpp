// `parallax collective`: predict an nccl-tests sweep on a topology, or compare a measured
// nccl-tests log with the prediction for the same sweep.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "collectives/collective_simulator.h"
#include "collectives/nccl_tests_log.h"
#include "collectives/scaling.h"
#include "collectives/transfer_trace.h"
#include "io/atomic_file.h"
#include "io/input_error.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "topology/topology_loader.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

struct CollectiveArgs {
  std::string topology;
  std::string nccl_version;  ///< overrides the topology's (and, with --compare, the log's)
  std::string op = "all_reduce";
  std::optional<int> gpus, nodes, gpus_per_node;
  std::string min_bytes = "8", max_bytes = "128M";
  int64_t step_factor = 2;
  std::string dtype = "float";
  std::string algo = "auto", proto = "auto";
  std::optional<int> channels;
  int root = 0;
  std::string model = "flow";
  std::string granularity = "auto";
  std::string compare;
  std::string json, trace;
  std::string scale;     // "8,16,32": a busbw-vs-GPUs curve at the size -b
  std::string plot_dir;  // --plot, with --scale
};

// nccl-tests' size syntax (-b 8 -e 16G: K, M, G, T are powers of 1024), or a unit string.
int64_t parse_size(const std::string& text, const std::string& option) {
  size_t used = 0;
  try {
    long long v = std::stoll(text, &used);
    std::string suffix = text.substr(used);
    int64_t scale = 1;
    if (suffix == "K" || suffix == "k") scale = int64_t{1} << 10;
    else if (suffix == "M" || suffix == "m") scale = int64_t{1} << 20;
    else if (suffix == "G" || suffix == "g") scale = int64_t{1} << 30;
    else if (suffix == "T" || suffix == "t") scale = int64_t{1} << 40;
    else if (!suffix.empty()) throw std::invalid_argument("suffix");
    if (v < 0) throw InputError("", option, "a size must not be negative: \"" + text + "\"");
    return v * scale;
  } catch (const InputError&) {
    throw;
  } catch (const std::exception&) {
    try {
      return static_cast<int64_t>(std::llround(parse_bytes(text).value()));
    } catch (const std::exception& e) {
      throw InputError("", option, "expected a size such as 8, 64K, 16G or \"1 GiB\": " + std::string(e.what()));
    }
  }
}

CollectiveOptions simulation_options(const CollectiveArgs& a) {
  CollectiveOptions o;
  o.model = a.model;
  if (a.algo != "auto") {
    auto algo = parse_algorithm(a.algo);
    if (!algo) throw InputError("", "--algo", "unknown algorithm \"" + a.algo + "\" (expected auto, ring, tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain, rhd, recursive_doubling, pairwise, direct or hierarchical)");
    o.algorithm = algo;
  }
  if (a.proto != "auto") {
    auto proto = parse_protocol(a.proto);
    if (!proto) throw InputError("", "--proto", "unknown protocol \"" + a.proto + "\" (expected auto, LL, LL128 or Simple)");
    o.protocol = proto;
  }
  o.channels = a.channels;
  if (a.channels && (*a.channels < 1 || *a.channels > kNcclMaxChannels)) {
    throw InputError("", "--channels", "must be between 1 and " + std::to_string(kNcclMaxChannels) + " (NCCL's MAXCHANNELS)");
  }
  o.root = a.root;
  if (a.granularity == "steps") o.granularity = LoweringOptions::Granularity::kSteps;
  else if (a.granularity == "pipelined") o.granularity = LoweringOptions::Granularity::kPipelined;
  else if (a.granularity != "auto") throw InputError("", "--granularity", "expected auto, steps or pipelined");
  if (a.model != "analytical") {
    bool known = false;
    for (const auto& m : network_models()) known = known || m.name == a.model;
    if (!known) throw InputError("", "--model", "unknown model \"" + a.model + "\" (expected flow, packet or analytical)");
  }
  return o;
}

CollectiveOp parse_op_arg(const std::string& text) {
  auto op = parse_op(text);
  if (!op) throw InputError("", "--op", "unknown collective \"" + text + "\" (expected all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce or send_recv)");
  return *op;
}

// A one-line description of where the ranks sit, for the table's title.
// The topology of the question, with the NCCL release whose rules apply: --nccl-version, else
// the compared log's (`log_version`, when the model covers it), else the topology file's own.
Topology load_question_topology(const CollectiveArgs& a, std::optional<int> nodes, const std::string& log_version = "") {
  Topology topo = load_topology(a.topology, TopologyLoadOptions{nodes});
  if (!a.nccl_version.empty()) {
    parse_nccl_version(a.nccl_version, "--nccl-version");  // refuses what it cannot model
    topo.info().nccl_version = a.nccl_version;
  } else if (!log_version.empty()) {
    try {
      parse_nccl_version(log_version, "");
      topo.info().nccl_version = log_version;
    } catch (const InputError&) {
      // Older than the model covers: the topology's (or the newest) rules, as without a version.
    }
  }
  return topo;
}

std::string describe(const CollectiveSimulator& sim, const std::string& model) {
  const Communicator& c = sim.communicator();
  const NcclTuningInputs& in = sim.tuning().inputs();
  const bool calibrated = !sim.topology().info().calibration.empty();
  const std::string model_note = !calibrated ? model
                                 : model == "analytical"
                                     ? model + " with the topology's calibrated parameters"
                                     : model + " with the topology's calibrated parameters (alone on idle links: the fitted time)";
  return sim.topology().info().name + ": " + std::to_string(c.size()) + " ranks on " + std::to_string(c.node_count()) +
         " node(s), " + std::to_string(c.ranks_per_node()) + " per node; model " + model_note + "; NCCL " +
         strprintf("2.%d", in.nccl_version % 100) + " view: " +
         std::to_string(in.channels) + " channels x " + strprintf("%.1f", in.bw_intra_gbs) + " GB/s intra, " +
         strprintf("%.1f", in.bw_inter_gbs) + " GB/s inter" + (in.nvls_supported ? ", NVLS" : "") +
         (in.collnet_supported ? ", SHARP" : "");
}

std::vector<NcclTestsDevice> devices_of(const CollectiveSimulator& sim) {
  std::vector<NcclTestsDevice> out;
  const Communicator& c = sim.communicator();
  for (int r = 0; r < c.size(); ++r) {
    const Device& d = sim.topology().device(c.device(r));
    NcclTestsDevice dev;
    dev.rank = r;
    dev.host = "node" + std::to_string(d.node);
    dev.device = d.local_index;
    dev.bus_id = strprintf("0000:%02x:00", std::max(0, d.local_index));
    std::string name = sim.topology().gpu_spec_of(c.device(r)).name;
    std::replace(name.begin(), name.end(), ' ', '-');
    dev.name = name;
    out.push_back(dev);
  }
  return out;
}

nlohmann::ordered_json result_json(const CollectiveResult& r) {
  nlohmann::ordered_json j;
  j["size_bytes"] = static_cast<int64_t>(std::llround(r.size.value()));
  j["time_us"] = r.time.seconds() * 1e6;
  j["algbw_gbs"] = r.algbw_gbs;
  j["busbw_gbs"] = r.busbw_gbs;
  j["algorithm"] = std::string(algorithm_name(r.algorithm));
  j["protocol"] = std::string(protocol_name(r.protocol));
  j["channels"] = r.channels;
  j["transfers"] = r.transfers;
  return j;
}

void write_trace(const CollectiveArgs& a, const CollectiveSimulator& sim, CollectiveOp op, int64_t bytes) {
  CollectiveOptions o = simulation_options(a);
  if (o.model == "analytical") throw InputError("", "--trace", "a trace needs a simulated model (--model flow)");
  o.keep_graph = true;
  CollectiveResult r = sim.run(op, Bytes(static_cast<double>(bytes)), o);
  std::string title = std::string(op_name(op)) + " " + std::to_string(bytes) + " B, " +
                      std::string(algorithm_name(r.algorithm)) + "/" + std::string(protocol_name(r.protocol));
  write_file_atomically(a.trace, transfer_trace_json(sim.topology(), sim.router(), r.graph, r.timings, title));
}

// The ranks placed on the topology: one it cannot hold is the topology file's shortfall.
std::unique_ptr<CollectiveSimulator> simulator_for(const CollectiveArgs& a, const Topology& topo, int ranks,
                                                   std::optional<int> per_node) {
  try {
    return std::make_unique<CollectiveSimulator>(topo, ranks, per_node);
  } catch (const std::invalid_argument& e) {
    throw InputError(a.topology, "", e.what());
  }
}

void run_sweep(const CollectiveArgs& a) {
  CollectiveOp op = parse_op_arg(a.op);
  CollectiveOptions options = simulation_options(a);
  Topology topo = load_question_topology(a, a.nodes);
  int gpus = a.gpus.value_or(static_cast<int>(topo.gpu_count()));
  const std::unique_ptr<CollectiveSimulator> simulator = simulator_for(a, topo, gpus, a.gpus_per_node);
  const CollectiveSimulator& sim = *simulator;
  int64_t lo = parse_size(a.min_bytes, "-b"), hi = parse_size(a.max_bytes, "-e");
  if (lo > hi) throw InputError("", "-b", "the smallest size is larger than the largest (-e)");
  if (a.step_factor < 2) throw InputError("", "-f", "the step factor must be at least 2");
  auto type_size = nccl_tests_type_size(a.dtype);
  if (!type_size) throw InputError("", "--dtype", "unknown type \"" + a.dtype + "\" (expected an nccl-tests type such as float, half, bfloat16, int8)");

  NcclTestsTableOptions t;
  t.op = op;
  t.dtype = a.dtype;
  t.root = a.root;
  t.ranks = sim.communicator().size();
  t.devices = devices_of(sim);
  t.min_bytes = lo;
  t.max_bytes = hi;
  t.step_factor = a.step_factor;
  t.title_comment = "Predicted by Parallax (not measured). " + describe(sim, a.model);
  t.extra_columns = {"algo", "proto"};
  NcclTestsTableWriter writer(t);
  std::string text = writer.header();
  std::vector<NcclTestsRow> rows;
  nlohmann::ordered_json jrows = nlohmann::ordered_json::array();
  // Sizes as nccl-tests steps them: rounded down to whole elements (× ranks for AG/RS/A2A).
  const int64_t grain = static_cast<int64_t>(*type_size) * (size_is_total_buffer(op) ? t.ranks : 1);
  for (int64_t size = lo; size <= hi; size *= a.step_factor) {
    int64_t bytes = size / grain * grain;
    CollectiveResult r = sim.run(op, Bytes(static_cast<double>(bytes)), options);
    spdlog::info("{} B: {:.2f} us ({} / {}, {} transfers)", bytes, r.time.seconds() * 1e6, algorithm_name(r.algorithm),
                 protocol_name(r.protocol), r.transfers);
    NcclTestsRow row = writer.predicted_row(bytes, std::max(r.time.seconds() * 1e6, 1e-9));
    if (bytes == 0) row.out_of_place = row.in_place = NcclTestsResult{r.time.seconds() * 1e6, 0, 0, "N/A"};
    text += writer.row(row, {std::string(algorithm_name(r.algorithm)), std::string(protocol_name(r.protocol))});
    rows.push_back(row);
    jrows.push_back(result_json(r));
    if (size == 0) break;
  }
  text += writer.footer(average_busbw(rows));
  std::fputs(text.c_str(), stdout);
  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["topology"] = topo.info().name;
    j["op"] = std::string(op_name(op));
    j["ranks"] = t.ranks;
    j["nodes"] = sim.communicator().node_count();
    j["model"] = a.model;
    j["rows"] = jrows;
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  if (!a.trace.empty()) write_trace(a, sim, op, hi / grain * grain);
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Each measured row of a log beside the simulator's prediction, as table rows and JSON, with the
// absolute errors over every size and over sizes of 1 MiB or more.
struct LogComparison {
  std::vector<std::vector<std::string>> table;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<double> err_all, err_large, bw_err_all, bw_err_large;
};

LogComparison compare_log_rows(const NcclTestsLog& log, const CollectiveSimulator& sim, CollectiveOp op, int ranks,
                               const CollectiveOptions& options) {
  LogComparison c;
  for (const NcclTestsRow& row : log.rows) {
    const auto& measured = row.out_of_place ? row.out_of_place : row.in_place;
    if (!measured || row.size_bytes <= 0 || measured->time_us <= 0) continue;
    CollectiveResult r = sim.run(op, Bytes(static_cast<double>(row.size_bytes)), options);
    const double pred_us = r.time.seconds() * 1e6;
    const double time_err = (pred_us - measured->time_us) / measured->time_us;
    const double meas_bus = static_cast<double>(row.size_bytes) / measured->time_us / 1e3 * busbw_factor(op, ranks);
    const double bw_err = meas_bus > 0 ? (r.busbw_gbs - meas_bus) / meas_bus : NAN;
    c.err_all.push_back(std::fabs(time_err));
    c.bw_err_all.push_back(std::fabs(bw_err));
    if (row.size_bytes >= (int64_t{1} << 20)) {
      c.err_large.push_back(std::fabs(time_err));
      c.bw_err_large.push_back(std::fabs(bw_err));
    }
    c.table.push_back({std::to_string(row.size_bytes), strprintf("%.2f", measured->time_us), strprintf("%.2f", pred_us),
                       strprintf("%+.1f%%", 100 * time_err), strprintf("%.2f", meas_bus), strprintf("%.2f", r.busbw_gbs),
                       strprintf("%+.1f%%", 100 * bw_err), std::string(algorithm_name(r.algorithm)),
                       std::string(protocol_name(r.protocol))});
    nlohmann::ordered_json j = result_json(r);
    j["measured_time_us"] = measured->time_us;
    j["measured_busbw_gbs"] = meas_bus;
    j["time_error"] = time_err;
    j["busbw_error"] = bw_err;
    c.rows.push_back(j);
  }
  return c;
}

// The table and the error summary. A log without sizes of 1 MiB or more has no large-size
// figures: said, not printed as nan.
std::string log_comparison_text(const LogComparison& c) {
  using A = TextTable::Align;
  TextTable table({"size (B)", "meas us", "pred us", "time err", "meas busbw", "pred busbw", "busbw err", "algo", "proto"},
                  {A::kRight, A::kRight, A::kRight, A::kRight, A::kRight, A::kRight, A::kRight, A::kLeft, A::kLeft});
  for (const auto& row : c.table) table.add_row(row);
  auto max_of = [](const std::vector<double>& v) { return v.empty() ? NAN : *std::max_element(v.begin(), v.end()); };
  auto large = [&](const std::vector<double>& v) {
    return v.empty() ? std::string("none")
                     : strprintf("median %.1f%%, max %.1f%%", 100 * median(v), 100 * max_of(v));
  };
  std::string text = table.render() + "\n";
  text += strprintf("|time error|:  median %.1f%%, max %.1f%% over %zu sizes; sizes >= 1 MiB: %s\n",
                    100 * median(c.err_all), 100 * max_of(c.err_all), c.err_all.size(), large(c.err_large).c_str());
  text += strprintf("|busbw error|: median %.1f%%, max %.1f%%; sizes >= 1 MiB: %s\n", 100 * median(c.bw_err_all),
                    100 * max_of(c.bw_err_all), large(c.bw_err_large).c_str());
  return text;
}

void run_compare(const CollectiveArgs& a) {
  NcclTestsLog log = read_nccl_tests_log(a.compare);
  std::optional<CollectiveOp> op = log.op;
  if (a.op != "all_reduce" || !op) op = parse_op_arg(a.op);
  std::optional<int> ranks = a.gpus ? a.gpus : log.ranks;
  if (!ranks) throw InputError(a.compare, "", "the log does not list its ranks: give --gpus (and --nodes)");
  std::optional<int> nodes = a.nodes ? a.nodes : log.nodes;
  // The log's node count resizes a compact preset; an explicit topology that already has that
  // many nodes is taken as it is.
  Topology topo = load_question_topology(a, a.nodes, log.nccl_version);
  if (!a.nodes && nodes && topo.node_count() != *nodes) topo = load_question_topology(a, nodes, log.nccl_version);
  std::optional<int> per_node = a.gpus_per_node;
  if (!per_node && nodes && *ranks % *nodes == 0) per_node = *ranks / *nodes;
  const std::unique_ptr<CollectiveSimulator> simulator = simulator_for(a, topo, *ranks, per_node);
  const CollectiveSimulator& sim = *simulator;

  const LogComparison c = compare_log_rows(log, sim, *op, *ranks, simulation_options(a));
  if (c.err_all.empty()) throw InputError(a.compare, "", "no row with a positive size and time to compare");
  std::string text = "measured: " + a.compare + (log.nccl_version.empty() ? "" : " (NCCL " + log.nccl_version + ")") +
                     "\npredicted: " + describe(sim, a.model) + "\ncollective: " + std::string(op_name(*op)) + "\n\n";
  std::fputs((text + log_comparison_text(c)).c_str(), stdout);
  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["log"] = a.compare;
    j["topology"] = topo.info().name;
    j["op"] = std::string(op_name(*op));
    j["ranks"] = *ranks;
    j["nodes"] = sim.communicator().node_count();
    j["model"] = a.model;
    j["median_abs_time_error"] = median(c.err_all);
    j["median_abs_time_error_ge_1MiB"] = median(c.err_large);
    j["median_abs_busbw_error"] = median(c.bw_err_all);
    j["median_abs_busbw_error_ge_1MiB"] = median(c.bw_err_large);
    j["rows"] = c.rows;
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  if (!a.trace.empty() && !log.rows.empty()) write_trace(a, sim, *op, log.rows.back().size_bytes);
}

// 1073741824 → "1 GiB" (whole binary units), else bytes.
std::string size_text(Bytes size) {
  const auto b = static_cast<int64_t>(size.value());
  for (const auto& [unit, name] : {std::pair{int64_t{1} << 30, "GiB"}, std::pair{int64_t{1} << 20, "MiB"},
                                   std::pair{int64_t{1} << 10, "KiB"}}) {
    if (b >= unit && b % unit == 0) return std::to_string(b / unit) + " " + name;
  }
  return std::to_string(b) + " B";
}

// "8,16,32,...": the GPU counts of --scale.
std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    try {
      size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < 2) throw std::invalid_argument("bad");
      out.push_back(n);
    } catch (const std::exception&) {
      throw InputError("", "--scale", "expected GPU counts of at least 2, comma-separated (8,16,32), found \"" + item + "\"");
    }
    at = comma + 1;
  }
  return out;
}

void plot_scaling(const std::string& dir, const std::vector<ScalingPoint>& points, CollectiveOp op, Bytes size) {
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/scaling.dat";
  {
    std::ofstream d(data);
    for (const ScalingPoint& p : points) {
      d << p.gpus << " " << p.chosen.busbw_gbs;
      for (const auto& f : p.forced) d << " " << (f ? strprintf("%.6g", f->busbw_gbs) : std::string("NaN"));
      d << "\n";
    }
  }
  std::string script = "set terminal pngcairo noenhanced size 900,560\nset output '" + dir + "/scaling.png'\n";
  script += "set logscale x 2\nset xlabel 'GPUs'\nset ylabel 'busbw (GB/s)'\nset key outside right\n";
  script += "set title \"" + std::string(op_name(op)) + " of " + size_text(size) + ": busbw vs GPUs\"\n";
  script += "plot '" + data + "' using 1:2 with linespoints lw 2 title 'NCCL choice'";
  for (size_t i = 0; i < scaling_algorithms().size(); ++i) {
    script += strprintf(", '' using 1:%zu with linespoints title '%s'", i + 3,
                        std::string(algorithm_name(scaling_algorithms()[i])).c_str());
  }
  run_gnuplot(dir + "/scaling.gp", script + "\n");
}

void run_scale(const CollectiveArgs& a) {
  const std::optional<CollectiveOp> op = parse_op_arg(a.op);  // InputError on a bad name
  const Bytes size(static_cast<double>(parse_size(a.min_bytes, "-b")));
  auto topology_for = [&](int nodes) { return load_question_topology(a, nodes); };
  const std::vector<ScalingPoint> points =
      scaling_curve(topology_for, parse_counts(a.scale), a.gpus_per_node, *op, size, simulation_options(a));
  using A = TextTable::Align;
  std::vector<std::string> head{"GPUs", "nodes", "NCCL choice", "busbw"};
  std::vector<A> align{A::kRight, A::kRight, A::kLeft, A::kRight};
  for (Algorithm alg : scaling_algorithms()) {
    head.emplace_back(algorithm_name(alg));
    align.push_back(A::kRight);
  }
  TextTable table(head, align);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ScalingPoint& p : points) {
    std::vector<std::string> row{std::to_string(p.gpus), std::to_string(p.nodes),
                                 std::string(algorithm_name(p.chosen.algorithm)) + "/" +
                                     std::string(protocol_name(p.chosen.protocol)),
                                 strprintf("%.1f", p.chosen.busbw_gbs)};
    nlohmann::ordered_json j;
    j["gpus"] = p.gpus;
    j["nodes"] = p.nodes;
    j["chosen"] = result_json(p.chosen);
    for (size_t i = 0; i < p.forced.size(); ++i) {
      const auto& f = p.forced[i];
      row.push_back(f ? strprintf("%.1f", f->busbw_gbs) : "-");
      j["busbw_gbs"][std::string(algorithm_name(scaling_algorithms()[i]))] = f ? nlohmann::ordered_json(f->busbw_gbs)
                                                                                 : nlohmann::ordered_json(nullptr);
    }
    table.add_row(row);
    rows.push_back(j);
  }
  std::printf("# %s of %s (busbw, GB/s) vs GPUs on %s, model %s; '-': the algorithm cannot run there\n%s",
              std::string(op_name(*op)).c_str(), size_text(size).c_str(), a.topology.c_str(), a.model.c_str(),
              table.render().c_str());
  if (!a.json.empty()) write_file_atomically(a.json, nlohmann::ordered_json{{"op", std::string(op_name(*op))}, {"size", size.value()}, {"rows", rows}}.dump(2) + "\n");
  if (!a.plot_dir.empty()) {
    plot_scaling(a.plot_dir, points, *op, size);
    std::printf("# plot: %s/scaling.png\n", a.plot_dir.c_str());
  }
}

}  // namespace

void add_collective_command(CLI::App& app) {
  auto args = std::make_shared<CollectiveArgs>();
  CLI::App* cmd = app.add_subcommand("collective", "predict an nccl-tests sweep, or compare with a measured log");
  cmd->add_option("--topology", args->topology, "topology JSON (a preset from topologies/ or your own)")->required();
  cmd->add_option("--op", args->op, "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv");
  cmd->add_option("--gpus,-g", args->gpus, "ranks, placed node after node (default: every GPU)");
  cmd->add_option("--nodes", args->nodes, "node count of the topology preset");
  cmd->add_option("--gpus-per-node", args->gpus_per_node, "at most this many ranks per node (mpirun -npernode)");
  cmd->add_option("-b,--minbytes", args->min_bytes, "smallest size (nccl-tests syntax: 8, 64K, 1M, 16G)");
  cmd->add_option("-e,--maxbytes", args->max_bytes, "largest size");
  cmd->add_option("-f,--stepfactor", args->step_factor, "size multiplier between rows");
  cmd->add_option("-d,--dtype", args->dtype, "nccl-tests data type (float, half, bfloat16, int8, ...)");
  cmd->add_option("--algo", args->algo, "auto (NCCL's cost model), ring, tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain, rhd, recursive_doubling, pairwise, direct, hierarchical");
  cmd->add_option("--proto", args->proto, "auto, LL, LL128, Simple");
  cmd->add_option("--nccl-version", args->nccl_version,
                  "the NCCL release whose algorithms and cost model apply (2.18 or later; default: with --compare the "
                  "log's, else the topology's \"nccl_version\", else the newest modelled, 2.30)");
  cmd->add_option("--channels", args->channels, "channels (default: what NCCL's search would give)");
  cmd->add_option("--root", args->root, "root rank of broadcast and reduce");
  cmd->add_option("--model", args->model, "flow (max-min fair network simulation), packet (packets, queues and lossless flow control: slow, for small sizes) or analytical (closed forms)");
  cmd->add_option("--granularity", args->granularity, "auto, steps or pipelined (how ring phases become transfers)");
  cmd->add_option("--compare", args->compare, "an nccl-tests log: predict the same sweep and show the error");
  cmd->add_option("--json", args->json, "write the results as JSON");
  cmd->add_option("--trace", args->trace, "write a Chrome/Perfetto trace of the largest size");
  cmd->add_option("--scale", args->scale,
                  "GPU counts (8,16,32,...): busbw at the size -b vs GPUs, NCCL's choice and every algorithm forced");
  cmd->add_option("--plot", args->plot_dir, "with --scale: draw the curve (PNG, gnuplot) into this folder");
  cmd->callback([args] {
    try {
      if (!args->scale.empty()) {
        run_scale(*args);
      } else if (args->compare.empty()) {
        run_sweep(*args);
      } else {
        run_compare(*args);
      }
    } catch (const std::invalid_argument& e) {
      // A layout the topology cannot hold or an algorithm that cannot run here: bad input.
      throw InputError("", "", e.what());
    }
  });
}

}  // namespace parallax::cli
