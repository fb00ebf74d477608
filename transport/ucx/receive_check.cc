// UcxWorker's receive checks (see ucx_worker.h, "Receive checks").
#include <sys/epoll.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/log.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

namespace {
// Rounds of progress that let a check (or cancellations) through a queue that is not stuck:
// it holds 64 messages at most, and a round reads up to 16.
constexpr int kCheckRounds = 1000;
}  // namespace

void UcxWorker::CheckReceiving() {
  if (checks_received_ < checks_sent_) {
    // Sent an interval ago: unless the queue is stuck it has arrived, or waits behind others.
    // (Only here does the checker progress: a check that found the queue full goes in now.)
    const bool was_queued = check_queued_;
    for (int round = 0; round < kCheckRounds && checks_received_ < checks_sent_; ++round) {
      Progress();
      ucp_worker_progress(checker_);
    }
    if (checks_received_ < checks_sent_) {
      // In the queue and not read: stuck. Not in it yet (the queue full all along): stuck
      // unless other messages were read meanwhile (senders that keep it full).
      if (was_queued || arrivals_ == arrivals_at_check_) {
        Renew();
        return;
      }
      arrivals_at_check_ = arrivals_;
      return;  // the same check, at the next interval
    }
  }
  SendReceiveCheck();
}

void UcxWorker::StartChecker() {
  std::string unused_address;
  int unused_fd = -1;
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  const std::string own = address();
  params.address = reinterpret_cast<const ucp_address_t*>(own.data());
  absl::Status created = CreateUcpWorker(&checker_, &unused_address, &unused_fd);
  if (created.ok() && ucp_ep_create(checker_, &params, &checker_ep_) != UCS_OK) {
    created = absl::UnavailableError("ucp_ep_create failed");
  }
  if (!created.ok()) {
    LogWarning("ucx: %s: no receive checks: %s", name_, created.message());
    if (checker_ != nullptr) ucp_worker_destroy(std::exchange(checker_, nullptr));
    checker_ep_ = nullptr;
  }
}

void UcxWorker::SendReceiveCheck() {
  if (checker_ == nullptr) return;  // it did not start
  // UCX 1.13 reads the header until the send completes: it lives until then.
  struct Check {
    uint64_t number;
    UcxWorker* worker;
  };
  auto* check = new Check{++checks_sent_, this};
  check_queued_ = false;
  arrivals_at_check_ = arrivals_;
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = check;
  param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    auto* sent = static_cast<Check*>(user_data);
    // Not after a renewal (the checker's end cancels it): the worker checks afresh then.
    if (status == UCS_OK && sent->number == sent->worker->checks_sent_) {
      sent->worker->check_queued_ = true;
    }
    delete sent;
    ucp_request_free(request);
  };
  const ucs_status_ptr_t request = ucp_am_send_nbx(checker_ep_, kReceiveCheckAm, &check->number,
                                                   sizeof(check->number), nullptr, 0, &param);
  if (!UCS_PTR_IS_PTR(request)) {
    check_queued_ = request == nullptr;
    delete check;
  }
  ucp_worker_progress(checker_);
}

void UcxWorker::Renew() {
  std::string address;
  int event_fd = -1;
  ucp_worker_h fresh = nullptr;
  if (absl::Status created = CreateUcpWorker(&fresh, &address, &event_fd); !created.ok()) {
    LogError("ucx: %s: the receive queue is stuck and no new worker starts (%s); trying again",
             name_, created.message());
    return;
  }
  LogWarning(
      "ucx: %s: messages no longer reach this worker over shared memory (a peer killed while it "
      "sent leaves the receive queue stuck): its connections start again on a new worker",
      name_);
  {
    // Before the owner's hook: connections it fails may bootstrap again at once.
    absl::MutexLock lock(&address_mu_);
    address_ = std::move(address);
  }
  if (on_renewal_) on_renewal_();
  for (int round = 0; round < kCheckRounds; ++round) Progress();  // closes, cancellations
  if (checker_ != nullptr) ucp_worker_destroy(std::exchange(checker_, nullptr));
  checker_ep_ = nullptr;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, ucx_fd_, nullptr);
  ucp_worker_destroy(std::exchange(worker_, fresh));
  ucx_fd_ = event_fd;
  WatchForInput(ucx_fd_);
  for (unsigned id = 0; id < am_handlers_.size(); ++id) {
    if (am_handlers_[id] != nullptr) RegisterAmHandler(id);
  }
  checks_sent_ = 0;
  checks_received_ = 0;
  check_queued_ = false;
  StartChecker();
  renewals_.fetch_add(1);
}

}  // namespace hetps::transport::ucx_internal
