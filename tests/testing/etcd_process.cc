#include "tests/testing/etcd_process.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/etcd_client.h"

namespace hetps::testing {
namespace {

// A port nothing listens on now (the kernel's pick for a socket bound to port 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

std::string EtcdProcess::Binary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

std::string EtcdProcess::log() const { return ReadFile(dir_.path() + "/etcd.log"); }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  const std::string binary = Binary();
  if (binary.empty()) {
    return absl::NotFoundError(
        "etcd is not installed (Debian's etcd-server; deploy/install_deps.sh installs it)");
  }
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  // Another process may take a picked port before etcd binds it: then try other ports.
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const std::string client = absl::StrCat("http://127.0.0.1:", FreePort());
    const std::string peer = absl::StrCat("http://127.0.0.1:", FreePort());
    etcd->endpoint_ = client.substr(7);
    etcd->process_ = std::make_unique<Subprocess>(
        std::vector<std::string>{
            binary, "--name=hetps-test", "--data-dir=" + etcd->dir_.path() + "/data",
            "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
            "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
            "--initial-cluster=hetps-test=" + peer,
            // Fast elections allow leases of 1 s (etcd's shortest
            // is 1.5 election timeouts): failover tests stay short.
            "--heartbeat-interval=20", "--election-timeout=200", "--log-level=warn"},
        etcd->dir_.path() + "/etcd.log");
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline && etcd->process_->running()) {
      absl::StatusOr<std::unique_ptr<server::EtcdClient>> client_of =
          server::EtcdClient::Connect(etcd->endpoint_, absl::Milliseconds(500));
      if (client_of.ok() && (*client_of)->Get("/hetps-test/ready").ok()) return etcd;
    }
    etcd->process_.reset();  // ends it
  }
  return absl::UnavailableError(absl::StrCat("etcd did not start: ", etcd->log()));
}

}  // namespace hetps::testing
