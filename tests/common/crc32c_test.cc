#include "common/crc32c.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hetps {
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  // The check value of CRC-32C (RFC 3720, appendix B.4): "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4: 32 zero bytes
}

TEST(Crc32cTest, PiecesGiveTheCrcOfTheWhole) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{500}, size_t{999}}) {
    EXPECT_EQ(Crc32c(data.data() + cut, data.size() - cut, Crc32c(data.data(), cut)), whole)
        << cut;
  }
  data[123] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace hetps
