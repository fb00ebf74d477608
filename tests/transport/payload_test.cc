#include "transport/payload.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace hetps::transport {
namespace {

ByteSpan Bytes(const std::string& s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(PayloadTest, CopiesRangesAcrossSegments) {
  const std::string a = "hello ", b = "parameter ", c = "server";
  Payload payload = Payload::Borrow(Bytes(a));
  payload.Append(Payload::Borrow(Bytes(b)));
  payload.Append(Payload::Copy(Bytes(c)));
  EXPECT_EQ(payload.size(), 22u);
  EXPECT_EQ(payload.segments().size(), 3u);
  EXPECT_EQ(payload.ToString(), "hello parameter server");
  std::string out(9, '\0');
  payload.CopyTo(4, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  EXPECT_EQ(out, "o paramet");
  EXPECT_EQ(payload.Subrange(3, 12).ToString(), "lo parameter");
  EXPECT_EQ(payload.Subrange(16, 6).ToString(), "server");
  EXPECT_EQ(payload.Subrange(16, 6).segments().size(), 1u);
  EXPECT_TRUE(payload.Subrange(6, 0).empty());
}

TEST(PayloadTest, OwnerKeepsBytesAlive) {
  auto owner = std::make_shared<std::string>("kept alive");
  std::weak_ptr<std::string> weak = owner;
  Payload payload = Payload::Shared(Bytes(*owner), owner);
  owner.reset();
  EXPECT_FALSE(weak.expired());
  Payload sub = payload.Subrange(5, 5);
  payload = Payload();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(sub.ToString(), "alive");
  sub = Payload();
  EXPECT_TRUE(weak.expired());
}

TEST(PayloadTest, CopyIsIndependentOfTheSource) {
  std::string source = "abc";
  Payload payload = Payload::Copy(Bytes(source));
  source[0] = 'x';
  EXPECT_EQ(payload.ToString(), "abc");
}

// Converts `count` bf16 values of `wire` (at element `first`) as a reference would.
std::vector<float> Widen(const std::vector<uint16_t>& wire, size_t first, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = Bf16ToFp32(wire[first + i]);
  return out;
}

TEST(PayloadTest, ConvertsAcrossSegmentsSplitElementsAndMisalignedPieces) {
  std::vector<uint16_t> wire(10000);
  for (size_t i = 0; i < wire.size(); ++i) wire[i] = Fp32ToBf16(static_cast<float>(i) - 5000.5f);
  std::string bytes(wire.size() * 2, '\0');
  std::memcpy(bytes.data(), wire.data(), bytes.size());
  // Cut at odd byte offsets: elements split between segments, and segments that start at an
  // odd address (the copies below are at aligned addresses plus one).
  const size_t cuts[] = {0, 3, 4097, 4100, 9001, bytes.size()};
  std::vector<std::string> storage;
  Payload payload;
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    storage.push_back(std::string(1, 'x') + bytes.substr(cuts[i], cuts[i + 1] - cuts[i]));
  }
  for (const std::string& piece : storage) {
    payload.Append(Payload::Borrow(Bytes(piece).subspan(1)));
  }
  ASSERT_EQ(payload.size(), bytes.size());
  for (const auto& [first, count] : std::vector<std::pair<size_t, size_t>>{
           {0, 10000}, {1, 9999}, {2048, 3000}, {4099, 1}, {9999, 1}, {7, 0}}) {
    std::vector<float> out(count + 1, -1.0f);
    payload.ConvertTo(first * 2, FloatFormat::kBf16, out.data(), FloatFormat::kFp32, count);
    EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + count), Widen(wire, first, count))
        << "elements " << first << " .. " << first + count;
    EXPECT_EQ(out[count], -1.0f) << "wrote past the end";
  }
  // The other way: fp32 pieces narrowed to bf16.
  const std::vector<float> values = Widen(wire, 0, wire.size());
  Payload wide = Payload::Borrow(ByteSpan(reinterpret_cast<const uint8_t*>(values.data()), 6));
  wide.Append(Payload::Borrow(
      ByteSpan(reinterpret_cast<const uint8_t*>(values.data()) + 6, values.size() * 4 - 6)));
  std::vector<uint16_t> narrowed(wire.size());
  wide.ConvertTo(0, FloatFormat::kFp32, narrowed.data(), FloatFormat::kBf16, wire.size());
  EXPECT_EQ(narrowed, wire);
}

}  // namespace
}  // namespace hetps::transport
