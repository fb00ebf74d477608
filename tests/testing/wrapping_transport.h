// A test transport that passes everything on to another one and wraps each connection it makes
// (test doubles that record or hold back calls: testing/burst_recorder.h, ...).
#ifndef HETPS_TESTS_TESTING_WRAPPING_TRANSPORT_H_
#define HETPS_TESTS_TESTING_WRAPPING_TRANSPORT_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace hetps::testing {

class WrappingTransport : public transport::Transport {
 public:
  explicit WrappingTransport(std::shared_ptr<transport::Transport> inner)
      : inner_(std::move(inner)) {}

  absl::string_view name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<transport::Listener>> Listen(
      const std::string& address, transport::RequestHandler* handler) override {
    return inner_->Listen(address, handler);
  }
  using transport::Transport::Connect;
  absl::StatusOr<std::unique_ptr<transport::Connection>> Connect(
      const std::string& address, absl::Time deadline,
      const transport::ConnectOptions& options) override {
    auto inner = inner_->Connect(address, deadline, options);
    if (!inner.ok()) return inner.status();
    return Wrap(*std::move(inner));
  }

 protected:
  // The connection handed out in place of `inner`, the inner transport's own.
  virtual std::unique_ptr<transport::Connection> Wrap(
      std::unique_ptr<transport::Connection> inner) = 0;

  const std::shared_ptr<transport::Transport> inner_;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_WRAPPING_TRANSPORT_H_
