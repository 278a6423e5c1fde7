// Entry point of the `parallax` command line. Errors are reported here, once: bad input
// (InputError, unit errors, bad arguments) exits 2 with a one-line message; an internal
// invariant failure exits 70; anything else exits 1.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "engine/invariant.h"
#include "io/input_error.h"
#include "parallax/commands.h"

int main(int argc, char** argv) {
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
    std::fprintf(stderr, "parallax: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const parallax::InputError& e) {
    std::fprintf(stderr, "parallax: error: %s\n", e.what());
    return 2;
  } catch (const parallax::InternalError& e) {
    std::fprintf(stderr, "parallax: %s\n", e.what());
    return 70;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parallax: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
