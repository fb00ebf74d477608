#include "tests/testing/etcd_process.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/etcd_client.h"
#include "tests/testing/ports.h"

namespace hetps::testing {

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

void EtcdTest::SetUp() {
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
  if (etcd.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << etcd.status();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  etcd_ = *std::move(etcd);
  absl::StatusOr<std::unique_ptr<server::EtcdClient>> client =
      server::EtcdClient::Connect(etcd_->endpoint(), call_timeout_);
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = *std::move(client);
}

}  // namespace hetps::testing
