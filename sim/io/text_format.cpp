// printf-style formatting into a std::string (text_format.h).
#include "io/text_format.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace parallax {

std::string format_text(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::max(0, std::vsnprintf(nullptr, 0, fmt, copy));
  va_end(copy);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, args);
  va_end(args);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string gnuplot_text(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace parallax
