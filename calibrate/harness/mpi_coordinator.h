// The Coordinator of a run launched by mpirun: one process per rank, agreement through
// MPI_COMM_WORLD. Built only into the MPI-enabled harnesses.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "harness/collective_sweep.h"

namespace parallax::harness {

/// True when this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI):
/// one of OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, MPI_LOCALNRANKS, MV2_COMM_WORLD_SIZE is set.
bool launched_by_mpi();

/// "Open MPI 4.1.4" from MPI_Get_library_version's first line (before any comma).
std::string mpi_library_version();

/// Agreement over a communicator (MPI_COMM_WORLD by default); rank 0 is the root. Every MPI
/// error aborts the job (MPI's default handler), so the methods do not return errors.
class MpiCoordinator final : public Coordinator {
 public:
  explicit MpiCoordinator(MPI_Comm comm = MPI_COMM_WORLD);
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This process's rank among the processes of its host (MPI_Comm_split_type SHARED) and
  /// their number.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  bool is_root() const override { return rank_ == 0; }
  int64_t broadcast(int64_t value) override;
  std::string broadcast(const std::string& bytes) override;
  bool any(bool local) override;
  std::vector<double> reduce_max(const std::vector<double>& local) override;
  std::vector<std::string> all_gather(const std::string& local) override;
  void barrier() override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

}  // namespace parallax::harness
