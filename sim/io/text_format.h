// printf-style formatting into a std::string, for the report writers of the libraries.
#pragma once

#include <string>

namespace parallax {

std::string format_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace parallax
