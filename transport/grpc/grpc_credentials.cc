#include "transport/grpc/grpc_credentials.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hetps::transport::grpc_internal {
namespace {

// The file's contents; "" for no file.
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (in) bytes << in.rdbuf();
  if (!in || bytes.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " ", path));
  }
  return bytes.str();
}

struct Pems {
  std::string cert, key, ca;
};

// The three files of `options`, read; a certificate always with its key.
absl::StatusOr<Pems> ReadPems(const TransportOptions& options) {
  absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "certificate");
  absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "key");
  absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "CA certificate");
  for (const auto* file : {&cert, &key, &ca}) {
    if (!file->ok()) return file->status();
  }
  if (cert->empty() != key->empty()) {
    return absl::InvalidArgumentError(
        "a TLS certificate and its key go together: set both files or neither");
  }
  return Pems{*std::move(cert), *std::move(key), *std::move(ca)};
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TransportOptions& options) {
  absl::StatusOr<Pems> pems = ReadPems(options);
  if (!pems.ok()) return pems.status();
  if (pems->cert.empty()) {
    if (!pems->ca.empty()) {
      return absl::InvalidArgumentError(
          "a TLS CA for client certificates needs the server's own certificate and key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl(
      pems->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                       : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = pems->ca;
  ssl.pem_key_cert_pairs.push_back({pems->key, pems->cert});
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TransportOptions& options) {
  absl::StatusOr<Pems> pems = ReadPems(options);
  if (!pems.ok()) return pems.status();
  if (pems->ca.empty()) {
    if (!pems->cert.empty()) {
      return absl::InvalidArgumentError(
          "a TLS client certificate needs the CA that verifies the server (tls_ca_file)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pems->ca;
  ssl.pem_private_key = pems->key;
  ssl.pem_cert_chain = pems->cert;
  return grpc::SslCredentials(ssl);
}

}  // namespace hetps::transport::grpc_internal
