// ClientCore's response path: a response taken from UCX straight into the caller's memory
// (its response sink) when it fits, by rendezvous or eagerly, and the call then ended.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "transport/ucx/ucx_client_core.h"
#include "transport/ucx/ucx_lanes.h"
#include "transport/ucx/ucx_server.h"

namespace hetps::transport::ucx_internal {
namespace {

// A message not taken is dropped by returning UCS_OK from its handler: UCX then drops a
// rendezvous descriptor itself (ucp_am_recv_callback_t). Releasing it there too (with
// ucp_am_data_release, only for descriptors kept with UCS_INPROGRESS) would free it twice.

size_t TotalSize(const ResponseSink& spans) {
  size_t total = 0;
  for (const auto& span : spans) total += span.size();
  return total;
}

}  // namespace

void ClientCore::DropSinksOfEndedCalls() {
  absl::erase_if(sinks, [this](const auto& entry) { return !tracker->IsOutstanding(entry.first); });
}

ucs_status_t ClientCore::OnResponse(const UcxFrame& frame, void* data, size_t length,
                                    const ucp_am_recv_param_t* param) {
  const uint64_t call = frame.call_id;
  ResponseSink sink;
  if (auto it = sinks.find(call); it != sinks.end()) {
    sink = std::move(it->second);
    sinks.erase(it);
  }
  if (frame.method == kGoodbyeMethod) {
    Fail(absl::UnavailableError(absl::StrCat(address, " closed the connection")));
    return UCS_OK;
  }
  if (!lanes_logged && ep != nullptr) {
    lanes_logged = true;
    const std::string lanes = DescribeLanes(ep);
    LogInfo("ucx: connected to %s over %s", address, lanes);
    large_sends.AllowEager(LanesCrossANetworkOverTcp(lanes));
    over_tcp = LanesUseTcp(lanes);
  }
  if (frame.status_code != 0) {
    tracker->Finish(call,
                    absl::Status(static_cast<absl::StatusCode>(frame.status_code), frame.text));
    return UCS_OK;
  }
  // From here the connection, not the tracker, ends the call: if bytes are being received into
  // the caller's memory, the call must not end (and let the caller reuse it) before UCX is done.
  std::optional<internal::CallTracker::Detached> detached = tracker->Detach(call);
  if (!detached.has_value()) return UCS_OK;  // ended already (its deadline passed): drop
  Response response;
  response.header = std::string(frame.text);
  const bool into_sink = !sink.empty() && TotalSize(sink) == length;
  absl::InlinedVector<ucp_dt_iov_t, 2> iov;
  if (into_sink) {
    for (const auto& span : sink) {
      response.payload.Append(Payload::Borrow(span));
      iov.push_back({span.data(), span.size()});
    }
  } else if (length > 0) {
    uint8_t* buffer = nullptr;
    response.payload = worker->Buffer(length, &buffer);
    iov.push_back({buffer, length});
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    size_t offset = 0;  // eager (small, or a slow link's): copied straight to where it belongs
    for (const ucp_dt_iov_t& piece : iov) {
      std::memcpy(piece.buffer, static_cast<const uint8_t*>(data) + offset, piece.length);
      offset += piece.length;
    }
    detached->done(std::move(response));
    return UCS_OK;
  }
  struct Target {
    std::weak_ptr<ClientCore> core;
    uint64_t call;
  };
  auto* target = new Target{weak_from_this(), call};
  ucp_request_param_t params = {};
  params.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  params.user_data = target;
  params.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<Target> done(static_cast<Target*>(user_data));
    if (request != nullptr) ucp_request_free(request);
    if (std::shared_ptr<ClientCore> core = done->core.lock()) {
      core->FinishReceive(done->call, status);
    }
  };
  Receiving& entry = receiving[call];
  entry.done = std::move(detached->done);
  entry.header = std::move(response.header);
  entry.payload = std::move(response.payload);
  // On the heap: the entry may move (the map grows), UCX's list of pieces must not.
  entry.pieces.assign(iov.begin(), iov.end());
  const UcxBuffer destination = DescribePieces(absl::MakeSpan(entry.pieces));
  params.datatype = destination.datatype;
  ucs_status_ptr_t request =
      ucp_am_recv_data_nbx(worker->worker(), data, destination.buffer, destination.count, &params);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    params.cb.recv_am(nullptr, request == nullptr ? UCS_OK : UCS_PTR_STATUS(request), length,
                      target);
    return UCS_OK;
  }
  entry.request = request;
  // At the call's deadline, a receive still running is cancelled (and the call then ends).
  entry.timer = timers->Schedule(detached->deadline, [weak = weak_from_this(), call] {
    std::shared_ptr<ClientCore> core = weak.lock();
    if (core == nullptr) return;
    core->worker->Post([core, call] {
      auto it = core->receiving.find(call);
      if (it == core->receiving.end() || it->second.request == nullptr) return;
      it->second.cancelled = absl::DeadlineExceededError(
          absl::StrCat("no whole response from ", core->address, " before the call's deadline"));
      ucp_request_cancel(core->worker->worker(), it->second.request);
    });
  });
  return UCS_OK;
}

void ClientCore::FinishReceive(uint64_t call, ucs_status_t status) {
  auto it = receiving.find(call);
  if (it == receiving.end()) return;
  Receiving entry = std::move(it->second);
  receiving.erase(it);
  if (entry.timer != 0) timers->Cancel(entry.timer);
  if (status == UCS_OK) {
    Response response;
    response.header = std::move(entry.header);
    response.payload = std::move(entry.payload);
    entry.done(std::move(response));
  } else if (!entry.cancelled.ok()) {
    entry.done(entry.cancelled);
  } else {
    entry.done(UcxError(absl::StrCat("receiving a response from ", address), status));
  }
}

}  // namespace hetps::transport::ucx_internal
