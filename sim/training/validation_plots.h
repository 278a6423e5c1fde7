// `parallax validate --plot`: the data and gnuplot scripts of its two figures. The parity plot
// puts every compared row at (published, predicted) tokens/s per GPU, one colour per source,
// with y = x and a ±10% band; with --fit-sustained-fraction, the fit's curve is each source's
// MAPE against σ beside the whole set's, the fitted σ marked.
#pragma once

#include <string>
#include <vector>

#include "training/published_runs.h"
#include "training/run_validation.h"
#include "training/constant_fit.h"

namespace parallax {

/// The parity plot's data: one gnuplot data block (index) per source of `row_sources`, in
/// name order, each line "published predicted" for a compared row (not published as out of
/// memory, simulated). `groups` receives the block names in that order.
std::string parity_data(const std::vector<PublishedRun>& runs, const std::vector<RunPrediction>& predictions,
                        const std::vector<std::string>& row_sources, std::vector<std::string>& groups);
std::string parity_script(const std::string& data_file, const std::string& png, const std::string& title,
                          const std::vector<std::string>& groups);

/// The fit's curve: per grid value a line "value MAPE(all) MAPE(source 1) …", sources as in
/// fit.sources. `axis` names the constant on the plot's x axis ("sustained fraction (sigma)").
std::string constant_fit_data(const ConstantSweep& sweep, const ConstantFit& fit);
std::string constant_fit_script(const std::string& data_file, const std::string& png, const std::string& title,
                                const std::string& axis, const ConstantFit& fit);

}  // namespace parallax
