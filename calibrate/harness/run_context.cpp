// Run metadata and stopping (run_context.h).
#include "harness/run_context.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fstream>
#include <map>

extern char** environ;

namespace parallax::harness {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

bool has_prefix(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Open MPI's launcher bookkeeping: set by mpirun on every launch, not by the person measuring.
bool launcher_bookkeeping(const std::string& name) {
  for (const char* prefix : {"OMPI_COMM_WORLD_", "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_APP_CTX",
                             "OMPI_FILE_LOCATION", "OMPI_FIRST_RANKS", "OMPI_ARGV", "OMPI_COMMAND",
                             "OMPI_NUM_APP_CTX", "OMPI_UNIVERSE_SIZE", "OMPI_MCA_initial_wdir",
                             "OMPI_MCA_shmem_RUNTIME_QUERY_hint"}) {
    if (has_prefix(name, prefix)) return true;
  }
  return false;
}

}  // namespace

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (has_prefix(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

std::string make_run_id(const std::string& date, const std::string& host) {
  return date + "-" + host + "-" + std::to_string(getpid());
}

std::string command_line(int argc, const char* const* argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string word = argv[i];
    if (word.empty() || word.find_first_of(" \t\n'\"\\$") != std::string::npos) {
      std::string quoted = "'";
      for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      word = quoted + "'";
    }
    out += (i ? " " : "") + word;
  }
  return out;
}

nlohmann::ordered_json harness_env() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    if ((has_prefix(name, "NCCL_") || has_prefix(name, "OMPI_") || has_prefix(name, "UCX_") ||
         name == "CUDA_VISIBLE_DEVICES") &&
        !launcher_bookkeeping(name)) {
      vars[name] = entry.substr(eq + 1);
    }
  }
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const char* name : {"NCCL_ALGO", "NCCL_PROTO"}) {
    if (!vars.count(name)) env[name] = nullptr;
  }
  for (const auto& [name, value] : vars) env[name] = value;
  return env;
}

nlohmann::ordered_json meta_line(const std::string& harness, const std::string& run_id, const std::string& date,
                                 const std::vector<std::string>& hosts, int ranks, int nodes) {
  nlohmann::ordered_json j;
  j["kind"] = "meta";
  j["run"] = run_id;
  j["harness"] = harness;
  j["harness_version"] = "0.1.0";
  j["date"] = date;
  j["hosts"] = hosts;
  j["ranks"] = ranks;
  j["nodes"] = nodes;
  return j;
}

void finish_meta_line(nlohmann::ordered_json& meta, const std::string& command) {
  meta["env"] = harness_env();
  meta["command"] = command;
}

double round_decimals(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  // Dividing the rounded integer by 10^d (not multiplying by 10^-d) gives the double nearest
  // the decimal, whose shortest form is the decimal itself.
  return std::round(value * scale) / scale;
}

RunClock::RunClock(double limit_s) : start_(std::chrono::steady_clock::now()), limit_s_(limit_s) {}

double RunClock::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool RunClock::interrupted() const { return g_stop_signal != 0; }

bool RunClock::must_stop(double next_cost_s) const {
  if (interrupted()) return true;
  return limit_s_ > 0 && elapsed_s() + std::max(0.0, next_cost_s) > limit_s_;
}

std::string RunClock::stop_reason() const {
  if (interrupted()) return g_stop_signal == SIGINT ? "interrupted (SIGINT)" : "interrupted (SIGTERM)";
  return "time limit";
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a write(2) in progress completes rather than failing with EINTR.
  // SA_RESETHAND: a second signal takes the default action, for a run that hangs in a collective.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace parallax::harness
