// parallax-nccl-bench: NCCL collectives swept like nccl-tests over groups of GPUs chosen to
// isolate link classes, plus cuBLASLt GEMMs and memory copies on one GPU; every point written as
// a calibrate/FORMAT.md JSON line as soon as it is timed (resumable), and printed as a table.
//
// One process drives every visible GPU (ncclCommInitAll). Built as parallax-nccl-bench-mpi
// (PARALLAX_HAVE_MPI) and started by mpirun, it runs one rank per process across nodes instead:
// each process takes GPU (local rank mod GPUs), rank 0 broadcasts the NCCL id over MPI.
// Without a visible GPU it prints one line and exits 3 (harness_run.h lists the exit codes).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "harness/collective_sweep.h"
#include "harness/compute_sweeps.h"
#include "harness/gpu_check.h"
#include "harness/gpu_info.h"
#include "harness/harness_run.h"
#include "harness/nccl_collectives.h"
#include "harness/run_context.h"
#include "harness/sweep_options.h"
#include "harness/whole_line.h"

#ifdef PARALLAX_HAVE_MPI
#include "harness/mpi_coordinator.h"
#endif

namespace {

using namespace parallax;
using namespace parallax::harness;

constexpr const char* kHarness = "parallax-nccl-bench";

struct GpuArgs {
  std::vector<std::string> algos;   ///< empty: NCCL_ALGO as set, or auto
  std::vector<std::string> protos;  ///< empty: NCCL_PROTO as set, or auto
  bool gemm = false;
  std::vector<std::string> gemm_dtypes{"bf16", "fp8"};
  bool memcpy = false;
  std::string memcpy_max = "4G";
  int64_t memcpy_max_bytes = 0;
  bool no_collectives = false;
  double point_timeout_s = 300;  ///< also the deadline of a multi-process communicator's set-up
  int device = 0;
};

// The ranks of a run as MPI gives them (one process: rank 0 of 1).
struct ProcessPlace {
  bool multi_process = false;
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;
  std::string mpi_version;
};

// NCCL_ALGO's spelling of the algorithms NCCL has; empty for Parallax's MPI-style ones.
std::string nccl_algo_name(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "Ring";
    case Algorithm::kTree: return "Tree";
    case Algorithm::kNvls: return "NVLS";
    case Algorithm::kNvlsTree: return "NVLSTree";
    case Algorithm::kCollNetDirect: return "CollnetDirect";
    case Algorithm::kCollNetChain: return "CollnetChain";
    case Algorithm::kPat: return "PAT";
    default: return "";
  }
}

// One sweep per (algorithm, protocol). A name Parallax knows is recorded in its canonical form;
// anything else is passed to NCCL verbatim (its own syntax: "^NVLS", "allreduce:tree").
std::vector<Forcing> make_forcings(std::vector<std::string> algos, std::vector<std::string> protos) {
  auto from_env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::vector<std::string>{v && *v ? v : "auto"};
  };
  algos = split_list(algos);
  protos = split_list(protos);
  if (algos.empty()) algos = from_env("NCCL_ALGO");
  if (protos.empty()) protos = from_env("NCCL_PROTO");
  std::vector<Forcing> out;
  for (const auto& a : algos) {
    Forcing algo;
    if (a != "auto") {
      if (const auto known = parse_algorithm(a)) {
        if (nccl_algo_name(*known).empty()) {
          throw std::invalid_argument("--algo: NCCL has no algorithm '" + a +
                                      "' (ring, tree, nvls, nvls_tree, collnet_direct, collnet_chain, pat)");
        }
        algo.algo = std::string(algorithm_name(*known));
        algo.nccl_algo = nccl_algo_name(*known);
      } else {
        algo.algo = algo.nccl_algo = a;
      }
    }
    for (const auto& p : protos) {
      Forcing f = algo;
      if (p != "auto") {
        const auto known = parse_protocol(p);
        f.proto = f.nccl_proto = known ? std::string(protocol_name(*known)) : p;
      }
      out.push_back(f);
    }
  }
  return out;
}

// The launcher's rank before MPI starts, so that argument errors are printed once.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

int measure(int argc, char** argv, const SweepOptions& o, const GpuArgs& g, const std::vector<Forcing>& forcings,
            int gpu_count, Coordinator& coordinator, const ProcessPlace& me) {
  const bool root = coordinator.is_root();
  const std::string host = host_name();
  std::vector<LocalRank> local;
  std::vector<RankPlace> places;
  std::vector<NcclTestsDevice> devices;
  GpuInfo root_gpu;
  std::string setup_error;
  try {
    if (!me.multi_process) {
      for (int d = 0; d < gpu_count; ++d) {
        const GpuInfo info = gpu_info(d);
        if (d == 0) root_gpu = info;
        local.push_back(LocalRank{d, d});
        places.push_back(RankPlace{host, d});
        devices.push_back(NcclTestsDevice{d, host, d, info.bus_id, info.name});
      }
      if (g.device < 0 || g.device >= gpu_count) {
        throw std::invalid_argument("--device " + std::to_string(g.device) + ": " + std::to_string(gpu_count) +
                                    " GPU(s) visible");
      }
      root_gpu = gpu_info(g.device);
    } else {
      const int device = me.local_rank % gpu_count;
      PX_CHECK(cudaSetDevice(device));
      root_gpu = gpu_info(device);
      local.push_back(LocalRank{me.rank, device});
    }
  } catch (const std::exception& e) {
    setup_error = e.what();
  }
  if (me.multi_process) {
    // Every process learns where every rank runs (its host, GPU and GPU name).
    const auto all = coordinator.all_gather(host + "\t" + std::to_string(local.empty() ? -1 : local[0].device) + "\t" +
                                            root_gpu.bus_id + "\t" + root_gpu.name);
    for (size_t r = 0; r < all.size(); ++r) {
      std::vector<std::string> f;
      size_t start = 0;
      for (int i = 0; i < 3; ++i) {
        const size_t tab = all[r].find('\t', start);
        f.push_back(all[r].substr(start, tab - start));
        start = tab + 1;
      }
      f.push_back(all[r].substr(start));
      const int device = std::atoi(f[1].c_str());
      places.push_back(RankPlace{f[0], device});
      devices.push_back(NcclTestsDevice{static_cast<int>(r), f[0], device, f[2].empty() ? "?" : f[2], f[3]});
    }
  }
  if (coordinator.any(!setup_error.empty())) {
    WholeLine(std::cerr) << kHarness << ": error" << (me.multi_process ? " on rank " + std::to_string(me.rank) : "") << ": "
              << (setup_error.empty() ? "another rank failed to start" : setup_error) << "\n";
    return kExitFailed;
  }
  if (me.multi_process && root && me.local_size > gpu_count) {
    WholeLine(std::cerr) << kHarness << ": warning: " << me.local_size << " ranks on " << host << " share " << gpu_count
              << " GPU(s)\n";
  }

  std::vector<std::string> hosts;
  for (const auto& p : places) {
    if (std::find(hosts.begin(), hosts.end(), p.host) == hosts.end()) hosts.push_back(p.host);
  }
  const std::string date = utc_now_iso();
  const std::string run_id = coordinator.broadcast(root ? make_run_id(date, host) : std::string());
  std::unique_ptr<MeasurementLog> log;
  try {
    log = open_log_on_root(coordinator, kHarness, o.output, std::cerr);
    if (root) {
      auto meta = meta_line(kHarness, run_id, date, hosts, static_cast<int>(places.size()),
                            static_cast<int>(hosts.size()));
      meta["gpu"] = devices.empty() ? root_gpu.name : devices[0].name;
      meta["gpu_count"] = places.size();
      meta["compute_capability"] = std::to_string(root_gpu.cc_major) + "." + std::to_string(root_gpu.cc_minor);
      if (const std::string d = driver_version(); !d.empty()) meta["driver"] = d;
      meta["cuda_driver"] = cuda_driver_version();
      meta["cuda_runtime"] = cuda_runtime_version();
      meta["nccl"] = nccl_version();
      if (me.multi_process) meta["mpi"] = me.mpi_version;
      std::vector<std::string> names;
      for (const auto& d : devices) names.push_back(d.name);
      if (std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n != names.front(); })) {
        meta["gpus"] = names;  // a mixed machine: every rank's GPU, in rank order
      }
      finish_meta_line(meta, command_line(argc, argv));
      if (log) log->append(meta);
      std::cout << "# " << kHarness << " 0.1.0, run " << run_id << ": " << places.size() << " GPU(s) on "
                << hosts.size() << " node(s), " << meta["gpu"].get<std::string>() << "; driver "
                << meta.value("driver", "?") << ", CUDA " << meta["cuda_runtime"].get<std::string>() << ", NCCL "
                << meta["nccl"].get<std::string>() << "\n"
                << std::flush;
    }
  } catch (const std::exception& e) {
    if (root) WholeLine(std::cerr) << kHarness << ": error: " << e.what() << "\n";
    return kExitFailed;
  }

  RunClock clock(o.time_limit_s);
  RunTally tally;
  if (!g.no_collectives) {
    NcclCollectives backend(coordinator, local, me.multi_process, g.point_timeout_s);
    SweepContext context;
    context.harness = kHarness;
    context.run_id = run_id;
    context.options = &o;
    context.forcings = forcings;
    context.places = places;
    context.devices = devices;
    context.coordinator = &coordinator;
    context.backend = &backend;
    context.log = log.get();
    context.clock = &clock;
    context.table = &std::cout;
    context.progress = &std::cerr;
    try {
      tally.add(run_collective_sweeps(context));
    } catch (const std::exception& e) {
      // Writing the file failed (only the root writes): nothing more can be kept.
      WholeLine(std::cerr) << kHarness << ": error: " << e.what() << "\n";
#ifdef PARALLAX_HAVE_MPI
      if (me.multi_process) MPI_Abort(MPI_COMM_WORLD, kExitFailed);
#endif
      return kExitFailed;
    }
  }
  // The compute sweeps run on rank 0's GPU only; the other processes wait.
  if (root && !tally.stopped && (g.gemm || g.memcpy)) {
    ComputeRun run;
    run.harness = kHarness;
    run.run_id = run_id;
    run.device = me.multi_process ? local[0].device : g.device;
    run.gpu_name = root_gpu.name;
    run.cc_major = root_gpu.cc_major;
    run.cc_minor = root_gpu.cc_minor;
    run.warmup = o.warmup;
    run.iters = o.iters;
    run.quiet = o.quiet;
    run.log = log.get();
    run.clock = &clock;
    run.table = &std::cout;
    run.progress = &std::cerr;
    auto merge = [&](const RunTally& t) {
      tally.measured += t.measured;
      tally.resumed += t.resumed;
      tally.failures += t.failures;
      if (t.stopped) {
        tally.stopped = true;
        tally.stop_reason = t.stop_reason;
      }
    };
    try {
      if (g.gemm) merge(run_gemm_sweep(run, g.gemm_dtypes));
      if (g.memcpy && !tally.stopped) merge(run_memcpy_sweep(run, g.memcpy_max_bytes));
    } catch (const std::exception& e) {
      WholeLine(std::cerr) << kHarness << ": error: " << e.what() << "\n";
      ++tally.failures;
    }
  }
  coordinator.barrier();
  tally.interrupted = clock.interrupted();
  const int code = root ? finish_run(tally, kHarness, log.get(), std::cerr) : kExitOk;
  return static_cast<int>(coordinator.broadcast(static_cast<int64_t>(code)));
}

}  // namespace

int main(int argc, char** argv) {
  const bool speaks = launcher_rank() == 0;
  SweepOptions o;
  o.max_bytes = "4G";
  GpuArgs g;
  const std::vector<HarnessOption> gpu_options{
      {"--algo",
       "NCCL_ALGO per sweep: auto, ring, tree, nvls, nvls_tree, collnet_direct, collnet_chain, pat "
       "(a list: one sweep each; default: NCCL_ALGO as set, else auto)",
       &g.algos},
      {"--proto", "NCCL_PROTO per sweep: auto, LL, LL128, Simple (a list; default as --algo)", &g.protos},
      {"--gemm", "run the cuBLASLt GEMM sweep (transformer shapes and squares)", &g.gemm},
      {"--gemm-dtypes", "GEMM input types: bf16, fp8 (e4m3; needs compute capability 8.9+)", &g.gemm_dtypes, true},
      {"--memcpy", "run the memory-copy sweep (device-to-device, host-to-device, device-to-host)", &g.memcpy},
      {"--memcpy-max", "largest copy (1 MiB ... this, x2)", &g.memcpy_max, true},
      {"--no-collectives", "skip the collective sweep (compute sweeps only)", &g.no_collectives},
      {"--point-timeout",
       "seconds a collective point (or, under MPI, a communicator set-up) may take before it counts as hung",
       &g.point_timeout_s, true},
      {"--device", "GPU of the compute sweeps (single process; under MPI, rank 0's GPU)", &g.device, true}};
  const HarnessCommand command{
      kHarness,
      "parallax-nccl-bench: NCCL collectives over groups of GPUs that isolate link classes, cuBLASLt GEMMs and "
      "memory copies; writes calibrate/FORMAT.md JSON lines (-o, resumable) and nccl-tests tables.",
      "parallax-nccl-bench 0.1.0"};
  std::vector<Forcing> forcings;
  auto check = [&] {
    if (!nccl_datatype(o.dtype)) throw std::invalid_argument("-d: this NCCL has no type '" + o.dtype + "'");
    forcings = make_forcings(g.algos, g.protos);
    g.gemm_dtypes = split_list(g.gemm_dtypes);
    for (const auto& d : g.gemm_dtypes) {
      if (d != "bf16" && d != "fp8") throw std::invalid_argument("--gemm-dtypes: bf16 or fp8, not '" + d + "'");
    }
    g.memcpy_max_bytes = parse_size(g.memcpy_max, "--memcpy-max");
    if (!(g.point_timeout_s > 0)) throw std::invalid_argument("--point-timeout: a positive number of seconds");
  };
  const CommandLineOutcome parsed = parse_harness_command_line(argc, argv, command, o, gpu_options, check, speaks);
  if (!parsed.measure) return parsed.exit_code;

  // Before MPI starts: a rank without a GPU says so and leaves (mpirun then stops the others).
  std::string why_not;
  const int gpu_count = visible_gpu_count(why_not);
  if (gpu_count == 0) {
    std::fprintf(stderr, "%s: no usable GPU: %s; nothing measured\n", kHarness, why_not.c_str());
    return kExitNoDevice;
  }
  install_stop_handlers();

#ifdef PARALLAX_HAVE_MPI
  if (launched_by_mpi()) {
    MPI_Init(&argc, &argv);
    int code = kExitFailed;
    {
      MpiCoordinator world;
      ProcessPlace me;
      me.multi_process = true;
      me.rank = world.rank();
      me.local_rank = world.local_rank();
      me.local_size = world.local_size();
      me.mpi_version = mpi_library_version();
      code = measure(argc, argv, o, g, forcings, gpu_count, world, me);
    }
    MPI_Finalize();
    return code;
  }
#endif
  SingleProcess single;
  return measure(argc, argv, o, g, forcings, gpu_count, single, ProcessPlace{});
}
