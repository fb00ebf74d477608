// gRPC credentials from TransportOptions' TLS files: plaintext when none is set.
#ifndef HETPS_TRANSPORT_GRPC_GRPC_CREDENTIALS_H_
#define HETPS_TRANSPORT_GRPC_GRPC_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace hetps::transport::grpc_internal {

// InvalidArgument when a file cannot be read, or a certificate comes without its key.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TransportOptions& options);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TransportOptions& options);

}  // namespace hetps::transport::grpc_internal

#endif  // HETPS_TRANSPORT_GRPC_GRPC_CREDENTIALS_H_
