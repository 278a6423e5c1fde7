// `mpirun -np N parallax search …`: the search split over MPI ranks (planning/layout_search.h's
// SearchPartition over MPI_Allgatherv). Built where MPI is found (PARALLAX_HAVE_MPI); MPI is
// started only when the process was launched by mpirun (its environment says so), so a plain
// `parallax search` never touches it.
#pragma once

#include <memory>

#include "planning/layout_search.h"

namespace parallax::cli {

class MpiSession {
 public:
  /// Starts MPI when launched by an MPI launcher with more than one rank; otherwise nothing.
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  /// Null when MPI was not started.
  SearchPartition* partition() { return partition_.get(); }
  /// Only rank 0 prints and writes files.
  bool is_root() const;

 private:
  std::unique_ptr<SearchPartition> partition_;
};

}  // namespace parallax::cli
