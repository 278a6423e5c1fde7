// The JSON-lines measurement file of calibrate/FORMAT.md, opened for appending and locked: resume
// (what is already measured), repair (a partial last line left by a killed run) and durable appends (one
// write(2) per complete line, so a crash can cut at most the line being written).
#pragma once

#include <cstddef>
#include <map>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace parallax::harness {

/// The resume key of a measurement line: its kind and the fields that name the point —
/// collective: op, group, ranks, size_bytes, dtype, redop, algo, proto, in_place;
/// gemm: dtype, m, n, k; memcpy: what, size_bytes. Empty for other kinds (meta, unknown).
/// Missing fields take the harness's own defaults, so a key never throws.
std::string measurement_key(const nlohmann::json& line);

/// An append-only measurement file.
class MeasurementLog {
 public:
  /// Opens `path` for appending, creating it if absent, and takes an exclusive lock on it for
  /// as long as the log lives: a second run on the same file (or a killed job's rank that is
  /// still writing) is refused with std::runtime_error naming the path. The file is then read: blank
  /// lines are skipped, the key and value of every measurement line are kept, and a last line
  /// that lacks its newline or does not parse (a run killed mid-write) is dropped by
  /// truncating the file after the previous newline; `notes` is told. Throws
  /// std::runtime_error naming "path:line" for any earlier line that does not parse (appending
  /// after it would hide it from readers, which stop there), and naming the path when the file
  /// cannot be read, truncated or opened.
  MeasurementLog(const std::string& path, std::ostream& notes);
  ~MeasurementLog();
  MeasurementLog(const MeasurementLog&) = delete;
  MeasurementLog& operator=(const MeasurementLog&) = delete;

  /// The line already in the file under `key`, or nullptr (the first one when repeated).
  const nlohmann::json* find(const std::string& key) const;
  /// Measurement lines read at open.
  size_t resumed() const { return resumed_; }
  const std::string& path() const { return path_; }

  /// Appends `line` as one '\n'-terminated write and remembers its key. Throws
  /// std::runtime_error naming the path if the write fails (disk full, ...).
  void append(const nlohmann::ordered_json& line);

 private:
  std::string path_;
  int fd_ = -1;
  size_t resumed_ = 0;
  std::map<std::string, nlohmann::json> done_;

  void resume(std::ostream& notes);
};

}  // namespace parallax::harness
