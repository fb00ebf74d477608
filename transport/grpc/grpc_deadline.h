// GrpcDeadline(): a deadline of Now()'s clock (common/clock.h) as gRPC takes it, on gRPC's
// monotonic clock. absl::ToChronoTime() would give gRPC a wall-clock time, which a step of the
// wall clock moves (and Now() does not follow steps).
#ifndef HETPS_TRANSPORT_GRPC_GRPC_DEADLINE_H_
#define HETPS_TRANSPORT_GRPC_GRPC_DEADLINE_H_

#include <grpc/support/time.h>

#include <algorithm>

#include "absl/time/time.h"
#include "common/clock.h"

namespace hetps::transport {

inline gpr_timespec GrpcDeadline(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  const int64_t left = absl::ToInt64Nanoseconds(std::max(deadline - Now(), absl::ZeroDuration()));
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(left, GPR_TIMESPAN));
}

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_GRPC_GRPC_DEADLINE_H_
