// WholeLine: a diagnostic line streamed piecewise and written in one call, so that the lines of
// ranks sharing one stderr (mpirun forwards them all to one stream) never interleave mid-line.
#pragma once

#include <ostream>
#include <sstream>
#include <string>

namespace parallax::harness {

class WholeLine {
 public:
  explicit WholeLine(std::ostream& to, const std::string& prefix = "") : to_(to) { buffer_ << prefix; }
  WholeLine(const WholeLine&) = delete;
  WholeLine& operator=(const WholeLine&) = delete;
  ~WholeLine() {
    const std::string line = buffer_.str();
    to_.write(line.data(), static_cast<std::streamsize>(line.size()));
    to_.flush();
  }

  template <class T>
  WholeLine& operator<<(const T& value) {
    buffer_ << value;
    return *this;
  }

 private:
  std::ostream& to_;
  std::ostringstream buffer_;
};

}  // namespace parallax::harness
