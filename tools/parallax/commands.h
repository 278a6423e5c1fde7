// The subcommands of `parallax`: each registers its options on the CLI11 app and runs.
#pragma once

#include <CLI/CLI.hpp>

namespace parallax::cli {

/// `parallax topo show FILE [--nodes N] [--dot FILE] [--json FILE]`
void add_topo_command(CLI::App& app);
/// `parallax flows --topology FILE --flows FILE [--model NAME] [--nodes N] [--json FILE]`
void add_flows_command(CLI::App& app);
/// `parallax collective --topology FILE [--op OP] [--gpus G] [-b MIN -e MAX -f F] [--compare LOG] ...`
void add_collective_command(CLI::App& app);
/// `parallax calibrate fit|compare MEASUREMENTS... --topology FILE [-o FILE] [--plot DIR] ...`
void add_calibrate_command(CLI::App& app);
/// `parallax train WORKLOAD.json [--tp N --pp N ...]`
void add_train_command(CLI::App& app);
/// `parallax validate RUNS.json [--fit-sustained-fraction | --fit-host-dispatch] [--plot DIR] ...`
void add_validate_command(CLI::App& app);
/// `parallax search` (the best parallel layouts of a training job) and `parallax scale` (its
/// data-parallel strategies over GPU counts).
void add_search_command(CLI::App& app);
/// `parallax serve step --model M --topology T --tp N [--pp N] (--prefill LENxBATCH | --decode B --context L)`
void add_serve_command(CLI::App& app);

}  // namespace parallax::cli
