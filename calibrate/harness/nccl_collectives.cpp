// NCCL collectives backend (nccl_collectives.h).
#include "harness/nccl_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "collectives/nccl_tests_log.h"
#include "harness/gpu_check.h"
#include "harness/whole_line.h"

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
// Weak, as nccl-tests declares it: a binary built against 2.28 headers still loads an older
// libnccl, where the symbol resolves to null and all-to-all falls back to grouped send/recv.
#pragma weak ncclAlltoAll
#define PARALLAX_NCCL_HAS_ALLTOALL_HEADER 1
#endif

namespace parallax::harness {
namespace {

// ncclInProgress is what the non-blocking set-up communicator answers while NCCL still works on
// a call (its initialisation, the split, finalisation); settle_setup() waits it out.
void check_enqueued(ncclResult_t status, const char* call) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (status == ncclInProgress) return;
#endif
  check_call(status, call);
}
#define PX_ENQUEUED(call) check_enqueued((call), #call)

void set_or_unset(const char* name, const std::string& value) {
  if (value.empty()) {
    unsetenv(name);
  } else {
    setenv(name, value.c_str(), 1);
  }
}

char* at(void* base, int64_t bytes) { return static_cast<char*>(base) + bytes; }

// Runs `enqueue` inside ncclGroupStart/End, ending the group even when a call in it throws:
// a group left open would swallow every later NCCL call of this thread.
template <typename Enqueue>
void grouped(Enqueue&& enqueue) {
  PX_CHECK(ncclGroupStart());
  try {
    enqueue();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  PX_CHECK(ncclGroupEnd());
}

// True when the NCCL loaded at run time has ncclAlltoAll (2.28+), as nccl-tests decides.
bool loaded_nccl_has_alltoall() {
#ifdef PARALLAX_NCCL_HAS_ALLTOALL_HEADER
  int version = 0;
  return &ncclAlltoAll != nullptr && ncclGetVersion(&version) == ncclSuccess && version >= NCCL_VERSION(2, 28, 0);
#else
  return false;
#endif
}

bool in_progress(ncclResult_t r) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  return r == ncclInProgress;
#else
  (void)r;
  return false;
#endif
}

bool still_running(ncclResult_t async) { return async == ncclSuccess || in_progress(async); }

}  // namespace

std::optional<ncclDataType_t> nccl_datatype(const std::string& dtype) {
  if (dtype == "int8" || dtype == "char") return ncclInt8;
  if (dtype == "uint8") return ncclUint8;
  if (dtype == "int32" || dtype == "int") return ncclInt32;
  if (dtype == "uint32") return ncclUint32;
  if (dtype == "int64") return ncclInt64;
  if (dtype == "uint64") return ncclUint64;
  if (dtype == "half") return ncclFloat16;
  if (dtype == "float") return ncclFloat32;
  if (dtype == "double") return ncclFloat64;
  if (dtype == "bfloat16") return ncclBfloat16;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
  if (dtype == "f8e4m3") return ncclFloat8e4m3;
  if (dtype == "f8e5m2") return ncclFloat8e5m2;
#endif
  return std::nullopt;
}

std::optional<ncclRedOp_t> nccl_redop(const std::string& redop) {
  if (redop == "sum") return ncclSum;
  if (redop == "prod") return ncclProd;
  if (redop == "max") return ncclMax;
  if (redop == "min") return ncclMin;
  if (redop == "avg") return ncclAvg;
  return std::nullopt;
}

NcclCollectives::NcclCollectives(Coordinator& coordinator, std::vector<LocalRank> local, bool multi_process,
                                 double point_timeout_s)
    : coordinator_(coordinator), local_(std::move(local)), multi_process_(multi_process),
      point_timeout_s_(point_timeout_s), native_alltoall_(loaded_nccl_has_alltoall()) {}

std::string NcclCollectives::implementation(CollectiveOp op) const {
  if (op != CollectiveOp::kAllToAll) return "";
  return native_alltoall_ ? "ncclAlltoAll" : "ncclSend/ncclRecv";
}

void NcclCollectives::open(const RankGroup& group, const Forcing& forcing, int64_t max_bytes) {
  close(false);
  set_or_unset("NCCL_ALGO", forcing.nccl_algo);
  set_or_unset("NCCL_PROTO", forcing.nccl_proto);
  group_size_ = static_cast<int>(group.ranks.size());
  for (const LocalRank& r : local_) {
    const auto it = std::find(group.ranks.begin(), group.ranks.end(), r.world_rank);
    if (it == group.ranks.end()) continue;
    Slot s;
    s.world_rank = r.world_rank;
    s.group_rank = static_cast<int>(it - group.ranks.begin());
    s.device = r.device;
    slots_.push_back(s);
  }
  // Every process reaches each agreement below, failed or not, so that none waits for another
  // in a collective that will never come.
  std::string error;
  try {
    allocate(max_bytes);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (coordinator_.any(!error.empty())) {
    throw std::runtime_error(error.empty() ? "another rank failed to allocate its buffers" : error);
  }
  create_communicators();
}

void NcclCollectives::allocate(int64_t max_bytes) {
  const auto bytes = static_cast<size_t>(max_bytes);
  for (Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    PX_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    PX_CHECK(cudaMalloc(&s.send, bytes));
    PX_CHECK(cudaMalloc(&s.recv, bytes));
    // Zeros: reductions stay finite through in-place iterations, and NCCL's speed does not
    // depend on the values.
    PX_CHECK(cudaMemsetAsync(s.send, 0, bytes, s.stream));
    PX_CHECK(cudaMemsetAsync(s.recv, 0, bytes, s.stream));
    PX_CHECK(cudaStreamSynchronize(s.stream));
  }
}

void NcclCollectives::create_communicators() {
  if (!multi_process_) {
    if (static_cast<int>(slots_.size()) != group_size_) {
      throw std::logic_error("NcclCollectives: a single process must drive every rank of its groups");
    }
    std::vector<ncclComm_t> comms(slots_.size(), nullptr);
    std::vector<int> devices;
    for (const Slot& s : slots_) devices.push_back(s.device);
    PX_CHECK(ncclCommInitAll(comms.data(), group_size_, devices.data()));
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].comm = comms[i];
    return;
  }
  // World rank 0 is in every group and group rank 0: it makes the id, every process receives it
  // (non-members too, since the broadcast spans the world), and an empty id means it failed.
  std::string id_bytes;
  std::string error;
  if (coordinator_.is_root()) {
    try {
      ncclUniqueId id;
      PX_CHECK(ncclGetUniqueId(&id));
      id_bytes.assign(id.internal, sizeof id.internal);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  id_bytes = coordinator_.broadcast(id_bytes);
  if (id_bytes.size() != sizeof(ncclUniqueId::internal)) {
    throw std::runtime_error(error.empty() ? "rank 0 could not create an NCCL unique id" : error);
  }
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  // The set-up communicator is non-blocking, so that a rank whose peers never arrive gives up
  // after --point-timeout (its communicator aborted) instead of waiting in ncclCommInitRank
  // forever. The timed one is split from it as a blocking communicator: on a non-blocking one,
  // every ncclGroupEnd hands the launch to a new thread that must be polled for, which would put
  // tens of microseconds of host time into every small collective.
  for (Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    PX_ENQUEUED(ncclCommInitRankConfig(&s.setup_comm, group_size_, id, s.group_rank, &config));
  }
  settle_setup("ncclCommInitRankConfig");
  for (Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    ncclConfig_t timed = NCCL_CONFIG_INITIALIZER;
    timed.blocking = 1;
    PX_ENQUEUED(ncclCommSplit(s.setup_comm, 0, s.group_rank, &s.comm, &timed));
  }
  // The split runs as a job of the (non-blocking) parent: the parent reads ncclSuccess once the
  // child is made.
  settle_setup("ncclCommSplit");
  for (const Slot& s : slots_) {
    ncclResult_t child = ncclSuccess;
    PX_CHECK(ncclCommGetAsyncError(s.comm, &child));
    PX_CHECK(child);
  }
  release_setup();
#else
  for (Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    PX_CHECK(ncclCommInitRank(&s.comm, group_size_, id, s.group_rank));
  }
#endif
}

void NcclCollectives::settle_setup(const std::string& what) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(point_timeout_s_);
  for (const Slot& s : slots_) {
    if (!s.setup_comm) continue;
    for (;;) {
      ncclResult_t async = ncclSuccess;
      PX_CHECK(ncclCommGetAsyncError(s.setup_comm, &async));
      if (async == ncclSuccess) break;
      if (!in_progress(async)) PX_CHECK(async);
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("rank " + std::to_string(s.world_rank) + " (GPU " + std::to_string(s.device) + "): " +
                                 what + " not done after " + std::to_string(static_cast<int>(point_timeout_s_)) +
                                 " s (--point-timeout); a peer that never came?");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
#else
  (void)what;
#endif
}

void NcclCollectives::release_setup() {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  // Finalised together (one group; non-blocking, so polled), then destroyed.
  PX_CHECK(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (const Slot& s : slots_) {
    if (!s.setup_comm) continue;
    const ncclResult_t r = ncclCommFinalize(s.setup_comm);
    if (first == ncclSuccess && !in_progress(r)) first = r;
  }
  PX_ENQUEUED(ncclGroupEnd());
  PX_CHECK(first);
  settle_setup("ncclCommFinalize of the set-up communicator");
  for (Slot& s : slots_) {
    if (!s.setup_comm) continue;
    PX_ENQUEUED(ncclCommDestroy(s.setup_comm));
    s.setup_comm = nullptr;
  }
#endif
}

void NcclCollectives::close(bool failed) noexcept {
  auto report = [](const char* what, const std::string& detail) {
    WholeLine(std::cerr) << "parallax-nccl-bench: warning: " << what << ": " << detail << "\n";
  };
  // A set-up communicator still here means open() failed halfway: nothing to drain.
  for (Slot& s : slots_) failed = failed || s.setup_comm;
  if (!failed) {
    // Finalizing flushes outstanding work; the communicators of one process finalize together.
    bool any = false;
    for (const Slot& s : slots_) any = any || s.comm;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    if (any) {
      ncclResult_t r = ncclGroupStart();
      for (const Slot& s : slots_) {
        if (s.comm && r == ncclSuccess) r = ncclCommFinalize(s.comm);
      }
      const ncclResult_t end = ncclGroupEnd();
      if (r != ncclSuccess || end != ncclSuccess) {
        report("ncclCommFinalize", ncclGetErrorString(r != ncclSuccess ? r : end));
        failed = true;
      }
    }
#endif
  }
  // Every communicator goes before any buffer: in one process, a rank's kernels may write into
  // another rank's buffers until that rank's communicator is aborted too.
  for (Slot& s : slots_) {
    for (ncclComm_t* comm : {&s.comm, &s.setup_comm}) {
      if (!*comm) continue;
      const bool abort = failed || comm == &s.setup_comm;
      const ncclResult_t r = abort ? ncclCommAbort(*comm) : ncclCommDestroy(*comm);
      if (r != ncclSuccess && !in_progress(r)) report(abort ? "ncclCommAbort" : "ncclCommDestroy", ncclGetErrorString(r));
      *comm = nullptr;
    }
  }
  for (Slot& s : slots_) {
    if (cudaSetDevice(s.device) != cudaSuccess) continue;
    for (cudaEvent_t e : s.events) cudaEventDestroy(e);
    if (s.send) cudaFree(s.send);
    if (s.recv) cudaFree(s.recv);
    if (s.stream) cudaStreamDestroy(s.stream);
  }
  slots_.clear();
}

void NcclCollectives::enqueue(const Slot& s, const CollectivePoint& p, ncclDataType_t type, ncclRedOp_t op,
                              int type_size) {
  const size_t count = static_cast<size_t>(p.count);
  const int64_t block = p.count * type_size;  // bytes per rank (per peer for all-to-all)
  const int n = group_size_, r = s.group_rank;
  void* send = s.send;
  void* recv = s.recv;
  switch (p.op) {
    case CollectiveOp::kAllReduce:
      PX_CHECK(ncclAllReduce(p.in_place ? recv : send, recv, count, type, op, s.comm, s.stream));
      break;
    case CollectiveOp::kAllGather:
      PX_CHECK(ncclAllGather(p.in_place ? at(recv, r * block) : send, recv, count, type, s.comm, s.stream));
      break;
    case CollectiveOp::kReduceScatter:
      PX_CHECK(ncclReduceScatter(send, p.in_place ? at(send, r * block) : recv, count, type, op, s.comm, s.stream));
      break;
    case CollectiveOp::kAllToAll: {
      // nccl-tests' alltoall in place passes one buffer as both (its in-place offsets are 0).
      void* from = p.in_place ? recv : send;
#ifdef PARALLAX_NCCL_HAS_ALLTOALL_HEADER
      if (native_alltoall_) {
        PX_CHECK(ncclAlltoAll(from, recv, count, type, s.comm, s.stream));
        break;
      }
#endif
      grouped([&] {
        for (int peer = 0; peer < n; ++peer) {
          PX_CHECK(ncclSend(at(from, peer * block), count, type, peer, s.comm, s.stream));
          PX_CHECK(ncclRecv(at(recv, peer * block), count, type, peer, s.comm, s.stream));
        }
      });
      break;
    }
    case CollectiveOp::kBroadcast:
      PX_CHECK(ncclBroadcast(p.in_place ? recv : send, recv, count, type, p.root, s.comm, s.stream));
      break;
    case CollectiveOp::kReduce:
      PX_CHECK(ncclReduce(p.in_place ? recv : send, recv, count, type, op, p.root, s.comm, s.stream));
      break;
    case CollectiveOp::kSendRecv: {
      const int next = (r + 1) % n, prev = (r - 1 + n) % n;
      grouped([&] {
        PX_CHECK(ncclSend(p.in_place ? recv : send, count, type, next, s.comm, s.stream));
        PX_CHECK(ncclRecv(recv, count, type, prev, s.comm, s.stream));
      });
      break;
    }
  }
}

void NcclCollectives::launch(const CollectivePoint& p, ncclDataType_t type, ncclRedOp_t op, int type_size) {
  // One group over the ranks of this process: NCCL needs every rank's call before any can run.
  grouped([&] {
    for (const Slot& s : slots_) enqueue(s, p, type, op, type_size);
  });
}

void NcclCollectives::wait_all() {
  // Polled rather than synchronised, so that an NCCL error or a hang (a peer that never comes)
  // ends the point with a message instead of blocking forever.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(point_timeout_s_);
  for (const Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    for (;;) {
      const cudaError_t status = cudaStreamQuery(s.stream);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) PX_CHECK(status);
      ncclResult_t async = ncclSuccess;
      PX_CHECK(ncclCommGetAsyncError(s.comm, &async));
      if (!still_running(async)) PX_CHECK(async);
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("rank " + std::to_string(s.world_rank) + " (GPU " + std::to_string(s.device) +
                                 "): not done after " + std::to_string(static_cast<int>(point_timeout_s_)) +
                                 " s (--point-timeout); a hang?");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

std::optional<TimeStats> NcclCollectives::measure(const CollectivePoint& p) {
  if (slots_.empty()) {
    warm_up_together(coordinator_, {}, nullptr);
    return std::nullopt;
  }
  const auto type = nccl_datatype(p.dtype);
  const auto op = nccl_redop(p.redop == "none" ? "sum" : p.redop);
  const auto type_size = nccl_tests_type_size(p.dtype);
  std::vector<int> mine;
  for (const Slot& s : slots_) mine.push_back(s.world_rank);
  // A rank whose warm-up fails (or whose peers' kernels never complete: wait_all's deadline)
  // still meets the others, so that no process is left in a barrier alone.
  warm_up_together(coordinator_, mine, [&] {
    if (!type || !op || !type_size) throw std::runtime_error("NCCL has no type " + p.dtype + " or operator " + p.redop);
    for (int i = 0; i < p.warmup; ++i) launch(p, *type, *op, *type_size);
    wait_all();
  });

  const auto events = static_cast<size_t>(p.iters) + 1;
  for (Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    while (s.events.size() < events) {
      cudaEvent_t e = nullptr;
      PX_CHECK(cudaEventCreate(&e));
      s.events.push_back(e);
    }
  }
  for (int i = 0; i < p.iters; ++i) {
    for (const Slot& s : slots_) {
      PX_CHECK(cudaSetDevice(s.device));
      PX_CHECK(cudaEventRecord(s.events[static_cast<size_t>(i)], s.stream));
    }
    launch(p, *type, *op, *type_size);
  }
  for (const Slot& s : slots_) {
    PX_CHECK(cudaSetDevice(s.device));
    PX_CHECK(cudaEventRecord(s.events[static_cast<size_t>(p.iters)], s.stream));
  }
  wait_all();

  std::optional<TimeStats> result;
  for (const Slot& s : slots_) {
    std::vector<double> times;
    for (size_t i = 0; i < static_cast<size_t>(p.iters); ++i) {
      float ms = 0;
      PX_CHECK(cudaEventElapsedTime(&ms, s.events[i], s.events[i + 1]));
      times.push_back(static_cast<double>(ms) * 1e3);
    }
    const TimeStats t = summarize(times);
    result = result ? slowest(*result, t) : t;
  }
  return result;
}

}  // namespace parallax::harness
