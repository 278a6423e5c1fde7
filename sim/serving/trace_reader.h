// Request traces to replay (../shared/reference/serving.md §4), recognised from their first
// line:
//   Azure LLM 2023/2024 CSV   TIMESTAMP,ContextTokens,GeneratedTokens (a datetime with up to 7
//                             fractional digits; arrivals relative to the first row)
//   BurstGPT CSV              Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
//                             (seconds; v2 adds Session ID and Elapsed time); rows with 0 response
//                             tokens are the trace's failed requests and are skipped
//   Mooncake JSON lines       {"timestamp" (ms), "input_length", "output_length", "hash_ids"}
//                             (prefix-chained hashes of 512-token blocks)
// Requests come out in arrival order (a stable sort by time), ids 0…n−1, with arrival times
// divided by `rate_scale` (2 = twice as fast). A bad line fails with the file, the line number
// and the reason.
#pragma once

#include <string>
#include <vector>

#include "serving/request.h"

namespace parallax {

enum class TraceFormat : uint8_t { kAzure, kBurstGpt, kMooncake };
const char* to_string(TraceFormat f);

struct Trace {
  TraceFormat format = TraceFormat::kAzure;
  std::vector<Request> requests;
  int64_t skipped = 0;  ///< rows the format marks as failed requests
};

/// Reads `path`. Throws InputError (file:line: reason).
Trace read_trace(const std::string& path, double rate_scale = 1.0);
/// The same from text; `name` stands for the file in errors.
Trace parse_trace(const std::string& text, const std::string& name, double rate_scale = 1.0);

/// The first `n` requests of the trace repeated end to end: copy k starts one mean arrival gap
/// after copy k − 1's last request, its ids continuing (for runs longer than a trace).
std::vector<Request> repeat_trace(const std::vector<Request>& requests, size_t n);

/// 100 ns ticks since 1970 of an Azure datetime "YYYY-MM-DD HH:MM:SS[.fraction]" (UTC, up to
/// 7 fractional digits), or −1 when it is not one.
int64_t parse_azure_ticks(const std::string& text);

}  // namespace parallax
