#include "transport/payload.h"

#include <algorithm>
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

template <typename Visit>
void Payload::ForEachPiece(size_t offset, size_t length, Visit&& visit) const {
  for (const ByteSpan& segment : segments_) {
    if (length == 0) break;
    if (offset >= segment.size()) {
      offset -= segment.size();
      continue;
    }
    const size_t n = std::min(segment.size() - offset, length);
    visit(segment.subspan(offset, n));
    length -= n;
    offset = 0;
  }
}

void Payload::CopyTo(size_t offset, absl::Span<uint8_t> out) const {
  uint8_t* dst = out.data();
  ForEachPiece(offset, out.size(), [&dst](ByteSpan piece) {
    std::memcpy(dst, piece.data(), piece.size());
    dst += piece.size();
  });
}

void Payload::ConvertTo(size_t offset, FloatFormat from, void* out, FloatFormat to,
                        size_t count) const {
  if (from == to) {
    CopyTo(offset, absl::Span<uint8_t>(static_cast<uint8_t*>(out), count * BytesPerElement(to)));
    return;
  }
  // One pass over the pieces: small ones (as gRPC's slices can be) are gathered into a buffer
  // and converted a chunk at a time; a large aligned piece met with the buffer empty is
  // converted where it lies. Elements may be split between pieces.
  const size_t in_size = BytesPerElement(from);
  const size_t out_size = BytesPerElement(to);
  constexpr size_t kChunk = 2048;
  alignas(64) uint8_t chunk[kChunk * 4];
  const size_t chunk_bytes = kChunk * in_size;
  size_t filled = 0;
  uint8_t* dst = static_cast<uint8_t*>(out);
  auto convert = [&](const uint8_t* src, size_t n) {
    ConvertFloats(src, from, dst, to, n);
    dst += n * out_size;
  };
  ForEachPiece(offset, count * in_size, [&](ByteSpan piece) {
    const uint8_t* src = piece.data();
    size_t left = piece.size();
    while (left > 0) {
      if (filled == 0 && left >= chunk_bytes && reinterpret_cast<uintptr_t>(src) % in_size == 0) {
        const size_t whole = left / in_size;
        convert(src, whole);
        src += whole * in_size;
        left -= whole * in_size;
        continue;
      }
      const size_t take = std::min(left, chunk_bytes - filled);
      std::memcpy(chunk + filled, src, take);
      filled += take;
      src += take;
      left -= take;
      if (filled == chunk_bytes) {
        convert(chunk, kChunk);
        filled = 0;
      }
    }
  });
  convert(chunk, filled / in_size);  // the request ends on an element boundary
}

Payload Payload::Subrange(size_t offset, size_t length) const {
  Payload result;
  result.owners_ = owners_;
  ForEachPiece(offset, length, [&result](ByteSpan piece) {
    result.segments_.push_back(piece);
    result.size_ += piece.size();
  });
  return result;
}

std::string Payload::ToString() const {
  std::string flat(size_, '\0');
  CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(flat.data()), flat.size()));
  return flat;
}

}  // namespace hetps::transport
