// Resume, repair and appends of the measurement file (measurement_log.h).
#include "harness/measurement_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace parallax::harness {
namespace {

std::string text_field(const nlohmann::json& j, const char* name, const char* fallback) {
  auto it = j.find(name);
  if (it == j.end()) return fallback;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string number_field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() ? "?" : it->dump();
}

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

}  // namespace

std::string measurement_key(const nlohmann::json& line) {
  if (!line.is_object()) return "";
  const std::string kind = text_field(line, "kind", "");
  if (kind == "collective") {
    return kind + "|" + text_field(line, "op", "?") + "|" + text_field(line, "group", "all") + "|" +
           number_field(line, "ranks") + "|" + number_field(line, "size_bytes") + "|" +
           text_field(line, "dtype", "float") + "|" + text_field(line, "redop", "none") + "|" +
           text_field(line, "algo", "auto") + "|" + text_field(line, "proto", "auto") + "|" +
           text_field(line, "in_place", "false");
  }
  if (kind == "gemm") {
    // batch and fast_accum were added later; a line without them is the single, precise product.
    return kind + "|" + text_field(line, "dtype", "?") + "|" + number_field(line, "m") + "|" +
           number_field(line, "n") + "|" + number_field(line, "k") + "|" + text_field(line, "batch", "1") + "|" +
           text_field(line, "fast_accum", "false");
  }
  if (kind == "memcpy") return kind + "|" + text_field(line, "what", "?") + "|" + number_field(line, "size_bytes");
  return "";
}

MeasurementLog::MeasurementLog(const std::string& path, std::ostream& notes) : path_(path) {
  // Locked before it is read: a killed job's rank 0 may outlive its launcher for a while and
  // still append, and a second run reading meanwhile would measure its points again.
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, std::string("cannot open for appending: ") + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    ::close(fd_);
    fd_ = -1;
    if (why == EWOULDBLOCK) {
      fail(path, "another run is still writing to this file (the ranks of a killed job can take a while to exit); "
                 "wait for it to end, or stop it, then run again");
    }
    fail(path, std::string("cannot lock: ") + std::strerror(why));
  }
  try {
    resume(notes);
  } catch (...) {
    ::close(fd_);  // and with it the lock: the caller may fix the file and open it again
    fd_ = -1;
    throw;
  }
}

void MeasurementLog::resume(std::ostream& notes) {
  const std::string& path = path_;
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream buffer;
      buffer << in.rdbuf();
      if (in.bad()) fail(path, "read failed");
      text = buffer.str();
    }
  }
  // Lines up to the last newline are complete; what follows it was cut by a killed run.
  size_t keep = text.size();
  const size_t last_newline = text.rfind('\n');
  const size_t complete_end = last_newline == std::string::npos ? 0 : last_newline + 1;
  if (complete_end < text.size()) {
    notes << path << ": dropping a partial last line (" << text.size() - complete_end
          << " bytes without a newline, from an interrupted run)\n";
    keep = complete_end;
  }
  size_t line_no = 0;
  size_t start = 0;
  while (start < complete_end) {
    const size_t end = text.find('\n', start);
    ++line_no;
    const std::string line = text.substr(start, end - start);
    const bool last = end + 1 == complete_end;
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        if (!last) {
          fail(path + ":" + std::to_string(line_no),
               "does not parse as a JSON object; fix or remove that line (or start a new file) before resuming");
        }
        notes << path << ":" << line_no << ": dropping a last line that does not parse (from an interrupted run)\n";
        keep = start;
        break;
      }
      const std::string key = measurement_key(j);
      if (!key.empty()) {
        ++resumed_;
        done_.emplace(key, std::move(j));
      }
    }
    start = end + 1;
  }
  if (keep < text.size() && ::ftruncate(fd_, static_cast<off_t>(keep)) != 0) {
    fail(path, std::string("cannot drop the partial last line: ") + std::strerror(errno));
  }
}

MeasurementLog::~MeasurementLog() {
  if (fd_ >= 0) ::close(fd_);
}

const nlohmann::json* MeasurementLog::find(const std::string& key) const {
  auto it = done_.find(key);
  return it == done_.end() ? nullptr : &it->second;
}

void MeasurementLog::append(const nlohmann::ordered_json& line) {
  const std::string text = line.dump() + "\n";
  // O_APPEND writes of a regular file are not split by other writers; a short write happens only
  // when the disk fills, and then the rest is tried once more so that the error is reported.
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path_, std::string("write failed: ") + std::strerror(errno));
    }
    written += static_cast<size_t>(n);
  }
  nlohmann::json plain = nlohmann::json::parse(text);
  const std::string key = measurement_key(plain);
  if (!key.empty()) done_.emplace(key, std::move(plain));
}

}  // namespace parallax::harness
