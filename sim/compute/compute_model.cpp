#include "compute/compute_model.h"

#include <algorithm>
#include <stdexcept>

namespace parallax {

ComputeModel::ComputeModel(GpuSpec gpu, ComputeModelOptions options, std::shared_ptr<const GemmEfficiency> gemm)
    : gpu_(std::move(gpu)), options_(options), gemm_(std::move(gemm)) {
  if (!gemm_) gemm_ = std::make_shared<ShapeEfficiency>();
  auto in_unit = [](double x) { return x > 0 && x <= 1; };
  if (!in_unit(options_.memory_efficiency) || !in_unit(options_.attention_efficiency.value_or(kAttentionEfficiency)) ||
      !in_unit(options_.sustained_fraction)) {
    throw std::invalid_argument("ComputeModel: efficiencies and the sustained fraction must be in (0, 1]");
  }
  if (options_.kernel_launch_overhead < Time::zero() || options_.host_gemm_issue < Time::zero() ||
      options_.host_dispatch < Time::zero()) {
    throw std::invalid_argument("ComputeModel: negative kernel launch overhead, host issue or dispatch time");
  }
  if (!(gpu_.bf16.value() > 0) || !(gpu_.memory_bandwidth.value() > 0)) {
    throw std::invalid_argument("ComputeModel: GPU \"" + gpu_.name + "\" needs a bf16 peak and a memory bandwidth");
  }
}

FlopRate ComputeModel::compute_rate(const OperatorCost& op) const {
  switch (op.kind) {
    case OperatorKind::kGemm: return gemm_->achieved_rate(op.shape, op.dtype, gpu_);
    case OperatorKind::kAttention: {
      if (const std::optional<FlopRate> measured = gemm_->attention_rate(op, gpu_)) return *measured;
      const bool fused_form = options_.attention_model == AttentionModel::kCudnn && !options_.attention_efficiency &&
                              !op.warp_mma_only && has_async_tensor_cores(gpu_) && op.keys_per_query > 0 &&
                              op.flops_per_exponential > 0;
      if (fused_form) return peak_rate(gpu_, op.dtype) * fused_attention_efficiency(op, gpu_);
      const double share = op.warp_mma_only && has_async_tensor_cores(gpu_) ? kWarpMmaAttentionShare : 1.0;
      const double eta = options_.attention_efficiency.value_or(kAttentionEfficiency);
      return peak_rate(gpu_, op.dtype) * shape_efficiency(eta * share, op.shape, attention_shape_);
    }
    case OperatorKind::kMemoryBound: return gpu_.fp32.value() > 0 ? gpu_.fp32 : gpu_.bf16;
  }
  return gpu_.bf16;
}

std::optional<AttentionModel> attention_model_named(std::string_view name) {
  if (name == "shape") return AttentionModel::kShape;
  if (name == "cudnn") return AttentionModel::kCudnn;
  return std::nullopt;
}

const char* attention_model_name(AttentionModel model) { return model == AttentionModel::kCudnn ? "cudnn" : "shape"; }

double fused_attention_efficiency(const OperatorCost& op, const GpuSpec& gpu) {
  const FusedAttentionConstants& k = op.backward_pass ? kFusedAttentionBackward : kFusedAttentionForward;
  const double peak = peak_rate(gpu, op.dtype).value();
  double exponentials = gpu.exponentials.value();
  if (!(exponentials > 0)) {
    const double flops_per_sm_clock = gpu.architecture == "blackwell" ? 8192.0 : 4096.0;
    exponentials = 16.0 * gpu.bf16.value() / flops_per_sm_clock;
  }
  const double flops_per_exponential_time = peak / exponentials;
  const double keys = op.keys_per_query, phi = op.flops_per_exponential;
  return k.peak_share * keys / (keys + k.half_keys) * phi / (phi + k.exponential_cost * flops_per_exponential_time);
}

Bandwidth ComputeModel::memory_bandwidth() const { return gpu_.memory_bandwidth * options_.memory_efficiency; }

Bandwidth ComputeModel::memory_bandwidth(const OperatorCost& op) const {
  const Bandwidth hbm = memory_bandwidth();
  if (!(op.per_sm_bandwidth.value() > 0) || gpu_.sms <= 0) return hbm;
  return std::min(hbm, op.per_sm_bandwidth * static_cast<double>(gpu_.sms));
}

OperatorTiming ComputeModel::timing(const OperatorCost& op) const {
  OperatorTiming t;
  t.rate = compute_rate(op);
  t.compute = compute_time(op.flops, t.rate * options_.sustained_fraction);
  t.memory = transfer_time(op.bytes_read_written, memory_bandwidth(op) * options_.sustained_fraction);
  t.launch = options_.kernel_launch_overhead * std::max(0, op.kernels);
  const int host_issued = op.host_issued();
  t.host = options_.host_gemm_issue * host_issued;
  const int dispatched = op.graph_replayed        ? 0
                         : op.host_dispatches >= 0 ? op.host_dispatches
                                                   : std::max(0, op.kernels - host_issued);
  t.issue = t.host + options_.host_dispatch * dispatched;
  Time bound = std::max(t.compute, t.memory);
  // An operator that can never finish (a zero rate) stays at Time::max() instead of overflowing.
  // The host issues the next kernel while the GPU runs this one: the slower of the two sets the pace.
  t.device = bound == Time::max() ? bound : bound + t.launch;
  t.total = std::max(t.device, t.host);
  return t;
}

Time issued_stream_time(const ComputeModel& cm, std::span<const OperatorCost* const> ops) {
  const Time dispatch = cm.options().host_dispatch;
  Time host, gpu;  // when each is done with what it has been given
  for (const OperatorCost* op : ops) {
    const OperatorTiming t = cm.timing(*op);
    if (t.total == Time::max()) return t.total;
    if (op->host_issued() > 0) {
      // Shapes read back from the GPU first: the host waits for it. Known beforehand: the host
      // issues them ahead. Either way the GPU runs each GEMM while the host prepares the next.
      const Time start = op->host_reads_back ? std::max(host, gpu) : host;
      host = start + t.issue;
      gpu = std::max(gpu + t.device, start + std::max(t.total, t.issue));
      continue;
    }
    const Time first_issued = host + (op->kernels > 0 && !op->graph_replayed ? dispatch : Time::zero());
    host += t.issue;
    // Its last kernel (an even share of its time) starts no sooner than the host issues it.
    const Time last_kernel = op->kernels > 1 ? Time::ps(t.device.picoseconds() / op->kernels) : t.device;
    gpu = std::max(std::max(gpu, first_issued) + t.device, host + last_kernel);
  }
  return gpu;
}

}  // namespace parallax
