// `parallax serve FLEET.json`: the fleet simulation (serving/fleet.h) with its summary, --json
// and --per-request CSV; `parallax serve step`: the time of one engine step of a model-parallel
// instance, with its breakdown (serving/step_model.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <optional>
#include <string>
#include <thread>

#include "compute/measured_gemm_table.h"
#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "model/model_loader.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "serving/batch_scheduler.h"
#include "serving/fleet_loader.h"
#include "serving/autoscale_plot.h"
#include "serving/fleet_report.h"
#include "serving/fleet_search.h"
#include "serving/fleet_sizing.h"
#include "serving/fleet_split_search.h"
#include "serving/fleet_sweep.h"
#include "serving/kv_capacity.h"
#include "serving/step_model.h"
#include "serving/step_validation.h"
#include "serving/trace_reader.h"
#include "topology/topology_loader.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

struct StepArgs {
  std::string model;
  std::string topology;
  std::optional<int> nodes;
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int dp = 1;
  int redundant_experts = 0;
  std::string prefill;  ///< LENxBATCH
  std::optional<int> decode;
  std::optional<int64_t> context;
  std::string overhead = "500us";
  std::string gemm_table;
  std::string json;
  std::string dtype = "bf16";
  std::string kv_cache_dtype = "bf16";
  std::string speculative = "none";
  std::string draft_model;
  double expert_skew = 0;
  bool two_batch_overlap = false;
  int draft_tokens = 0;
  std::optional<double> acceptance;
};

// A bundled name, or a Hugging Face config.json / model block file.
ModelConfig load_model_arg(const std::string& text) {
  if (fs::exists(text) && !fs::is_directory(text)) return load_model_file(text);
  if (text.size() > 5 && text.ends_with(".json")) throw InputError(text, "", "no such model file");
  return load_bundled_model(bundled_models_dir(), text);
}

Topology load_topology_arg(const std::string& text, std::optional<int> nodes) {
  std::string file = text;
  if (!fs::exists(file)) {
    file = topologies_dir() + "/" + text + ".json";
    if (text.find('/') != std::string::npos || !fs::exists(file)) {
      throw InputError("", "--topology", "no topology file or preset named \"" + text + "\"");
    }
  }
  Topology topology = load_topology(file, TopologyLoadOptions{nodes});
  if (!topology.info().node_groups.empty()) {
    throw InputError(file, "/node_groups", "one engine step runs on one kind of GPU; this is a cluster of node groups "
                                           "(name one group's own topology)");
  }
  return topology;
}

// "LENxBATCH": BATCH prompts of LEN tokens.
std::pair<int64_t, int> parse_prefill(const std::string& text) {
  const size_t x = text.find('x');
  auto bad = [&] { return InputError("", "--prefill", "expected LENxBATCH (e.g. 4096x8), found \"" + text + "\""); };
  if (x == std::string::npos || x == 0 || x + 1 == text.size()) throw bad();
  const std::string len = text.substr(0, x), batch = text.substr(x + 1);
  if (len.find_first_not_of("0123456789") != std::string::npos || batch.find_first_not_of("0123456789") != std::string::npos ||
      len.size() > 9 || batch.size() > 6) {
    throw bad();
  }
  const int64_t l = std::stoll(len);
  const int b = std::stoi(batch);
  if (l < 1 || b < 1) throw bad();
  return {l, b};
}

RaggedBatch batch_of(const StepArgs& a, std::string& described) {
  RaggedBatch batch;
  if (!a.prefill.empty() == a.decode.has_value()) {
    throw InputError("", "--prefill/--decode", "give exactly one of --prefill LENxBATCH and --decode BATCH");
  }
  if (!a.prefill.empty()) {
    if (a.context) throw InputError("", "--context", "goes with --decode (a prefill's context is its prompt)");
    const auto [len, count] = parse_prefill(a.prefill);
    for (int i = 0; i < count; ++i) batch.sequences.push_back({len, len, true});
    described = "prefill of " + std::to_string(count) + " prompt(s) of " + std::to_string(len) + " tokens";
    return batch;
  }
  if (!a.context) throw InputError("", "--context", "--decode needs --context LEN (tokens held per sequence)");
  if (*a.decode < 1 || *a.decode > 1000000) throw InputError("", "--decode", "between 1 and 1000000 sequences");
  if (*a.context < 1) throw InputError("", "--context", "must be at least 1 token");
  const int64_t d = a.draft_tokens;
  for (int i = 0; i < *a.decode; ++i) batch.sequences.push_back({1 + d, *a.context + d, true, d});
  described = "decode step of " + std::to_string(*a.decode) + " sequence(s) with " + std::to_string(*a.context) +
              " tokens of context" + (d > 0 ? ", each verifying " + std::to_string(d) + " draft token(s)" : "");
  return batch;
}

std::string ms(Time t) { return strprintf("%.3f ms", t.seconds() * 1e3); }

void run_step(const StepArgs& a) {
  const ModelConfig model = load_model_arg(a.model);
  const Topology topo = load_topology_arg(a.topology, a.nodes);
  std::string described;
  const RaggedBatch batch = batch_of(a, described);
  StepModelOptions options;
  options.step_overhead = parse_time(a.overhead);
  if (options.step_overhead < Time::zero()) throw InputError("", "--overhead", "must not be negative");
  if (!a.gemm_table.empty()) options.gemm = std::make_shared<MeasuredGemmTable>(load_gemm_measurements(a.gemm_table));
  options.dtype = a.dtype == "fp8" ? DType::kFp8 : DType::kBf16;
  options.kv_cache_dtype = a.kv_cache_dtype == "fp8" ? DType::kFp8 : DType::kBf16;
  options.speculative = a.speculative == "mtp"     ? SpeculativeMethod::kMtp
                        : a.speculative == "eagle" ? SpeculativeMethod::kEagle
                        : a.speculative == "draft" ? SpeculativeMethod::kDraftModel
                                                   : SpeculativeMethod::kNone;
  if ((a.speculative == "draft") != !a.draft_model.empty()) {
    throw InputError("", "--speculative draft/--draft-model", "a draft model is named with --speculative draft, and only then");
  }
  if (!a.draft_model.empty()) options.draft_model = std::make_shared<const ModelConfig>(load_model_arg(a.draft_model));
  if ((options.speculative != SpeculativeMethod::kNone) != (a.draft_tokens > 0) || (a.draft_tokens > 0) != a.acceptance.has_value()) {
    throw InputError("", "--speculative/--draft-tokens/--acceptance", "give all three, or none");
  }
  if (a.draft_tokens > 0 && !a.decode) throw InputError("", "--draft-tokens", "speculates in a --decode step");
  options.expert_skew = a.expert_skew;
  options.two_batch_overlap = a.two_batch_overlap;
  if (a.two_batch_overlap && a.dp < 2) throw InputError("", "--two-batch-overlap", "overlaps the all-to-alls of --dp > 1");
  InstanceShape shape{a.tp, a.pp, a.ep, a.dp, a.redundant_experts};
  if (a.dp > 1 && a.ep == 1) shape.ep = a.tp * a.dp;  // the experts over every GPU
  std::optional<StepModel> step_model;
  StepBreakdown b;
  try {
    step_model.emplace(model, topo, shape, options);
    b = step_model->step(batch);
  } catch (const std::invalid_argument& e) {
    throw InputError("", "--tp/--pp/--ep/--dp/--prefill/--decode", e.what());
  }
  const std::string gpu = topo.gpu_spec_of(topo.gpus().front()).name;
  std::printf("serve step: %s on %s (%s), tp %d, pp %d%s%s, %s weights, %s KV cache\n", model.name.c_str(),
              a.topology.c_str(), gpu.c_str(), a.tp, a.pp,
              shape.dp > 1 ? strprintf(", dp %d attention ranks", shape.dp).c_str() : "",
              shape.ep > 1 ? strprintf(", ep %d", shape.ep).c_str() : "", a.dtype.c_str(), a.kv_cache_dtype.c_str());
  std::printf("  %s: %lld new token(s)\n\n", described.c_str(), static_cast<long long>(b.new_tokens));
  TextTable t({"part", "time", "share"}, {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight});
  auto row = [&](const char* name, Time part) {
    t.add_row({name, ms(part), strprintf("%.1f%%", b.total > Time::zero() ? 100.0 * part.seconds() / b.total.seconds() : 0.0)});
  };
  row("GEMMs", b.gemm);
  row("attention", b.attention);
  row("other kernels", b.other);
  row("TP all-reduce", b.tp_communication);
  row("PP hand-off", b.pp_handoff);
  if (shape.dp > 1) row("EP all-to-all", b.ep_communication);
  if (b.drafting > Time::zero()) row("  of it, drafting", b.drafting);
  if (b.overlapped > Time::zero()) row("beside one another", Time::zero() - b.overlapped);
  row("framework overhead", b.overhead);
  row("step", b.total);
  std::printf("%s\n", t.render().c_str());
  if (a.pp > 1) std::printf("  slowest stage: %s (with pp batches in flight, one step per stage time)\n", ms(b.bottleneck_stage).c_str());
  if (step_model->expert_rows() != 1) {
    std::printf("  router skew (Zipf %g): the busiest GPU computes %.2fx an even share of the routed rows\n", a.expert_skew,
                step_model->expert_rows());
  }
  std::printf("  per GPU: %.3f TFLOP, %.3f GB of HBM traffic; %.0f new tokens/s\n", b.flops.value() / 1e12,
              b.hbm_bytes.value() / 1e9, static_cast<double>(b.new_tokens) / b.total.seconds());
  const double per_sequence = a.draft_tokens > 0 ? expected_tokens_per_step(a.draft_tokens, *a.acceptance) : 1.0;
  if (a.draft_tokens > 0) {
    std::printf("  speculative (%s, %d drafts, acceptance %.2f): %.2f tokens a sequence a step, %.0f output tokens/s\n",
                a.speculative.c_str(), a.draft_tokens, *a.acceptance, per_sequence,
                per_sequence * static_cast<double>(*a.decode) / b.total.seconds());
  }
  const ServingPrecision precision{options.dtype, options.kv_cache_dtype};
  const StepMemory memory =
      step_memory(model, topo.gpu_spec_of(topo.gpus().front()), shape, batch, precision,
                  options.draft_model ? draft_footprint(*options.draft_model, shape.tp, precision) : DraftFootprint{});
  std::printf("  memory per GPU%s: %.1f GiB of weights + %.1f GiB of KV cache%s%s = %.1f GiB of %.1f GiB: %s\n",
              a.pp > 1 ? strprintf(" (stage %d, the fullest)", memory.stage).c_str() : "", in_gib(memory.weights),
              in_gib(memory.kv_cache), options.draft_model ? " (the draft model's included)" : "",
              memory.states.value() > 0 ? strprintf(" + %.1f GiB of Mamba states", in_gib(memory.states)).c_str() : "",
              in_gib(memory.total()), in_gib(memory.memory),
              memory.fits() ? "fits" : "DOES NOT FIT (the time is what the step would take if it did)");
  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["model"] = model.name;
    j["topology"] = a.topology;
    j["gpu"] = gpu;
    j["tp"] = a.tp;
    j["dtype"] = a.dtype;
    j["kv_cache_dtype"] = a.kv_cache_dtype;
    j["pp"] = a.pp;
    j["ep"] = shape.ep;
    j["dp"] = shape.dp;
    j["batch"] = described;
    j["tokens_per_sequence"] = per_sequence;
    j["memory_per_gpu_bytes"] = {{"weights", memory.weights.value()}, {"kv_cache", memory.kv_cache.value()},
                                 {"mamba_states", memory.states.value()}, {"gpu", memory.memory.value()},
                                 {"fits", memory.fits()}};
    const nlohmann::ordered_json report = to_json(b);
    for (auto it = report.begin(); it != report.end(); ++it) j[it.key()] = *it;
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
}

struct FleetArgs {
  std::string fleet;
  std::string compare_routers;
  std::string plot;
  std::string rates;
  double attainment = 0.9;
  std::optional<uint64_t> seed;
  std::optional<int64_t> requests;
  std::optional<double> rate;
  std::string slo_ttft, slo_tpot;
  std::string json;
  std::string per_request;
  std::string replay;
  double rate_scale = 1.0;
  std::string trace;
  size_t top = 10;
  int jobs = 0;
  bool exhaustive = false;
  std::vector<int> max_sequences;
  std::vector<int64_t> token_budgets;
  std::vector<int> draft_tokens;
  std::optional<double> target;
  std::string emit;
  std::string gpu_hour_price;
};

// "2.5" (every GPU) or "H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2" (by GPU name), dollars per GPU-hour.
GpuHourPrices parse_prices(const std::string& text) {
  GpuHourPrices prices;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? "*" : item.substr(0, eq);
    const std::string value = eq == std::string::npos ? item : item.substr(eq + 1);
    char* end = nullptr;
    const double price = std::strtod(value.c_str(), &end);
    if (name.empty() || value.empty() || *end != '\0' || !(price >= 0 && price <= 1e6)) {
      throw InputError("", "--gpu-hour-price",
                       "expected dollars per GPU-hour (2.5) or GPU=price pairs (H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2), found \"" +
                           item + "\"");
    }
    prices[name] = price;
  }
  if (prices.empty()) throw InputError("", "--gpu-hour-price", "give a price");
  return prices;
}

// The --gpu-hour-price of a command that runs the pools as placed: each pool's GPU priced.
GpuHourPrices pool_prices(const FleetArgs& a, const FleetConfig& c) {
  const GpuHourPrices prices = a.gpu_hour_price.empty() ? GpuHourPrices{} : parse_prices(a.gpu_hour_price);
  if (!prices.empty()) {
    if (const std::string gpu = unpriced_gpu(c, prices); !gpu.empty()) {
      throw InputError("", "--gpu-hour-price", "no price for " + gpu + " (name it, or give one price for every GPU)");
    }
  }
  return prices;
}

// The --gpu-hour-price of a command that may run pools on any of the cluster's GPUs, each priced.
GpuHourPrices cluster_prices(const FleetArgs& a, const Topology& topology) {
  if (a.gpu_hour_price.empty()) return {};
  const GpuHourPrices prices = parse_prices(a.gpu_hour_price);
  for (const auto& [gpu, price] : prices) {
    if (!(price > 0)) {
      throw InputError("", "--gpu-hour-price", "ranking by cost needs every price above 0 (" +
                                                   (gpu == "*" ? std::string("the one price") : gpu) + " is 0)");
    }
  }
  if (const std::string gpu = unpriced_cluster_gpu(topology, prices); !gpu.empty()) {
    throw InputError("", "--gpu-hour-price", "no price for " + gpu + " (name it, or give one price for every GPU)");
  }
  return prices;
}

void make_plot_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw InputError("", "--plot", "cannot create the folder " + dir);
}

std::vector<RoutingPolicy> parse_routers(const std::string& list) {
  std::vector<RoutingPolicy> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (name == "rr") name = "round_robin";
    const auto p = routing_policy_from(name);
    if (!p) throw InputError("", "--compare-routers", "unknown router \"" + name + "\" (" + routing_policy_names() + ")");
    out.push_back(*p);
  }
  if (out.size() < 2) throw InputError("", "--compare-routers", "name at least two routers, comma-separated");
  return out;
}

void run_comparison(const FleetArgs& a, const FleetFile& f) {
  const std::vector<RoutingPolicy> routers = parse_routers(a.compare_routers);
  std::vector<RouterRun> runs;
  try {
    runs = compare_routers(f.config, routers);
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/pools", e.what());
  }
  std::printf("serve: %s on %s, the same traffic through %zu routers (seed %llu)\n", f.config.model.name.c_str(),
              f.topology_name.c_str(), runs.size(), static_cast<unsigned long long>(f.config.seed));
  std::fputs(router_table(runs).c_str(), stdout);
  if (!a.json.empty()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const RouterRun& r : runs) j.push_back(fleet_json(f.config, f.topology_name, r.result, r.summary));
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  if (!a.plot.empty()) {
    make_plot_dir(a.plot);
    std::vector<std::string> files;
    for (const RouterRun& r : runs) {
      files.push_back(a.plot + "/cdf-" + to_string(r.router) + ".dat");
      write_file_atomically(files.back(), router_cdf_data(r));
    }
    run_gnuplot(a.plot + "/routers.gp", router_cdf_gnuplot(files, runs, a.plot + "/routers.png"));
    std::printf("  wrote %s/routers.png\n", a.plot.c_str());
  }
}

FleetFile load_with_overrides(const FleetArgs& a, bool check_shapes = true) {
  FleetFile f = load_fleet(a.fleet, bundled_models_dir(), topologies_dir(), check_shapes);
  FleetConfig& c = f.config;
  if (a.seed) c.seed = *a.seed;
  if (a.requests) {
    if (*a.requests < 1 || *a.requests > 100000000) throw InputError("", "--requests", "between 1 and 100000000");
    c.traffic.requests = *a.requests;
  }
  if (a.rate) {
    if (c.traffic.arrival == TrafficSpec::Arrival::kClosedLoop) {
      throw InputError("", "--rate", "the fleet's traffic is a closed loop (its rate follows from its users)");
    }
    if (!(*a.rate > 0 && *a.rate <= 1e7)) throw InputError("", "--rate", "must be in (0, 1e7] requests per second");
    c.traffic.rate_per_s = *a.rate;
  }
  if (!a.replay.empty()) {
    Trace trace = read_trace(a.replay, a.rate_scale);
    // Fewer requests: the trace's first ones; more: the trace repeated end to end.
    if (a.requests) trace.requests = repeat_trace(trace.requests, static_cast<size_t>(*a.requests));
    c.replay_name = a.replay + " (" + to_string(trace.format) + ", " + std::to_string(trace.requests.size()) +
                    " requests" + (a.rate_scale != 1.0 ? ", rate x" + strprintf("%g", a.rate_scale) : std::string()) +
                    (trace.skipped > 0 ? ", " + std::to_string(trace.skipped) + " failed ones skipped" : std::string()) + ")";
    c.replay = std::make_shared<const std::vector<Request>>(std::move(trace.requests));
  } else if (a.rate_scale != 1.0) {
    throw InputError("", "--rate-scale", "goes with --replay (use --rate for synthetic traffic)");
  }
  if (!a.slo_ttft.empty()) c.slo_ttft = parse_time(a.slo_ttft);
  if (!a.slo_tpot.empty()) c.slo_tpot = parse_time(a.slo_tpot);
  return f;
}

// "[done/total what]" on a terminal's stderr, cleared at the end; nothing elsewhere.
std::function<void(size_t, size_t)> progress_counter(std::string what) {
  const bool terminal = isatty(STDERR_FILENO) != 0;
  return [terminal, what = std::move(what)](size_t done, size_t total) {
    if (!terminal) return;
    std::fprintf(stderr, "\r  [%zu/%zu %s]", done, total, what.c_str());
    if (done == total) std::fprintf(stderr, "\r%*s\r", 24 + static_cast<int>(what.size()), "");
  };
}

void run_sweep(const FleetArgs& a) {
  FleetFile f = load_with_overrides(a);
  const FleetConfig& c = f.config;
  if (c.slo_ttft == Time::zero() && c.slo_tpot == Time::zero()) {
    throw InputError(a.fleet, "/slo", "a capacity sweep needs an SLO (the fleet's slo, or --slo-ttft / --slo-tpot)");
  }
  if (!(a.attainment > 0 && a.attainment <= 1)) throw InputError("", "--attainment", "a fraction in (0, 1]");
  std::vector<double> rates;
  try {
    rates = parse_rates(a.rates);
  } catch (const std::invalid_argument& e) {
    throw InputError("", "--rates", e.what());
  }
  std::printf("serve sweep: %s on %s, %s at %zu %s (seed %llu)\n", c.model.name.c_str(), f.topology_name.c_str(),
              c.replay ? ("replay of " + c.replay_name).c_str() : c.traffic.describe().c_str(), rates.size(),
              c.replay ? "speed-ups of the trace" : "rates", static_cast<unsigned long long>(c.seed));
  std::vector<RatePoint> points;
  try {
    points = sweep_rates(c, rates, progress_counter("runs"), pool_prices(a, c));
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/traffic", e.what());
  }
  std::fputs(sweep_table(points, a.attainment).c_str(), stdout);
  if (!a.json.empty()) write_file_atomically(a.json, sweep_json(points, a.attainment).dump(2) + "\n");
  if (!a.plot.empty()) {
    make_plot_dir(a.plot);
    write_file_atomically(a.plot + "/capacity.dat", sweep_data(points));
    run_gnuplot(a.plot + "/capacity.gp",
                sweep_gnuplot(a.plot + "/capacity.dat", a.plot + "/capacity.png", c.model.name + " on " + f.topology_name));
    std::printf("  wrote %s/capacity.png\n", a.plot.c_str());
  }
}

void write_search_plot(const FleetArgs& a, const FleetFile& f, const std::string& data, bool by_capacity,
                       const std::string& what) {
  make_plot_dir(a.plot);
  write_file_atomically(a.plot + "/shapes.dat", data);
  run_gnuplot(a.plot + "/shapes.gp", shape_gnuplot(a.plot + "/shapes.dat", a.plot + "/shapes.png", by_capacity,
                                                   f.config.model.name + " on " + f.topology_name + ": " + what));
  std::printf("  wrote %s/shapes.png\n", a.plot.c_str());
}

// A disaggregated fleet: how its GPUs split between prefill and decode, and each side's shape.
void run_split_search(const FleetArgs& a, const FleetFile& f, int threads, const GpuHourPrices& prices) {
  SplitSearch s;
  try {
    s = search_splits(f.config, threads, a.attainment, !a.exhaustive, progress_counter("splits"), prices);
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/pools", e.what());
  }
  std::fputs(split_table(s, a.top).c_str(), stdout);
  if (s.ranked.empty()) throw InputError(a.fleet, "/pools", "no split of these GPUs between prefill and decode serves");
  if (!a.json.empty()) write_file_atomically(a.json, split_json(s).dump(2) + "\n");
  if (!a.emit.empty()) {
    write_file_atomically(a.emit, fleet_with_split(load_json_file(a.fleet), f.config, s.ranked.front()).dump(2) + "\n");
    std::printf("  wrote the best fleet to %s\n", a.emit.c_str());
  }
  if (!a.plot.empty()) write_search_plot(a, f, split_data(s), s.by_capacity, "prefill / decode splits");
}

void run_search(const FleetArgs& a) {
  FleetFile f = load_with_overrides(a, false);  // the pools' shapes are what is searched
  const FleetConfig& c = f.config;
  if (!(a.attainment > 0 && a.attainment <= 1)) throw InputError("", "--attainment", "a fraction in (0, 1]");
  const GpuHourPrices prices = cluster_prices(a, *c.topology);
  const int threads = a.jobs > 0 ? a.jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const bool split = c.pools.size() == 2 && c.pools.front().role != PoolRole::kColocated;
  std::printf("serve search: %s on %s (%zu GPUs), %s (seed %llu); %s, ranked by %s\n", c.model.name.c_str(),
              f.topology_name.c_str(), c.topology->gpu_count(),
              c.replay ? ("replay of " + c.replay_name).c_str() : c.traffic.describe().c_str(),
              static_cast<unsigned long long>(c.seed),
              split ? "prefill/decode splits" : "instance shapes",
              (std::string(c.slo_ttft > Time::zero() || c.slo_tpot > Time::zero() ? "capacity at the SLO" : "output throughput") +
               (prices.empty() ? "" : " per dollar an hour")).c_str());
  if (split) {
    if (!a.max_sequences.empty() || !a.token_budgets.empty() || !a.draft_tokens.empty()) {
      throw InputError("", "--max-sequences/--token-budgets/--draft-tokens",
                       "vary a colocated pool's batching; a split keeps each pool's own");
    }
    run_split_search(a, f, threads, prices);
    return;
  }
  ShapeSearchOptions options;
  options.threads = threads;
  options.attainment = a.attainment;
  options.prune = !a.exhaustive;
  options.max_sequences = a.max_sequences;
  options.token_budgets = a.token_budgets;
  options.draft_tokens = a.draft_tokens;
  options.prices = prices;
  ShapeSearch s;
  try {
    s = search_shapes(c, options, progress_counter("shapes"));
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/pools", e.what());
  }
  std::fputs(shape_table(s, a.top).c_str(), stdout);
  if (s.ranked.empty()) throw InputError(a.fleet, "/pools/0", "no instance shape of the model fits these GPUs");
  if (!a.json.empty()) write_file_atomically(a.json, shape_json(s).dump(2) + "\n");
  if (!a.emit.empty()) {
    write_file_atomically(a.emit, fleet_with_shape(load_json_file(a.fleet), c, s.ranked.front()).dump(2) + "\n");
    std::printf("  wrote the best fleet to %s\n", a.emit.c_str());
  }
  if (!a.plot.empty()) write_search_plot(a, f, shape_data(s), s.by_capacity, "instance shapes");
}

// How many instances the fleet's pools need for a target load within the SLO.
void run_size(const FleetArgs& a) {
  FleetFile f = load_with_overrides(a);
  const FleetConfig& c = f.config;
  if (!(a.attainment > 0 && a.attainment <= 1)) throw InputError("", "--attainment", "a fraction in (0, 1]");
  if (!(*a.target > 0 && *a.target <= 1e7)) throw InputError("", "--target", "must be in (0, 1e7]");
  std::printf("serve size: %s on %s, %s (seed %llu); target %g %s\n", c.model.name.c_str(), f.topology_name.c_str(),
              c.replay ? ("replay of " + c.replay_name).c_str() : c.traffic.describe().c_str(),
              static_cast<unsigned long long>(c.seed), *a.target,
              c.replay ? "times the trace's own rate" : "requests/s");
  FleetSizing s;
  try {
    s = size_fleet(c, *a.target, a.attainment, f.topology_with_nodes, progress_counter("fleets"),
                   cluster_prices(a, *c.topology));
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/pools", e.what());
  }
  std::fputs(sizing_table(c, s).c_str(), stdout);
  if (!a.json.empty()) write_file_atomically(a.json, sizing_json(c, s).dump(2) + "\n");
  if (!s.chosen) throw InputError(a.fleet, "/pools", "no fleet tried meets the SLO at the target");
  if (!a.emit.empty()) {
    write_file_atomically(a.emit, sized_fleet_file(load_json_file(a.fleet), c, s, s.tried[*s.chosen]).dump(2) + "\n");
    std::printf("  wrote the sized fleet to %s\n", a.emit.c_str());
  }
}

// An autoscaled run's instances, arrivals and SLO over time.
void plot_autoscaling(const std::string& dir, const FleetConfig& c, const FleetResult& result) {
  make_plot_dir(dir);
  const std::string instances = dir + "/autoscale-instances.dat", arrivals = dir + "/autoscale-arrivals.dat";
  write_file_atomically(instances, autoscale_instances_data(result));
  write_file_atomically(arrivals, autoscale_arrivals_data(c, result));
  run_gnuplot(dir + "/autoscale.gp", autoscale_gnuplot(c, result, instances, arrivals, dir + "/autoscale.png"));
  std::printf("  wrote %s/autoscale.png\n", dir.c_str());
}

void run_fleet(const FleetArgs& a) {
  FleetFile f = load_with_overrides(a);
  if (!a.compare_routers.empty()) {
    run_comparison(a, f);
    return;
  }
  FleetConfig& c = f.config;
  const GpuHourPrices prices = pool_prices(a, c);
  if (!a.plot.empty() && std::none_of(c.pools.begin(), c.pools.end(), [](const PoolConfig& p) { return p.autoscale.has_value(); })) {
    throw InputError("", "--plot", "draws --compare-routers or an autoscaled pool's run; this fleet has neither");
  }
  c.record_steps = !a.trace.empty();
  const bool terminal = isatty(STDERR_FILENO) != 0;
  const int64_t total = c.replay ? static_cast<int64_t>(c.replay->size()) : c.traffic.requests;
  if (terminal && total >= 20000) {
    c.progress = [](int64_t done, int64_t all) {
      const int width = 40;
      const int filled = static_cast<int>(width * done / std::max<int64_t>(1, all));
      std::fprintf(stderr, "\r  [%s%s] %lld/%lld requests", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(), static_cast<long long>(done),
                   static_cast<long long>(all));
      if (done == all) std::fprintf(stderr, "\r%80s\r", "");
    };
  }
  FleetResult result;
  try {
    result = simulate_fleet(c);
  } catch (const std::invalid_argument& e) {
    throw InputError(a.fleet, "/pools", e.what());
  }
  const FleetSummary summary = summarize(c, result);
  std::fputs(fleet_text(c, f.topology_name, result, summary).c_str(), stdout);
  nlohmann::ordered_json json = fleet_json(c, f.topology_name, result, summary);
  if (!prices.empty()) {
    const FleetCost cost = fleet_cost(c, result, summary, prices);
    std::fputs(cost_text(cost).c_str(), stdout);
    json["cost"] = cost_json(cost);
  }
  if (!a.json.empty()) write_file_atomically(a.json, json.dump(2) + "\n");
  if (!a.per_request.empty()) write_file_atomically(a.per_request, per_request_csv(result));
  if (!a.trace.empty()) write_file_atomically(a.trace, chrome_trace(c, result));
  if (!a.plot.empty()) plot_autoscaling(a.plot, c, result);
}

// The options `serve` and `serve sweep` share: the fleet, its seed, size, traffic and SLOs.
void add_run_options(CLI::App* app, FleetArgs& f) {
  app->add_option("--seed", f.seed, "seed of every random draw (default: the fleet's, else 1)");
  app->add_option("--requests", f.requests,
                  "requests per run (default: the fleet's; with --replay, a trace shorter than this is repeated)");
  app->add_option("--replay", f.replay,
                  "replay a trace (Azure CSV, BurstGPT CSV, Mooncake JSON lines) in place of the fleet's traffic");
  app->add_option("--slo-ttft", f.slo_ttft, "time-to-first-token objective, e.g. 2s");
  app->add_option("--slo-tpot", f.slo_tpot, "time-per-output-token objective, e.g. 100ms");
}

CLI::App* add_step_subcommand(CLI::App* serve) {
  auto a = std::make_shared<StepArgs>();
  CLI::App* step = serve->add_subcommand("step", "time of one engine step of a TP x PP instance, with its breakdown");
  step->add_option("--model", a->model, "bundled model name or a Hugging Face config.json")->required();
  step->add_option("--topology", a->topology, "topology preset name or file")->required();
  step->add_option("--nodes", a->nodes, "nodes of the topology preset");
  step->add_option("--tp", a->tp, "tensor-parallel GPUs per instance")->capture_default_str();
  step->add_option("--pp", a->pp, "pipeline stages per instance")->capture_default_str();
  step->add_option("--dp", a->dp,
                   "MoE: data-parallel attention ranks of tp GPUs each, the experts spread over all of them (ep = tp·dp)")
      ->capture_default_str();
  step->add_option("--redundant-experts", a->redundant_experts,
                   "MoE, experts spread: replicas of the most chosen experts (EPLB), E + r over the GPUs")
      ->check(CLI::Range(0, 4096));
  step->add_option("--ep", a->ep, "MoE: 1 (experts split by TP) or tp (experts spread whole over the TP group)")
      ->capture_default_str();
  step->add_option("--prefill", a->prefill, "prefill of BATCH prompts of LEN tokens: LENxBATCH");
  step->add_option("--decode", a->decode, "one decode step of BATCH sequences (with --context)");
  step->add_option("--context", a->context, "tokens each decoding sequence holds (its KV cache)");
  step->add_option("--overhead", a->overhead, "framework time per step")->capture_default_str();
  step->add_option("--gemm-table", a->gemm_table, "measured GEMM rates (parallax-nccl-bench --gemm lines), and attention kernels' (attention-bench.py lines)");
  step->add_option("--json", a->json, "write the breakdown as JSON (step_time_ms and its parts)");
  step->add_option("--speculative", a->speculative,
                   "decode: drafting by the model's MTP module, an EAGLE head, or a draft model (--draft-model)")
      ->check(CLI::IsMember({"none", "mtp", "eagle", "draft"}))
      ->capture_default_str();
  step->add_option("--draft-model", a->draft_model,
                   "with --speculative draft: the draft LLM (a bundled name or a config.json; the target's vocabulary)");
  step->add_option("--draft-tokens", a->draft_tokens, "decode: draft tokens each sequence verifies")
      ->check(CLI::Range(0, 16));
  step->add_option("--acceptance", a->acceptance, "decode: the chance each draft token is accepted, given the ones before")
      ->check(CLI::Range(0.0, 0.999));
  step->add_option("--moe-expert-skew", a->expert_skew,
                   "MoE: a Zipf-skewed router (0 even); with experts spread over GPUs the busiest sets the pace")
      ->check(CLI::Range(0.0, 16.0));
  step->add_flag("--two-batch-overlap", a->two_batch_overlap,
                 "with --dp: two micro-batches, one's all-to-alls beside the other's layers");
  step->add_option("--dtype", a->dtype, "the weights and GEMMs: bf16, or fp8 (activations stay bf16)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  step->add_option("--kv-cache-dtype", a->kv_cache_dtype, "the KV cache: bf16, or fp8 (read at 1 B an element)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  step->callback([a] { run_step(*a); });
  return step;
}

struct StepValidateArgs {
  std::string runs;
  std::string overhead = "500us";
  std::string json;
};

CLI::App* add_validate_subcommand(CLI::App* serve) {
  auto v = std::make_shared<StepValidateArgs>();
  CLI::App* validate = serve->add_subcommand("validate", "predict published engine-step times and report the error per row");
  validate->add_option("runs", v->runs, "runs file (workloads/serve-validation/*.json)")->required();
  validate->add_option("--overhead", v->overhead, "framework time per step")->capture_default_str();
  validate->add_option("--json", v->json, "write one object per row (id, measured, predicted, error)");
  validate->callback([v] {
    StepModelOptions options;
    options.step_overhead = parse_time(v->overhead);
    if (options.step_overhead < Time::zero()) throw InputError("", "--overhead", "must not be negative");
    const auto results = predict_step_runs(load_step_runs(v->runs), bundled_models_dir(), topologies_dir(), options);
    std::printf("serve validate: %s, step overhead %s\n", v->runs.c_str(), v->overhead.c_str());
    std::fputs(step_validation_text(results).c_str(), stdout);
    if (!v->json.empty()) write_file_atomically(v->json, step_validation_json(results).dump(2) + "\n");
  });
  return validate;
}

CLI::App* add_sweep_subcommand(CLI::App* serve) {
  auto w = std::make_shared<FleetArgs>();
  CLI::App* sweep = serve->add_subcommand("sweep", "capacity curve: SLO attainment and p99 latencies against offered load");
  sweep->add_option("fleet", w->fleet, "fleet file")->required();
  sweep->add_option("--rates", w->rates, "rates: A:B:xF, A:B:+S or a list (with --replay: speed-ups of the trace)")
      ->required();
  sweep->add_option("--attainment", w->attainment, "the fraction of requests that must meet the SLOs")
      ->capture_default_str();
  add_run_options(sweep, *w);
  sweep->add_option("--json", w->json, "write the curve as JSON");
  sweep->add_option("--plot", w->plot, "write the capacity plot (PNG, gnuplot) into this folder");
  sweep->add_option("--gpu-hour-price", w->gpu_hour_price,
                    "dollars per GPU-hour, one price (2.5) or per GPU (H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2): each "
                    "rate's $ per million output tokens");
  sweep->callback([w] { run_sweep(*w); });
  return sweep;
}

CLI::App* add_size_subcommand(CLI::App* serve) {
  auto w = std::make_shared<FleetArgs>();
  CLI::App* size = serve->add_subcommand(
      "size", "how many instances of each pool serve a target load within the SLO, on the fewest GPUs");
  size->add_option("fleet", w->fleet, "fleet file (its pools' shapes are kept; their counts and the nodes are sized)")
      ->required();
  add_run_options(size, *w);
  size->add_option("--target", w->target, "the load to serve: requests/s (with --replay, the trace's speed-up)")
      ->required();
  size->add_option("--attainment", w->attainment, "the share of requests that must meet the SLO")->capture_default_str();
  size->add_option("--json", w->json, "write every fleet tried as JSON");
  size->add_option("--emit", w->emit, "write the sized fleet file (counts and the topology's nodes)");
  size->add_option("--gpu-hour-price", w->gpu_hour_price,
                   "dollars per GPU-hour, one price (2.5) or per GPU (H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2): seek the "
                   "cheapest fleet rather than the smallest (pools on several kinds of GPU: which mix)");
  size->callback([w] { run_size(*w); });
  return size;
}

CLI::App* add_search_subcommand(CLI::App* serve) {
  auto w = std::make_shared<FleetArgs>();
  CLI::App* search = serve->add_subcommand(
      "search", "which instance shape (TP, PP, DP attention, EP) serves the fleet's traffic best on its GPUs; for a "
      "disaggregated fleet, also how many GPUs prefill and how many decode");
  search->add_option("fleet", w->fleet, "fleet file with one colocated pool, or one prefill and one decode pool (shapes and counts are replaced)")->required();
  add_run_options(search, *w);
  search->add_option("--attainment", w->attainment, "with an SLO: the share of requests that must meet it")
      ->capture_default_str();
  search->add_option("--top", w->top, "rows of the table")->capture_default_str();
  search->add_option("--jobs", w->jobs, "fleet simulations at once (default: all cores)");
  search->add_flag("--exhaustive", w->exhaustive,
                   "simulate every candidate, none pruned by its rate bound (slower; to check the pruning)");
  search->add_option("--max-sequences", w->max_sequences,
                     "colocated: sequence caps to try with every shape, e.g. 64,128,256 (default: the pool's)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  search->add_option("--token-budgets", w->token_budgets,
                     "colocated: token budgets (chunk sizes) to try with every shape, e.g. 2048,8192 (default: the pool's)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  search->add_option("--draft-tokens", w->draft_tokens,
                     "colocated, speculating pools: draft tokens a step to try with every shape, e.g. 1,2,4 (default: the pool's)")
      ->delimiter(',')
      ->check(CLI::Range(1, 16));
  search->add_option("--json", w->json, "write every simulated shape as JSON");
  search->add_option("--emit", w->emit, "write the fleet file with the best shape");
  search->add_option("--plot", w->plot, "write each shape's capacity against its p99 TPOT (PNG, gnuplot) here");
  search->add_option("--gpu-hour-price", w->gpu_hour_price,
                     "dollars per GPU-hour, one price (2.5) or per GPU (H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2): rank by "
                     "capacity per dollar an hour of the GPUs in use, with each candidate's $/hour and $ per million "
                     "output tokens");
  search->callback([w] { run_search(*w); });
  return search;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  CLI::App* serve = app.add_subcommand(
      "serve", "serving: simulate a fleet (FLEET.json: model, topology, pools, router, traffic), or time one engine step");
  auto f = std::make_shared<FleetArgs>();
  serve->add_option("fleet", f->fleet, "fleet file (workloads/serve/*.json; docs/serving-format.md)");
  add_run_options(serve, *f);
  serve->add_option("--rate", f->rate, "open-loop arrival rate, requests per second (default: the fleet's)");
  serve->add_option("--rate-scale", f->rate_scale, "with --replay: arrivals this many times faster")->capture_default_str();
  serve->add_option("--json", f->json, "write the whole summary as JSON");
  serve->add_option("--gpu-hour-price", f->gpu_hour_price,
                    "dollars per GPU-hour, one price (2.5) or per GPU (H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.2): the run's "
                    "GPU-hours, cost and $ per million tokens");
  serve->add_option("--per-request", f->per_request, "write one CSV row per request");
  serve->add_option("--trace", f->trace, "write a Chrome/Perfetto trace: one track per instance, its engine steps");
  serve->add_option("--compare-routers", f->compare_routers,
                    "run the same traffic through each of these routers (comma-separated) and compare them");
  serve->add_option("--plot", f->plot,
                    "write PNGs (gnuplot) here: with --compare-routers latency CDFs; with autoscaled pools their instances, "
                    "the arrival rate and the SLO met over time");
  CLI::App* step = add_step_subcommand(serve);
  CLI::App* validate = add_validate_subcommand(serve);
  CLI::App* sweep = add_sweep_subcommand(serve);
  CLI::App* search = add_search_subcommand(serve);
  CLI::App* size = add_size_subcommand(serve);
  serve->callback([step, sweep, validate, search, size, f] {
    if (step->parsed() || sweep->parsed() || validate->parsed() || search->parsed() || size->parsed()) return;
    if (f->fleet.empty()) throw CLI::CallForHelp();
    run_fleet(*f);
  });
}

}  // namespace parallax::cli
