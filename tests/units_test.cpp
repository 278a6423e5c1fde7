// Units: parsing of human strings, rejections, formatting, and the one rounding conversion.
#include <gtest/gtest.h>

#include "units/unit_parse.h"
#include "units/units.h"

namespace parallax {
namespace {

TEST(Units, BandwidthBitsAndBytes) {
  // 400 Gb/s = 400e9 bit/s / 8 = 50e9 B/s.
  EXPECT_DOUBLE_EQ(parse_bandwidth("400 Gb/s").value(), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400Gbps").value(), 50e9);
  // 900 GB/s = 900e9 B/s (decimal prefix, as nccl-tests reports).
  EXPECT_DOUBLE_EQ(parse_bandwidth("900 GB/s").value(), 900e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1.8 TB/s").value(), 1.8e12);
  // 25 GiB/s = 25 * 2^30 B/s.
  EXPECT_DOUBLE_EQ(parse_bandwidth("25 GiB/s").value(), 25.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("  12 MB/s ").value(), 12e6);
}

TEST(Units, Times) {
  // 1.5 us = 1.5e6 ps; 800 ns = 800e3 ps.
  EXPECT_EQ(parse_time("1.5 us").picoseconds(), 1'500'000);
  EXPECT_EQ(parse_time("800ns").picoseconds(), 800'000);
  EXPECT_EQ(parse_time("0.5 \xC2\xB5s").picoseconds(), 500'000);
  EXPECT_EQ(parse_time("2 ms").picoseconds(), 2'000'000'000);
  EXPECT_EQ(parse_time("1 s").picoseconds(), 1'000'000'000'000);
  EXPECT_EQ(parse_time("10 ps").picoseconds(), 10);
  EXPECT_EQ(parse_time("1e-6 s").picoseconds(), 1'000'000);
}

TEST(Units, Sizes) {
  // 80 GiB = 80 * 2^30; 64 MB = 64e6 (decimal).
  EXPECT_DOUBLE_EQ(parse_bytes("80 GiB").value(), 80.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bytes("64MB").value(), 64e6);
  EXPECT_DOUBLE_EQ(parse_bytes("512 B").value(), 512.0);
  EXPECT_DOUBLE_EQ(parse_bytes("1 KiB").value(), 1024.0);
  EXPECT_DOUBLE_EQ(parse_bytes("8 bytes").value(), 8.0);
}

TEST(Units, FlopRatesAndRatios) {
  EXPECT_DOUBLE_EQ(parse_flop_rate("989 TFLOP/s").value(), 989e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("67 TFLOPS").value(), 67e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("1.2 PFLOP/s").value(), 1.2e15);
  EXPECT_DOUBLE_EQ(parse_ratio("2:1"), 2.0);
  EXPECT_DOUBLE_EQ(parse_ratio("1:1"), 1.0);
}

TEST(Units, Rejections) {
  // "Gbs" lacks the /s or ps that makes it a rate; "parsecs" is no unit; sizes cannot be negative.
  EXPECT_THROW(parse_bandwidth("400 Gbs"), UnitError);
  EXPECT_THROW(parse_bandwidth("400"), UnitError);
  EXPECT_THROW(parse_bandwidth("fast"), UnitError);
  EXPECT_THROW(parse_bandwidth("400 mb/s"), UnitError);  // milli-bits? refused, not guessed
  EXPECT_THROW(parse_time("12 parsecs"), UnitError);
  EXPECT_THROW(parse_time("5"), UnitError);
  EXPECT_THROW(parse_time("-1 us"), UnitError);
  EXPECT_THROW(parse_time("1e74 s"), UnitError);  // beyond 64-bit picoseconds (found by fuzzing)
  EXPECT_THROW(parse_bytes("-64 MiB"), UnitError);
  EXPECT_THROW(parse_bytes("64 Mb"), UnitError);  // bits are not a size
  EXPECT_THROW(parse_bytes("64 MiB/s"), UnitError);
  EXPECT_THROW(parse_flop_rate("989 TFLOP"), UnitError);
  EXPECT_THROW(parse_ratio("2"), UnitError);
  EXPECT_THROW(parse_ratio("0:1"), UnitError);
}

TEST(Units, ErrorMessagesSayWhatWasExpected) {
  try {
    parse_bandwidth("400 Gbs");
    FAIL();
  } catch (const UnitError& e) {
    EXPECT_NE(std::string(e.what()).find("\"400 Gb/s\""), std::string::npos) << e.what();
  }
  try {
    parse_bytes("-1 GiB");
    FAIL();
  } catch (const UnitError& e) {
    EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos) << e.what();
  }
}

TEST(Units, FormatRoundTrips) {
  for (const char* s : {"450 GB/s", "50 GB/s", "1.8 TB/s"}) {
    EXPECT_EQ(format_bandwidth(parse_bandwidth(s)), s);
  }
  for (const char* s : {"1.5 us", "800 ns", "2 ms", "3 s"}) EXPECT_EQ(format_time(parse_time(s)), s);
  for (const char* s : {"64 MiB", "1 GiB", "512 B", "80 GiB"}) EXPECT_EQ(format_bytes(parse_bytes(s)), s);
  EXPECT_EQ(format_flop_rate(parse_flop_rate("989.4 TFLOP/s")), "989.4 TFLOP/s");
}

TEST(Units, TransferTimeRoundsUpToThePicosecond) {
  // 1 GiB at 50 GB/s = 1073741824 / 50e9 s = 21.47483648 ms = 21474836480 ps exactly.
  EXPECT_EQ(transfer_time(gib(1), gigabytes_per_second(50)).picoseconds(), 21'474'836'480);
  // 1 byte at 3 B/s = 1/3 s = 333333333333.33 ps → rounds up to ...334.
  EXPECT_EQ(transfer_time(bytes(1), bytes_per_second(3)).picoseconds(), 333'333'333'334);
  EXPECT_EQ(transfer_time(bytes(0), bytes_per_second(3)), Time::zero());
  // A rate of zero never finishes: Time::max(), not an overflowed integer.
  EXPECT_EQ(transfer_time(bytes(1), bytes_per_second(0)), Time::max());
  EXPECT_EQ(compute_time(Flops(1e30), FlopRate(1)), Time::max());
}

TEST(Units, TimeArithmetic) {
  EXPECT_EQ((Time::us(1) + Time::ns(500)).picoseconds(), 1'500'000);
  EXPECT_LT(Time::ns(999), Time::us(1));
  EXPECT_DOUBLE_EQ(Time::ms(2).seconds(), 2e-3);
}

}  // namespace
}  // namespace parallax
