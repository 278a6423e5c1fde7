// What every fuzz target shares: the input as a file where the parser reads files, and the
// rule that a parser may refuse an input only with InputError (the CLI's exit 2); any other
// exception, like a crash, a hang or a sanitizer report, is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "io/input_error.h"

namespace parallax::fuzz {

// Runs `parse`; an InputError is an answer, anything else aborts with what it was.
template <class Parse>
void only_input_errors(Parse parse) {
  try {
    parse();
  } catch (const InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: not an InputError: %s\n", e.what());
    std::abort();
  }
}

// The input written to this process's own scratch file, with `suffix` (parsers that look at
// the extension), for the parsers that take a path.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& suffix = ".json") {
  const std::string path = "/tmp/parallax-fuzz-" + std::to_string(::getpid()) + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                               static_cast<std::streamsize>(size));
  return path;
}

inline std::string as_text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

}  // namespace parallax::fuzz
