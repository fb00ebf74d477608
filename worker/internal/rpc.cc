#include "worker/internal/rpc.h"

#include <algorithm>
#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace hetps::internal {

absl::StatusOr<std::vector<transport::Response>> CallEach(
    transport::Transport& transport, const std::vector<std::shared_ptr<ShardChannel>>& channels,
    uint32_t method, const std::vector<std::string>& headers,
    std::vector<transport::Payload> payloads, absl::Time deadline) {
  struct Gather {
    absl::Mutex mu;
    std::atomic<bool> all_answered{false};  // remaining == 0, for Drive to poll
    size_t remaining ABSL_GUARDED_BY(mu);
    std::vector<absl::StatusOr<transport::Response>> results ABSL_GUARDED_BY(mu);
  };
  auto gather = std::make_shared<Gather>();
  {
    absl::MutexLock lock(&gather->mu);
    gather->remaining = channels.size();
    gather->all_answered.store(channels.empty());
    gather->results.resize(channels.size(), absl::UnknownError("no answer"));
  }
  payloads.resize(channels.size());
  for (size_t i = 0; i < channels.size(); ++i) {
    channels[i]->Call(method, headers[i], std::move(payloads[i]), deadline,
                      [gather, i](absl::StatusOr<transport::Response> result) {
                        absl::MutexLock lock(&gather->mu);
                        gather->results[i] = std::move(result);
                        if (--gather->remaining == 0) gather->all_answered.store(true);
                      });
  }
  transport.Drive([&gather] { return gather->all_answered.load(); });
  absl::MutexLock lock(&gather->mu);
  auto all_answered = [&gather]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gather->mu) {
    return gather->remaining == 0;
  };
  // Each call ends by its deadline; the wait is bounded by the calls themselves.
  gather->mu.Await(absl::Condition(&all_answered));
  std::vector<transport::Response> responses;
  for (auto& result : gather->results) {
    if (!result.ok()) return result.status();
    responses.push_back(*std::move(result));
  }
  return responses;
}

absl::StatusOr<DropResult> DropOnEach(transport::Transport& transport,
                                      const std::vector<std::shared_ptr<ShardChannel>>& channels,
                                      const hetps::v1::DropRequest& request, absl::Time deadline) {
  const std::vector<std::string> headers(channels.size(), request.SerializeAsString());
  HETPS_ASSIGN_OR_RETURN(
      std::vector<transport::Response> responses,
      CallEach(transport, channels, hetps::v1::METHOD_DROP, headers, {}, deadline));
  DropResult result;
  for (const transport::Response& response : responses) {
    hetps::v1::DropResponse dropped;
    if (!dropped.ParseFromString(response.header)) {
      return absl::InternalError("malformed drop response");
    }
    result.tensors = std::max(result.tensors, dropped.dropped());
    result.released_bytes += dropped.released_bytes();
  }
  return result;
}

}  // namespace hetps::internal
