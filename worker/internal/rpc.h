// CallEach: sends one request to each of several shards at once and waits for all the answers.
// Used for the control calls (hello, declare, barrier, stats). Bounded: every call has
// `deadline`.
#ifndef HETPS_WORKER_INTERNAL_RPC_H_
#define HETPS_WORKER_INTERNAL_RPC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "transport/transport.h"
#include "worker/client.h"
#include "worker/internal/shard_channel.h"

namespace hetps::internal {

// Request i (headers[i], payloads[i] if given) goes to channels[i]. Returns the responses in the
// same order, or the first error. Drives `transport` while it waits (see Transport::Drive).
absl::StatusOr<std::vector<transport::Response>> CallEach(
    transport::Transport& transport, const std::vector<std::shared_ptr<ShardChannel>>& channels,
    uint32_t method, const std::vector<std::string>& headers,
    std::vector<transport::Payload> payloads, absl::Time deadline);

// Sends `request` to every shard of `channels` and adds up their answers.
absl::StatusOr<DropResult> DropOnEach(transport::Transport& transport,
                                      const std::vector<std::shared_ptr<ShardChannel>>& channels,
                                      const hetps::v1::DropRequest& request, absl::Time deadline);

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_RPC_H_
