// A request handler for transport tests that echoes, fails, stays silent or answers later,
// depending on the method, and requests for it.
#ifndef HETPS_TESTS_TRANSPORT_TEST_HANDLER_H_
#define HETPS_TESTS_TRANSPORT_TEST_HANDLER_H_

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace hetps::transport::test_calls {

enum TestMethod : uint32_t {
  kEcho = 1,
  kNeverReply = 2,
  kFail = 3,
  kReplyLater = 4,
  kDeadline = 5,
  kRecord = 6,
};

class TestHandler : public RequestHandler {
 public:
  ~TestHandler() override {
    for (auto& thread : threads_) thread.join();
    // Silent calls are answered at the end: a handler replies to every request once.
    for (auto& reply : held_) reply(absl::CancelledError("test over"));
  }

  std::vector<int> recorded() {
    absl::MutexLock lock(&mu_);
    return recorded_;
  }

  void HandleRequest(Request request, ReplyCallback reply) override {
    switch (request.method) {
      case kEcho: {
        Response response;
        response.header = request.header;
        response.payload = request.payload;
        reply(std::move(response));
        return;
      }
      case kNeverReply: {
        absl::MutexLock lock(&mu_);
        held_.push_back(std::move(reply));
        return;
      }
      case kFail:
        reply(absl::PermissionDeniedError("handler says no: " + request.header));
        return;
      case kReplyLater: {
        absl::MutexLock lock(&mu_);
        threads_.emplace_back([reply = std::move(reply), header = request.header]() mutable {
          absl::SleepFor(absl::Milliseconds(20));
          Response response;
          response.header = header;
          reply(std::move(response));
        });
        return;
      }
      case kRecord: {
        {
          absl::MutexLock lock(&mu_);
          recorded_.push_back(std::stoi(request.header));
        }
        reply(Response());
        return;
      }
      case kDeadline: {
        Response response;
        response.header = std::to_string(absl::ToInt64Milliseconds(request.deadline - absl::Now()));
        reply(std::move(response));
        return;
      }
    }
    reply(absl::UnimplementedError("unknown test method"));
  }

 private:
  absl::Mutex mu_;
  std::vector<ReplyCallback> held_;
  std::vector<int> recorded_;
  std::vector<std::thread> threads_;
};

inline Request MakeRequest(uint32_t method, std::string header,
                           absl::Duration timeout = absl::Seconds(10)) {
  Request request;
  request.method = method;
  request.header = std::move(header);
  request.deadline = absl::Now() + timeout;
  return request;
}

}  // namespace hetps::transport::test_calls

#endif  // HETPS_TESTS_TRANSPORT_TEST_HANDLER_H_
