// AlignedBuffer: a heap array of floats that starts on a 64-byte boundary (a cache line, one
// AVX-512 vector), for parameters, gradients and optimizer state. In the server the allocation
// comes from jemalloc (linked as the process allocator). Move-only; not thread-safe.
//
//   HETPS_ASSIGN_OR_RETURN(AlignedBuffer weights, AlignedBuffer::Allocate(n));
#ifndef HETPS_COMMON_ALIGNED_BUFFER_H_
#define HETPS_COMMON_ALIGNED_BUFFER_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetps {

inline constexpr size_t kBufferAlignment = 64;

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Uninitialised storage for `num_floats` floats; ResourceExhausted when memory runs out.
  static absl::StatusOr<AlignedBuffer> Allocate(size_t num_floats);
  // The same, filled with zeros.
  static absl::StatusOr<AlignedBuffer> AllocateZeroed(size_t num_floats);

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t size_bytes() const { return size_ * sizeof(float); }
  absl::Span<float> span() { return absl::MakeSpan(data_, size_); }
  absl::Span<const float> span() const { return absl::MakeConstSpan(data_, size_); }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hetps

#endif  // HETPS_COMMON_ALIGNED_BUFFER_H_
