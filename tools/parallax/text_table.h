// Plain-text tables for the terminal: columns sized to their widest cell, numbers right-aligned.
#pragma once

#include <string>
#include <vector>

namespace parallax::cli {

class TextTable {
 public:
  enum class Align { kLeft, kRight };
  explicit TextTable(std::vector<std::string> headers, std::vector<Align> align = {});
  void add_row(std::vector<std::string> cells);
  /// Renders with `indent` spaces before each line and two spaces between columns.
  std::string render(int indent = 2) const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

/// printf-style formatting into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace parallax::cli
