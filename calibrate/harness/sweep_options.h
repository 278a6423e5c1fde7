// The command-line surface both harnesses share: nccl-tests' size syntax and flags (-b -e -f -w
// -n -d), the lists of collectives, reduction operators and rank groups, in-place or not, the
// output file and the time limit, parsed by one function, so that parallax-nccl-bench and
// parallax-mpi-bench spell every option the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "collectives/collective.h"

namespace parallax::harness {

/// nccl-tests' size syntax: an integer with an optional K, M, G or T suffix (powers of 1024:
/// "64M" is 64 MiB, "1G" 1 GiB), or a unit string such as "1 GiB" or "512 kB". Throws
/// std::invalid_argument naming `option` for anything else or a negative size.
int64_t parse_size(const std::string& text, const std::string& option);

/// The sizes of an nccl-tests sweep: b, b·f, b·f², … while ≤ e. Throws std::invalid_argument
/// when b < 1, b > e or f < 2.
std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor);

/// Options of a collective sweep, as parsed (strings) and as resolved (typed) by
/// resolve_sweep_options.
struct SweepOptions {
  std::string min_bytes = "8";
  std::string max_bytes = "64M";  ///< each program sets its own default before parsing
  int64_t step_factor = 2;
  int warmup = 5;
  int iters = 20;
  std::vector<std::string> ops{"all"};     ///< collective names (parse_op spellings) or "all"
  std::vector<std::string> redops{"sum"};  ///< reduction operators, for the ops that reduce
  std::vector<std::string> groups{"all"};  ///< rank_groups.h names
  std::string dtype = "float";             ///< an nccl-tests type name
  int root = 0;                            ///< root, as an index into the group, of broadcast/reduce
  std::string placement = "both";          ///< out, in or both (nccl-tests measures both)
  std::string output;                      ///< the JSON-lines file; empty: tables only
  double time_limit_s = 0;                 ///< stop cleanly after this long; 0: no limit
  bool quiet = false;                      ///< no per-point progress lines

  // Filled by resolve_sweep_options.
  std::vector<CollectiveOp> collectives;
  std::vector<int64_t> sizes;
  int64_t min_size = 0, max_size = 0;
  std::vector<bool> in_place_modes;  ///< false (out-of-place) before true, as nccl-tests prints
};

/// Checks and types the shared options as parsed: sizes, iteration counts, op, group and
/// placement names, the data type (known to nccl-tests) and redops (sum, prod, max, min, avg).
/// Throws std::invalid_argument with a message that names the option.
void resolve_sweep_options(SweepOptions& options);

/// An option a harness adds to the shared ones, bound to a field of its own arguments. A bool is
/// a flag; a list takes commas.
struct HarnessOption {
  std::string names;  ///< CLI11 spelling: "--algo" or "-x,--long"
  std::string help;
  std::variant<bool*, int*, double*, std::string*, std::vector<std::string>*> target;
  bool show_default = false;  ///< --help prints the field's value
};

/// What a harness says of itself in --help and --version.
struct HarnessCommand {
  std::string name;         ///< "parallax-mpi-bench"
  std::string description;  ///< --help's first line
  std::string version;      ///< --version's line
};

/// What parsing the command line came to: measure, or exit with `exit_code` (help or version
/// printed, or the error reported) before measuring anything.
struct CommandLineOutcome {
  bool measure = false;
  int exit_code = 0;
};

/// Parses argv into `options` (the shared options, resolved) and the harness's `extra` ones, then
/// runs `check` (may be empty; it throws std::invalid_argument naming the option). Only a rank
/// that `speaks` prints help, version or the error. Both harnesses parse here, so that CLI11's
/// header-only code is compiled once.
CommandLineOutcome parse_harness_command_line(int argc, char** argv, const HarnessCommand& command,
                                              SweepOptions& options, const std::vector<HarnessOption>& extra,
                                              const std::function<void()>& check, bool speaks);

/// Splits "a,b,c" (already split by CLI11 when given as a list) and trims blanks.
std::vector<std::string> split_list(const std::vector<std::string>& items);

}  // namespace parallax::harness
