// Initial weights of a partition from its tensor's Initializer (proto/ps.proto). Random rules
// draw each element from (seed, the element's index in the whole tensor), so the values do not
// depend on how the tensor is partitioned or on which shard computes them.
#ifndef HETPS_SERVER_INITIALIZER_H_
#define HETPS_SERVER_INITIALIZER_H_

#include "absl/status/statusor.h"
#include "common/aligned_buffer.h"
#include "common/partitioning.h"
#include "proto/ps.pb.h"

namespace hetps {
class ThreadPool;
}

namespace hetps::server {

// InvalidArgument for an unknown kind or bad parameters.
absl::Status ValidateInitializer(const hetps::v1::Initializer& init);

// The weights of partition `range` (zeros for INIT_KIND_VALUES, whose values arrive later).
// `pool` (may be null) spreads a large partition over its threads (a normal draw costs about
// 1 ns an element, vectorised: server/random_draws.h). ResourceExhausted when memory runs out.
// REQUIRES: ValidateInitializer(init).ok().
absl::StatusOr<AlignedBuffer> InitialWeights(const hetps::v1::Initializer& init,
                                             PartitionRange range, ThreadPool* pool = nullptr);
// The same into `weights` (range.size values): memory a partition holds already.
void FillInitialWeights(const hetps::v1::Initializer& init, PartitionRange range, float* weights,
                        ThreadPool* pool = nullptr);

}  // namespace hetps::server

#endif  // HETPS_SERVER_INITIALIZER_H_
