// Payload: the bytes that travel beside a request's or response's header (tensor data).
//
// A read-only sequence of segments plus whatever keeps them alive, so that caller memory,
// parameter buffers and received network buffers can all be sent and received without first
// being copied into one place. Copying a Payload copies references, not bytes.
//
//   Payload p = Payload::Borrow(AsBytes(gradient));   // caller keeps `gradient` alive
//   p.Append(Payload::Shared(bytes, owner));          // `owner` keeps `bytes` alive
//   p.CopyTo(offset, out);                            // gather a range into `out`
//
// Not thread-safe for mutation; const methods may be used from several threads.
#ifndef HETPS_TRANSPORT_PAYLOAD_H_
#define HETPS_TRANSPORT_PAYLOAD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "common/half.h"

namespace hetps::transport {

using ByteSpan = absl::Span<const uint8_t>;

template <typename T>
ByteSpan AsBytes(absl::Span<const T> values) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T));
}
template <typename T>
absl::Span<uint8_t> AsWritableBytes(absl::Span<T> values) {
  return absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(values.data()), values.size() * sizeof(T));
}

class Payload {
 public:
  Payload() = default;

  // Refers to `bytes` without owning them: the caller keeps them alive and unchanged until the
  // call that carries this payload has completed.
  static Payload Borrow(ByteSpan bytes);
  // Refers to `bytes`, which `owner` keeps alive.
  static Payload Shared(ByteSpan bytes, std::shared_ptr<const void> owner);
  // Refers to several segments, which `owner` keeps alive.
  static Payload FromSegments(absl::Span<const ByteSpan> segments,
                              std::shared_ptr<const void> owner);
  // Owns a copy of `bytes`.
  static Payload Copy(ByteSpan bytes);

  // Adds `other`'s segments after this payload's (no bytes are copied).
  void Append(const Payload& other);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  absl::Span<const ByteSpan> segments() const { return segments_; }

  // Copies bytes [offset, offset + out.size()) into `out`.
  // REQUIRES: offset + out.size() <= size().
  void CopyTo(size_t offset, absl::Span<uint8_t> out) const;

  // Reads `count` elements of format `from` starting at byte `offset` and writes them to `out`
  // in format `to`, across segment boundaries.
  // REQUIRES: offset + count * BytesPerElement(from) <= size().
  void ConvertTo(size_t offset, FloatFormat from, void* out, FloatFormat to, size_t count) const;

  // Bytes [offset, offset + length) of this payload, sharing its memory.
  // REQUIRES: offset + length <= size().
  Payload Subrange(size_t offset, size_t length) const;

  // A flat copy, for tests and small headers.
  std::string ToString() const;

 private:
  // Calls visit(piece) for the pieces of segments that make up [offset, offset + length).
  template <typename Visit>
  void ForEachPiece(size_t offset, size_t length, Visit&& visit) const;

  absl::InlinedVector<ByteSpan, 2> segments_;
  absl::InlinedVector<std::shared_ptr<const void>, 2> owners_;
  size_t size_ = 0;
};

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_PAYLOAD_H_
