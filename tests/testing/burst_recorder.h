// A transport that records which bursts its calls name (tests of transport::Request::burst_bytes).
#ifndef HETPS_TESTS_TESTING_BURST_RECORDER_H_
#define HETPS_TESTS_TESTING_BURST_RECORDER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing/wrapping_transport.h"
#include "transport/transport.h"

namespace hetps::testing {

// Passes calls on and records, per connection, the payload bytes and bursts
// (transport::Request::burst_bytes) of the calls of one method.
class BurstRecorder final : public WrappingTransport {
 public:
  struct Seen {
    size_t payload_bytes = 0;
    std::vector<size_t> bursts;
  };

  BurstRecorder(std::shared_ptr<transport::Transport> inner, uint32_t method)
      : WrappingTransport(std::move(inner)), method_(method) {}

  std::map<std::string, Seen> TakeSeen() {
    absl::MutexLock lock(&mu_);
    return std::exchange(seen_, {});
  }

 private:
  class Recording final : public transport::Connection {
   public:
    Recording(std::unique_ptr<transport::Connection> inner, BurstRecorder* recorder)
        : inner_(std::move(inner)), recorder_(recorder) {}
    void Call(transport::Request request, transport::ResponseCallback done) override {
      if (request.method == recorder_->method_) {
        absl::MutexLock lock(&recorder_->mu_);
        Seen& seen = recorder_->seen_[address()];
        seen.payload_bytes += request.payload.size();
        seen.bursts.push_back(request.burst_bytes);
      }
      inner_->Call(std::move(request), std::move(done));
    }
    void Shutdown() override { inner_->Shutdown(); }
    const std::string& address() const override { return inner_->address(); }

   private:
    const std::unique_ptr<transport::Connection> inner_;
    BurstRecorder* const recorder_;
  };

  std::unique_ptr<transport::Connection> Wrap(
      std::unique_ptr<transport::Connection> inner) override {
    return std::make_unique<Recording>(std::move(inner), this);
  }

  const uint32_t method_;
  absl::Mutex mu_;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

// What an operation of `total_bytes` split over `connections` connections must have named: on
// each connection several calls, each with that connection's share (all its payloads).
inline void ExpectEachCallNamesItsConnectionsShare(
    const std::map<std::string, BurstRecorder::Seen>& seen, size_t connections,
    size_t total_bytes) {
  ASSERT_EQ(seen.size(), connections);
  size_t total = 0;
  for (const auto& [address, calls] : seen) {
    ASSERT_GT(calls.bursts.size(), 1u) << address;
    for (size_t burst : calls.bursts) EXPECT_EQ(burst, calls.payload_bytes) << address;
    total += calls.payload_bytes;
  }
  EXPECT_EQ(total, total_bytes);
}

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_BURST_RECORDER_H_
