// NCCL collectives as a CollectiveBackend, called as nccl-tests calls them (same buffers, same
// in-place offsets; all-to-all as ncclAlltoAll where the loaded NCCL has it (2.28+), else as
// grouped ncclSend/ncclRecv to every peer; send/recv as the ring neighbour exchange of
// sendrecv_perf). One process may drive every rank of a group
// (ncclCommInitAll) or one rank among many processes (ncclCommInitRank with a unique id that the
// Coordinator broadcasts).
//
// Across processes, the communicator is first made non-blocking, so that its set-up has a
// deadline (--point-timeout), then split into the blocking one that is timed.
//
// Timing: after the warm-up and an agreement of every process (warm_up_together), a CUDA event
// is recorded on each rank's stream before every iteration and after the last; an iteration's
// time on a rank is the elapsed time between its events, and the point's stats are the slowest
// rank's (collective_sweep.h).
// NCCL_ALGO/NCCL_PROTO are set (or unset) before each group's communicator is created, since
// NCCL reads them when it tunes a new communicator, and stay so while it is used.
#pragma once

#include <nccl.h>

#include <optional>
#include <string>
#include <vector>

#include "harness/collective_sweep.h"

namespace parallax::harness {

/// NCCL's datatype for an nccl-tests type name, or nullopt.
std::optional<ncclDataType_t> nccl_datatype(const std::string& dtype);
/// NCCL's reduction operator for sum, prod, max, min, avg, or nullopt.
std::optional<ncclRedOp_t> nccl_redop(const std::string& redop);

/// A rank this process drives: its world rank and CUDA device.
struct LocalRank {
  int world_rank = 0;
  int device = 0;
};

class NcclCollectives final : public CollectiveBackend {
 public:
  /// `multi_process`: the world spans processes and `local` holds one rank; otherwise `local`
  /// holds every rank. `point_timeout_s`: a point still running after this long is a hang; it
  /// fails (and its communicator is aborted) instead of blocking the run forever.
  NcclCollectives(Coordinator& coordinator, std::vector<LocalRank> local, bool multi_process,
                  double point_timeout_s);
  ~NcclCollectives() override { close(false); }
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  void open(const RankGroup& group, const Forcing& forcing, int64_t max_bytes) override;
  std::optional<TimeStats> measure(const CollectivePoint& point) override;
  void close(bool failed) noexcept override;
  std::string implementation(CollectiveOp op) const override;

 private:
  struct Slot {
    int world_rank = 0;
    int group_rank = 0;
    int device = 0;
    ncclComm_t comm = nullptr;        ///< blocking: the one collectives are timed on
    ncclComm_t setup_comm = nullptr;  ///< multi-process: non-blocking, during open() only
    cudaStream_t stream = nullptr;
    void* send = nullptr;
    void* recv = nullptr;
    std::vector<cudaEvent_t> events;
  };

  void allocate(int64_t max_bytes);
  void create_communicators();
  void launch(const CollectivePoint& p, ncclDataType_t type, ncclRedOp_t op, int type_size);
  void enqueue(const Slot& s, const CollectivePoint& p, ncclDataType_t type, ncclRedOp_t op, int type_size);
  void wait_all();
  /// Waits until no set-up communicator of this process answers ncclInProgress (non-blocking
  /// initialisation, split, finalisation), at most --point-timeout; throws naming `what` on an
  /// error or at the deadline.
  void settle_setup(const std::string& what);
  /// Finalises and destroys the set-up communicators once the timed ones are split from them.
  void release_setup();

  Coordinator& coordinator_;
  std::vector<LocalRank> local_;
  bool multi_process_;
  double point_timeout_s_;
  std::vector<Slot> slots_;  ///< the members of the open group that this process drives
  int group_size_ = 0;
  bool native_alltoall_ = false;  ///< the loaded NCCL has ncclAlltoAll
};

}  // namespace parallax::harness
