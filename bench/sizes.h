// Message sizes as people write them: "4K", "1M", "64M", "1G" (powers of 1024), or plain bytes.
#ifndef HETPS_BENCH_SIZES_H_
#define HETPS_BENCH_SIZES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps::bench {

// Accepts digits with an optional K, M or G (also KB/KiB, ...), case-insensitive.
// InvalidArgument for anything else, for zero and for overflow.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// The shortest exact form: 4096 -> "4K", 1048576 -> "1M", 1000 -> "1000".
std::string FormatSize(uint64_t bytes);

// begin, begin * factor, ... up to end (included when reached exactly).
// REQUIRES: 0 < begin <= end, factor >= 2.
std::vector<uint64_t> SweepSizes(uint64_t begin, uint64_t end, uint64_t factor);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_SIZES_H_
