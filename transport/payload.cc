#include "transport/payload.h"

#include <cstring>

namespace hetps::transport {

Payload Payload::Borrow(ByteSpan bytes) {
  Payload payload;
  if (!bytes.empty()) {
    payload.segments_.push_back(bytes);
    payload.size_ = bytes.size();
  }
  return payload;
}

Payload Payload::Shared(ByteSpan bytes, std::shared_ptr<const void> owner) {
  Payload payload = Borrow(bytes);
  if (owner != nullptr) payload.owners_.push_back(std::move(owner));
  return payload;
}

Payload Payload::FromSegments(absl::Span<const ByteSpan> segments,
                              std::shared_ptr<const void> owner) {
  Payload payload;
  for (const ByteSpan& segment : segments) {
    if (segment.empty()) continue;
    payload.segments_.push_back(segment);
    payload.size_ += segment.size();
  }
  if (owner != nullptr) payload.owners_.push_back(std::move(owner));
  return payload;
}

Payload Payload::Copy(ByteSpan bytes) {
  auto copy = std::make_shared<const std::string>(reinterpret_cast<const char*>(bytes.data()),
                                                  bytes.size());
  ByteSpan view(reinterpret_cast<const uint8_t*>(copy->data()), copy->size());
  return Shared(view, std::move(copy));
}

void Payload::Append(const Payload& other) {
  segments_.insert(segments_.end(), other.segments_.begin(), other.segments_.end());
  owners_.insert(owners_.end(), other.owners_.begin(), other.owners_.end());
  size_ += other.size_;
}

void Payload::CopyTo(size_t offset, absl::Span<uint8_t> out) const {
  size_t remaining = out.size();
  uint8_t* dst = out.data();
  for (const ByteSpan& segment : segments_) {
    if (remaining == 0) break;
    if (offset >= segment.size()) {
      offset -= segment.size();
      continue;
    }
    const size_t n = std::min(segment.size() - offset, remaining);
    std::memcpy(dst, segment.data() + offset, n);
    dst += n;
    remaining -= n;
    offset = 0;
  }
}

Payload Payload::Subrange(size_t offset, size_t length) const {
  Payload result;
  result.owners_ = owners_;
  size_t remaining = length;
  for (const ByteSpan& segment : segments_) {
    if (remaining == 0) break;
    if (offset >= segment.size()) {
      offset -= segment.size();
      continue;
    }
    const size_t n = std::min(segment.size() - offset, remaining);
    result.segments_.push_back(segment.subspan(offset, n));
    remaining -= n;
    offset = 0;
  }
  result.size_ = length - remaining;
  return result;
}

std::string Payload::ToString() const {
  std::string flat(size_, '\0');
  CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(flat.data()), flat.size()));
  return flat;
}

}  // namespace hetps::transport
