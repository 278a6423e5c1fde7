// The space of a layout search (search_space.h).
#include "planning/search_space.h"

#include <algorithm>
#include <functional>

#include "io/input_error.h"
#include "io/json_reader.h"
#include "training/workload_loader.h"

namespace parallax {
namespace {

std::vector<int> divisors_up_to(int n, int limit) {
  std::vector<int> out;
  for (int d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::vector<int> powers_of_two_dividing(int n, int limit) {
  std::vector<int> out;
  for (int d = 1; d <= std::min(n, limit); d *= 2) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

ZeroStage zero_of(JsonReader& r) {
  const int64_t z = r.as_int();
  if (z < 0 || z > 3) r.fail("ZeRO stage must be 0, 1, 2 or 3");
  return static_cast<ZeroStage>(z);
}

Recomputation recompute_of(JsonReader& r) {
  const std::string s = r.as_string();
  if (auto recompute = recomputation_from(s)) return *recompute;
  r.fail("\"" + s + "\" is not a recomputation (expected none, selective, full or selective_op)");
}

ContextParallelComm cp_comm_of(JsonReader& r) {
  const std::string s = r.as_string();
  if (auto c = context_parallel_comm_from(s)) return *c;
  r.fail("\"" + s + "\" is not a CP scheme (expected ring or ulysses)");
}

MoeDispatcher moe_dispatcher_of(JsonReader& r) {
  const std::string s = r.as_string();
  if (auto d = moe_dispatcher_from(s)) return *d;
  r.fail("\"" + s + "\" is not a MoE token dispatcher (expected alltoall or flex)");
}

ExpertGemms expert_gemms_of(JsonReader& r) {
  const std::string s = r.as_string();
  if (auto g = expert_gemms_from(s)) return *g;
  r.fail("\"" + s + "\" is not a way to issue expert GEMMs (expected per_expert, grouped or sequential)");
}

int positive_int(JsonReader& r) {
  const int64_t v = r.as_int();
  if (v < 1 || v > (1 << 20)) r.fail("must be between 1 and 1048576");
  return static_cast<int>(v);
}

// A count of layers: 0 allowed.
int layer_count(JsonReader& r) {
  const int64_t v = r.as_int();
  if (v < 0 || v > 1 << 20) r.fail("must be between 0 and 1048576, found " + std::to_string(v));
  return static_cast<int>(v);
}

// Reads `key`'s list, when given, into `into` (each element by `read`).
template <typename T, typename Read>
void read_list(JsonReader& root, const std::string& key, std::vector<T>& into, Read read) {
  auto list = root.find(key);
  if (!list) return;
  if (!list->is_array()) list->fail("must be a list");
  std::vector<T> values;
  for (JsonReader& e : list->elements()) values.push_back(read(e));
  if (values.empty()) list->fail("must not be empty");
  into = std::move(values);
}

}  // namespace

SearchSpace default_search_space(const ModelConfig& model, const ParallelLayout& base, int gpus, int gpus_per_node) {
  SearchSpace s;
  s.tp = powers_of_two_dividing(gpus, std::min(64, std::max(1, 2 * gpus_per_node)));
  s.pp = divisors_up_to(gpus, std::max(1, model.layers));
  s.cp = base.sequence_length >= 16384 ? powers_of_two_dividing(gpus, 8) : std::vector<int>{1};
  s.ep = model.moe ? powers_of_two_dividing(std::max(1, model.moe->experts), std::min(gpus, 64)) : std::vector<int>{1};
  s.expert_tp = model.moe ? std::vector<int>{0, 1} : std::vector<int>{0};
  s.vpp = {2, 4};
  s.zero = {ZeroStage::kStage0, ZeroStage::kStage1, ZeroStage::kStage2, ZeroStage::kStage3};
  s.micro_batch = {1, 2, 4, 8};
  s.recompute = {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull};
  s.recompute_layers = {base.recompute_layers};
  s.schedule = {PipelineScheduleKind::kOneFOneB, PipelineScheduleKind::kInterleavedOneFOneB,
                PipelineScheduleKind::kZeroBubbleH1, PipelineScheduleKind::kZeroBubbleV, PipelineScheduleKind::kDualPipeV};
  s.cp_comm = {base.cp_comm};
  s.moe_dispatcher = {base.moe_dispatcher};
  s.expert_gemms = {base.expert_gemms};
  s.moe_a2a_overlap = {false, true};  // where it can run (moe_a2a_overlap_possible): MoE, ep > 1, pairing schedules
  s.sequence_parallel = {true};
  s.tp_comm_overlap = {base.tp_comm_overlap};
  s.cpu_offloading_layers = {base.cpu_offloading_layers};
  s.rank_order = {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"};
  return s;
}

SearchSpace read_search_space(const std::string& path, SearchSpace s, int gpus) {
  const nlohmann::json doc = load_json_file(path);
  JsonReader root(doc, path);
  if (!root.is_object()) root.fail("a search space is a JSON object of lists (docs/search-format.md)");
  auto degree = [gpus](JsonReader& r) {
    const int v = positive_int(r);
    if (gpus % v != 0) r.fail(std::to_string(v) + " does not divide the " + std::to_string(gpus) + " GPUs");
    return v;
  };
  read_list(root, "tp", s.tp, degree);
  read_list(root, "pp", s.pp, degree);
  read_list(root, "cp", s.cp, degree);
  read_list(root, "ep", s.ep, degree);
  read_list(root, "expert_tp", s.expert_tp, [](JsonReader& r) {
    if (r.is_string()) {
      if (r.as_string() != "tp") r.fail("must be \"tp\" or an integer ≥ 1");
      return 0;
    }
    return positive_int(r);
  });
  read_list(root, "vpp", s.vpp, positive_int);
  read_list(root, "zero", s.zero, zero_of);
  read_list(root, "dp_shard", s.dp_shard, positive_int);
  read_list(root, "micro_batch", s.micro_batch, [](JsonReader& r) { return static_cast<int64_t>(positive_int(r)); });
  read_list(root, "recompute", s.recompute, recompute_of);
  read_list(root, "recompute_layers", s.recompute_layers, layer_count);
  read_list(root, "schedule", s.schedule,
            [&](JsonReader& r) { return schedule_from(r.as_string(), path, r.pointer()); });
  read_list(root, "cp_comm", s.cp_comm, cp_comm_of);
  read_list(root, "moe_dispatcher", s.moe_dispatcher, moe_dispatcher_of);
  read_list(root, "expert_gemm", s.expert_gemms, expert_gemms_of);
  read_list(root, "moe_a2a_overlap", s.moe_a2a_overlap, [](JsonReader& r) { return r.as_bool(); });
  read_list(root, "sequence_parallel", s.sequence_parallel, [](JsonReader& r) { return r.as_bool(); });
  read_list(root, "tp_comm_overlap", s.tp_comm_overlap, [](JsonReader& r) { return r.as_bool(); });
  read_list(root, "cpu_offloading_layers", s.cpu_offloading_layers, layer_count);
  read_list(root, "rank_order", s.rank_order, [](JsonReader& r) {
    const std::string order = r.as_string();
    try {
      parse_rank_order(order);
    } catch (const std::invalid_argument& e) {
      r.fail(e.what());
    }
    return order;
  });
  root.finish();
  return s;
}

namespace {

using Layouts = std::vector<ParallelLayout>;

// Every layout of `in` once per value of a dimension where the dimension applies to it (set by
// `set`), else as it is.
template <typename T, typename Applies, typename Set>
Layouts expand(const Layouts& in, const std::vector<T>& values, Applies applies, Set set) {
  Layouts out;
  for (const ParallelLayout& l : in) {
    if (!applies(l)) {
      out.push_back(l);
      continue;
    }
    for (const T& v : values) {
      ParallelLayout c = l;
      set(c, v);
      out.push_back(std::move(c));
    }
  }
  return out;
}

// The degrees that fill the GPUs: tp·pp·cp divides them and dp is what is left; the switches
// that only some degrees have start at their one value (1F1B, no chunks, no SP, TP or all-to-all
// overlap, the first rank order).
Layouts degrees(const SearchSpace& space, const ParallelLayout& base, int gpus) {
  Layouts out;
  for (int tp : space.tp) {
    for (int pp : space.pp) {
      for (int cp : space.cp) {
        if (gpus % (tp * pp * cp) != 0) continue;
        ParallelLayout l = base;
        l.tp = tp;
        l.pp = pp;
        l.cp = cp;
        l.dp = gpus / (tp * pp * cp);
        l.schedule = PipelineScheduleKind::kOneFOneB;
        l.virtual_stages = 1;
        l.microbatch_group = 0;  // the depth-first default of whatever interleaving follows
        l.sequence_parallel = l.tp_comm_overlap = l.moe_a2a_overlap = false;
        l.expert_tp = 0;
        l.cpu_offloading_layers = 0;
        l.dp_shard = 0;
        l.rank_order = space.rank_order.front();
        l.stage_layers.clear();
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

// Every layout as it is (states sharded over all its data-parallel ranks) and, with ZeRO 1–3, once
// per shard group size in `sizes` that splits its dp·cp ranks into two or more groups.
Layouts with_shard_groups(const Layouts& in, const std::vector<int>& sizes) {
  if (sizes.empty()) return in;
  Layouts out;
  for (const ParallelLayout& l : in) {
    out.push_back(l);
    const int ranks = l.dp * l.cp;
    if (l.zero_stage == ZeroStage::kStage0) continue;
    for (int v : sizes) {
      if (v >= ranks || ranks % v != 0) continue;
      ParallelLayout c = l;
      c.dp_shard = v;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace

Enumeration enumerate_layouts(const SearchSpace& space, const ModelConfig& model, const ParallelLayout& base, int gpus) {
  auto always = [](const ParallelLayout&) { return true; };
  Layouts l = degrees(space, base, gpus);
  l = expand(l, space.ep, always, [](ParallelLayout& x, int v) { x.ep = v; });
  // Expert TP is its own degree only for MoE models, and only differs from tp above one; a
  // value equal to tp is the default (0), so that no layout is counted twice.
  l = expand(l, space.expert_tp, [&](const ParallelLayout& x) { return model.moe && x.tp > 1; },
             [](ParallelLayout& x, int v) { x.expert_tp = v == x.tp ? 0 : v; });
  l = expand(l, space.zero, always, [](ParallelLayout& x, ZeroStage v) { x.zero_stage = v; });
  l = with_shard_groups(l, space.dp_shard);
  l = expand(l, space.micro_batch, always, [](ParallelLayout& x, int64_t v) { x.micro_batch = v; });
  l = expand(l, space.recompute, always, [](ParallelLayout& x, Recomputation v) {
    x.recompute = v;
    x.recompute_layers = 0;
  });
  // A block of layers is a choice of full recomputation.
  l = expand(l, space.recompute_layers, [](const ParallelLayout& x) { return x.recompute == Recomputation::kFull; },
             [](ParallelLayout& x, int v) { x.recompute_layers = v; });
  // Only pipelines have schedules; the interleaved one has vpp chunks, a V (ZB-V, DualPipeV) two.
  l = expand(l, space.schedule, [](const ParallelLayout& x) { return x.pp > 1; },
             [](ParallelLayout& x, PipelineScheduleKind v) {
               x.schedule = v;
               if (v_shaped(v)) x.virtual_stages = 2;
             });
  l = expand(l, space.vpp, [](const ParallelLayout& x) { return x.schedule == PipelineScheduleKind::kInterleavedOneFOneB; },
             [](ParallelLayout& x, int v) { x.virtual_stages = v; });
  l = expand(l, space.cp_comm, [](const ParallelLayout& x) { return x.cp > 1; },
             [](ParallelLayout& x, ContextParallelComm v) { x.cp_comm = v; });
  l = expand(l, space.moe_dispatcher, [&](const ParallelLayout& x) { return model.moe && x.ep > 1; },
             [](ParallelLayout& x, MoeDispatcher v) { x.moe_dispatcher = v; });
  l = expand(l, space.expert_gemms, [&](const ParallelLayout&) { return model.moe.has_value(); },
             [](ParallelLayout& x, ExpertGemms v) { x.expert_gemms = v; });
  l = expand(l, space.moe_a2a_overlap, [](const ParallelLayout& x) { return x.moe_a2a_overlap_possible(); },
             [](ParallelLayout& x, bool v) { x.moe_a2a_overlap = v; });
  l = expand(l, space.sequence_parallel, [](const ParallelLayout& x) { return x.tp > 1; },
             [](ParallelLayout& x, bool v) { x.sequence_parallel = v; });
  l = expand(l, space.tp_comm_overlap, [](const ParallelLayout& x) { return x.tp > 1; },
             [](ParallelLayout& x, bool v) { x.tp_comm_overlap = v; });
  // Megatron-Core offloads activations only without pipelining or recomputation.
  l = expand(l, space.cpu_offloading_layers, [](const ParallelLayout& x) { return x.activation_offloading_possible(); },
             [](ParallelLayout& x, int v) { x.cpu_offloading_layers = v; });
  // Rank orders differ only with both DP and PP above one.
  l = expand(l, space.rank_order, [](const ParallelLayout& x) { return x.dp > 1 && x.pp > 1; },
             [](ParallelLayout& x, const std::string& v) { x.rank_order = v; });
  Enumeration out;
  out.enumerated = l.size();
  const bool every_layer_too =
      std::find(space.recompute_layers.begin(), space.recompute_layers.end(), 0) != space.recompute_layers.end();
  for (ParallelLayout& x : l) {
    try {
      validate(x, model, gpus);
      if (x.recompute_layers > 0) {
        // Recomputing as many layers as a stage holds, or more, is recomputing every layer (0):
        // the same layout as 0 where the space has 0.
        const std::vector<int> per_stage = virtual_stage_layers(x, model);
        if (x.recompute_layers >= *std::max_element(per_stage.begin(), per_stage.end())) {
          if (every_layer_too) {
            ++out.rejected_by_rule;
            continue;
          }
          x.recompute_layers = 0;
        }
      }
      out.valid.push_back(std::move(x));
    } catch (const InputError&) {
      ++out.rejected_by_rule;
    }
  }
  return out;
}

}  // namespace parallax
