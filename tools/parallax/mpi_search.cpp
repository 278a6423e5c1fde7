// The layout search over MPI ranks (mpi_search.h).
#include "parallax/mpi_search.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <cstring>
#include <string>
#include <vector>

#ifdef PARALLAX_HAVE_MPI
#include <mpi.h>
#endif

namespace parallax::cli {
namespace {

// The launcher's world size from its environment (Open MPI, MPICH/Hydra, PMIx), 1 when none.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  }
  return 1;
}

#ifdef PARALLAX_HAVE_MPI
class MpiPartition : public SearchPartition {
 public:
  MpiPartition() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<LayoutSummary> all_gather(const std::vector<LayoutSummary>& mine) override {
    const int bytes = static_cast<int>(mine.size() * sizeof(LayoutSummary));
    std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = total;
      total += counts[static_cast<size_t>(r)];
    }
    std::vector<LayoutSummary> all(static_cast<size_t>(total) / sizeof(LayoutSummary));
    MPI_Allgatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD);
    return all;
  }

 private:
  int rank_ = 0, size_ = 1;
};
#endif

}  // namespace

MpiSession::MpiSession() {
#ifdef PARALLAX_HAVE_MPI
  if (launcher_world_size() > 1) {
    MPI_Init(nullptr, nullptr);
    partition_ = std::make_unique<MpiPartition>();
  }
#else
  if (launcher_world_size() > 1) {
    throw std::runtime_error("this parallax was built without MPI: run one process (install libopenmpi-dev and rebuild)");
  }
#endif
}

MpiSession::~MpiSession() {
#ifdef PARALLAX_HAVE_MPI
  if (partition_) MPI_Finalize();
#endif
}

bool MpiSession::is_root() const { return !partition_ || partition_->rank() == 0; }

}  // namespace parallax::cli
