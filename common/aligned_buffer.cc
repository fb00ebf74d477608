#include "common/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdint>
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
  // Large buffers (weights, gradients, copies) on huge pages where the kernel offers them
  // (transparent_hugepage=madvise): 512 times fewer page faults when they are first written.
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(memory) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(memory) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return buffer;
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::AllocateZeroed(size_t num_floats) {
  absl::StatusOr<AlignedBuffer> buffer = Allocate(num_floats);
  if (buffer.ok() && num_floats > 0) std::memset(buffer->data(), 0, buffer->size_bytes());
  return buffer;
}

}  // namespace hetps
