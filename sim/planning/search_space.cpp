// The space of a layout search (search_space.h).
#include "planning/search_space.h"

#include <algorithm>
#include <functional>

#include "io/input_error.h"
#include "io/json_reader.h"
#include "training/iteration_report.h"
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
  if (s == "none") return Recomputation::kNone;
  if (s == "selective") return Recomputation::kSelective;
  if (s == "full") return Recomputation::kFull;
  r.fail("\"" + s + "\" is not a recomputation (expected none, selective or full)");
}

ContextParallelComm cp_comm_of(JsonReader& r) {
  const std::string s = r.as_string();
  if (auto c = context_parallel_comm_from(s)) return *c;
  r.fail("\"" + s + "\" is not a CP scheme (expected ring or ulysses)");
}

int positive_int(JsonReader& r) {
  const int64_t v = r.as_int();
  if (v < 1 || v > (1 << 20)) r.fail("must be between 1 and 1048576");
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
  s.vpp = {2, 4};
  s.zero = {ZeroStage::kStage0, ZeroStage::kStage1, ZeroStage::kStage2, ZeroStage::kStage3};
  s.micro_batch = {1, 2, 4, 8};
  s.recompute = {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull};
  s.schedule = {PipelineScheduleKind::kOneFOneB, PipelineScheduleKind::kInterleavedOneFOneB,
                PipelineScheduleKind::kZeroBubbleH1};
  s.cp_comm = {base.cp_comm};
  s.sequence_parallel = {true};
  s.tp_comm_overlap = {base.tp_comm_overlap};
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
  read_list(root, "vpp", s.vpp, positive_int);
  read_list(root, "zero", s.zero, zero_of);
  read_list(root, "micro_batch", s.micro_batch, [](JsonReader& r) { return static_cast<int64_t>(positive_int(r)); });
  read_list(root, "recompute", s.recompute, recompute_of);
  read_list(root, "schedule", s.schedule,
            [&](JsonReader& r) { return schedule_from(r.as_string(), path, r.pointer()); });
  read_list(root, "cp_comm", s.cp_comm, cp_comm_of);
  read_list(root, "sequence_parallel", s.sequence_parallel, [](JsonReader& r) { return r.as_bool(); });
  read_list(root, "tp_comm_overlap", s.tp_comm_overlap, [](JsonReader& r) { return r.as_bool(); });
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

Enumeration enumerate_layouts(const SearchSpace& space, const ModelConfig& model, const ParallelLayout& base, int gpus) {
  Enumeration out;
  auto consider = [&](ParallelLayout l) {
    ++out.enumerated;
    try {
      validate(l, model, gpus);
      out.valid.push_back(std::move(l));
    } catch (const InputError&) {
      ++out.rejected_by_rule;
    }
  };
  for (int tp : space.tp) {
    for (int pp : space.pp) {
      for (int cp : space.cp) {
        if (gpus % (tp * pp * cp) != 0) continue;
        const int dp = gpus / (tp * pp * cp);
        for (int ep : space.ep) {
          for (ZeroStage zero : space.zero) {
            for (int64_t mbs : space.micro_batch) {
              for (Recomputation rc : space.recompute) {
                for (PipelineScheduleKind schedule : space.schedule) {
                  // Only pipelines have schedules: one stage takes 1F1B alone.
                  if (pp == 1 && schedule != PipelineScheduleKind::kOneFOneB) continue;
                  const bool interleaved = schedule == PipelineScheduleKind::kInterleavedOneFOneB;
                  const std::vector<int> chunks = interleaved ? space.vpp : std::vector<int>{1};
                  for (int v : chunks) {
                    for (ContextParallelComm comm : cp > 1 ? space.cp_comm : std::vector<ContextParallelComm>{base.cp_comm}) {
                      for (bool sp : tp > 1 ? space.sequence_parallel : std::vector<bool>{false}) {
                        for (bool overlap : tp > 1 ? space.tp_comm_overlap : std::vector<bool>{false}) {
                          // Rank orders differ only with both DP and PP above one.
                          const std::vector<std::string> orders =
                              dp > 1 && pp > 1 ? space.rank_order : std::vector<std::string>{space.rank_order.front()};
                          for (const std::string& order : orders) {
                            ParallelLayout l = base;
                            l.tp = tp;
                            l.pp = pp;
                            l.cp = cp;
                            l.dp = dp;
                            l.ep = ep;
                            l.zero_stage = zero;
                            l.micro_batch = mbs;
                            l.recompute = rc;
                            l.schedule = schedule;
                            l.virtual_stages = v;
                            l.cp_comm = comm;
                            l.sequence_parallel = sp;
                            l.tp_comm_overlap = overlap;
                            l.rank_order = order;
                            l.stage_layers.clear();
                            consider(std::move(l));
                          }
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string short_layout(const ParallelLayout& layout) { return layout_description(layout); }

}  // namespace parallax
