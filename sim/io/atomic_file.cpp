#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include "io/input_error.h"

namespace parallax {

// An output that cannot be written is the user's to fix (a missing folder, a directory, no
// permission): InputError naming the path, exit 2, and nothing left half-written.
void write_file_atomically(const std::string& path, const std::string& content) {
  if (path.empty()) throw InputError("", "", "an output file needs a name (the path given is empty)");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path, "", "is a directory, not a file to write");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", std::string("cannot be written: ") + std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      const int error = errno;
      out.close();
      std::remove(tmp.c_str());
      throw InputError(path, "", std::string("write failed: ") + std::strerror(error));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw InputError(path, "", std::string("cannot be replaced: ") + std::strerror(error));
  }
}

}  // namespace parallax
