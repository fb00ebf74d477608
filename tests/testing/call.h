// Blocking calls and an echo handler for transport-level tests.
#ifndef HETPS_TESTS_TESTING_CALL_H_
#define HETPS_TESTS_TESTING_CALL_H_

#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "transport/transport.h"

namespace hetps::testing {

// Answers every request with its own header and payload.
class EchoHandler : public transport::RequestHandler {
 public:
  void HandleRequest(transport::Request request, transport::ReplyCallback reply) override {
    transport::Response response;
    response.header = request.header;
    response.payload = request.payload;
    reply(std::move(response));
  }
};

// Sends `request` and waits for its outcome, driving `drive` meanwhile if given (see
// Transport::Drive); the request's deadline bounds the wait.
inline absl::StatusOr<transport::Response> CallAndWait(transport::Connection& connection,
                                                       transport::Request request,
                                                       transport::Transport* drive = nullptr) {
  absl::Notification done;
  absl::StatusOr<transport::Response> result;
  connection.Call(std::move(request), [&](absl::StatusOr<transport::Response> r) {
    result = std::move(r);
    done.Notify();
  });
  if (drive != nullptr) drive->Drive([&done] { return done.HasBeenNotified(); });
  done.WaitForNotification();
  return result;
}

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_CALL_H_
