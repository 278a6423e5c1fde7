// printf-style formatting into a std::string, for the report writers of the libraries.
#pragma once

#include <string>

namespace parallax {

std::string format_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// `text` inside a gnuplot double-quoted string: its backslashes and double quotes escaped (a
/// model's or a pool's name can hold either).
std::string gnuplot_text(const std::string& text);

}  // namespace parallax
