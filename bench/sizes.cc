#include "bench/sizes.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hetps::bench {

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  const absl::Status bad = absl::InvalidArgumentError(
      absl::StrCat("bad size '", text, "': use digits with an optional K, M or G"));
  std::string s = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (absl::EndsWith(s, "IB")) {
    s.resize(s.size() - 2);  // 4KiB
  } else if (absl::EndsWith(s, "B")) {
    s.pop_back();  // 4KB, 4096B
  }
  uint64_t multiplier = 1;
  if (!s.empty()) {
    const char unit = s.back();
    if (unit == 'K' || unit == 'M' || unit == 'G') {
      multiplier = uint64_t{1} << (unit == 'K' ? 10 : unit == 'M' ? 20 : 30);
      s.pop_back();
    }
  }
  uint64_t value = 0;
  if (s.empty() || !std::all_of(s.begin(), s.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(s, &value)) {
    return bad;
  }
  if (value == 0) return absl::InvalidArgumentError("a size must be at least 1 byte");
  if (value > std::numeric_limits<uint64_t>::max() / multiplier) {
    return absl::InvalidArgumentError(absl::StrCat("size '", text, "' is too large"));
  }
  return value * multiplier;
}

std::string FormatSize(uint64_t bytes) {
  if (bytes % (uint64_t{1} << 30) == 0) return absl::StrCat(bytes >> 30, "G");
  if (bytes % (uint64_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, "M");
  if (bytes % (uint64_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, "K");
  return absl::StrCat(bytes);
}

std::vector<uint64_t> SweepSizes(uint64_t begin, uint64_t end, uint64_t factor) {
  std::vector<uint64_t> sizes;
  for (uint64_t size = begin; size <= end; size *= factor) {
    sizes.push_back(size);
    if (size > end / factor) break;
  }
  return sizes;
}

}  // namespace hetps::bench
