// One engine step of a serving instance (step_model.h).
#include "serving/step_model.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace parallax {
namespace {

// Sums operators' forward times by kind into `b`; returns their total.
Time add_forward(const ComputeModel& cm, const std::vector<ModelOperator>& ops, StepBreakdown& b) {
  Time sum = Time::zero();
  for (const ModelOperator& op : ops) {
    const Time t = cm.time(op.forward);
    sum += t;
    b.flops += op.forward.flops;
    b.hbm_bytes += op.forward.bytes_read_written;
    switch (op.forward.kind) {
      case OperatorKind::kGemm: b.gemm += t; break;
      case OperatorKind::kAttention: b.attention += t; break;
      default: b.other += t; break;
    }
  }
  return sum;
}

// Each stage's layers by kind (a hybrid model's) and as dense or MoE: they differ in nothing
// else, so one of each is costed, then counted.
std::vector<StageLayerKinds> stage_layer_kinds(const ModelConfig& model, const std::vector<int>& stage_layers) {
  std::vector<StageLayerKinds> out;
  int first = 0;
  for (const int layers : stage_layers) {
    StageLayerKinds stage;
    std::map<std::pair<LayerKind, bool>, std::pair<int, int>> kinds;  // → (an example, how many)
    for (int l = first; l < first + layers; ++l) {
      auto [it, added] = kinds.try_emplace({model.layer_kind(l), model.is_moe_layer(l)}, l, 0);
      ++it->second.second;
      // A Transformer layer reduces its attention and MLP branches (once if parallel); a
      // hybrid model's single block once.
      stage.all_reduces += model.layer_kind(l) != LayerKind::kTransformer || model.parallel_block ? 1 : 2;
    }
    for (const auto& [kind, example_and_count] : kinds) stage.examples.push_back(example_and_count);
    out.push_back(std::move(stage));
    first += layers;
  }
  return out;
}

}  // namespace

int gpus_per_node(const Topology& topo) {
  return topo.node_count() > 0 ? static_cast<int>(topo.gpus_of_node(0).size()) : static_cast<int>(topo.gpu_count());
}

std::string placement_problem(InstanceShape shape, int per_node, int node_offset) {
  for (int s = 0; s < shape.pp; ++s) {
    const int first = (node_offset + s * shape.tp) % per_node;
    const bool fits = shape.tp <= per_node ? first + shape.tp <= per_node : first == 0 && shape.tp % per_node == 0;
    if (!fits) {
      return "stage " + std::to_string(s) + "'s TP group of " + std::to_string(shape.tp) + " GPUs would start at GPU " +
             std::to_string(first) + " of a node of " + std::to_string(per_node) +
             (shape.tp <= per_node ? " and straddle two nodes" : " (a TP group wider than a node fills whole nodes)");
    }
  }
  return {};
}

std::vector<int> split_layers(int layers, int stages) {
  if (stages < 1 || stages > layers) {
    throw std::invalid_argument("pp=" + std::to_string(stages) + " cannot split " + std::to_string(layers) + " layers");
  }
  std::vector<int> out(static_cast<size_t>(stages), layers / stages);
  for (int i = 0; i < layers % stages; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

StepModel::StepModel(ModelConfig model, const Topology& topology, InstanceShape shape, StepModelOptions options,
                     int node_offset)
    : model_(std::move(model)), shape_(shape), options_(std::move(options)),
      compute_(topology.gpu_spec_of(topology.gpus().front()), options_.compute, options_.gemm) {
  if (shape_.tp < 1 || shape_.pp < 1) throw std::invalid_argument("tp and pp must be at least 1");
  const int gpus = shape_.tp * shape_.pp;
  if (gpus > static_cast<int>(topology.gpu_count())) {
    throw std::invalid_argument("an instance of tp=" + std::to_string(shape_.tp) + " x pp=" + std::to_string(shape_.pp) +
                                " needs " + std::to_string(gpus) + " GPUs; the topology has " +
                                std::to_string(topology.gpu_count()));
  }
  if (shape_.ep != 1 && !model_.moe) throw std::invalid_argument("ep applies to MoE models; " + model_.name + " is dense");
  if (shape_.ep != 1 && shape_.ep != shape_.tp) {
    throw std::invalid_argument("ep=" + std::to_string(shape_.ep) + " must be 1 or tp=" + std::to_string(shape_.tp) +
                                " (experts spread over the TP group)");
  }
  sharding_ = ShardingFactors{shape_.tp, 1, shape_.ep, false, shape_.ep > 1};
  RaggedBatch probe;
  probe.sequences = {SequenceChunk{}};
  if (std::string p = sharding_problem(model_, probe, sharding_); !p.empty()) throw std::invalid_argument(p);
  stage_layers_ = split_layers(model_.layers, shape_.pp);
  stage_kinds_ = stage_layer_kinds(model_, stage_layers_);
  const int per_node = gpus_per_node(topology);
  if (node_offset < 0 || node_offset >= per_node) {
    throw std::invalid_argument("GPU " + std::to_string(node_offset) + " is outside a node of " + std::to_string(per_node));
  }
  if (std::string p = placement_problem(shape_, per_node, node_offset); !p.empty()) throw std::invalid_argument(p);
  if (shape_.tp > 1) {
    tp_group_ = std::make_unique<CollectiveSimulator>(topology, shape_.tp, std::min(shape_.tp, per_node));
  }
  // Stage s holds ranks s·tp … (s+1)·tp − 1; its hand-off goes from rank (s+1)·tp − 1's peer
  // position, rank s·tp, to rank (s+1)·tp: on one node when both sit in the same one.
  std::shared_ptr<CollectiveSimulator> same, across;
  for (int s = 0; s + 1 < shape_.pp; ++s) {
    const bool one_node = (node_offset + s * shape_.tp) / per_node == (node_offset + (s + 1) * shape_.tp) / per_node;
    auto& sim = one_node ? same : across;
    if (!sim) sim = std::make_shared<CollectiveSimulator>(topology, 2, one_node ? 2 : 1);
    handoffs_.push_back(sim);
  }
}

Time StepModel::all_reduce(Bytes size) const {
  if (!tp_group_ || size.value() <= 0) return Time::zero();
  // Steps repeat their token counts: each size's all-reduce is timed once.
  if (auto it = all_reduce_times_.find(size.value()); it != all_reduce_times_.end()) return it->second;
  CollectiveOptions o;
  o.model = options_.collective_model;
  const Time t = tp_group_->run(CollectiveOp::kAllReduce, size, o).time;
  all_reduce_times_.emplace(size.value(), t);
  return t;
}

Time StepModel::handoff(int stage, Bytes size) const {
  CollectiveOptions o;
  o.model = options_.collective_model;
  return handoffs_.at(static_cast<size_t>(stage))->run(CollectiveOp::kSendRecv, size, o).time;
}

StepBreakdown StepModel::step(const RaggedBatch& batch_in) const {
  RaggedBatch batch = batch_in;
  batch.dtype = options_.dtype;
  batch.kv_cache = options_.kv_cache_dtype;
  const ShardingFactors& sharding = sharding_;
  // The model and shape were checked at construction; a batch only needs sane lengths.
  if (batch.sequences.empty()) throw std::invalid_argument("the batch has no sequence");
  for (const SequenceChunk& c : batch.sequences) {
    if (c.q_len < 1 || c.kv_len < c.q_len) {
      throw std::invalid_argument(std::to_string(c.q_len) + " new tokens with " + std::to_string(c.kv_len) +
                                  " in context (need 1 <= new <= context)");
    }
  }
  constexpr Validation trusted = Validation::kTrusted;
  StepBreakdown b;
  b.sequences = static_cast<int64_t>(batch.sequences.size());
  for (const SequenceChunk& c : batch.sequences) b.new_tokens += c.q_len;
  const Bytes activations(static_cast<double>(b.new_tokens) * static_cast<double>(model_.hidden) *
                          bytes_per_element(activation_dtype(batch.dtype)));
  const Time layer_all_reduce = all_reduce(activations);

  for (int s = 0; s < shape_.pp; ++s) {
    Time stage = Time::zero();
    int all_reduces = 0;
    if (s == 0) {
      stage += add_forward(compute_, embedding_operators(model_, batch, sharding, trusted), b);
      all_reduces += 1;  // the vocabulary-parallel embedding's partial sums
    }
    const StageLayerKinds& kinds = stage_kinds_[static_cast<size_t>(s)];
    all_reduces += kinds.all_reduces;
    for (const auto& [example, count] : kinds.examples) {
      StepBreakdown one;
      const Time t = add_forward(compute_, layer_operators(model_, example, batch, sharding, trusted), one);
      stage += t * count;
      b.gemm += one.gemm * count;
      b.attention += one.attention * count;
      b.other += one.other * count;
      b.flops += one.flops * static_cast<double>(count);
      b.hbm_bytes += one.hbm_bytes * static_cast<double>(count);
    }
    if (s == shape_.pp - 1) stage += add_forward(compute_, output_operators(model_, batch, sharding, trusted), b);
    const Time tp = layer_all_reduce * all_reduces;
    b.tp_communication += tp;
    b.bottleneck_stage = std::max(b.bottleneck_stage, stage + tp);
    b.total += stage + tp;
    if (s + 1 < shape_.pp) {
      const Time h = handoff(s, activations);
      b.pp_handoff += h;
      b.total += h;
    }
  }
  b.overhead = options_.step_overhead;
  b.total += b.overhead;
  return b;
}

nlohmann::ordered_json to_json(const StepBreakdown& b) {
  auto ms = [](Time t) { return t.seconds() * 1e3; };
  nlohmann::ordered_json j;
  j["step_time_ms"] = ms(b.total);
  j["gemm_ms"] = ms(b.gemm);
  j["attention_ms"] = ms(b.attention);
  j["other_kernels_ms"] = ms(b.other);
  j["tp_communication_ms"] = ms(b.tp_communication);
  j["pp_handoff_ms"] = ms(b.pp_handoff);
  j["overhead_ms"] = ms(b.overhead);
  j["bottleneck_stage_ms"] = ms(b.bottleneck_stage);
  j["flops_per_gpu"] = b.flops.value();
  j["hbm_bytes_per_gpu"] = b.hbm_bytes.value();
  j["sequences"] = b.sequences;
  j["new_tokens"] = b.new_tokens;
  j["tokens_per_s"] = b.total > Time::zero() ? static_cast<double>(b.new_tokens) / b.total.seconds() : 0.0;
  return j;
}

}  // namespace parallax
