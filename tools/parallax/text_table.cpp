#include "parallax/text_table.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace parallax::cli {

TextTable::TextTable(std::vector<std::string> headers, std::vector<Align> align)
    : headers_(std::move(headers)), align_(std::move(align)) {
  align_.resize(headers_.size(), Align::kLeft);
}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::render(int indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s(static_cast<size_t>(indent), ' ');
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      s += align_[c] == Align::kRight ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
      if (c + 1 < cells.size()) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out += s + "\n";
  };
  line(headers_);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return std::string(buf, static_cast<size_t>(std::max(n, 0)));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.pop_back();
  return big;
}

}  // namespace parallax::cli
