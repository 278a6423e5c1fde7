// Entry point of the `parallax` command line. Errors are reported here, once, on one line with
// control characters escaped (an input string may hold a newline): bad input (InputError, bad
// arguments) and a job too large for this machine's memory exit 2; a failed invariant or any
// other exception is a bug in Parallax and exits 70 as an internal error, with what to report.
#include <cstdio>
#include <new>
#include <string>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "engine/invariant.h"
#include "io/input_error.h"
#include "parallax/commands.h"

namespace {

constexpr const char* kReport =
    " (a bug in Parallax: please report it with the command line and the input files it read)";

// One line whatever the message holds: control characters and DEL as C escapes.
std::string one_line(const char* message) {
  std::string out;
  for (const char* c = message; *c; ++c) {
    const auto byte = static_cast<unsigned char>(*c);
    if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += *c;
    }
  }
  return out;
}

int report(const char* prefix, const char* message, const char* suffix, int code) {
  std::fprintf(stderr, "parallax: %s%s%s\n", prefix, one_line(message).c_str(), suffix);
  return code;
}

// A search or a validation builds and frees one simulation after another; glibc would hand the
// freed top of the heap back to the kernel each time and fault it in again for the next (about
// 6% of a search's time). Keep up to 256 MiB of it, and grow the heap 64 MiB at a time.
void keep_freed_heap() {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_heap();
  CLI::App app{"Parallax: a discrete-event simulator of GPU clusters for distributed deep learning"};
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log progress and details to stderr");
  app.set_version_flag("--version", "parallax 0.1.0");
  parallax::cli::add_topo_command(app);
  parallax::cli::add_flows_command(app);
  parallax::cli::add_collective_command(app);
  parallax::cli::add_calibrate_command(app);
  parallax::cli::add_train_command(app);
  parallax::cli::add_validate_command(app);
  parallax::cli::add_search_command(app);
  parallax::cli::add_serve_command(app);
  app.parse_complete_callback([&] {
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
    spdlog::set_pattern("[%l] %v");
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report("error: ", e.what(), " (see --help)", 2);
  } catch (const parallax::InputError& e) {
    return report("error: ", e.what(), "", 2);
  } catch (const std::bad_alloc&) {
    return report("error: ", "not enough memory for this simulation on this machine", "", 2);
  } catch (const parallax::InternalError& e) {
    return report("", e.what(), kReport, 70);
  } catch (const std::exception& e) {
    return report("internal error: ", e.what(), kReport, 70);
  }
  return 0;
}
