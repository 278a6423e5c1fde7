// The one exception type for bad user input: it carries the file, the JSON pointer of the
// offending value and the reason, and prints as "file: /json/pointer: reason". Thrown only
// while loading and validating inputs; caught once in the CLI's main.
#pragma once

#include <stdexcept>
#include <string>

namespace parallax {

class InputError : public std::runtime_error {
 public:
  /// `file` may be empty (input not from a file); `pointer` may be empty (whole document).
  InputError(std::string file, std::string pointer, std::string reason)
      : std::runtime_error(compose(file, pointer, reason)),
        file_(std::move(file)), pointer_(std::move(pointer)), reason_(std::move(reason)) {}

  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }
  const std::string& reason() const { return reason_; }

 private:
  static std::string compose(const std::string& file, const std::string& pointer,
                             const std::string& reason) {
    std::string out;
    if (!file.empty()) out += file + ": ";
    if (!pointer.empty()) out += pointer + ": ";
    return out + reason;
  }
  std::string file_, pointer_, reason_;
};

}  // namespace parallax
