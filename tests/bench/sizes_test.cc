#include "bench/sizes.h"

#include "gtest/gtest.h"

namespace hetps::bench {
namespace {

TEST(SizesTest, ParsesUnitsAndPlainBytes) {
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("4k"), 4096u);
  EXPECT_EQ(*ParseSize("1M"), 1u << 20);
  EXPECT_EQ(*ParseSize("64M"), 64u << 20);
  EXPECT_EQ(*ParseSize("2G"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseSize("4KB"), 4096u);
  EXPECT_EQ(*ParseSize("1000"), 1000u);
  EXPECT_EQ(*ParseSize("1000B"), 1000u);
  EXPECT_EQ(*ParseSize(" 8K "), 8192u);
}

TEST(SizesTest, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "K", "4Q", "-1", "+4K", "4.5K", "0", "0K", "K4", "4 K",
                          "99999999999999999999", "20000000000G"}) {
    EXPECT_EQ(ParseSize(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SizesTest, FormatsTheShortestExactForm) {
  EXPECT_EQ(FormatSize(4096), "4K");
  EXPECT_EQ(FormatSize(1 << 20), "1M");
  EXPECT_EQ(FormatSize(uint64_t{3} << 30), "3G");
  EXPECT_EQ(FormatSize(1000), "1000");
  EXPECT_EQ(FormatSize(6144), "6K");
  for (uint64_t v : {1ull, 4096ull, 1ull << 20, 12345ull}) EXPECT_EQ(*ParseSize(FormatSize(v)), v);
}

TEST(SizesTest, SweepsFromBeginToEnd) {
  EXPECT_EQ(SweepSizes(4096, 64 << 20, 16),
            (std::vector<uint64_t>{4096, 65536, 1 << 20, 16 << 20}));
  EXPECT_EQ(SweepSizes(4096, 4096, 2), (std::vector<uint64_t>{4096}));
  EXPECT_EQ(SweepSizes(1, 8, 2), (std::vector<uint64_t>{1, 2, 4, 8}));
  EXPECT_EQ(SweepSizes(uint64_t{1} << 62, ~uint64_t{0}, 4),
            (std::vector<uint64_t>{uint64_t{1} << 62}));  // no overflow
}

}  // namespace
}  // namespace hetps::bench
