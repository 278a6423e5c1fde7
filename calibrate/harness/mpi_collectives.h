// MPI collectives over host memory as a CollectiveBackend: the calls nccl-tests makes, in
// MPI's spelling (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall,
// MPI_Bcast, MPI_Reduce, and MPI_Sendrecv to the next rank of a ring), out-of-place or with
// MPI_IN_PLACE. Timing: a barrier after the warm-up, then MPI_Wtime around every call.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include "harness/collective_sweep.h"
#include "harness/mpi_coordinator.h"

namespace parallax::harness {

/// The MPI datatype of an nccl-tests type name, or nullopt (MPI has no half, bfloat16, fp8).
std::optional<MPI_Datatype> mpi_datatype(const std::string& dtype);
/// The MPI operator of a reduction name, or nullopt (MPI has no avg).
std::optional<MPI_Op> mpi_op(const std::string& redop);

class MpiCollectives final : public CollectiveBackend {
 public:
  explicit MpiCollectives(MpiCoordinator& world) : world_(world) {}
  ~MpiCollectives() override { close(false); }
  MpiCollectives(const MpiCollectives&) = delete;
  MpiCollectives& operator=(const MpiCollectives&) = delete;

  void open(const RankGroup& group, const Forcing& forcing, int64_t max_bytes) override;
  std::optional<TimeStats> measure(const CollectivePoint& point) override;
  void close(bool failed) noexcept override;

 private:
  void call(const CollectivePoint& point, MPI_Datatype type, MPI_Op op);

  MpiCoordinator& world_;
  MPI_Comm comm_ = MPI_COMM_NULL;  ///< the group's communicator; null on non-members
  int rank_ = 0;                   ///< in the group
  int size_ = 1;
  std::vector<unsigned char> send_, recv_;  ///< kept across groups: allocation is not measured
};

}  // namespace parallax::harness
