// `parallax scale --rank-orders` (rank_order_study.h).
#include "planning/rank_order_study.h"

#include <algorithm>
#include <set>

#include "io/input_error.h"
#include "io/text_format.h"

namespace parallax {
namespace {

constexpr ParallelDim kCanonical[] = {ParallelDim::kTp, ParallelDim::kCp, ParallelDim::kEp, ParallelDim::kDp, ParallelDim::kPp};

int degree(const ParallelLayout& l, ParallelDim d) {
  switch (d) {
    case ParallelDim::kTp: return l.tp;
    case ParallelDim::kCp: return l.cp;
    case ParallelDim::kEp: return l.ep;
    case ParallelDim::kDp: return l.dp;
    case ParallelDim::kPp: return l.pp;
  }
  return 1;
}

WorkKind kind_of(ParallelDim d) {
  switch (d) {
    case ParallelDim::kTp: return WorkKind::kTpComm;
    case ParallelDim::kCp: return WorkKind::kCpComm;
    case ParallelDim::kEp: return WorkKind::kEpComm;
    case ParallelDim::kDp: return WorkKind::kDpComm;
    case ParallelDim::kPp: return WorkKind::kPpComm;
  }
  return WorkKind::kCompute;
}

std::string order_string(const std::vector<ParallelDim>& dims) {
  std::string s;
  for (ParallelDim d : dims) s += (s.empty() ? "" : "-") + std::string(to_string(d));
  return s;
}

// The layout's order with every dimension listed (the missing ones appended canonically).
std::string completed(const std::string& order) {
  std::vector<ParallelDim> dims = parse_rank_order(order);
  for (ParallelDim d : kCanonical) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  }
  return order_string(dims);
}

int nodes_spanned(const std::vector<int>& group, int gpus_per_node) {
  std::set<int> nodes;
  for (int r : group) nodes.insert(r / gpus_per_node);
  return static_cast<int>(nodes.size());
}

RankOrderCase simulate_order(const ModelConfig& model, ParallelLayout l, const Topology& topology, int gpus_per_node,
                             const std::string& order, const IterationOptions& options) {
  RankOrderCase c;
  c.order = order;
  l.rank_order = order;
  try {
    c.result = simulate_iteration(model, l, topology, options);
  } catch (const InputError& e) {
    c.problem = e.reason();
    return c;
  } catch (const std::invalid_argument& e) {
    c.problem = e.what();
    return c;
  }
  const RankMapping ranks(l);
  for (ParallelDim d : kCanonical) {
    if (degree(l, d) <= 1) continue;
    DimensionPlacement p;
    p.dim = d;
    p.degree = degree(l, d);
    p.nodes_spanned = nodes_spanned(ranks.group(d, 0), gpus_per_node);
    const size_t k = kind_index(kind_of(d));
    for (const StageResult& s : c.result->stages) {
      p.sent_per_gpu = std::max(p.sent_per_gpu, s.communication[k].sent);
      p.exposed_across_nodes = std::max(p.exposed_across_nodes, s.time.exposed_across_nodes[k]);
    }
    if (p.nodes_spanned > 1) c.sent_across_nodes += p.sent_per_gpu;
    c.dims.push_back(p);
  }
  return c;
}

}  // namespace

std::vector<std::string> distinct_rank_orders(const ParallelLayout& layout) {
  std::vector<ParallelDim> varied, fixed;
  for (ParallelDim d : kCanonical) (degree(layout, d) > 1 ? varied : fixed).push_back(d);
  const std::string own = completed(layout.rank_order);
  std::vector<std::string> out{own};
  // The layout's own order may list the degree-1 dimensions elsewhere: the same placement.
  std::vector<ParallelDim> own_varied;
  for (ParallelDim d : parse_rank_order(own)) {
    if (degree(layout, d) > 1) own_varied.push_back(d);
  }
  std::sort(varied.begin(), varied.end());
  do {
    if (varied == own_varied) continue;
    std::vector<ParallelDim> dims = varied;
    dims.insert(dims.end(), fixed.begin(), fixed.end());
    out.push_back(order_string(dims));
  } while (std::next_permutation(varied.begin(), varied.end()));
  return out;
}

RankOrderStudy run_rank_order_study(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                                    const std::vector<std::string>& orders, const IterationOptions& options) {
  RankOrderStudy study;
  study.gpus = layout.world_size();
  study.gpus_per_node = std::max(1, static_cast<int>(topology.gpu_count()) / std::max(1, topology.node_count()));
  for (const std::string& order : orders) {
    study.cases.push_back(simulate_order(model, layout, topology, study.gpus_per_node, order, options));
  }
  return study;
}

std::string rank_order_table(const RankOrderStudy& study) {
  std::string t = format_text("  %-16s %11s %10s %10s %13s  %s\n", "rank order", "iteration", "tok/s/GPU", "memory/GPU",
                              "across nodes", "per dimension: nodes its group spans, GiB sent per GPU, exposed across nodes");
  for (const RankOrderCase& c : study.cases) {
    if (!c.result) {
      t += format_text("  %-16s  not run: %s\n", c.order.c_str(), c.problem.c_str());
      continue;
    }
    std::string dims;
    for (const DimensionPlacement& p : c.dims) {
      dims += format_text("%s%s %d: %s, %.2f GiB, %.0f ms", dims.empty() ? "" : "; ", to_string(p.dim), p.degree,
                          p.nodes_spanned > 1 ? format_text("%d nodes", p.nodes_spanned).c_str() : "in a node",
                          in_gib(p.sent_per_gpu), p.exposed_across_nodes.seconds() * 1e3);
    }
    t += format_text("  %-16s %9.3f s %10.1f %6.1f GiB %9.2f GiB  %s\n", c.order.c_str(), c.result->iteration_time.seconds(),
                     c.result->tokens_per_second_per_gpu, in_gib(c.result->peak_memory), in_gib(c.sent_across_nodes), dims.c_str());
  }
  t += format_text("rank order: innermost first (%d GPUs a node); across nodes: GiB a GPU sends per iteration in the "
                   "dimensions whose groups span nodes\n",
                   study.gpus_per_node);
  return t;
}

nlohmann::ordered_json rank_order_json(const RankOrderStudy& study) {
  nlohmann::ordered_json j;
  j["gpus"] = study.gpus;
  j["gpus_per_node"] = study.gpus_per_node;
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const RankOrderCase& c : study.cases) {
    nlohmann::ordered_json x;
    x["rank_order"] = c.order;
    if (!c.result) {
      x["problem"] = c.problem;
      cases.push_back(x);
      continue;
    }
    x["iteration_time_s"] = c.result->iteration_time.seconds();
    x["tokens_per_second_per_gpu"] = c.result->tokens_per_second_per_gpu;
    x["peak_memory_bytes"] = c.result->peak_memory.value();
    x["sent_across_nodes_bytes"] = c.sent_across_nodes.value();
    nlohmann::ordered_json dims = nlohmann::ordered_json::array();
    for (const DimensionPlacement& p : c.dims) {
      dims.push_back({{"dim", to_string(p.dim)},
                      {"degree", p.degree},
                      {"nodes_spanned", p.nodes_spanned},
                      {"sent_per_gpu_bytes", p.sent_per_gpu.value()},
                      {"exposed_across_nodes_s", p.exposed_across_nodes.seconds()}});
    }
    x["dimensions"] = dims;
    cases.push_back(x);
  }
  j["rank_orders"] = cases;
  return j;
}

}  // namespace parallax
