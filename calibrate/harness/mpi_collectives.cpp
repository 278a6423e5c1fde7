// MPI collectives backend (mpi_collectives.h).
#include "harness/mpi_collectives.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "collectives/nccl_tests_log.h"

namespace parallax::harness {
namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

#define PX_MPI(call) check_mpi((call), #call)

}  // namespace

std::optional<MPI_Datatype> mpi_datatype(const std::string& dtype) {
  if (dtype == "int8" || dtype == "char") return MPI_INT8_T;
  if (dtype == "uint8") return MPI_UINT8_T;
  if (dtype == "int32" || dtype == "int") return MPI_INT32_T;
  if (dtype == "uint32") return MPI_UINT32_T;
  if (dtype == "int64") return MPI_INT64_T;
  if (dtype == "uint64") return MPI_UINT64_T;
  if (dtype == "float") return MPI_FLOAT;
  if (dtype == "double") return MPI_DOUBLE;
  return std::nullopt;
}

std::optional<MPI_Op> mpi_op(const std::string& redop) {
  if (redop == "sum") return MPI_SUM;
  if (redop == "prod") return MPI_PROD;
  if (redop == "max") return MPI_MAX;
  if (redop == "min") return MPI_MIN;
  return std::nullopt;
}

void MpiCollectives::open(const RankGroup& group, const Forcing&, int64_t max_bytes) {
  close(false);
  const bool member = std::find(group.ranks.begin(), group.ranks.end(), world_.rank()) != group.ranks.end();
  // Key = world rank keeps the group's ranks in world order, so world rank 0 is group rank 0.
  PX_MPI(MPI_Comm_split(MPI_COMM_WORLD, member ? 1 : MPI_UNDEFINED, world_.rank(), &comm_));
  if (!member) return;
  PX_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  PX_MPI(MPI_Comm_rank(comm_, &rank_));
  PX_MPI(MPI_Comm_size(comm_, &size_));
  const auto bytes = static_cast<size_t>(max_bytes);
  // Zeros: reductions of zeros stay finite, and CPU arithmetic does not run faster on them.
  if (send_.size() < bytes) send_.assign(bytes, 0);
  if (recv_.size() < bytes) recv_.assign(bytes, 0);
}

void MpiCollectives::close(bool) noexcept {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

void MpiCollectives::call(const CollectivePoint& p, MPI_Datatype type, MPI_Op op) {
  const int count = static_cast<int>(p.count);
  unsigned char* send = send_.data();
  unsigned char* recv = recv_.data();
  switch (p.op) {
    case CollectiveOp::kAllReduce:
      PX_MPI(MPI_Allreduce(p.in_place ? MPI_IN_PLACE : send, recv, count, type, op, comm_));
      break;
    case CollectiveOp::kAllGather:
      if (p.in_place) {
        PX_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, type, comm_));
      } else {
        PX_MPI(MPI_Allgather(send, count, type, recv, count, type, comm_));
      }
      break;
    case CollectiveOp::kReduceScatter:
      // In place, the input is the whole receive buffer and the result lands in its first block.
      PX_MPI(MPI_Reduce_scatter_block(p.in_place ? MPI_IN_PLACE : send, recv, count, type, op, comm_));
      break;
    case CollectiveOp::kAllToAll:
      if (p.in_place) {
        PX_MPI(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, type, comm_));
      } else {
        PX_MPI(MPI_Alltoall(send, count, type, recv, count, type, comm_));
      }
      break;
    case CollectiveOp::kBroadcast:
      // MPI_Bcast has one buffer: out-of-place, the root sends from its send buffer and the
      // others receive into their receive buffer (nccl-tests' buffers); in place, both are one.
      PX_MPI(MPI_Bcast(!p.in_place && rank_ == p.root ? send : recv, count, type, p.root, comm_));
      break;
    case CollectiveOp::kReduce:
      if (p.in_place && rank_ == p.root) {
        PX_MPI(MPI_Reduce(MPI_IN_PLACE, recv, count, type, op, p.root, comm_));
      } else {
        PX_MPI(MPI_Reduce(p.in_place ? recv : send, recv, count, type, op, p.root, comm_));
      }
      break;
    case CollectiveOp::kSendRecv: {
      const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
      if (p.in_place) {
        PX_MPI(MPI_Sendrecv_replace(recv, count, type, next, 0, prev, 0, comm_, MPI_STATUS_IGNORE));
      } else {
        PX_MPI(MPI_Sendrecv(send, count, type, next, 0, recv, count, type, prev, 0, comm_, MPI_STATUS_IGNORE));
      }
      break;
    }
  }
}

std::optional<TimeStats> MpiCollectives::measure(const CollectivePoint& p) {
  if (comm_ == MPI_COMM_NULL) {
    warm_up_together(world_, {}, nullptr);
    return std::nullopt;
  }
  const auto type = mpi_datatype(p.dtype);
  const auto op = mpi_op(p.redop == "none" ? "sum" : p.redop);
  const auto type_size = nccl_tests_type_size(p.dtype);
  warm_up_together(world_, {world_.rank()}, [&] {
    if (!type || !op || !type_size) throw std::runtime_error("MPI has no type " + p.dtype + " or operator " + p.redop);
    if (p.count > INT_MAX) throw std::runtime_error("count " + std::to_string(p.count) + " exceeds MPI's int counts");
    for (int i = 0; i < p.warmup; ++i) call(p, *type, *op);
  });
  std::vector<double> times;
  times.reserve(static_cast<size_t>(p.iters));
  for (int i = 0; i < p.iters; ++i) {
    const double t0 = MPI_Wtime();
    call(p, *type, *op);
    times.push_back((MPI_Wtime() - t0) * 1e6);
  }
  return summarize(times);
}

}  // namespace parallax::harness
