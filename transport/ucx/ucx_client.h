// The client side of the UCX transport (see ucx_transport.h): a UcxConnection per server,
// all of a transport's connections on one client worker.
#ifndef HETPS_TRANSPORT_UCX_UCX_CLIENT_H_
#define HETPS_TRANSPORT_UCX_UCX_CLIENT_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/timer_queue.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

struct ClientCore;

// The worker a transport's connections share, and the connections it routes responses to.
struct ClientWorker {
  static absl::StatusOr<std::unique_ptr<ClientWorker>> Create(const UcxOptions& options);
  // The worker's thread runs the response handler, which reads `connections`: it must stop
  // before `connections` goes (members are destroyed last to first, so it would go first and a
  // late response would probe a destroyed map: seen as a process hanging at exit). Stopped in
  // place, not reset: tasks it runs while stopping still reach it through `worker`.
  ~ClientWorker() {
    if (worker != nullptr) worker->Stop();
  }

  std::unique_ptr<UcxWorker> worker;
  // UCX may pick memory-mapped transports for this worker (transport/ucx/shared_memory.h).
  bool maps_memory = true;
  std::atomic<uint64_t> next_connection{1};
  // Only by the thread holding the worker: connections by their number (responses carry it).
  absl::flat_hash_map<uint64_t, std::weak_ptr<ClientCore>> connections;
};

class UcxConnection final : public Connection {
 public:
  // Bootstraps over gRPC at `address` and opens a UCX endpoint to the server. While connected,
  // it checks every keepalive_interval, and every second while calls wait, that the server
  // answers over the bootstrap connection (UCX's own peer failure detection is off, see
  // CreateEndpoint).
  // REQUIRES: `client_worker` and `timers` outlive the connection.
  static absl::StatusOr<std::unique_ptr<UcxConnection>> Connect(
      const std::string& address, absl::Time deadline, const ConnectOptions& connect,
      ClientWorker* client_worker, const std::shared_ptr<Transport>& grpc, TimerQueue* timers,
      const UcxOptions& options);
  ~UcxConnection() override;

  void Call(Request request, ResponseCallback done) override;
  void Shutdown() override;
  const std::string& address() const override;

  // Response sinks held for calls not answered yet (tests: none may outlive its call).
  size_t HeldSinksForTesting();

 private:
  explicit UcxConnection(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}

  std::shared_ptr<ClientCore> core_;
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_CLIENT_H_
