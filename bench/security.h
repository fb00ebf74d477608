// How a ps-bench run secures its connections: the job's token and TLS, for the embedded shards
// and for the workers, so that one run measures them beside plaintext (see --security).
#ifndef HETPS_BENCH_SECURITY_H_
#define HETPS_BENCH_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps::bench {

struct SecuritySetting {
  std::string name = "off";  // off | token | tls | token+tls: what the rows say
  // Embedded shards: the token they require ("" none) and their certificate ("" plaintext).
  std::string shard_auth_token;
  std::string shard_tls_cert_file;
  std::string shard_tls_key_file;
  // Workers (ClientOptions' fields of the same names).
  std::string auth_token_file;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Files a run made for itself (a random token), removed when this goes.
class ScratchFiles {
 public:
  ScratchFiles() = default;
  ScratchFiles(const ScratchFiles&) = delete;
  ScratchFiles& operator=(const ScratchFiles&) = delete;
  ~ScratchFiles();
  // A new file holding `contents`, readable by this user only.
  absl::StatusOr<std::string> Write(const std::string& contents);

 private:
  std::vector<std::string> paths_;
};

// Embedded mode: one setting per entry of `list` ("off,token+tls"). The token is the one in
// `token_file`, else a random one written to `scratch`; TLS needs `tls_dir` (made by
// deploy/tls/make_certs.sh). InvalidArgument names what is wrong.
absl::StatusOr<std::vector<SecuritySetting>> EmbeddedSecurity(const std::string& list,
                                                              const std::string& tls_dir,
                                                              const std::string& token_file,
                                                              ScratchFiles& scratch);

// With --servers: what a worker presents, as ClientOptions would take it (the token from
// `token_file` or $HETPS_AUTH_TOKEN; TLS when `tls_ca_file` is set).
absl::StatusOr<SecuritySetting> ClusterSecurity(const std::string& token_file,
                                                const std::string& tls_ca_file,
                                                const std::string& tls_cert_file,
                                                const std::string& tls_key_file);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_SECURITY_H_
