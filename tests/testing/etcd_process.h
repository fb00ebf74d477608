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

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_ETCD_PROCESS_H_
