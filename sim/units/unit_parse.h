// Parsing of human-written quantities ("400 Gb/s", "1.5 us", "80 GiB", "989 TFLOP/s", "2:1")
// and their formatting back into short human strings. Parsing happens only at the input
// boundary (sim/io); everything inside the simulator holds typed quantities.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "units/units.h"

namespace parallax {

/// A string that is not a valid quantity of the expected kind. The message says what was
/// expected; the io layer prefixes it with the file and JSON path.
class UnitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "400 Gb/s", "400Gbps", "900 GB/s", "1.8 TB/s", "25 GiB/s". `b` is bit, `B` byte.
/// Throws UnitError on a missing, unknown or ambiguous unit ("400 Gbs") or a negative value.
Bandwidth parse_bandwidth(std::string_view text);
/// "1.5 us", "800ns", "0.5 µs", "2 ms", "1 s", "10 ps". Throws UnitError; negative is an error.
Time parse_time(std::string_view text);
/// "80 GiB", "64MB", "512 B", "1 KiB". Decimal and binary prefixes. Bits are rejected.
Bytes parse_bytes(std::string_view text);
/// "989 TFLOP/s", "67 TFLOPS", "1.2 PFLOP/s".
FlopRate parse_flop_rate(std::string_view text);
/// "3865 Gop/s", "9.8 Top/s", "4.9e12 ops".
OperationRate parse_operation_rate(std::string_view text);
/// "2:1" → 2.0, "1:1" → 1.0; both sides must be positive.
double parse_ratio(std::string_view text);

/// "450 GB/s", "50 GB/s", "1.25 TB/s" (decimal, 4 significant digits).
std::string format_bandwidth(Bandwidth bw);
/// "1.5 us", "12.3 ms", "800 ns", "2.5 s".
std::string format_time(Time t);
/// "64 MiB", "1 GiB", "512 B" (binary prefixes, as nccl-tests' sizes are powers of two).
std::string format_bytes(Bytes b);
/// "989.4 TFLOP/s".
std::string format_flop_rate(FlopRate r);

}  // namespace parallax
