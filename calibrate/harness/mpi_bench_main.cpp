// parallax-mpi-bench: MPI collectives over host memory, swept like nccl-tests, written as the
// JSON lines of calibrate/FORMAT.md (kind collective; the meta line names the CPU and the MPI
// library) and printed as nccl-tests tables. `mpirun --oversubscribe -np 2` on one host measures
// the shared-memory "link"; across hosts, the network as MPI drives it.
// Reported time: the largest per-rank mean over the timed iterations (reduced to rank 0, which
// writes); min/max are the largest per-rank min/max.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "harness/collective_sweep.h"
#include "harness/harness_run.h"
#include "harness/mpi_collectives.h"
#include "harness/mpi_coordinator.h"
#include "harness/run_context.h"
#include "harness/sweep_options.h"
#include "harness/whole_line.h"

namespace {

using namespace parallax::harness;

constexpr const char* kHarness = "parallax-mpi-bench";

int run(int argc, char** argv) {
  MpiCoordinator world;
  const bool root = world.is_root();

  SweepOptions o;
  o.max_bytes = "64M";
  const HarnessCommand command{kHarness,
                               "parallax-mpi-bench: MPI collectives over host memory, swept like nccl-tests; writes "
                               "calibrate/FORMAT.md JSON lines (-o) and nccl-tests tables. Run under mpirun.",
                               "parallax-mpi-bench 0.1.0"};
  auto check = [&o] {
    if (!mpi_datatype(o.dtype)) throw std::invalid_argument("-d: MPI has no type for '" + o.dtype + "'");
    for (const auto& r : o.redops) {
      if (!mpi_op(r)) throw std::invalid_argument("--op: MPI has no reduction operator '" + r + "'");
    }
  };
  const CommandLineOutcome parsed = parse_harness_command_line(argc, argv, command, o, {}, check, root);
  if (!parsed.measure) return parsed.exit_code;
  install_stop_handlers();

  // Where every rank runs: its host and its index on that host.
  std::vector<RankPlace> places;
  for (const auto& entry : world.all_gather(host_name() + "\t" + std::to_string(world.local_rank()))) {
    const size_t tab = entry.rfind('\t');
    places.push_back(RankPlace{entry.substr(0, tab), std::stoi(entry.substr(tab + 1))});
  }
  std::vector<std::string> hosts;
  for (const auto& p : places) {
    if (std::find(hosts.begin(), hosts.end(), p.host) == hosts.end()) hosts.push_back(p.host);
  }

  const std::string date = utc_now_iso();
  const std::string run_id = world.broadcast(root ? make_run_id(date, host_name()) : std::string());
  std::unique_ptr<MeasurementLog> log;
  try {
    log = open_log_on_root(world, kHarness, o.output, std::cerr);
    if (root) {
      auto meta = meta_line(kHarness, run_id, date, hosts, world.size(), static_cast<int>(hosts.size()));
      meta["cpu"] = cpu_model();
      meta["mpi"] = mpi_library_version();
      finish_meta_line(meta, command_line(argc, argv));
      if (log) log->append(meta);
      std::cout << "# " << kHarness << " 0.1.0, run " << run_id << ": " << world.size() << " ranks on "
                << hosts.size() << " node(s), " << meta["mpi"].get<std::string>() << "\n";
    }
  } catch (const std::exception& e) {
    if (root) WholeLine(std::cerr) << kHarness << ": error: " << e.what() << "\n";
    return kExitFailed;
  }

  RunClock clock(o.time_limit_s);
  MpiCollectives backend(world);
  SweepContext context;
  context.harness = kHarness;
  context.run_id = run_id;
  context.options = &o;
  context.places = places;
  context.coordinator = &world;
  context.backend = &backend;
  context.log = log.get();
  context.clock = &clock;
  context.table = &std::cout;
  context.progress = &std::cerr;
  RunTally tally;
  try {
    tally.add(run_collective_sweeps(context));
  } catch (const std::exception& e) {
    // Only the root writes, so only it fails here, while the others wait in a collective.
    WholeLine(std::cerr) << kHarness << ": error: " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, kExitFailed);
  }
  tally.interrupted = clock.interrupted();
  const int code = root ? finish_run(tally, kHarness, log.get(), std::cerr) : kExitOk;
  return static_cast<int>(world.broadcast(static_cast<int64_t>(code)));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = run(argc, argv);
  MPI_Finalize();
  return code;
}
