// Fleet files (fleet_loader.h).
#include "serving/fleet_loader.h"

#include <filesystem>

#include "io/json_reader.h"
#include "model/model_loader.h"
#include "serving/trace_reader.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;

int64_t integer_in(JsonReader v, int64_t least, int64_t most) {
  const int64_t x = v.as_int();
  if (x < least || x > most) {
    v.fail("must be between " + std::to_string(least) + " and " + std::to_string(most) + ", found " + std::to_string(x));
  }
  return x;
}

// A serving type: the weights' or the KV cache's.
DType serving_dtype(const JsonReader& v) {
  const std::string t = v.as_string();
  if (t == "bf16") return DType::kBf16;
  if (t == "fp8") return DType::kFp8;
  v.fail("\"" + t + "\" is not a serving type (bf16 or fp8)");
}

double number_in(JsonReader v, double least, double most);

// "speculative": {"method": "mtp" | "eagle" | "draft", "model": (draft only), "tokens": k,
// "acceptance": a}.
void read_speculative(JsonReader v, PoolConfig& pool, const std::string& models_dir) {
  const JsonReader method = v.at("method");
  const std::string m = method.as_string();
  if (m == "mtp") {
    pool.step.speculative = SpeculativeMethod::kMtp;
  } else if (m == "eagle") {
    pool.step.speculative = SpeculativeMethod::kEagle;
  } else if (m == "draft") {
    pool.step.speculative = SpeculativeMethod::kDraftModel;
    pool.step.draft_model = std::make_shared<const ModelConfig>(read_model(v.at("model"), models_dir));
  } else {
    method.fail("\"" + m + "\" is not a drafting method (mtp, eagle or draft)");
  }
  if (m != "draft") {
    if (auto model = v.find("model")) model->fail("only a draft model (method \"draft\") is a separate model");
  }
  pool.batching.speculative_tokens = static_cast<int>(integer_in(v.at("tokens"), 1, 16));
  pool.batching.acceptance = number_in(v.at("acceptance"), 0, 0.999);
  v.finish();
}

double number_in(JsonReader v, double least, double most) {
  const double x = v.as_number();
  if (!(x >= least && x <= most)) {
    v.fail("must be between " + std::to_string(least) + " and " + std::to_string(most));
  }
  return x;
}

Time non_negative_time(JsonReader v) {
  const Time t = v.as_time();
  if (t < Time::zero()) v.fail("must not be negative");
  return t;
}

// "group_nodes": {"h100": 2, "a100": 4}: node counts of the named groups of `groups` (the
// topology as its file gives it), the others as the file has them; in the groups' order.
std::vector<int> read_group_nodes(JsonReader v, const Topology& groups) {
  const std::vector<NodeGroup>& list = groups.info().node_groups;
  if (list.empty()) v.fail("node counts per group need a topology with \"node_groups\"");
  std::vector<int> nodes;
  for (const NodeGroup& g : list) nodes.push_back(g.nodes);
  for (const std::string& name : v.keys()) {
    JsonReader count = v.at(name);
    const auto it = std::find_if(list.begin(), list.end(), [&](const NodeGroup& g) { return g.name == name; });
    if (it == list.end()) count.fail("no node group is named \"" + name + "\"");
    nodes[static_cast<size_t>(it - list.begin())] = static_cast<int>(integer_in(count, 1, kMaxNodes));
  }
  return nodes;
}

std::shared_ptr<const Topology> read_topology(JsonReader t, const std::string& fleet, const std::string& dir,
                                              FleetFile& f) {
  std::string& name = f.topology_name;
  std::string file;
  TopologyLoadOptions load;
  if (t.is_string()) {
    name = t.as_string();
    file = preset_file(dir, t);
  } else if (auto preset = t.find("preset")) {
    name = preset->as_string();
    file = preset_file(dir, *preset);
  } else {
    name = t.at("file").as_string();
    file = (fs::path(fleet).parent_path() / name).string();
  }
  std::optional<JsonReader> group_nodes;
  if (!t.is_string()) {
    if (auto n = t.find("nodes")) load.nodes = static_cast<int>(integer_in(*n, 1, 100000));
    group_nodes = t.find("group_nodes");
    t.finish();
  }
  if (name.find('/') != std::string::npos && !t.has("file")) t.fail("a preset name, not a path (use \"file\")");
  if (!fs::exists(file)) t.fail("no topology file " + file);
  if (group_nodes) load.group_nodes = read_group_nodes(*group_nodes, load_topology(file, load));
  auto topology = std::make_shared<const Topology>(load_topology(file, load));
  const bool grouped = !topology->info().node_groups.empty();
  f.topology_with_nodes = [file, load, grouped](const std::vector<int>& nodes) {
    TopologyLoadOptions more = load;
    if (grouped) {
      more.group_nodes = nodes;
    } else {
      more.nodes = nodes.at(0);
    }
    return std::make_shared<const Topology>(load_topology(file, more));
  };
  return topology;
}

LengthDistribution read_lengths(JsonReader v) {
  LengthDistribution d;
  if (v.is_number()) {
    d.value = integer_in(v, 1, 10000000);
    return d;
  }
  const std::string kind = v.at("distribution").as_string();
  if (kind == "fixed") {
    d.value = integer_in(v.at("tokens"), 1, 10000000);
  } else if (kind == "uniform") {
    d.kind = LengthDistribution::Kind::kUniform;
    d.min = integer_in(v.at("min"), 1, 10000000);
    d.max = integer_in(v.at("max"), d.min, 10000000);
  } else if (kind == "lognormal") {
    d.kind = LengthDistribution::Kind::kLognormal;
    d.mean = number_in(v.at("mean"), 1, 1e7);
    d.sigma = number_in(v.at("sigma"), 0, 5);
    d.min = v.has("min") ? integer_in(v.at("min"), 1, 10000000) : 1;
    d.max = v.has("max") ? integer_in(v.at("max"), d.min, 10000000) : 10000000;
  } else {
    v.at("distribution").fail("unknown distribution \"" + kind + "\" (fixed, uniform, lognormal)");
  }
  v.finish();
  return d;
}

// [{"from": "0 s", "scale": 0.5}, {"from": "600 s", "scale": 1.5}, ...]
std::vector<RateStep> read_rate_profile(JsonReader v) {
  std::vector<RateStep> steps;
  for (JsonReader e : v.elements()) {
    RateStep step{non_negative_time(e.at("from")), number_in(e.at("scale"), 0, 1e6)};
    if (steps.empty() && step.from != Time::zero()) e.at("from").fail("the first step starts at 0 s");
    if (!steps.empty() && !(step.from > steps.back().from)) e.at("from").fail("steps must start later and later");
    steps.push_back(step);
    e.finish();
  }
  if (steps.empty()) v.fail("needs at least one step");
  if (!(steps.back().scale > 0)) v.fail("the last step's scale must be positive (arrivals must go on)");
  return steps;
}

TrafficSpec read_traffic(JsonReader t, const std::string& fleet) {
  TrafficSpec s;
  const std::string arrival = t.has("arrival") ? t.at("arrival").as_string() : "poisson";
  if (arrival == "poisson" || arrival == "gamma") {
    s.arrival = arrival == "poisson" ? TrafficSpec::Arrival::kPoisson : TrafficSpec::Arrival::kGamma;
    s.rate_per_s = number_in(t.at("rate"), 1e-6, 1e7);
    if (s.arrival == TrafficSpec::Arrival::kGamma) s.cv = number_in(t.at("cv"), 0.01, 100);
    if (auto v = t.find("rate_profile")) s.rate_profile = read_rate_profile(*v);
  } else if (arrival == "closed_loop") {
    s.arrival = TrafficSpec::Arrival::kClosedLoop;
    s.users = static_cast<int>(integer_in(t.at("users"), 1, 1000000));
    s.think_time = t.has("think_time") ? non_negative_time(t.at("think_time")) : Time::zero();
  } else {
    t.at("arrival").fail("unknown arrival \"" + arrival + "\" (poisson, gamma, closed_loop)");
  }
  s.requests = integer_in(t.at("requests"), 1, 100000000);
  if (auto v = t.find("lengths_from")) {
    if (t.has("prompt") || t.has("output")) v->fail("lengths_from replaces \"prompt\" and \"output\"; give one or the other");
    const std::string file = (fs::path(fleet).parent_path() / v->as_string()).string();
    if (!fs::exists(file)) v->fail("no trace file " + file);
    auto rows = std::make_shared<std::vector<std::pair<int64_t, int64_t>>>();
    for (const Request& r : read_trace(file).requests) rows->emplace_back(r.prompt_tokens, r.output_tokens);
    if (rows->empty()) v->fail("the trace " + file + " has no request");
    s.length_rows = std::move(rows);
    s.length_source = v->as_string();
  } else {
    s.prompt = read_lengths(t.at("prompt"));
    s.output = read_lengths(t.at("output"));
  }
  if (auto v = t.find("sessions")) s.sessions = integer_in(*v, 0, 1000000000);
  t.finish();
  return s;
}

// {"node": N, "gpu": G}: the topology's GPU G of node N (default 0), as an index into its GPUs.
int read_placement(JsonReader v, const Topology& topology) {
  const int per_node = gpus_per_node(topology);
  const auto node = v.has("node") ? integer_in(v.at("node"), 0, topology.node_count() - 1) : 0;
  const auto gpu = v.has("gpu") ? integer_in(v.at("gpu"), 0, per_node - 1) : 0;
  v.finish();
  return static_cast<int>(node) * per_node + static_cast<int>(gpu);
}

// "autoscale": {"min", "max", "initial", "metric", "target", "interval", "scale_down_window",
// "tolerance", and "startup" or "engine_init" and "load_bandwidth"}.
AutoscaleConfig read_autoscale(JsonReader v) {
  AutoscaleConfig a;
  a.min = static_cast<int>(integer_in(v.at("min"), 0, 100000));
  a.max = static_cast<int>(integer_in(v.at("max"), std::max(a.min, 1), 100000));
  if (auto i = v.find("initial")) a.initial = static_cast<int>(integer_in(*i, std::max(a.min, 1), a.max));
  if (auto m = v.find("metric")) {
    const auto metric = autoscale_metric_from(m->as_string());
    if (!metric) m->fail("\"" + m->as_string() + "\" is not a scaling metric (concurrency, waiting, kv_cache, ttft or arrival_rate)");
    a.metric = *metric;
  }
  const bool share = a.metric == AutoscaleMetric::kKvCache || a.metric == AutoscaleMetric::kArrivalRate;
  a.target = share ? number_in(v.at("target"), 0.01, 1) : number_in(v.at("target"), 0.01, 1e6);
  const auto positive_time = [](JsonReader t) {
    const Time x = t.as_time();
    if (!(x > Time::zero())) t.fail("must be positive");
    return x;
  };
  if (auto t = v.find("interval")) a.interval = positive_time(*t);
  if (auto t = v.find("scale_down_window")) a.scale_down_window = non_negative_time(*t);
  if (auto t = v.find("tolerance")) a.tolerance = number_in(*t, 0, 0.99);
  if (auto t = v.find("startup")) {
    for (const char* key : {"engine_init", "load_bandwidth"}) {
      if (v.has(key)) v.at(key).fail("\"startup\" is given: it replaces engine_init and load_bandwidth");
    }
    a.startup = non_negative_time(*t);
  }
  if (auto t = v.find("engine_init")) a.engine_init = non_negative_time(*t);
  if (auto t = v.find("load_bandwidth")) {
    a.load_bandwidth = t->as_bandwidth();
    if (!(a.load_bandwidth.value() > 0)) t->fail("must be positive");
  }
  v.finish();
  return a;
}

PoolConfig read_pool(JsonReader p, int index, const Topology& topology, const std::string& models_dir) {
  PoolConfig pool;
  pool.name = p.has("name") ? p.at("name").as_string() : "pool" + std::to_string(index);
  if (auto role = p.find("role")) {
    const std::string r = role->as_string();
    if (r == "prefill") {
      pool.role = PoolRole::kPrefill;
    } else if (r == "decode") {
      pool.role = PoolRole::kDecode;
    } else if (r != "colocated") {
      role->fail("unknown role \"" + r + "\" (colocated, prefill, decode)");
    }
  }
  pool.shape.tp = static_cast<int>(integer_in(p.at("tp"), 1, 4096));
  if (auto v = p.find("pp")) pool.shape.pp = static_cast<int>(integer_in(*v, 1, 1024));
  if (auto v = p.find("ep")) pool.shape.ep = static_cast<int>(integer_in(*v, 1, 4096));
  if (auto v = p.find("redundant_experts")) pool.shape.redundant_experts = static_cast<int>(integer_in(*v, 0, 4096));
  if (auto v = p.find("dp")) {
    pool.shape.dp = static_cast<int>(integer_in(*v, 1, 4096));
    if (!p.find("ep")) pool.shape.ep = pool.shape.tp * pool.shape.dp;  // the experts over every GPU
  }
  if (auto a = p.find("autoscale")) {
    if (auto c = p.find("count")) c->fail("an autoscaled pool holds autoscale's max instances: give max, not count");
    pool.autoscale = read_autoscale(*a);
    pool.count = pool.autoscale->max;
  } else {
    pool.count = static_cast<int>(integer_in(p.at("count"), 1, 100000));
  }
  if (auto v = p.find("dtype")) pool.step.dtype = serving_dtype(*v);
  if (auto v = p.find("placement")) pool.first_gpu = read_placement(*v, topology);
  if (auto b = p.find("batching")) {
    if (auto v = b->find("policy")) {
      const auto policy = batching_policy_from(v->as_string());
      if (!policy) v->fail("unknown policy \"" + v->as_string() + "\" (chunked, prefill_first, static)");
      pool.batching.policy = *policy;
      // Sarathi-Serve is the chunked policy with its own small budget.
      if (v->as_string() == "sarathi") pool.batching.token_budget = 512;
    }
    if (auto v = b->find("max_sequences")) pool.batching.max_sequences = static_cast<int>(integer_in(*v, 1, 100000));
    if (auto v = b->find("token_budget")) pool.batching.token_budget = integer_in(*v, 1, 10000000);
    if (auto v = b->find("dp_dispatch")) {
      const std::string d = v->as_string();
      if (d == "round_robin") {
        pool.batching.dp_dispatch = DpDispatch::kRoundRobin;
      } else if (d == "shortest_queue") {
        pool.batching.dp_dispatch = DpDispatch::kShortestQueue;
      } else {
        v->fail("\"" + d + "\" is not a dispatch to data-parallel ranks (round_robin or shortest_queue)");
      }
    }
    b->finish();
  }
  if (auto k = p.find("kv_cache")) {
    if (auto v = k->find("block_size")) pool.batching.block_size = integer_in(*v, 1, 4096);
    if (auto v = k->find("blocks")) pool.batching.kv_blocks = integer_in(*v, 1, int64_t{1} << 40);
    if (auto v = k->find("memory_reserve")) pool.memory_reserve = number_in(*v, 0, 0.99);
    if (auto v = k->find("dtype")) pool.step.kv_cache_dtype = serving_dtype(*v);
    if (auto v = k->find("workspace")) pool.workspace = v->as_bytes();
    if (auto v = k->find("prefix_caching")) {
      pool.batching.prefix_caching = v->as_bool();
      if (pool.batching.prefix_caching && pool.batching.policy == BatchingPolicy::kStatic) {
        v->fail("static batching keeps no prefix cache (use chunked or prefill_first)");
      }
    }
    if (auto v = k->find("preemption")) {
      const auto mode = preemption_mode_from(v->as_string());
      if (!mode) v->fail("preemption is \"recompute\" or \"swap\"");
      if (*mode == PreemptionMode::kSwap && pool.batching.policy == BatchingPolicy::kStatic) {
        v->fail("static batching never preempts");
      }
      pool.batching.preemption = *mode;
    }
    if (auto v = k->find("swap_space")) pool.swap_space = v->as_bytes();
    if (auto v = k->find("hybrid_allocator")) pool.hybrid_kv_allocator = v->as_bool();
    if (auto v = k->find("swap_bandwidth")) {
      pool.swap_bandwidth = v->as_bandwidth();
      if (!(pool.swap_bandwidth->value() > 0)) v->fail("the swap bandwidth must be positive");
    }
    if (auto v = k->find("host_cache")) {
      pool.host_cache = v->as_bytes();
      if (pool.host_cache.value() > 0 && !pool.batching.prefix_caching) {
        v->fail("a host tier extends the prefix cache: set \"prefix_caching\": true");
      }
    }
    k->finish();
  }
  if (auto v = p.find("step_overhead")) pool.step.step_overhead = non_negative_time(*v);
  if (auto v = p.find("speculative")) read_speculative(*v, pool, models_dir);
  if (auto v = p.find("moe_expert_skew")) pool.step.expert_skew = number_in(*v, 0, 16);
  if (auto v = p.find("two_batch_overlap")) pool.step.two_batch_overlap = v->as_bool();
  p.finish();
  return pool;
}

RoutingPolicy routing_policy_at(const JsonReader& v) {
  const auto policy = routing_policy_from(v.as_string());
  if (!policy) v.fail("unknown router \"" + v.as_string() + "\" (" + routing_policy_names() + ")");
  return *policy;
}

// "router": a policy name, or an object with the policy and its options.
void read_router(JsonReader& r, FleetConfig& c) {
  if (r.is_string()) {
    c.router = routing_policy_at(r);
    return;
  }
  c.router = routing_policy_at(r.at("policy"));
  if (auto v = r.find("refresh_interval")) c.refresh_interval = non_negative_time(*v);
  if (auto v = r.find("decode_policy")) c.decode_router = routing_policy_at(*v);
  if (auto v = r.find("kv_network")) {
    c.kv_network = v->as_string();
    if (c.kv_network != "flow" && c.kv_network != "analytical") v->fail("\"flow\" or \"analytical\"");
  }
  if (auto v = r.find("kv_streaming")) c.kv_streaming = v->as_bool();
  if (auto v = r.find("index_blocks")) c.router_index_blocks = integer_in(*v, 1, int64_t{1} << 40);
  r.finish();
}

// A fleet is colocated, or disaggregated: prefill and decode pools and no colocated one.
void check_pool_roles(const FleetConfig& c, const JsonReader& pools) {
  bool prefill = false, decode = false, colocated = false;
  for (const PoolConfig& pool : c.pools) {
    prefill = prefill || pool.role == PoolRole::kPrefill;
    decode = decode || pool.role == PoolRole::kDecode;
    colocated = colocated || pool.role == PoolRole::kColocated;
  }
  if (prefill != decode || (prefill && colocated)) {
    pools.fail("a disaggregated fleet has prefill and decode pools and no colocated one");
  }
}

// Shapes and memory are checked here, where the JSON path is known.
void check_pools(const FleetConfig& c, const std::string& path, bool check_shapes) {
  for (size_t i = 0; i < c.pools.size(); ++i) {
    const PoolConfig& pool = c.pools[i];
    // A Mamba layer's state is one per sequence, not per block of tokens: the block-granular
    // prefix cache and swap space would need its states at block boundaries.
    if (c.model.mamba && pool.batching.prefix_caching) {
      throw InputError(path, "/pools/" + std::to_string(i) + "/kv_cache/prefix_caching",
                       "prefix caching of a hybrid model's Mamba states is not modelled");
    }
    if (c.model.mamba && pool.batching.preemption == PreemptionMode::kSwap) {
      throw InputError(path, "/pools/" + std::to_string(i) + "/kv_cache/preemption",
                       "swapping a hybrid model's Mamba states is not modelled (use recompute)");
    }
    if (!check_shapes) continue;
    try {
      check_pool_shape(c, pool);
    } catch (const std::invalid_argument& e) {
      throw InputError(path, "/pools/" + std::to_string(i), e.what());
    }
  }
}

}  // namespace

FleetFile load_fleet(const std::string& path, const std::string& models_dir, const std::string& topologies_dir,
                     bool check_shapes) {
  const nlohmann::json doc = load_json_file(path);
  JsonReader root(doc, path);
  FleetFile f;
  FleetConfig& c = f.config;
  if (auto d = root.find("description")) d->as_string();  // for people; not read
  c.model = read_model(root.at("model"), models_dir);
  c.topology = read_topology(root.at("topology"), path, topologies_dir, f);
  JsonReader pools = root.at("pools");
  int index = 0;
  for (const JsonReader& p : pools.elements()) c.pools.push_back(read_pool(p, index++, *c.topology, models_dir));
  if (c.pools.empty()) pools.fail("needs at least one pool");
  if (auto r = root.find("router")) read_router(*r, c);
  c.traffic = read_traffic(root.at("traffic"), path);
  if (auto v = root.find("seed")) c.seed = static_cast<uint64_t>(integer_in(*v, 0, INT64_MAX));
  if (auto slo = root.find("slo")) {
    if (auto v = slo->find("ttft")) c.slo_ttft = non_negative_time(*v);
    if (auto v = slo->find("tpot")) c.slo_tpot = non_negative_time(*v);
    slo->finish();
  }
  root.finish();
  check_pool_roles(c, pools);
  check_pools(c, path, check_shapes);
  return f;
}

}  // namespace parallax
