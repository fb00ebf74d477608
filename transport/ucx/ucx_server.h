// UcxListener: the server side of the UCX transport (see ucx_transport.h).
#ifndef HETPS_TRANSPORT_UCX_UCX_SERVER_H_
#define HETPS_TRANSPORT_UCX_UCX_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_frame.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

// Transport-level methods (proto/frame.proto): the bootstrap, over gRPC, and the goodbye a
// peer that leaves sends over UCX.
inline constexpr uint32_t kBootstrapMethod = 0x40000001;
inline constexpr uint32_t kGoodbyeMethod = 0x40000002;

class UcxListener final : public Listener {
 public:
  // Listens on gRPC at `address` (through `grpc`) and on UCX.
  // REQUIRES: `handler` outlives the listener.
  static absl::StatusOr<std::unique_ptr<UcxListener>> Start(const std::string& address,
                                                            RequestHandler* handler,
                                                            const UcxOptions& options,
                                                            const std::shared_ptr<Transport>& grpc);
  ~UcxListener() override;

  std::string address() const override;
  void Shutdown() override;

 private:
  struct Core;
  class Front;

  UcxListener() = default;
  // The worker that takes the next bootstrap: the newest one, or a new one once enough clients
  // have left it (UcxOptions::server_clients_per_worker). Ends older ones that nobody uses any
  // more. Not from a worker's own thread (ending one joins its thread). Null once shut down.
  std::shared_ptr<Core> CoreForBootstrap();
  // Answers a probe (UcxBootstrapRequest::address_only) with the address the client knows if
  // that worker still serves, else the newest one's.
  void AnswerProbe(const std::string& known_address, ReplyCallback reply);

  RequestHandler* handler_ = nullptr;
  UcxOptions options_;
  absl::Mutex mu_;
  // Oldest first; the last takes bootstraps. Each has its own UCX worker and peers.
  std::vector<std::shared_ptr<Core>> cores_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Front> front_;
  std::unique_ptr<Listener> grpc_listener_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_SERVER_H_
