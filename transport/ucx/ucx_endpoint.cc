// Endpoints and the frames sent on them (declared in ucx_worker.h).
#include <atomic>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "transport/ucx/ucx_frame.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

UcxBuffer DescribePieces(absl::Span<ucp_dt_iov_t> pieces) {
  size_t merged = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    ucp_dt_iov_t& last = pieces[merged == 0 ? 0 : merged - 1];
    if (merged > 0 && static_cast<uint8_t*>(last.buffer) + last.length == pieces[i].buffer) {
      last.length += pieces[i].length;
    } else {
      pieces[merged++] = pieces[i];
    }
  }
  pieces = pieces.first(merged);
  if (pieces.empty()) return {ucp_dt_make_contig(1), nullptr, 0};
  if (pieces.size() == 1) return {ucp_dt_make_contig(1), pieces[0].buffer, pieces[0].length};
  return {ucp_dt_make_iov(), pieces.data(), pieces.size()};
}

namespace {
std::atomic<uint64_t> sends_inside_progress{0};
}  // namespace

uint64_t SendsInsideProgressForTesting() { return sends_inside_progress.load(); }

void SendFrame(UcxWorker& worker, ucp_ep_h ep, unsigned am_id, const UcxFrame& frame,
               Payload payload, bool eager, absl::AnyInvocable<void(ucs_status_t)> done) {
  if (worker.InsideProgress()) sends_inside_progress.fetch_add(1, std::memory_order_relaxed);
  // UCX 1.13 has no UCP_AM_SEND_FLAG_COPY_HEADER: the header lives until the send completes.
  // Data-path headers fit inline (no allocation of their own).
  struct SendState {
    absl::InlinedVector<char, 96> header;
    Payload payload;
    absl::InlinedVector<ucp_dt_iov_t, 2> iov;  // the state stays put: UCX may point into it
    absl::AnyInvocable<void(ucs_status_t)> done;
  };
  auto* state = new SendState{{}, std::move(payload), {}, std::move(done)};
  state->header.resize(EncodedUcxFrameSize(frame));
  EncodeUcxFrameTo(frame, state->header.data());
  for (const ByteSpan& segment : state->payload.segments()) {
    state->iov.push_back({const_cast<uint8_t*>(segment.data()), segment.size()});
  }
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  const UcxBuffer buffer = DescribePieces(absl::MakeSpan(state->iov));
  param.datatype = buffer.datatype;
  if (eager) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
  }
  param.user_data = state;
  param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    auto* sent = static_cast<SendState*>(user_data);
    sent->done(status);
    delete sent;
    ucp_request_free(request);
  };
  ucs_status_ptr_t request = ucp_am_send_nbx(ep, am_id, state->header.data(), state->header.size(),
                                             buffer.buffer, buffer.count, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    state->done(request == nullptr ? UCS_OK : UCS_PTR_STATUS(request));
    delete state;
  }
}

absl::StatusOr<ucp_ep_h> CreateEndpoint(UcxWorker& worker, const std::string& address,
                                        std::function<void(ucs_status_t)> on_error) {
  // The peer's address comes over the network: what cannot be one is refused before UCX
  // reads it (and asserts).
  HETPS_RETURN_IF_ERROR(CheckWorkerAddress(address));
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  // Peer failure detection (UCP_ERR_HANDLING_MODE_PEER) rules out shared memory in UCX 1.13,
  // so it stays off: deadlines end calls to a vanished peer, a probe then notices a restarted
  // server, and peers that leave cleanly say goodbye.
  params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
    (*static_cast<std::function<void(ucs_status_t)>*>(arg))(status);
  };
  params.err_handler.arg = worker.Keep(std::move(on_error));
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(worker.worker(), &params, &ep);
  if (status != UCS_OK) return UcxError("ucp_ep_create", status);
  return ep;
}

void CloseEndpoint(UcxWorker& worker, ucp_ep_h ep, absl::Duration wait) {
  if (worker.InsideProgress()) {
    worker.RunAfterProgress([&worker, ep] { CloseEndpoint(worker, ep); });
    return;
  }
  ucp_request_param_t param = {};
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  // Done, or failed (the flush to a peer that is gone: the endpoint is released all the same).
  if (!UCS_PTR_IS_PTR(request)) return;
  if (wait > absl::ZeroDuration()) {
    worker.ProgressUntil([request] { return ucp_request_check_status(request) != UCS_INPROGRESS; },
                         wait);
  }
  // Released now, a close still under way completes in the background (UCX frees it then, and
  // a worker destroyed meanwhile ends it).
  ucp_request_free(request);
}

}  // namespace hetps::transport::ucx_internal
