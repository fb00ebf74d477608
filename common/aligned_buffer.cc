#include "common/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace hetps {

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t num_floats) {
  AlignedBuffer buffer;
  if (num_floats == 0) return buffer;
  if (num_floats > (SIZE_MAX - kBufferAlignment) / sizeof(float)) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate %d floats", num_floats));
  }
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t bytes =
      (num_floats * sizeof(float) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  void* memory = std::aligned_alloc(kBufferAlignment, bytes);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("out of memory allocating %d bytes", bytes));
  }
  buffer.data_ = static_cast<float*>(memory);
  buffer.size_ = num_floats;
  return buffer;
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::AllocateZeroed(size_t num_floats) {
  absl::StatusOr<AlignedBuffer> buffer = Allocate(num_floats);
  if (buffer.ok() && num_floats > 0) std::memset(buffer->data(), 0, buffer->size_bytes());
  return buffer;
}

}  // namespace hetps
