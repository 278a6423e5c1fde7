// Reading nccl-tests logs and printing tables in their layout; the format is described in
// nccl_tests_log.h and shared/reference/nccl-cost-model.md §3.
#include "collectives/nccl_tests_log.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "io/input_error.h"

namespace parallax {
namespace {

// ---------------------------------------------------------------------------------------------
// Tokens and numbers

struct Token {
  std::string_view text;
  size_t begin = 0;  // offsets in the line, so a blank block can be told from a missing one
  size_t end = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

std::vector<Token> tokenize(std::string_view line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    out.push_back(Token{line.substr(i, j - i), i, j});
    i = j;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

bool parse_double(std::string_view s, double& out) {
  if (s.empty()) return false;
  const char* first = s.data();
  if (*first == '+') ++first;  // from_chars rejects a leading '+'
  auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Sizes and counts are "%li", but some forks print them "%e"; both are accepted.
bool parse_size(std::string_view s, int64_t& out) {
  if (parse_int(s, out)) return out >= 0;
  if (s.find_first_of(".eE") == std::string_view::npos) return false;
  double d = 0;
  if (!parse_double(s, d) || !std::isfinite(d) || d < 0 || d > 9.2e18) return false;
  out = std::llround(d);
  return true;
}

// A count stated in prose; absurd values are dropped rather than trusted.
std::optional<int> small_int(const std::string& digits) {
  int64_t v = 0;
  if (!parse_int(digits, v) || v < 1 || v > 10'000'000) return std::nullopt;
  return static_cast<int>(v);
}

bool is_word(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// Columns are separated by 2-8 spaces; a gap this wide before a row's only block is the
// out-of-place block printed blank (nccl-tests prints 32 spaces), so the block is in-place.
constexpr size_t kBlankBlockGap = 24;

// "[1,0]<stdout>:" (mpirun --tag-output) and "0: " (srun -l) prefixes hide the row's shape.
std::string_view strip_launcher_prefix(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!line.empty() && line[0] == '[') {
    for (std::string_view tag : {"]<stdout>:", "]<stderr>:"}) {
      size_t at = line.find(tag);
      if (at != std::string_view::npos && at < 24) return line.substr(at + tag.size());
    }
    return line;
  }
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  size_t digits = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i > digits && i + 1 < line.size() && line[i] == ':' && (line[i + 1] == ' ' || line[i + 1] == '\t')) {
    return line.substr(i + 2);
  }
  return line;
}

// ---------------------------------------------------------------------------------------------
// Table shape: which column is which, from the column header or guessed from a row

enum class Col { kSize, kCount, kType, kRedop, kRoot, kRedopOrRoot };

struct Shape {
  std::vector<Col> prefix;
  std::vector<std::string> prefix_names;
  std::vector<std::string> block_names;  // time first; algbw, busbw, #wrong/error and extras
  size_t algbw_at = 1, busbw_at = 2, wrong_at = 3;
  int blocks = 2;                         // blocks named by the header
  std::vector<std::string> trailing;      // columns after the last block
  size_t trailing_tokens = 0;             // a timestamp is two tokens (date and time)
  NcclTestsLayout layout = NcclTestsLayout::kCurrent;

  size_t block_width() const { return block_names.size(); }

  std::string describe() const {
    std::string out;
    for (const auto& n : prefix_names) out += (out.empty() ? "" : " ") + n;
    std::string block;
    for (const auto& n : block_names) block += (block.empty() ? "" : " ") + n;
    out += ", then " + block + (blocks == 2 ? " for out-of-place and for in-place" : "");
    for (const auto& n : trailing) out += ", " + n;
    return out;
  }
};

std::optional<Col> prefix_column(std::string_view name) {
  if (name == "size") return Col::kSize;
  if (name == "count") return Col::kCount;
  if (name == "type") return Col::kType;
  if (name == "redop") return Col::kRedop;
  if (name == "root") return Col::kRoot;
  return std::nullopt;
}

bool is_time_column(std::string_view name) { return name == "time" || name == "cputime"; }

// `names` are the header's words without the leading '#'.
std::optional<Shape> shape_from_header(const std::vector<std::string_view>& names) {
  if (names.size() < 4 || names[0] != "size" || names[1] != "count") return std::nullopt;
  auto first = std::find_if(names.begin(), names.end(), is_time_column);
  if (first == names.end()) return std::nullopt;
  Shape s;
  bool has_root = false;
  for (auto it = names.begin(); it != first; ++it) {
    auto col = prefix_column(*it);
    if (!col) return std::nullopt;
    has_root = has_root || *col == Col::kRoot;
    s.prefix.push_back(*col);
    s.prefix_names.emplace_back(*it);
  }
  auto second = std::find_if(first + 1, names.end(), is_time_column);
  s.blocks = second == names.end() ? 1 : 2;
  auto block_end = second == names.end() ? names.end() : second;
  s.block_names.assign(first, block_end);
  auto index_of = [&](std::initializer_list<std::string_view> wanted) -> std::optional<size_t> {
    for (size_t i = 0; i < s.block_names.size(); ++i) {
      for (auto w : wanted) {
        if (s.block_names[i] == w) return i;
      }
    }
    return std::nullopt;
  };
  auto algbw = index_of({"algbw"});
  auto busbw = index_of({"busbw"});
  auto wrong = index_of({"#wrong", "wrong", "error"});
  if (!algbw || !busbw || !wrong) return std::nullopt;
  s.algbw_at = *algbw;
  s.busbw_at = *busbw;
  s.wrong_at = *wrong;
  if (s.blocks == 2) {
    if (static_cast<size_t>(names.end() - second) < s.block_width() ||
        !std::equal(s.block_names.begin(), s.block_names.end(), second)) {
      return std::nullopt;
    }
    for (auto it = second + static_cast<std::ptrdiff_t>(s.block_width()); it != names.end(); ++it) {
      s.trailing.emplace_back(*it);
      s.trailing_tokens += *it == "timestamp" ? 2 : 1;
    }
  }
  s.layout = (s.block_names[s.wrong_at] == "error" || !has_root) ? NcclTestsLayout::kLegacy
                                                                   : NcclTestsLayout::kCurrent;
  return s;
}

// Without a column header the field count tells the generation: 13 (or 9 with one block) since
// 2022, 21 with `-I 1`, 12 (or 8) before 2022.
std::optional<Shape> shape_from_field_count(size_t n) {
  Shape s;
  const std::vector<std::string> current_block = {"time", "algbw", "busbw", "#wrong"};
  if (n == 13 || n == 9 || n == 21) {
    s.prefix = {Col::kSize, Col::kCount, Col::kType, Col::kRedop, Col::kRoot};
    s.prefix_names = {"size", "count", "type", "redop", "root"};
    s.block_names = current_block;
    if (n == 21) s.block_names.insert(s.block_names.end(), {"i_min", "i_max", "i_p99", "i_cv%"});
    return s;
  }
  if (n == 12 || n == 8) {
    // Legacy broadcast printed the root where the others print the redop.
    s.prefix = {Col::kSize, Col::kCount, Col::kType, Col::kRedopOrRoot};
    s.prefix_names = {"size", "count", "type", "redop"};
    s.block_names = {"time", "algbw", "busbw", "error"};
    s.layout = NcclTestsLayout::kLegacy;
    return s;
  }
  return std::nullopt;
}

bool looks_like_row(const std::vector<Token>& t) {
  int64_t ignored = 0;
  return t.size() >= 3 && parse_size(t[0].text, ignored) && parse_size(t[1].text, ignored) && is_word(t[2].text);
}

// ---------------------------------------------------------------------------------------------
// The parser

class LogParser {
 public:
  LogParser(std::string_view text, const std::string& source) : text_(text) { log_.source = source; }

  NcclTestsLog run() {
    size_t pos = 0;
    while (pos < text_.size()) {
      size_t nl = text_.find('\n', pos);
      if (nl == std::string_view::npos) nl = text_.size();
      ++line_no_;
      read_line(strip_launcher_prefix(text_.substr(pos, nl - pos)));
      pos = nl + 1;
    }
    if (log_.rows.empty()) {
      fail_at(std::max(line_no_, 1),
              "no nccl-tests data rows (lines such as '   1048576   262144   float   sum   -1   …') in " +
                  std::to_string(line_no_) + " line" + (line_no_ == 1 ? "" : "s"));
    }
    finish();
    return std::move(log_);
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& reason) const {
    throw InputError(log_.source, "line " + std::to_string(line), reason);
  }
  [[noreturn]] void fail(const std::string& reason) const { fail_at(line_no_, reason); }

  void read_line(std::string_view line) {
    const std::vector<Token> t = tokenize(line);
    if (t.empty()) return;
    if (t[0].text[0] == '#') {
      read_comment(line, t);
      return;
    }
    if (t.size() >= 2 && t[0].text == "size" && t[1].text == "count") {
      // A column header someone copied without its '#'.
      std::vector<std::string_view> names;
      for (const auto& tok : t) names.push_back(tok.text);
      if (auto s = shape_from_header(names)) shape_ = s;
      return;
    }
    if (looks_like_row(t)) {
      read_row(t);
      return;
    }
    read_hints(line, /*comment=*/false);
  }

  void read_comment(std::string_view line, const std::vector<Token>& t) {
    // Words after the '#', whether or not it stands apart ("#  Rank" or "#Rank").
    std::vector<std::string_view> words;
    if (t[0].text.size() > 1) words.push_back(t[0].text.substr(1));
    for (size_t i = 1; i < t.size(); ++i) words.push_back(t[i].text);
    if (words.empty()) return;

    if (words.size() >= 3 && words[0] == "Collective" && words[1] == "test" && words[2] == "starting:") {
      note_run_start(runs_started_);
      if (words.size() >= 4) op_started_ = parse_op(words[3]);
      return;
    }
    if (words[0] == "nThread") {
      note_run_start(nthread_lines_);
      return;
    }
    if (words[0] == "Rank" && read_device(line, t)) return;
    if (words.size() >= 2 && words[0] == "size" && words[1] == "count") {
      if (auto s = shape_from_header(words)) shape_ = s;
      return;
    }
    read_hints(line, /*comment=*/true);
  }

  // One log holds one run; two would mix devices, sizes and possibly operations.
  void note_run_start(int& counter) {
    if (++counter > 1) {
      fail("a second nccl-tests run starts here; give one run per log (split the file)");
    }
  }

  // "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" and the older forms
  // without "Group" or with "[0x%02x]". Anything else starting "# Rank" is just a comment.
  bool read_device(std::string_view line, const std::vector<Token>& t) {
    size_t i = t[0].text == "#" ? 1 : 0;
    if (i + 1 >= t.size()) return false;
    int64_t rank = 0, device = 0;
    if (!parse_int(t[i + 1].text, rank)) return false;
    size_t on = i + 2;
    while (on < t.size() && t[on].text != "on") ++on;
    if (on + 3 >= t.size() || t[on + 2].text != "device" || !parse_int(t[on + 3].text, device)) return false;
    NcclTestsDevice d;
    d.rank = static_cast<int>(rank);
    d.host = std::string(t[on + 1].text);
    d.device = static_cast<int>(device);
    size_t name_from = t[on + 3].end;
    if (on + 4 < t.size() && t[on + 4].text[0] == '[') {
      size_t close = line.find(']', t[on + 4].begin);
      if (close != std::string_view::npos) {
        d.bus_id = std::string(line.substr(t[on + 4].begin + 1, close - t[on + 4].begin - 1));
        name_from = close + 1;
      }
    }
    d.name = trim(line.substr(std::min(name_from, line.size())));
    log_.devices.push_back(std::move(d));
    return true;
  }

  void read_row(const std::vector<Token>& t) {
    if (!shape_) {
      shape_ = shape_from_field_count(t.size());
      if (!shape_) {
        fail("a data row with " + std::to_string(t.size()) +
             " fields, and no column header line ('#  size  count  type …') to say which is which");
      }
    }
    const Shape& s = *shape_;
    const size_t p = s.prefix.size(), b = s.block_width(), n = t.size();
    int blocks = 0;
    size_t trailing_at = n;
    if (s.blocks == 2 && (n == p + 2 * b + s.trailing_tokens || n == p + 2 * b)) {
      blocks = 2;
      trailing_at = p + 2 * b;
    } else if (n == p + b || (s.trailing_tokens > 0 && n == p + b + s.trailing_tokens)) {
      blocks = 1;
      trailing_at = p + b;
    } else {
      const size_t expected = p + static_cast<size_t>(s.blocks) * b + s.trailing_tokens;
      fail("data row has " + std::to_string(n) + " fields; expected " + std::to_string(expected) + " (" +
           s.describe() + ")");
    }

    NcclTestsRow row;
    row.line = line_no_;
    for (size_t i = 0; i < p; ++i) read_prefix_field(s.prefix[i], s.prefix_names[i], t[i].text, row);
    if (blocks == 2) {
      row.out_of_place = read_block(s, t, p, "out-of-place");
      row.in_place = read_block(s, t, p + b, "in-place");
    } else if (t[p].begin - t[p - 1].end >= kBlankBlockGap) {
      // nccl-tests prints the out-of-place block as blanks when it only runs in place.
      row.in_place = read_block(s, t, p, "in-place");
    } else {
      row.out_of_place = read_block(s, t, p, "out-of-place");
    }
    size_t k = trailing_at;
    for (const auto& name : s.trailing) {
      if (k >= n) break;
      if (name == "timestamp" && k + 1 < n) {
        row.extra.push_back(std::string(t[k].text) + " " + std::string(t[k + 1].text));
        k += 2;
      } else {
        row.extra.emplace_back(t[k++].text);
      }
    }
    if (log_.rows.empty()) {
      log_.layout = s.layout;
      log_.extra_columns = s.trailing;
    }
    log_.rows.push_back(std::move(row));
  }

  void read_prefix_field(Col col, const std::string& name, std::string_view text, NcclTestsRow& row) const {
    int64_t v = 0;
    auto bad = [&](const std::string& what) {
      fail(name + " '" + std::string(text) + "' is not " + what);
    };
    switch (col) {
      case Col::kSize:
        if (!parse_size(text, row.size_bytes)) bad("a byte count");
        return;
      case Col::kCount:
        if (!parse_size(text, row.count)) bad("an element count");
        return;
      case Col::kType:
        if (!is_word(text)) bad("a type name");
        row.type = std::string(text);
        return;
      case Col::kRedop:
        if (!is_word(text)) bad("a reduction name");
        row.redop = std::string(text);
        return;
      case Col::kRoot:
        if (!parse_int(text, v) || v < -1 || v > 1'000'000'000) bad("a root rank");
        row.root = static_cast<int>(v);
        return;
      case Col::kRedopOrRoot:
        if (parse_int(text, v) && v >= -1 && v <= 1'000'000'000) {
          row.root = static_cast<int>(v);
        } else if (is_word(text)) {
          row.redop = std::string(text);
        } else {
          bad("a reduction name or a root rank");
        }
        return;
    }
  }

  NcclTestsResult read_block(const Shape& s, const std::vector<Token>& t, size_t at, const char* which) const {
    NcclTestsResult r;
    for (size_t i = 0; i < s.block_width(); ++i) {
      std::string_view text = t[at + i].text;
      double v = 0;
      const bool number = parse_double(text, v);
      if (i == s.wrong_at) {
        if (!number && text != "N/A") {
          fail(std::string(which) + " " + s.block_names[i] + " '" + std::string(text) +
               "' is neither a number nor N/A");
        }
        r.wrong = std::string(text);
        continue;
      }
      const bool measured = i == 0 || i == s.algbw_at || i == s.busbw_at;
      if (!number && (measured || text != "N/A")) {
        fail(std::string(which) + " " + s.block_names[i] + " '" + std::string(text) + "' is not a number");
      }
      if (i == 0) r.time_us = v;
      if (i == s.algbw_at) r.algbw_gbs = v;
      if (i == s.busbw_at) r.busbw_gbs = v;
    }
    return r;
  }

  // Statements about the run outside the table: NCCL version, ranks, nodes, collective.
  void read_hints(std::string_view line, bool comment) {
    const std::string l = lower(line);
    std::smatch m;
    if (size_t at = l.find("nccl-library="); at != std::string::npos && version_from_library_.empty()) {
      int64_t code = 0;
      auto digits = tokenize(std::string_view(l).substr(at + std::strlen("nccl-library=")));
      if (!digits.empty() && parse_int(digits[0].text, code) && code > 0) {
        // NCCL_VERSION_CODE is X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before.
        const int64_t major = code >= 10000 ? code / 10000 : code / 1000;
        const int64_t minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
        version_from_library_ =
            std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
      }
    }
    if (version_from_text_.empty() && l.find("version") != std::string::npos) {
      static const std::regex version(R"(\bnccl[-_ ]?version[:= ]*v?(\d+\.\d+\.\d+))");
      if (std::regex_search(l, m, version)) version_from_text_ = m[1];
    }
    if (!ranks_hint_ && l.find("ranks") != std::string::npos) {
      static const std::regex in_comment(R"(\bn?ranks\s*[:=]?\s*(\d+))");
      static const std::regex in_output(R"(\bnranks\s+(\d+))");
      if (std::regex_search(l, m, comment ? in_comment : in_output)) ranks_hint_ = small_int(m[1].str());
    }
    if (!nodes_hint_ && l.find("node") != std::string::npos) {
      static const std::regex in_comment(R"((\d+)\s*-?\s*nodes?\b)");
      static const std::regex in_output(R"(\bnnodes\s+(\d+))");
      if (std::regex_search(l, m, comment ? in_comment : in_output)) nodes_hint_ = small_int(m[1].str());
    }
    if (comment && !op_comment_ && l.find("collective:") != std::string::npos) {
      static const std::regex collective(R"(collective:\s*([a-z_\-]+))");
      if (std::regex_search(l, m, collective)) op_comment_ = parse_op(m[1].str());
    }
  }

  void finish() {
    if (op_started_) {
      log_.op = op_started_;
    } else if (op_comment_) {
      log_.op = op_comment_;
    } else {
      log_.op = op_from_file_name();
    }
    if (!log_.devices.empty()) {
      log_.ranks = static_cast<int>(log_.devices.size());
      std::set<std::string> hosts;
      for (const auto& d : log_.devices) hosts.insert(d.host);
      log_.nodes = static_cast<int>(hosts.size());
    } else {
      log_.ranks = ranks_hint_;
      log_.nodes = nodes_hint_ ? nodes_hint_ : nodes_from_file_name();
    }
    log_.nccl_version = !version_from_library_.empty() ? version_from_library_ : version_from_text_;
  }

  std::string file_name() const {
    return lower(std::filesystem::path(log_.source).filename().string());
  }

  std::optional<CollectiveOp> op_from_file_name() const {
    const std::string name = file_name();
    // Longer names first: "allreduce" and "reduce_scatter" both contain "reduce".
    static const std::vector<std::pair<std::vector<std::string_view>, CollectiveOp>> spellings = {
        {{"reduce_scatter", "reducescatter", "reduce-scatter"}, CollectiveOp::kReduceScatter},
        {{"all_reduce", "allreduce", "all-reduce"}, CollectiveOp::kAllReduce},
        {{"all_gather", "allgather", "all-gather"}, CollectiveOp::kAllGather},
        {{"alltoall", "all_to_all", "all-to-all", "a2a"}, CollectiveOp::kAllToAll},
        {{"broadcast", "bcast"}, CollectiveOp::kBroadcast},
        {{"sendrecv", "send_recv", "send-recv"}, CollectiveOp::kSendRecv},
        {{"reduce"}, CollectiveOp::kReduce},
    };
    for (const auto& [words, op] : spellings) {
      for (auto w : words) {
        if (name.find(w) != std::string::npos) return op;
      }
    }
    return std::nullopt;
  }

  std::optional<int> nodes_from_file_name() const {
    static const std::regex nodes(R"((\d+)[-_]?nodes?)");
    std::smatch m;
    const std::string name = file_name();
    if (std::regex_search(name, m, nodes)) return small_int(m[1].str());
    return std::nullopt;
  }

  std::string_view text_;
  NcclTestsLog log_;
  int line_no_ = 0;
  std::optional<Shape> shape_;
  int runs_started_ = 0, nthread_lines_ = 0;
  std::optional<CollectiveOp> op_started_, op_comment_;
  std::optional<int> ranks_hint_, nodes_hint_;
  std::string version_from_library_, version_from_text_;
};

// ---------------------------------------------------------------------------------------------
// Printing

// nccl-tests' getFloatStr: the first of %.2f, %.1f, %.0f that fits the column, else %e.
std::string fit_float(double value, int width) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*.2f", width, value);
  if (std::strlen(buf) <= static_cast<size_t>(width)) return buf;
  std::snprintf(buf, sizeof buf, "%*.1f", width, value);
  if (std::strlen(buf) <= static_cast<size_t>(width)) return buf;
  std::snprintf(buf, sizeof buf, "%*.0f", width, value);
  if (std::strlen(buf) <= static_cast<size_t>(width)) return buf;
  // nccl-tests truncates this to the width; a value that large is a bug either way, and
  // printing it whole keeps it readable.
  if (width >= 7) {
    std::snprintf(buf, sizeof buf, "%*.1e", width, value);
  } else {
    std::snprintf(buf, sizeof buf, "%*.0e", width, value);
  }
  return buf;
}

std::string pad_left(std::string_view s, size_t width) {
  return s.size() >= width ? std::string(s) : std::string(width - s.size(), ' ') + std::string(s);
}

bool has_whitespace(std::string_view s) { return std::any_of(s.begin(), s.end(), is_space); }

size_t extra_width(const std::string& name) { return std::max<size_t>(6, name.size()); }

}  // namespace

NcclTestsLog parse_nccl_tests_log(std::string_view text, const std::string& source) {
  return LogParser(text, source).run();
}

NcclTestsLog read_nccl_tests_log(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path, "", "is a directory, not an nccl-tests log");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path, "", "read failed");
  return parse_nccl_tests_log(text.str(), path);
}

std::string format_nccl_tests_time(double time_us, NcclTestsNumberStyle style) {
  if (style == NcclTestsNumberStyle::kCurrent) return fit_float(time_us, 7);
  char buf[64];
  if (time_us >= 10000.0) {
    std::snprintf(buf, sizeof buf, "%7.0f", time_us);
  } else if (time_us >= 100.0) {
    std::snprintf(buf, sizeof buf, "%7.1f", time_us);
  } else {
    std::snprintf(buf, sizeof buf, "%7.2f", time_us);
  }
  return buf;
}

std::string format_nccl_tests_bandwidth(double gbs, NcclTestsNumberStyle style) {
  if (style == NcclTestsNumberStyle::kCurrent) return fit_float(gbs, 6);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%6.2f", gbs);
  return buf;
}

std::string_view nccl_tests_binary_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce_perf";
    case CollectiveOp::kAllGather: return "all_gather_perf";
    case CollectiveOp::kReduceScatter: return "reduce_scatter_perf";
    case CollectiveOp::kAllToAll: return "alltoall_perf";
    case CollectiveOp::kBroadcast: return "broadcast_perf";
    case CollectiveOp::kReduce: return "reduce_perf";
    case CollectiveOp::kSendRecv: return "sendrecv_perf";
  }
  return "?";
}

std::optional<int> nccl_tests_type_size(std::string_view type) {
  // nccl-tests' test_typenames, plus the names older builds printed.
  static const std::vector<std::pair<std::string_view, int>> sizes = {
      {"int8", 1},    {"uint8", 1},   {"char", 1},     {"f8e4m3", 1},   {"f8e5m2", 1},
      {"half", 2},    {"bfloat16", 2}, {"int32", 4},   {"uint32", 4},   {"int", 4},
      {"float", 4},   {"int64", 8},   {"uint64", 8},   {"double", 8},
  };
  for (const auto& [name, size] : sizes) {
    if (name == type) return size;
  }
  return std::nullopt;
}

NcclTestsResult make_result(CollectiveOp op, int ranks, int64_t size_bytes, double time_us) {
  if (ranks < 1) throw std::invalid_argument("make_result: ranks must be at least 1");
  if (size_bytes < 0) throw std::invalid_argument("make_result: negative size");
  if (!(time_us > 0) || !std::isfinite(time_us)) throw std::invalid_argument("make_result: time must be positive");
  NcclTestsResult r;
  r.time_us = time_us;
  // B/µs = 1e6 B/s, so GB/s (1e9 B/s) is B/µs / 1e3.
  r.algbw_gbs = static_cast<double>(size_bytes) / time_us / 1e3;
  r.busbw_gbs = r.algbw_gbs * busbw_factor(op, ranks);
  r.wrong = "N/A";
  return r;
}

double average_busbw(const std::vector<NcclTestsRow>& rows) {
  double sum = 0;
  int n = 0;
  for (const auto& row : rows) {
    for (const auto* block : {&row.out_of_place, &row.in_place}) {
      if (*block) {
        sum += (*block)->busbw_gbs;
        ++n;
      }
    }
  }
  return n == 0 ? 0.0 : sum / n;
}

NcclTestsTableWriter::NcclTestsTableWriter(NcclTestsTableOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  auto reject = [](const std::string& why) { throw std::invalid_argument("NcclTestsTableWriter: " + why); };
  if (o.ranks < 1) reject("ranks must be at least 1");
  if (!o.devices.empty() && o.devices.size() != static_cast<size_t>(o.ranks)) {
    reject("devices must be empty or one per rank (" + std::to_string(o.devices.size()) + " for " +
           std::to_string(o.ranks) + " ranks)");
  }
  if (o.min_bytes < 0 || o.min_bytes > o.max_bytes) reject("need 0 <= min_bytes <= max_bytes");
  if (o.step_factor < 2) reject("step_factor must be at least 2");
  if (o.dtype.empty() || has_whitespace(o.dtype)) reject("dtype must be one word");
  if (o.redop.empty() || has_whitespace(o.redop)) reject("redop must be one word");
  for (const auto& d : o.devices) {
    if (d.host.empty() || has_whitespace(d.host) || has_whitespace(d.bus_id) ||
        d.name.find('\n') != std::string::npos) {
      reject("device host and bus id must be one word each, the name one line");
    }
  }
  for (const auto& c : o.extra_columns) {
    if (c.empty() || has_whitespace(c)) reject("extra column names must be one word each");
  }
}

std::string NcclTestsTableWriter::header() const {
  const auto& o = options_;
  const bool current = o.numbers == NcclTestsNumberStyle::kCurrent;
  const std::string program(nccl_tests_binary_name(o.op));
  std::string out;
  char buf[512];
  std::istringstream title(o.title_comment);
  for (std::string line; std::getline(title, line);) {
    out += (line.rfind('#', 0) == 0 ? "" : "# ") + line + "\n";
  }
  out += "# Collective test starting: " + program + "\n";
  // A prediction is one timing of one operation per GPU: 1 thread, 1 GPU per process.
  std::snprintf(buf, sizeof buf,
                "# nThread 1 nGpus 1 minBytes %" PRId64 " maxBytes %" PRId64 " step: %" PRId64
                "(factor) warmup iters: 0 iters: 1 agg iters: 1 validation: 0 graph: 0%s\n",
                o.min_bytes, o.max_bytes, o.step_factor, current ? " unalign: 0" : "");
  out += buf;
  out += "#\n# Using devices\n";
  for (const auto& d : o.devices) {
    std::snprintf(buf, sizeof buf, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", d.rank, 0, 0,
                  d.host.c_str(), d.device, d.bus_id.c_str(), d.name.c_str());
    out += buf;
  }
  if (o.devices.empty()) out += "#  ranks: " + std::to_string(o.ranks) + " (devices not listed)\n";

  std::string names_tail, units_tail;
  for (const auto& c : o.extra_columns) {
    names_tail += "  " + pad_left(c, extra_width(c));
    units_tail += "  " + std::string(extra_width(c), ' ');
  }
  out += "#\n";
  std::snprintf(buf, sizeof buf,
                "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                "", "", "", "");
  out += buf;
  if (current) {
    // nccl-tests ends these two lines with " %*s", an empty timestamp column.
    if (names_tail.empty()) names_tail = " ";
    if (units_tail.empty()) units_tail = " ";
    std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "size",
                  "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                  "#wrong");
    out += buf + names_tail + "\n";
    std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)",
                  "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    out += buf + units_tail + "\n";
  } else {
    std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size",
                  "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                  "#wrong");
    out += buf + names_tail + "\n";
    std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
                  "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    out += buf + units_tail + "\n";
  }
  return out;
}

std::string NcclTestsTableWriter::row(const NcclTestsRow& r, const std::vector<std::string>& extra) const {
  const auto& o = options_;
  const std::vector<std::string>& values = extra.empty() ? r.extra : extra;
  if (values.size() != o.extra_columns.size()) {
    throw std::invalid_argument("NcclTestsTableWriter::row: " + std::to_string(values.size()) + " extra values for " +
                                std::to_string(o.extra_columns.size()) + " extra columns");
  }
  const std::string& type = r.type.empty() ? o.dtype : r.type;
  const std::string redop = !reduces(o.op) ? "none" : (r.redop.empty() ? o.redop : r.redop);
  const int root = !has_root(o.op) ? -1 : (r.root >= 0 ? r.root : o.root);
  if (has_whitespace(type) || has_whitespace(redop)) {
    throw std::invalid_argument("NcclTestsTableWriter::row: type and redop must be one word each");
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%12" PRId64 "  %12" PRId64 "  %8s  %6s  %6d", r.size_bytes, r.count, type.c_str(),
                redop.c_str(), root);
  std::string out = buf;
  const bool current = o.numbers == NcclTestsNumberStyle::kCurrent;
  auto block = [&](const NcclTestsResult& res) {
    if (has_whitespace(res.wrong)) throw std::invalid_argument("NcclTestsTableWriter::row: #wrong must be one word");
    out += "  " + format_nccl_tests_time(res.time_us, o.numbers);
    out += "  " + format_nccl_tests_bandwidth(res.algbw_gbs, o.numbers);
    out += "  " + format_nccl_tests_bandwidth(res.busbw_gbs, o.numbers);
    out += "  " + pad_left(res.wrong.empty() ? "N/A" : res.wrong, current ? 6 : 5);
  };
  if (r.out_of_place) {
    block(*r.out_of_place);
  } else {
    out += std::string(32, ' ');  // nccl-tests' writeBenchMarkLineNullBody
  }
  if (r.in_place) block(*r.in_place);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].empty() || has_whitespace(values[i])) {
      throw std::invalid_argument("NcclTestsTableWriter::row: extra value '" + values[i] + "' must be one word");
    }
    out += "  " + pad_left(values[i], extra_width(o.extra_columns[i]));
  }
  return out + "\n";
}

std::string NcclTestsTableWriter::footer(double avg_busbw_gbs) const {
  char buf[256];
  std::string out;
  std::snprintf(buf, sizeof buf, "# %-20s : %d %s\n", "Out of bounds values", 0, "OK");
  out += buf;
  std::snprintf(buf, sizeof buf, "# %-20s : %g %s\n", "Avg bus bandwidth", avg_busbw_gbs, "");
  out += buf;
  out += "#\n# Collective test concluded: " + std::string(nccl_tests_binary_name(options_.op)) + "\n";
  return out;
}

NcclTestsRow NcclTestsTableWriter::predicted_row(int64_t size_bytes, double time_us) const {
  const auto& o = options_;
  const auto type_size = nccl_tests_type_size(o.dtype);
  if (!type_size) throw std::invalid_argument("NcclTestsTableWriter: unknown nccl-tests type '" + o.dtype + "'");
  NcclTestsRow r;
  r.size_bytes = size_bytes;
  r.count = size_bytes / *type_size / (size_is_total_buffer(o.op) ? o.ranks : 1);
  r.type = o.dtype;
  r.redop = reduces(o.op) ? o.redop : "none";
  r.root = has_root(o.op) ? o.root : -1;
  r.out_of_place = make_result(o.op, o.ranks, size_bytes, time_us);
  r.in_place = r.out_of_place;
  return r;
}

}  // namespace parallax
