#include "bench/security.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/auth_token.h"
#include "common/status_macros.h"

namespace hetps::bench {
namespace {

std::string RandomToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 8; ++i) absl::StrAppendFormat(&token, "%08x", device());
  return token;
}

bool Readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

ScratchFiles::~ScratchFiles() {
  for (const std::string& path : paths_) unlink(path.c_str());
}

absl::StatusOr<std::string> ScratchFiles::Write(const std::string& contents) {
  const char* base = std::getenv("TMPDIR");
  std::string path = std::string(base != nullptr ? base : "/tmp") + "/ps-bench-XXXXXX";
  const int fd = mkstemp(path.data());  // mode 0600
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create a file like ", path));
  paths_.push_back(path);
  const bool written =
      write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

absl::StatusOr<std::vector<SecuritySetting>> EmbeddedSecurity(const std::string& list,
                                                              const std::string& tls_dir,
                                                              const std::string& token_file,
                                                              ScratchFiles& scratch) {
  std::vector<SecuritySetting> settings;
  std::string token;
  std::string worker_token_file = token_file;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    SecuritySetting setting;
    setting.name = std::string(name);
    const bool with_token = name == "token" || name == "token+tls";
    const bool with_tls = name == "tls" || name == "token+tls";
    if (!with_token && !with_tls && name != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--security takes off, token, tls or token+tls (a list of them), not '", name, "'"));
    }
    if (with_token) {
      if (token.empty()) {
        if (token_file.empty()) {
          token = RandomToken();
          HETPS_ASSIGN_OR_RETURN(worker_token_file, scratch.Write(token + "\n"));
        } else {
          HETPS_ASSIGN_OR_RETURN(token, LoadAuthToken(token_file));
        }
      }
      setting.shard_auth_token = token;
      setting.auth_token_file = worker_token_file;
    }
    if (with_tls) {
      setting.shard_tls_cert_file = tls_dir + "/server.pem";
      setting.shard_tls_key_file = tls_dir + "/server.key";
      setting.tls_ca_file = tls_dir + "/ca.pem";
      for (const std::string* file :
           {&setting.shard_tls_cert_file, &setting.shard_tls_key_file, &setting.tls_ca_file}) {
        if (tls_dir.empty() || !Readable(*file)) {
          return absl::InvalidArgumentError(absl::StrCat("--security=", name,
                                                         " needs --tls_dir: a directory made by "
                                                         "deploy/tls/make_certs.sh (",
                                                         *file, " is not readable)"));
        }
      }
    }
    settings.push_back(setting);
  }
  if (settings.empty()) return absl::InvalidArgumentError("--security names no setting");
  return settings;
}

absl::StatusOr<SecuritySetting> ClusterSecurity(const std::string& token_file,
                                                const std::string& tls_ca_file,
                                                const std::string& tls_cert_file,
                                                const std::string& tls_key_file) {
  SecuritySetting setting;
  HETPS_ASSIGN_OR_RETURN(const std::string token, LoadAuthToken(token_file));
  setting.auth_token_file = token_file;
  setting.tls_ca_file = tls_ca_file;
  setting.tls_cert_file = tls_cert_file;
  setting.tls_key_file = tls_key_file;
  if (!token.empty() && !tls_ca_file.empty()) {
    setting.name = "token+tls";
  } else if (!token.empty()) {
    setting.name = "token";
  } else if (!tls_ca_file.empty()) {
    setting.name = "tls";
  }
  return setting;
}

}  // namespace hetps::bench
