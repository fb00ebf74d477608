// GrpcListener: a gRPC server with one generic callback service. Each client connection opens
// one bidirectional stream (a ServerStream reactor, see grpc_listener.cc) that reads request
// frames, hands them to the RequestHandler, and writes the replies back as they come, one write
// in flight at a time. A second server, on the bulk port, serves the streams of large calls
// (TransportOptions::grpc_bulk_port); its port goes to every client in the first stream's
// initial metadata.
#ifndef HETPS_TRANSPORT_GRPC_GRPC_LISTENER_H_
#define HETPS_TRANSPORT_GRPC_GRPC_LISTENER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/transport.h"

namespace hetps::transport::grpc_internal {

class GrpcListener final : public Listener {
 public:
  // REQUIRES: `handler` outlives the listener.
  static absl::StatusOr<std::unique_ptr<GrpcListener>> Start(const std::string& address,
                                                             RequestHandler* handler,
                                                             const TransportOptions& options);
  ~GrpcListener() override;

  std::string address() const override { return address_; }
  void Shutdown() override;

 private:
  class Service;

  GrpcListener() = default;

  std::string address_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  // The bulk port's server (TransportOptions::grpc_bulk_port); null without one.
  std::unique_ptr<Service> bulk_service_;
  std::unique_ptr<grpc::Server> bulk_server_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace hetps::transport::grpc_internal

#endif  // HETPS_TRANSPORT_GRPC_GRPC_LISTENER_H_
