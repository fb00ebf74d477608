// GrpcConnection: the client end of a gRPC connection. Calls to one server share one
// bidirectional stream (a callback-API reactor), multiplexed by call id; one write is in flight
// at a time and the rest queue behind it. If the stream breaks, its outstanding calls fail with
// Unavailable (or the status gRPC reports) and the next call opens a new stream.
//
// Calls of bursts that move at least kBulkBurstBytes (Request::burst_bytes) take a second
// stream, on a channel of its own to the bulk port that the server names in the first stream's
// initial metadata (TransportOptions::grpc_bulk_port), once that channel is connected; until
// then, and whenever it is not, they take the first. Responses may come back in any order.
#ifndef HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_
#define HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/timer_queue.h"
#include "transport/internal/call_tracker.h"
#include "transport/transport.h"

namespace hetps::transport::grpc_internal {

class ClientStream;

class GrpcConnection final : public Connection {
 public:
  // Opens the bulk channel to an address (host:bulk port).
  using ChannelOpener = std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

  // REQUIRES: `timers` outlives the connection.
  // `greeting`: sent with every stream it opens (ConnectOptions::greeting).
  GrpcConnection(std::string address, std::shared_ptr<grpc::Channel> channel,
                 ChannelOpener open_bulk, std::string greeting, size_t max_message_bytes,
                 TimerQueue* timers);
  ~GrpcConnection() override;

  void Call(Request request, ResponseCallback done) override;
  void Shutdown() override;
  const std::string& address() const override { return address_; }

 private:
  // A channel and the stream open on it.
  struct Lane {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    std::shared_ptr<ClientStream> stream;
  };

  // The live stream for a call (`large`: it may take the bulk lane), opening a new one if
  // there is none; null after Shutdown.
  std::shared_ptr<ClientStream> CurrentStream(bool large);
  // Whether the bulk lane is connected; opens its channel once its port is known, and asks it
  // to connect when it is not.
  bool BulkReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  const ChannelOpener open_bulk_;
  const std::string greeting_;
  const size_t max_message_bytes_;
  TimerQueue* const timers_;
  const std::shared_ptr<internal::CallTracker> tracker_;
  // The bulk port the server named (0: none yet), set by the first lane's streams.
  const std::shared_ptr<std::atomic<int>> bulk_port_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  Lane first_ ABSL_GUARDED_BY(mu_);
  Lane bulk_ ABSL_GUARDED_BY(mu_);
  int bulk_lane_port_ ABSL_GUARDED_BY(mu_) = 0;  // where bulk_.channel goes
  // Bulk lanes to a port the server no longer names (it restarted), kept until Shutdown: a
  // channel must not be let go of from a gRPC thread, where its last stream ends.
  std::vector<Lane> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::transport::grpc_internal

#endif  // HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_
