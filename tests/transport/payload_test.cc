#include "transport/payload.h"

#include <memory>
#include <string>

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

}  // namespace
}  // namespace hetps::transport
