// Published engine-step measurements against the step model (step_validation.h).
#include "serving/step_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "io/json_reader.h"
#include "model/model_loader.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

double step_ms(const StepModel& m, const RaggedBatch& b) { return m.step(b).total.seconds() * 1e3; }

RaggedBatch prompts(int batch, int64_t length) {
  RaggedBatch b;
  for (int i = 0; i < batch; ++i) b.sequences.push_back({length, length, true});
  return b;
}

RaggedBatch decodes(int batch, int64_t context) {
  RaggedBatch b;
  for (int i = 0; i < batch; ++i) b.sequences.push_back({1, context, true});
  return b;
}

double predict(const StepModel& m, const StepRun& r) {
  if (r.kind == "prefill") return step_ms(m, prompts(r.batch, r.length));
  if (r.kind == "decode") return step_ms(m, decodes(r.batch, r.length));
  // request: the prefill, then the decode steps, the context growing by one each
  double total = step_ms(m, prompts(r.batch, r.length));
  for (int64_t t = 1; t < r.output; ++t) total += step_ms(m, decodes(r.batch, r.length + t));
  return total;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<StepRun> load_step_runs(const std::string& path) {
  const nlohmann::json doc = load_json_file(path);
  JsonReader root(doc, path);
  std::vector<StepRun> out;
  for (JsonReader row : root.at("runs").elements()) {
    StepRun r;
    r.id = row.at("id").as_string();
    r.source = row.at("source").as_string();
    r.model = row.at("model").as_string();
    r.topology = row.at("topology").as_string();
    r.tp = static_cast<int>(row.at("tp").as_int());
    if (r.tp < 1 || r.tp > 1024) row.at("tp").fail("must be between 1 and 1024");
    const std::string dtype = row.at("dtype").as_string();
    if (dtype != "bf16" && dtype != "fp8") row.at("dtype").fail("\"bf16\" (fp16 too) or \"fp8\"");
    r.dtype = dtype == "fp8" ? DType::kFp8 : DType::kBf16;
    r.kind = row.at("kind").as_string();
    if (r.kind != "prefill" && r.kind != "decode" && r.kind != "request") {
      row.at("kind").fail("\"prefill\", \"decode\" or \"request\"");
    }
    r.batch = static_cast<int>(row.at("batch").as_int());
    if (r.batch < 1 || r.batch > 4096) row.at("batch").fail("must be between 1 and 4096");
    r.length = row.at("length").as_int();
    if (r.length < 1 || r.length > 1000000) row.at("length").fail("must be between 1 and 1000000");
    if (r.kind == "request") {
      r.output = row.at("output").as_int();
      if (r.output < 1 || r.output > 100000) row.at("output").fail("must be between 1 and 100000");
    }
    r.measured_ms = row.at("measured_ms").as_number();
    if (!(r.measured_ms > 0 && r.measured_ms < 1e9)) row.at("measured_ms").fail("must be a positive time in ms");
    if (auto note = row.find("note")) note->as_string();
    row.finish();
    out.push_back(std::move(r));
  }
  if (auto d = root.find("description")) d->as_string();
  root.finish();
  return out;
}

std::vector<StepRunResult> predict_step_runs(const std::vector<StepRun>& runs, const std::string& models_dir,
                                             const std::string& topologies_dir, const StepModelOptions& options) {
  std::map<std::string, Topology> topologies;
  std::vector<StepRunResult> out;
  for (const StepRun& r : runs) {
    StepRunResult res;
    res.run = r;
    try {
      const ModelConfig model = load_bundled_model(models_dir, r.model);
      auto it = topologies.find(r.topology);
      if (it == topologies.end()) {
        it = topologies.emplace(r.topology, load_topology(topologies_dir + "/" + r.topology + ".json")).first;
      }
      StepModelOptions o = options;
      o.dtype = r.dtype;
      const StepModel m(model, it->second, InstanceShape{r.tp, 1}, o);
      res.predicted_ms = predict(m, r);
      res.error = (res.predicted_ms - r.measured_ms) / r.measured_ms;
    } catch (const std::exception& e) {
      res.error_message = e.what();
    }
    out.push_back(std::move(res));
  }
  return out;
}

nlohmann::ordered_json step_validation_json(const std::vector<StepRunResult>& results) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const StepRunResult& r : results) {
    nlohmann::ordered_json row{{"id", r.run.id}, {"source", r.run.source}, {"measured_ms", r.run.measured_ms}};
    if (r.error_message.empty()) {
      row["predicted_ms"] = r.predicted_ms;
      row["error"] = r.error;
    } else {
      row["error_message"] = r.error_message;
    }
    j.push_back(std::move(row));
  }
  return j;
}

std::string step_validation_text(const std::vector<StepRunResult>& results) {
  std::string out = "  row                          model        GPU          tp  what                      measured  predicted   error\n";
  std::map<std::string, std::vector<double>> by_source;
  std::vector<double> all;
  char buf[320];
  for (const StepRunResult& r : results) {
    const StepRun& x = r.run;
    std::string what = x.kind + " " + std::to_string(x.batch) + (x.kind == "decode" ? " @ctx " : "x") +
                       std::to_string(x.length) + (x.kind == "request" ? "+" + std::to_string(x.output) : "");
    if (!r.error_message.empty()) {
      std::snprintf(buf, sizeof buf, "  %-28s %-12s %-12s %2d  %-24s %8.1fms  not predicted: %s\n", x.id.c_str(),
                    x.model.c_str(), x.topology.c_str(), x.tp, what.c_str(), x.measured_ms, r.error_message.c_str());
      out += buf;
      continue;
    }
    std::snprintf(buf, sizeof buf, "  %-28s %-12s %-12s %2d  %-24s %8.1fms %8.1fms  %+6.1f%%\n", x.id.c_str(),
                  x.model.c_str(), x.topology.c_str(), x.tp, what.c_str(), x.measured_ms, r.predicted_ms, 100 * r.error);
    out += buf;
    by_source[x.source].push_back(r.error);
    all.push_back(r.error);
  }
  auto line = [&](const std::string& name, const std::vector<double>& errors) {
    double abs_sum = 0;
    for (double e : errors) abs_sum += std::abs(e);
    std::snprintf(buf, sizeof buf, "  %-40s %3zu rows: mean |error| %5.1f%%, signed median %+6.1f%%\n", name.c_str(),
                  errors.size(), errors.empty() ? 0.0 : 100 * abs_sum / static_cast<double>(errors.size()),
                  100 * median(errors));
    out += buf;
  };
  out += "\n";
  for (const auto& [source, errors] : by_source) line(source, errors);
  line("all", all);
  return out;
}

}  // namespace parallax
