// EtcdProcess: a real etcd (Debian's etcd-server) for one test, on 127.0.0.1 with ports picked
// for it and its own data directory, stopped by PID when this goes out of scope.
//
//   auto etcd = EtcdProcess::Start();
//   if (!etcd.ok()) GTEST_SKIP() << etcd.status();   // only when etcd is not installed
//   ... (*etcd)->endpoint() ...
#ifndef HETPS_TESTS_TESTING_ETCD_PROCESS_H_
#define HETPS_TESTS_TESTING_ETCD_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "tests/testing/subprocess.h"

namespace hetps::testing {

class EtcdProcess {
 public:
  // The etcd program, or empty when it is not installed.
  static std::string Binary();
  // Starts etcd and waits (bounded) until it serves. NotFound when etcd is not installed.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start();

  // "127.0.0.1:port" of its client URL.
  const std::string& endpoint() const { return endpoint_; }
  Subprocess& process() { return *process_; }
  std::string log() const;

 private:
  EtcdProcess() = default;

  ScopedTempDir dir_;
  std::string endpoint_;
  std::unique_ptr<Subprocess> process_;
};

// A test with an etcd of its own and a client of it; skipped where etcd is not installed.
class EtcdTest : public ::testing::Test {
 protected:
  explicit EtcdTest(absl::Duration call_timeout = absl::Seconds(5)) : call_timeout_(call_timeout) {}
  void SetUp() override;

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<server::EtcdClient> client_;

 private:
  const absl::Duration call_timeout_;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_ETCD_PROCESS_H_
