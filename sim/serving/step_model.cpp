// One engine step of a serving instance (step_model.h).
#include "serving/step_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
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

// Each stage's layers by kind (a hybrid model's), as dense or MoE, and with a DSA indexer of their
// own or not: they differ in nothing else, so one of each is costed, then counted.
std::vector<StageLayerKinds> stage_layer_kinds(const ModelConfig& model, const std::vector<int>& stage_layers) {
  std::vector<StageLayerKinds> out;
  int first = 0;
  for (const int layers : stage_layers) {
    StageLayerKinds stage;
    // (kind, MoE, a DSA indexer of its own) → (an example, how many)
    std::map<std::tuple<LayerKind, bool, bool>, std::pair<int, int>> kinds;
    for (int l = first; l < first + layers; ++l) {
      auto [it, added] = kinds.try_emplace({model.layer_kind(l), model.is_moe_layer(l), model.has_indexer(l)}, l, 0);
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
  // Every TP group of the instance: one per stage, or per data-parallel attention rank.
  for (int s = 0; s < shape.pp * shape.dp; ++s) {
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
  if (shape_.tp < 1 || shape_.pp < 1 || shape_.dp < 1) throw std::invalid_argument("tp, pp and dp must be at least 1");
  const int gpus = shape_.gpus();
  if (gpus > static_cast<int>(topology.gpu_count())) {
    throw std::invalid_argument("an instance of tp=" + std::to_string(shape_.tp) + " x pp=" + std::to_string(shape_.pp) +
                                (shape_.dp > 1 ? " x dp=" + std::to_string(shape_.dp) : std::string()) + " needs " +
                                std::to_string(gpus) + " GPUs; the topology has " + std::to_string(topology.gpu_count()));
  }
  if (shape_.dp > 1 && !model_.moe) {
    throw std::invalid_argument("data-parallel attention (dp > 1) is for MoE models; " + model_.name + " is dense");
  }
  if (shape_.ep != 1 && !model_.moe) throw std::invalid_argument("ep applies to MoE models; " + model_.name + " is dense");
  if (shape_.dp > 1) {
    if (shape_.pp > 1) throw std::invalid_argument("data-parallel attention with pipeline stages is not modelled (pp must be 1)");
    if (shape_.ep != shape_.tp * shape_.dp) {
      throw std::invalid_argument("ep=" + std::to_string(shape_.ep) + " must be tp·dp=" + std::to_string(shape_.tp * shape_.dp) +
                                  " (with data-parallel attention the experts spread over every GPU)");
    }
  } else if (shape_.ep != 1 && shape_.ep != shape_.tp) {
    throw std::invalid_argument("ep=" + std::to_string(shape_.ep) + " must be 1 or tp=" + std::to_string(shape_.tp) +
                                " (experts spread over the TP group)");
  }
  if (shape_.redundant_experts < 0 || (shape_.redundant_experts > 0 && shape_.ep < 2)) {
    throw std::invalid_argument("redundant experts need the experts spread over GPUs (ep > 1)");
  }
  sharding_ = ShardingFactors{shape_.tp, 1, shape_.ep, false, shape_.ep > 1, 0, shape_.dp, shape_.redundant_experts};
  if (options_.two_batch_overlap && shape_.dp < 2) {
    throw std::invalid_argument("two-batch overlap hides the all-to-alls of data-parallel attention (dp > 1)");
  }
  if (options_.speculative != SpeculativeMethod::kNone && shape_.pp > 1) {
    throw std::invalid_argument("speculative decoding with pipeline stages is not modelled (pp must be 1)");
  }
  if (options_.speculative == SpeculativeMethod::kMtp && model_.mtp_layers == 0) {
    throw std::invalid_argument("speculative decoding by MTP needs the model's multi-token-prediction module; " +
                                model_.name + " has none (num_nextn_predict_layers)");
  }
  if (options_.speculative == SpeculativeMethod::kDraftModel) make_draft_model(topology, node_offset);
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
  if (shape_.dp > 1) ep_group_ = std::make_unique<CollectiveSimulator>(topology, gpus, std::min(gpus, per_node));
  if (!(std::isfinite(options_.expert_skew) && options_.expert_skew >= 0)) {
    throw std::invalid_argument("the router's Zipf skew must be finite and >= 0");
  }
  if (model_.moe && shape_.ep > 1) {
    expert_rows_ =
        busiest_expert_group_load(model_.moe->experts, shape_.ep, options_.expert_skew, shape_.redundant_experts);
  }
  for (int l = 0; l < model_.layers; ++l) moe_layers_ += model_.is_moe_layer(l) ? 1 : 0;
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
  // The model and shape were checked at construction; a batch only needs sane lengths.
  if (batch.sequences.empty()) throw std::invalid_argument("the batch has no sequence");
  for (const SequenceChunk& c : batch.sequences) {
    if (c.q_len < 1 || c.kv_len < c.q_len) {
      throw std::invalid_argument(std::to_string(c.q_len) + " new tokens with " + std::to_string(c.kv_len) +
                                  " in context (need 1 <= new <= context)");
    }
  }
  StepBreakdown b = shape_.dp == 1 ? stages(batch) : ranks_in_step(batch);
  b.sequences = static_cast<int64_t>(batch.sequences.size());
  b.new_tokens = 0;
  for (const SequenceChunk& c : batch.sequences) b.new_tokens += c.q_len;
  b.overhead = options_.step_overhead;
  b.total += b.overhead;
  return b;
}

StepBreakdown StepModel::ranks_in_step(const RaggedBatch& batch) const {
  // The ranks step together (the MoE layers exchange their tokens): the slowest rank's layers,
  // and the all-to-alls of the rank that sends the most. With two-batch overlap each rank runs
  // its sequences as two micro-batches, the all-to-alls of one beside the layers of the other.
  const int parts = options_.two_batch_overlap ? 2 : 1;
  StepBreakdown b;
  int64_t busiest = 0, speculating = 0, passes = 0;
  for (const RaggedBatch& rank : attention_ranks(batch, shape_.dp)) {
    StepBreakdown r;
    for (const RaggedBatch& part : split_over_attention_ranks(rank, parts)) {
      if (part.sequences.empty()) continue;
      add_parts(r, stages(part));
      int64_t tokens = 0, drafting = 0;
      for (const SequenceChunk& c : part.sequences) {
        tokens += c.q_len;
        drafting += c.drafts > 0 ? 1 : 0;
        passes = std::max(passes, c.drafts);
      }
      busiest = std::max(busiest, tokens);
      speculating = std::max(speculating, drafting);
    }
    if (r.total > b.total) b = r;
  }
  Time exchange = expert_all_to_alls(busiest);
  // An MTP draft layer that is MoE exchanges its one token a sequence per pass as well.
  if (options_.speculative == SpeculativeMethod::kMtp && model_.is_moe_layer(model_.layers)) {
    exchange += expert_all_to_alls(speculating, 1) * passes;
  }
  b.ep_communication = exchange * parts;
  if (parts == 1) {
    b.total += b.ep_communication;
  } else {
    // Layer by layer, one micro-batch's exchange runs beside the other's compute: the longer of
    // the two goes on, and one layer's share of the shorter is the pipeline's fill.
    const Time longer = std::max(b.total, b.ep_communication), shorter = std::min(b.total, b.ep_communication);
    const Time total = longer + Time::from_seconds(shorter.seconds() / std::max(1, moe_layers_));
    b.overlapped = b.total + b.ep_communication - total;
    b.total = total;
  }
  b.bottleneck_stage = b.total;
  return b;
}

void StepModel::add_parts(StepBreakdown& sum, const StepBreakdown& part) {
  sum.total += part.total;
  sum.gemm += part.gemm;
  sum.attention += part.attention;
  sum.other += part.other;
  sum.tp_communication += part.tp_communication;
  sum.pp_handoff += part.pp_handoff;
  sum.drafting += part.drafting;
  sum.bottleneck_stage += part.bottleneck_stage;
  sum.flops += part.flops;
  sum.hbm_bytes += part.hbm_bytes;
}

StepBreakdown StepModel::stages(const RaggedBatch& batch) const {
  constexpr Validation trusted = Validation::kTrusted;
  const ShardingFactors& sharding = sharding_;
  StepBreakdown b;
  int64_t tokens = 0;
  for (const SequenceChunk& c : batch.sequences) tokens += c.q_len;
  const Bytes activations(static_cast<double>(tokens) * static_cast<double>(model_.hidden) *
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
      std::vector<ModelOperator> ops = layer_operators(model_, example, batch, sharding, trusted);
      if (expert_rows_ != 1 && model_.is_moe_layer(example)) ops = scale_experts(std::move(ops), expert_rows_);
      const Time t = add_forward(compute_, ops, one);
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
  const Time drafts = drafting(batch, b);
  b.bottleneck_stage += drafts;
  b.total += drafts;
  return b;
}

void StepModel::make_draft_model(const Topology& topology, int node_offset) {
  if (!options_.draft_model) throw std::invalid_argument("speculative decoding by a draft model needs the draft model");
  const ModelConfig& draft = *options_.draft_model;
  if (draft.vocab != model_.vocab) {
    throw std::invalid_argument("the draft model " + draft.name + " has a vocabulary of " + std::to_string(draft.vocab) +
                                " tokens, the target " + model_.name + " " + std::to_string(model_.vocab) +
                                ": a draft model must share the target's tokenizer");
  }
  StepModelOptions options = options_;
  options.speculative = SpeculativeMethod::kNone;
  options.draft_model.reset();
  options.step_overhead = Time::zero();  // the engine's step overhead is the target's, once
  options.expert_skew = 0;
  options.two_batch_overlap = false;
  try {
    draft_ = std::make_unique<StepModel>(draft, topology, InstanceShape{shape_.tp, 1}, options, node_offset);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("the draft model " + draft.name + ": " + e.what());
  }
}

Time StepModel::drafting(const RaggedBatch& batch, StepBreakdown& b) const {
  if (options_.speculative == SpeculativeMethod::kNone) return Time::zero();
  RaggedBatch draft = batch;
  draft.sequences.clear();
  int64_t passes = 0;
  for (const SequenceChunk& c : batch.sequences) {
    if (c.drafts <= 0) continue;
    draft.sequences.push_back(SequenceChunk{1, c.kv_len - c.drafts, true});
    passes = std::max(passes, c.drafts);
  }
  if (draft.sequences.empty()) return Time::zero();
  if (draft_) {
    // One pass: a decode step of the draft model over the speculating sequences.
    const StepBreakdown one = draft_->step(draft);
    b.gemm += one.gemm * passes;
    b.attention += one.attention * passes;
    b.other += one.other * passes;
    b.tp_communication += one.tp_communication * passes;
    b.flops += one.flops * static_cast<double>(passes);
    b.hbm_bytes += one.hbm_bytes * static_cast<double>(passes);
    b.drafting = one.total * passes;
    return b.drafting;
  }
  // One pass: the draft layer, its input projection (the token's hidden state beside its
  // embedding, 2h → h) and the output head, on one token of each speculating sequence.
  constexpr Validation trusted = Validation::kTrusted;
  const int layer = options_.speculative == SpeculativeMethod::kMtp ? model_.layers : 0;
  std::vector<ModelOperator> ops = layer_operators(model_, layer, draft, sharding_, trusted);
  if (expert_rows_ != 1 && model_.is_moe_layer(layer)) ops = scale_experts(std::move(ops), expert_rows_);
  const double tokens = static_cast<double>(draft.sequences.size()), h = static_cast<double>(model_.hidden);
  ModelOperator projection;
  projection.name = "draft_input_proj";
  projection.forward = projection.backward = gemm_cost(GemmShape{tokens, h, 2 * h, 1}, draft.dtype);
  ops.push_back(projection);
  for (ModelOperator& op : output_operators(model_, draft, sharding_, trusted)) ops.push_back(std::move(op));
  StepBreakdown one;
  const Time pass = add_forward(compute_, ops, one) +
                    all_reduce(Bytes(tokens * h * bytes_per_element(activation_dtype(draft.dtype)))) * 2;
  b.gemm += one.gemm * passes;
  b.attention += one.attention * passes;
  b.other += one.other * passes;
  b.flops += one.flops * static_cast<double>(passes);
  b.hbm_bytes += one.hbm_bytes * static_cast<double>(passes);
  b.drafting = pass * passes;
  return b.drafting;
}

Time StepModel::expert_all_to_alls(int64_t tokens, std::optional<int> layers) const {
  if (!ep_group_ || tokens <= 0) return Time::zero();
  // Each token goes to its top-k experts' GPUs and comes back, per MoE layer: T·k rows of h out
  // and as many back. With fp8 weights the dispatch sends fp8 rows with one fp32 scale per 128
  // elements (DeepEP's fp8 dispatch, as SGLang runs it); the combine returns 16-bit rows.
  const double rows = static_cast<double>(tokens) * model_.moe->top_k;
  const double h = static_cast<double>(model_.hidden);
  const double activation = bytes_per_element(activation_dtype(options_.dtype));
  const double dispatch_row = options_.dtype == DType::kFp8 ? h + std::ceil(h / 128) * 4 : h * activation;
  const auto timed = [&](Bytes size) {
    auto [it, added] = all_to_all_times_.try_emplace(size.value(), Time::zero());
    if (added) {
      CollectiveOptions o;
      o.model = options_.collective_model;
      it->second = ep_group_->run(CollectiveOp::kAllToAll, size, o).time;
    }
    return it->second;
  };
  return (timed(Bytes(rows * dispatch_row)) + timed(Bytes(rows * h * activation))) * layers.value_or(moe_layers_);
}

std::vector<RaggedBatch> attention_ranks(const RaggedBatch& batch, int ranks) {
  const bool tagged = std::any_of(batch.sequences.begin(), batch.sequences.end(), [](const SequenceChunk& c) { return c.rank >= 0; });
  if (!tagged) return split_over_attention_ranks(batch, ranks);
  std::vector<RaggedBatch> out(static_cast<size_t>(std::max(1, ranks)));
  for (RaggedBatch& r : out) {
    r.dtype = batch.dtype;
    r.kv_cache = batch.kv_cache;
    r.attention = batch.attention;
  }
  for (const SequenceChunk& c : batch.sequences) {
    if (c.rank < 0 || c.rank >= ranks) {
      throw std::invalid_argument("a sequence of rank " + std::to_string(c.rank) + " in a step of " + std::to_string(ranks) +
                                  " attention ranks (every sequence tagged, or none)");
    }
    out[static_cast<size_t>(c.rank)].sequences.push_back(c);
  }
  return out;
}

std::vector<RaggedBatch> split_over_attention_ranks(const RaggedBatch& batch, int ranks) {
  std::vector<RaggedBatch> out(static_cast<size_t>(std::max(1, ranks)));
  for (RaggedBatch& r : out) {
    r.dtype = batch.dtype;
    r.kv_cache = batch.kv_cache;
    r.attention = batch.attention;
  }
  std::vector<SequenceChunk> order = batch.sequences;
  std::stable_sort(order.begin(), order.end(), [](const SequenceChunk& a, const SequenceChunk& b) {
    return a.q_len != b.q_len ? a.q_len > b.q_len : a.kv_len > b.kv_len;
  });
  std::vector<std::pair<int64_t, int64_t>> load(out.size());  // (new tokens, context)
  for (const SequenceChunk& c : order) {
    const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[r].sequences.push_back(c);
    load[r].first += c.q_len;
    load[r].second += c.kv_len;
  }
  return out;
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
  j["ep_communication_ms"] = ms(b.ep_communication);
  j["drafting_ms"] = ms(b.drafting);
  j["overlapped_ms"] = ms(b.overlapped);
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
