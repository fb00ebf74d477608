// Small helpers for decoding request headers and encoding response headers.
#ifndef HETPS_SERVER_REQUEST_UTIL_H_
#define HETPS_SERVER_REQUEST_UTIL_H_

#include <sched.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/half.h"
#include "proto/ps.pb.h"
#include "transport/transport.h"

namespace hetps::server {

// Requests (or replicated batches) over partitions of at most this many bytes may run on the
// receiving thread (when their owner thread is idle). Waking the owner costs more than the
// update up to about this size: on two CPUs the woken owner waited for one, and 256 KiB
// push+pulls took 130 to 180 us where their echo took 50 (bench/PERFORMANCE.md).
inline constexpr uint64_t kRunHereBytes = 1 << 20;

// Called by a thread that has just posted a larger request's work to owner threads: gives up
// its CPU, so that an owner sharing that CPU starts now rather than when this thread's time
// slice ends. Traced on a shard pinned to one CPU: its UCX thread kept taking in the messages
// of a 32 MiB push-pull for 4 to 7 ms at a stretch while the owners waited, so no answer went
// back meanwhile (bench/PERFORMANCE.md, "Owners first"). Where no other thread waits for this
// CPU, the call returns at once (a system call, against an update of over a mebibyte).
inline void LetOwnersRun() { sched_yield(); }

// Parses `bytes` into `message`; InvalidArgument when they are not a `Message`.
template <typename Message>
absl::Status ParseHeaderInto(const std::string& bytes, Message& message) {
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->name(), " header"));
  }
  return absl::OkStatus();
}

template <typename Message>
absl::StatusOr<Message> ParseHeader(const std::string& bytes) {
  Message message;
  if (absl::Status status = ParseHeaderInto(bytes, message); !status.ok()) return status;
  return message;
}

// The element format of a wire dtype; InvalidArgument for an unknown one.
inline absl::StatusOr<FloatFormat> FormatOf(hetps::v1::DType dtype) {
  switch (dtype) {
    case hetps::v1::DTYPE_FP32:
      return FloatFormat::kFp32;
    case hetps::v1::DTYPE_BF16:
      return FloatFormat::kBf16;
    case hetps::v1::DTYPE_FP16:
      return FloatFormat::kFp16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", dtype));
  }
}

// When a shard stops waiting for something a request waits on (other workers' pushes, a
// barrier) whose caller gives up at `deadline`: a little before, so that the caller gets the
// shard's explanation (who is missing) instead of its own "no response".
inline absl::Time AnswerBy(absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return deadline;
  const absl::Duration margin = std::min(absl::Seconds(1), (deadline - now) / 10);
  return deadline - std::max(margin, absl::ZeroDuration());
}

// "1, 3, 4" for a list of worker ranks, shortened for large jobs ("0, 1, ... 9 (40 in all)").
inline std::string DescribeRanks(const std::vector<uint32_t>& ranks) {
  constexpr size_t kShown = 10;
  if (ranks.size() <= kShown) return absl::StrJoin(ranks, ", ");
  return absl::StrCat(absl::StrJoin(ranks.begin(), ranks.begin() + kShown, ", "), ", ... (",
                      ranks.size(), " in all)");
}

template <typename Message>
transport::Response HeaderResponse(const Message& message) {
  transport::Response response;
  response.header = message.SerializeAsString();
  return response;
}

}  // namespace hetps::server

#endif  // HETPS_SERVER_REQUEST_UTIL_H_
