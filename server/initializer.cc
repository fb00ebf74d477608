#include "server/initializer.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"

namespace hetps::server {
namespace {

// A uniform double in [0, 1) from (seed, counter).
double UniformAt(uint64_t seed, uint64_t counter) {
  return static_cast<double>(Mix64(seed ^ Mix64(counter)) >> 11) * 0x1.0p-53;
}

// Elements [first, end) of the partition that starts at global element `begin`, into `w`.
void Fill(const hetps::v1::Initializer& init, uint64_t begin, float* w, size_t first, size_t end) {
  switch (init.kind()) {
    case hetps::v1::INIT_KIND_UNIFORM:
      for (size_t i = first; i < end; ++i) {
        const double u = UniformAt(init.seed(), begin + i);
        w[i] = static_cast<float>(init.a() + (init.b() - init.a()) * u);
      }
      break;
    case hetps::v1::INIT_KIND_NORMAL:
      for (size_t i = first; i < end; ++i) {
        // Box-Muller from two uniforms of this element; 1 - u keeps the log finite.
        const uint64_t global = begin + i;
        const double u1 = 1.0 - UniformAt(init.seed(), 2 * global);
        const double u2 = UniformAt(init.seed(), 2 * global + 1);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        w[i] = static_cast<float>(init.a() + init.b() * z);
      }
      break;
    default:  // constant; unspecified and values (set later) start as zeros
      std::fill(w + first, w + end, static_cast<float>(init.a()));
      break;
  }
}

// Below this many elements a partition is filled on the calling thread alone.
constexpr size_t kParallelInitElements = size_t{1} << 18;

}  // namespace

absl::Status ValidateInitializer(const hetps::v1::Initializer& init) {
  if (!std::isfinite(init.a()) || !std::isfinite(init.b())) {
    return absl::InvalidArgumentError("initializer parameters must be finite");
  }
  switch (init.kind()) {
    case hetps::v1::INIT_KIND_UNSPECIFIED:
    case hetps::v1::INIT_KIND_CONSTANT:
    case hetps::v1::INIT_KIND_VALUES:
      return absl::OkStatus();
    case hetps::v1::INIT_KIND_UNIFORM:
      if (!(init.a() < init.b())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("uniform initializer needs a < b, got [%g, %g)", init.a(), init.b()));
      }
      return absl::OkStatus();
    case hetps::v1::INIT_KIND_NORMAL:
      if (init.b() < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("normal initializer needs stddev >= 0, got %g", init.b()));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown initializer kind %d", init.kind()));
  }
}

absl::StatusOr<AlignedBuffer> InitialWeights(const hetps::v1::Initializer& init,
                                             PartitionRange range, ThreadPool* pool) {
  HETPS_ASSIGN_OR_RETURN(AlignedBuffer weights, AlignedBuffer::Allocate(range.size));
  FillInitialWeights(init, range, weights.data(), pool);
  return weights;
}

void FillInitialWeights(const hetps::v1::Initializer& init, PartitionRange range, float* weights,
                        ThreadPool* pool) {
  if (pool != nullptr && range.size >= kParallelInitElements) {
    // Pieces of whole cache lines: no two threads write one.
    pool->ParallelFor(range.size, kBufferAlignment / sizeof(float), [&](size_t first, size_t end) {
      Fill(init, range.begin, weights, first, end);
    });
  } else {
    Fill(init, range.begin, weights, 0, range.size);
  }
}

}  // namespace hetps::server
