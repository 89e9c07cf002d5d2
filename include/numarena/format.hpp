// How numarena writes numbers for people (byte counts, percentages, id lists), and reads
// byte counts back.
//
// Every message, CLI table and report uses these, so the same quantity reads the same
// everywhere ("3.5 GiB", "87.5%", "0-3,8"). Machine-readable output (JSON, Prometheus) carries
// raw numbers instead.
//
//   numarena::FormatBytes(3758096384);        // "3.5 GiB"
//   numarena::FormatPercent(0.875);           // "87.5%"
//   numarena::FormatIdList({{0, 1, 2, 3, 8}}); // "0-3,8"
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "numarena/status.hpp"

namespace numarena {

// `bytes` with a binary unit and one decimal: "512 B", "1.0 KiB", "3.5 GiB", "1.0 PiB" (and
// "16384.0 PiB" near UINT64_MAX: the unit stops at PiB).
std::string FormatBytes(std::uint64_t bytes);

// `fraction` (1.0 = 100 %) with one decimal and no space: "87.5%". Values outside [0, 1] are
// printed as they are ("120.0%"); NaN prints "nan%".
std::string FormatPercent(double fraction);

// Ids as the kernel writes cpulists and nodelists: sorted, duplicates dropped, runs of
// consecutive ids as ranges ("0-3,8,10-11"); "" for an empty list.
std::string FormatIdList(std::span<const int> ids);

// A byte count as people write it: decimal digits with an optional binary suffix K, M, G, T
// or P (also KiB, MiB, ...; case-insensitive; "B" alone allowed): "4096", "64K", "2MiB",
// "1g". InvalidArgument for anything else (empty, signs, fractions, hex, spaces) and for
// values past UINT64_MAX, naming the text.
//
//   auto bytes = numarena::ParseByteSize("512M");  // 536870912
[[nodiscard]] StatusOr<std::uint64_t> ParseByteSize(std::string_view text);

}  // namespace numarena
