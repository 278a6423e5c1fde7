// A layout as a workload file's parallel block (workload_writer.h).
#include "training/workload_writer.h"

#include <algorithm>

#include "model/layer_operators.h"

namespace parallax {

nlohmann::ordered_json parallel_block(const ParallelLayout& l) {
  nlohmann::ordered_json p;
  p["tp"] = l.tp;
  p["pp"] = l.pp;
  p["dp"] = l.dp;
  if (l.virtual_stages > 1 && !v_shaped(l.schedule)) p["vpp"] = l.virtual_stages;  // a V's 2 are implied
  if (l.microbatch_group > 0) p["microbatch_group"] = l.microbatch_group;
  if (l.cp > 1) {
    p["cp"] = l.cp;
    p["cp_comm"] = to_string(l.cp_comm);
  }
  if (l.ep > 1) p["ep"] = l.ep;
  if (l.ep > 1 && l.moe_dispatcher == MoeDispatcher::kFlex) p["moe_dispatcher"] = to_string(l.moe_dispatcher);
  if (l.expert_tp > 0) p["expert_tp"] = l.expert_tp;
  if (l.expert_gemms != ExpertGemms::kPerExpert) p["expert_gemm"] = to_string(l.expert_gemms);
  if (l.cuda_graphs != CudaGraphs::kNone) p["cuda_graphs"] = to_string(l.cuda_graphs, l.cuda_graph_scope);
  p["zero_stage"] = static_cast<int>(l.zero_stage);
  if (l.dp_shard > 0) p["dp_shard"] = l.dp_shard;
  p["micro_batch"] = l.micro_batch;
  p["global_batch"] = l.global_batch;
  p["sequence_parallel"] = l.sequence_parallel;
  p["recompute"] = to_string(l.recompute);
  if (l.recompute == Recomputation::kFull && l.recompute_layers > 0) p["recompute_layers"] = l.recompute_layers;
  if (l.recompute_modules.any()) p["recompute_modules"] = module_names(l.recompute_modules);
  p["schedule"] = to_string(l.schedule);
  p["dtype"] = to_string(l.dtype);
  if (l.dtype == DType::kFp8) {
    p["fp8_recipe"] = to_string(l.fp8_recipe);
    p["fp8_param_gather"] = l.fp8_param_gather;
  }
  if (l.dtype == DType::kFp4) p["fp4_recipe"] = to_string(l.fp4_recipe);
  // A module moved to fp8 within an fp4 run is cast by the fp8 recipe.
  const bool fp8_module = std::any_of(l.module_precision.dtype.begin(), l.module_precision.dtype.end(),
                                      [](const std::optional<DType>& t) { return t == DType::kFp8; });
  if (l.dtype != DType::kFp8 && fp8_module) p["fp8_recipe"] = to_string(l.fp8_recipe);
  if (is_quantised(l.dtype) && l.bf16_layers_at_start + l.bf16_layers_at_end > 0) {
    p["bf16_layers_at_start"] = l.bf16_layers_at_start;
    p["bf16_layers_at_end"] = l.bf16_layers_at_end;
  }
  if (l.module_precision.any()) {
    nlohmann::ordered_json modules;
    for (size_t i = 0; i < kQuantModules; ++i) {
      if (l.module_precision.dtype[i]) modules[to_string(static_cast<QuantModule>(i))] = to_string(*l.module_precision.dtype[i]);
    }
    p["module_precision"] = modules;
  }
  p["attention"] = to_string(l.attention);
  p["grad_reduce_overlap"] = l.grad_reduce_overlap;
  p["grad_reduce_in_fp32"] = l.grad_reduce_in_fp32;
  if (l.optimizer != OptimizerKind::kAdam) p["optimizer"] = to_string(l.optimizer);
  if (l.precision_aware_optimizer) {
    p["precision_aware_optimizer"] = true;
    p["exp_avg_dtype"] = optimizer_state_dtype_name(l.exp_avg_bytes);
    p["exp_avg_sq_dtype"] = optimizer_state_dtype_name(l.exp_avg_sq_bytes);
  }
  p["param_gather_prefetch"] = l.param_gather_prefetch;
  if (l.param_gather_per_tensor) p["param_gather_per_tensor"] = true;
  p["tp_comm_overlap"] = l.tp_comm_overlap;
  if (!l.rope_fusion) p["rope_fusion"] = false;
  if (l.moe_router_fusion) p["moe_router_fusion"] = true;
  if (l.moe_load_balancing != LoadBalancingLoss::kAux) p["moe_router_load_balancing"] = to_string(l.moe_load_balancing);
  if (l.moe_shared_expert_overlap) p["moe_shared_expert_overlap"] = true;
  if (l.moe_a2a_overlap) p["moe_a2a_overlap"] = true;
  if (!l.moe_expert_load.relative.empty()) {
    p["moe_expert_load"] = {{"relative", l.moe_expert_load.relative}};
  } else if (l.moe_expert_load.zipf_exponent != 0) {
    p["moe_expert_load"] = {{"zipf", l.moe_expert_load.zipf_exponent}};
  }
  if (l.moe_capacity_factor) p["moe_capacity_factor"] = *l.moe_capacity_factor;
  if (l.moe_pad_to_capacity) p["moe_pad_to_capacity"] = true;
  if (l.cpu_offloading_layers > 0) p["cpu_offloading_layers"] = l.cpu_offloading_layers;
  p["rank_order"] = l.rank_order;
  if (!l.stage_layers.empty()) p["stage_layers"] = l.stage_layers;
  if (l.first_stage_layers >= 0) p["decoder_first_pipeline_num_layers"] = l.first_stage_layers;
  if (l.last_stage_layers >= 0) p["decoder_last_pipeline_num_layers"] = l.last_stage_layers;
  if (l.account_for_embedding) p["account_for_embedding_in_pipeline_split"] = true;
  if (l.account_for_loss) p["account_for_loss_in_pipeline_split"] = true;
  return p;
}

}  // namespace parallax
