// MPI agreement for the harnesses (mpi_coordinator.h).
#include "harness/mpi_coordinator.h"

#include <cstdlib>

namespace parallax::harness {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string v(text, static_cast<size_t>(length > 0 ? length : 0));
  v = v.substr(0, v.find_first_of(",\n"));
  // "Open MPI v4.1.4" → "Open MPI 4.1.4" (FORMAT.md's spelling).
  const size_t at = v.find(" v");
  if (at != std::string::npos && at + 2 < v.size() && v[at + 2] >= '0' && v[at + 2] <= '9') v.erase(at + 1, 1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\0')) v.pop_back();
  return v;
}

MpiCoordinator::MpiCoordinator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
}

int64_t MpiCoordinator::broadcast(int64_t value) {
  MPI_Bcast(&value, 1, MPI_INT64_T, 0, comm_);
  return value;
}

std::string MpiCoordinator::broadcast(const std::string& bytes) {
  int64_t length = broadcast(static_cast<int64_t>(bytes.size()));
  std::string out = is_root() ? bytes : std::string(static_cast<size_t>(length), '\0');
  if (length > 0) MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, 0, comm_);
  return out;
}

bool MpiCoordinator::any(bool local) {
  int in = local ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, comm_);
  return out != 0;
}

std::vector<double> MpiCoordinator::reduce_max(const std::vector<double>& local) {
  std::vector<double> out(local.size(), 0.0);
  MPI_Reduce(local.data(), out.data(), static_cast<int>(local.size()), MPI_DOUBLE, MPI_MAX, 0, comm_);
  return is_root() ? out : local;
}

std::vector<std::string> MpiCoordinator::all_gather(const std::string& local) {
  int length = static_cast<int>(local.size());
  std::vector<int> lengths(static_cast<size_t>(size_));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_);
  std::vector<int> offsets(static_cast<size_t>(size_), 0);
  int total = 0;
  for (int i = 0; i < size_; ++i) {
    offsets[static_cast<size_t>(i)] = total;
    total += lengths[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(local.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_);
  std::vector<std::string> out;
  for (int i = 0; i < size_; ++i) {
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                             static_cast<size_t>(lengths[static_cast<size_t>(i)])));
  }
  return out;
}

void MpiCoordinator::barrier() { MPI_Barrier(comm_); }

}  // namespace parallax::harness
