#include "server/initializer.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/simd.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "server/random_draws.h"

namespace hetps::server {
namespace {

struct FillUniform {
  HETPS_KERNEL static void Run(uint64_t seed, uint64_t begin, double low, double width, float* w,
                               size_t first, size_t end) {
    for (size_t i = first; i < end; ++i) {
      w[i] = static_cast<float>(low + width * UniformAt(seed, begin + i));
    }
  }
};

struct FillNormal {
  HETPS_KERNEL static void Run(uint64_t seed, uint64_t begin, double mean, double stddev, float* w,
                               size_t first, size_t end) {
    for (size_t i = first; i < end; ++i) {
      w[i] = static_cast<float>(mean + stddev * StandardNormalAt(seed, begin + i));
    }
  }
};

// Elements [first, end) of the partition that starts at global element `begin`, into `w`.
void Fill(const hetps::v1::Initializer& init, uint64_t begin, float* w, size_t first, size_t end) {
  switch (init.kind()) {
    case hetps::v1::INIT_KIND_UNIFORM:
      RunKernel<FillUniform>(init.seed(), begin, init.a(), init.b() - init.a(), w, first, end);
      break;
    case hetps::v1::INIT_KIND_NORMAL:
      RunKernel<FillNormal>(init.seed(), begin, init.a(), init.b(), w, first, end);
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
