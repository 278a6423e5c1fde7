// Parsing and checking of the options both harnesses share (sweep_options.h).
#include "harness/sweep_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "collectives/nccl_tests_log.h"
#include "harness/harness_run.h"
#include "harness/rank_groups.h"
#include "units/unit_parse.h"

namespace parallax::harness {

int64_t parse_size(const std::string& text, const std::string& option) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(option + ": " + why + " (expected a size such as 8, 64K, 16G or \"1 GiB\")");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (suffix == "T" || suffix == "t") shift = 40;
  if (digits > 0 && shift >= 0) {
    if (digits > 15) fail("'" + text + "' is too large");
    const int64_t value = std::stoll(text.substr(0, digits));
    if (value > (std::numeric_limits<int64_t>::max() >> shift)) fail("'" + text + "' is too large");
    return value << shift;
  }
  if (!text.empty() && text[0] == '-') fail("a size must not be negative: '" + text + "'");
  try {
    const double bytes = parse_bytes(text).value();
    if (bytes != std::floor(bytes)) fail("'" + text + "' is not a whole number of bytes");
    if (bytes > 9.0e18) fail("'" + text + "' is too large");
    return static_cast<int64_t>(bytes);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    fail("'" + text + "': " + e.what());
  }
  return 0;
}

std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  if (min_bytes < 1) throw std::invalid_argument("-b: the smallest size must be at least 1 byte");
  if (min_bytes > max_bytes) throw std::invalid_argument("-b must not exceed -e");
  if (factor < 2) throw std::invalid_argument("-f: the step factor must be at least 2");
  std::vector<int64_t> sizes;
  for (int64_t s = min_bytes; s <= max_bytes; s *= factor) {
    sizes.push_back(s);
    if (s > max_bytes / factor) break;  // the next step would pass max_bytes (or overflow)
  }
  return sizes;
}

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t end = item.find(',', start);
      if (end == std::string::npos) end = item.size();
      std::string part = item.substr(start, end - start);
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      if (!part.empty()) out.push_back(part);
      start = end + 1;
    }
  }
  return out;
}

namespace {

void add_sweep_options(CLI::App& app, SweepOptions& o) {
  app.add_option("-b,--minbytes", o.min_bytes, "smallest size (nccl-tests syntax: 8, 64K, 1M, 16G)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", o.max_bytes, "largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "size multiplier between points")->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "untimed iterations before the timed ones")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed iterations per point (time = their mean)")->capture_default_str();
  app.add_option("--ops,--collectives", o.ops,
                 "collectives: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, "
                 "or all")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--op,--redop", o.redops, "reduction operators for the reducing collectives (sum, prod, max, min, avg)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--groups", o.groups, "rank groups: all, node, pair-intra, one-per-node, rail, self")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-d,--dtype,--datatype", o.dtype, "data type, as nccl-tests names it (float, half, bfloat16, ...)")
      ->capture_default_str();
  app.add_option("-r,--root", o.root, "root of broadcast and reduce, as a rank of the group")->capture_default_str();
  app.add_option("--placement", o.placement, "out (out-of-place), in (in-place) or both")->capture_default_str();
  app.add_option("-o,--output", o.output,
                 "JSON-lines file (calibrate/FORMAT.md); an existing file is resumed: points it holds are skipped");
  app.add_option("--time-limit", o.time_limit_s, "stop cleanly after this many seconds (0: no limit)")
      ->capture_default_str();
  app.add_flag("-q,--quiet", o.quiet, "no progress line per point on stderr");
}

void add_harness_option(CLI::App& app, const HarnessOption& extra) {
  std::visit(
      [&](auto* field) {
        using Field = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<Field, bool>) {
          app.add_flag(extra.names, *field, extra.help);
        } else {
          CLI::Option* option = app.add_option(extra.names, *field, extra.help);
          if constexpr (std::is_same_v<Field, std::vector<std::string>>) option->delimiter(',');
          if (extra.show_default) option->capture_default_str();
        }
      },
      extra.target);
}

}  // namespace

CommandLineOutcome parse_harness_command_line(int argc, char** argv, const HarnessCommand& command,
                                              SweepOptions& options, const std::vector<HarnessOption>& extra,
                                              const std::function<void()>& check, bool speaks) {
  CLI::App app{command.description};
  add_sweep_options(app, options);
  for (const auto& option : extra) add_harness_option(app, option);
  app.set_version_flag("--version", command.version);
  auto exit_with = [](int code) { return CommandLineOutcome{false, code}; };
  try {
    app.parse(argc, argv);
    resolve_sweep_options(options);
    if (check) check();
  } catch (const CLI::CallForHelp& e) {
    return exit_with(speaks ? app.exit(e) : kExitOk);
  } catch (const CLI::CallForAllHelp& e) {
    return exit_with(speaks ? app.exit(e) : kExitOk);
  } catch (const CLI::CallForVersion& e) {
    return exit_with(speaks ? app.exit(e) : kExitOk);
  } catch (const CLI::ParseError& e) {
    if (speaks) std::fprintf(stderr, "%s: error: %s (see --help)\n", command.name.c_str(), e.what());
    return exit_with(kExitUsage);
  } catch (const std::invalid_argument& e) {
    if (speaks) std::fprintf(stderr, "%s: error: %s\n", command.name.c_str(), e.what());
    return exit_with(kExitUsage);
  }
  return CommandLineOutcome{true, kExitOk};
}

void resolve_sweep_options(SweepOptions& o) {
  o.min_size = parse_size(o.min_bytes, "-b");
  o.max_size = parse_size(o.max_bytes, "-e");
  o.sizes = sweep_sizes(o.min_size, o.max_size, o.step_factor);
  if (o.warmup < 0) throw std::invalid_argument("-w: warm-up iterations must not be negative");
  if (o.iters < 1) throw std::invalid_argument("-n: at least one timed iteration");
  if (!(o.time_limit_s >= 0) || !std::isfinite(o.time_limit_s)) {
    throw std::invalid_argument("--time-limit: a number of seconds, 0 for none");
  }

  o.collectives.clear();
  for (const auto& name : split_list(o.ops)) {
    if (name == "all") {
      for (CollectiveOp op : all_ops()) {
        if (std::find(o.collectives.begin(), o.collectives.end(), op) == o.collectives.end()) o.collectives.push_back(op);
      }
      continue;
    }
    const auto op = parse_op(name);
    if (!op) {
      throw std::invalid_argument("--ops: unknown collective '" + name +
                                  "' (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, "
                                  "send_recv, all)");
    }
    if (std::find(o.collectives.begin(), o.collectives.end(), *op) == o.collectives.end()) o.collectives.push_back(*op);
  }
  if (o.collectives.empty()) throw std::invalid_argument("--ops: no collective given");

  o.redops = split_list(o.redops);
  if (o.redops.empty()) throw std::invalid_argument("--op: no reduction operator given");
  for (const auto& r : o.redops) {
    static const std::vector<std::string> known = {"sum", "prod", "max", "min", "avg"};
    if (std::find(known.begin(), known.end(), r) == known.end()) {
      throw std::invalid_argument("--op: unknown reduction operator '" + r + "' (sum, prod, max, min, avg)");
    }
  }

  o.groups = split_list(o.groups);
  if (o.groups.empty()) throw std::invalid_argument("--groups: no group given");
  for (const auto& g : o.groups) {
    if (std::find(group_names().begin(), group_names().end(), g) == group_names().end()) {
      throw std::invalid_argument("--groups: unknown group '" + g + "' (all, node, pair-intra, one-per-node, rail, self)");
    }
  }

  if (!nccl_tests_type_size(o.dtype)) {
    throw std::invalid_argument("-d: unknown data type '" + o.dtype +
                                "' (int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, "
                                "f8e4m3, f8e5m2)");
  }
  if (o.root < 0) throw std::invalid_argument("-r: the root must not be negative");

  if (o.placement == "both") {
    o.in_place_modes = {false, true};
  } else if (o.placement == "out") {
    o.in_place_modes = {false};
  } else if (o.placement == "in") {
    o.in_place_modes = {true};
  } else {
    throw std::invalid_argument("--placement: out, in or both, not '" + o.placement + "'");
  }
}

}  // namespace parallax::harness
