// A ModelConfig written back as the workloads' own model block (model_loader.h, form 2): the
// inverse of model_from_block, so that a model read from anywhere (a Hugging Face config, a
// validation row) can be saved into a workload that `parallax train` reads back unchanged.
#pragma once

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace parallax {

/// Every key that shapes cost, defaults included, in model_loader.h's order; `source` is not
/// written (a file name, not a property of the model).
nlohmann::ordered_json model_block(const ModelConfig& model);

}  // namespace parallax
