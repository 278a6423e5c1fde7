// Output files are written whole or not at all: the content goes to a temporary name beside
// the target and is renamed over it only after a successful write, so a failure never leaves
// a half-written result behind.
#pragma once

#include <string>

namespace parallax {

/// Writes `content` to `path` atomically (temp file + rename). Throws InputError naming the
/// path when it is empty or a directory, its folder is missing or not writable, or the disk is full.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace parallax
