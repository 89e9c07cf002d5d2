// The one formatting module (numarena/format.hpp): every message and table uses it, so its
// forms are pinned here.
#include "numarena/format.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using numarena::FormatBytes;
using numarena::FormatIdList;
using numarena::FormatPercent;

TEST_CASE("FormatBytes: whole bytes below 1 KiB, one decimal and a binary unit above") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(std::uint64_t{3758096384}) == "3.5 GiB");
  CHECK(FormatBytes(std::uint64_t{1} << 50) == "1.0 PiB");
  // The unit stops at PiB: the largest value still prints, in PiB.
  CHECK(FormatBytes(std::numeric_limits<std::uint64_t>::max()) == "16384.0 PiB");
}

TEST_CASE("FormatPercent: one decimal, no space, out-of-range values as they are") {
  CHECK(FormatPercent(0.875) == "87.5%");
  CHECK(FormatPercent(0) == "0.0%");
  CHECK(FormatPercent(1.2) == "120.0%");
  CHECK(FormatPercent(-0.05) == "-5.0%");
  CHECK(FormatPercent(std::nan("")) == "nan%");
}

TEST_CASE("FormatIdList: sorted, unique, runs as ranges") {
  CHECK(FormatIdList(std::vector<int>{}) == "");
  CHECK(FormatIdList(std::vector<int>{8, 3, 2, 1, 0, 3}) == "0-3,8");
  CHECK(FormatIdList(std::vector<int>{10, 11}) == "10-11");
  CHECK(FormatIdList(std::vector<int>{std::numeric_limits<int>::max(),
                                      std::numeric_limits<int>::max() - 1}) ==
        "2147483646-2147483647");
}

TEST_CASE("ParseByteSize: digits with a binary suffix, overflow and junk refused") {
  using numarena::ParseByteSize;
  CHECK(ParseByteSize("0").value() == 0);
  CHECK(ParseByteSize("4096").value() == 4096);
  CHECK(ParseByteSize("64K").value() == 65536);
  CHECK(ParseByteSize("64k").value() == 65536);
  CHECK(ParseByteSize("2MiB").value() == (std::uint64_t{2} << 20));
  CHECK(ParseByteSize("1g").value() == (std::uint64_t{1} << 30));
  CHECK(ParseByteSize("3TB").value() == (std::uint64_t{3} << 40));
  CHECK(ParseByteSize("7B").value() == 7);
  CHECK(ParseByteSize("18446744073709551615").value() == std::numeric_limits<std::uint64_t>::max());
  CHECK(ParseByteSize("16383P").value() == (std::uint64_t{16383} << 50));
  for (const char* bad : {"", "K", "-1", "+1", "1.5G", "0x10", " 1", "1 ", "1X", "1KK",
                          "18446744073709551616", "16384P", "99999999999999999999K"}) {
    INFO(bad);
    auto parsed = ParseByteSize(bad);
    REQUIRE(!parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(parsed.status().message()).find("byte size") != std::string::npos);
  }
}
