// ucx-pingpong: raw UCX active-message round trips between two processes, the floor beside
// hetps's UCX figures (bench/ucx_vs_raw.sh). The initiator (this process) forks a responder;
// each sends one active message of --size bytes (no header) and waits for the other's, busy
// polling, like `ucx_perftest -t ucp_am_lat -E poll`. Two kinds of round trip, in turn:
//
//   untouched  nobody reads the payload (what ucx_perftest measures): over shared memory the
//              bytes never leave the sender's cache, since the receiver does not read them;
//   delivered  each side copies what it receives into its own buffer before it counts as
//              received, and the responder answers with those bytes: what any receiver that
//              keeps the data pays (a parameter server sums the gradient, a worker needs the
//              weights in its tensor), so the payload crosses between the two CPUs both ways.
//
// Prints one line per kind: kind, round trips, p50 / p90 / p99 of the round trip in
// microseconds. Past UCX's rendezvous threshold the receiver always fetches the payload into
// its buffer, so both kinds deliver it there. Exit status 2 when UCX fails; both processes give
// up after --timeout_s.
#include <signal.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/latency.h"
#include "bench/pinning.h"
#include "common/clock.h"
#include "common/command_line.h"

ABSL_FLAG(int64_t, size, 4096, "Payload bytes of each message");
ABSL_FLAG(int, iterations, 20000, "Measured round trips per kind");
ABSL_FLAG(int, warmup, 2000, "Unmeasured round trips before each kind");
ABSL_FLAG(int, initiator_cpu, -1, "Pin the initiator to this CPU (-1: no pinning)");
ABSL_FLAG(int, responder_cpu, -1, "Pin the responder to this CPU (-1: no pinning)");
ABSL_FLAG(int, timeout_s, 120, "Both processes give up after this long");

namespace {

constexpr unsigned kPingAm = 1;
constexpr unsigned kPongAm = 2;

[[noreturn]] void Fail(const char* what, ucs_status_t status) {
  std::fprintf(stderr, "ucx-pingpong: %s: %s\n", what, ucs_status_string(status));
  std::exit(2);
}

// One side: its UCP context and worker, its own buffer, and what the last message brought.
struct Side {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<uint8_t> buffer;
  bool received = false;
  ucp_ep_h reply_ep = nullptr;  // the responder answers on the endpoint a ping came from
  bool touch = false;           // the kind of the message received last (its 1-byte header)

  explicit Side(size_t size) : buffer(size, 1) {
    ucp_config_t* config = nullptr;
    ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
    if (status != UCS_OK) Fail("ucp_config_read", status);
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    status = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (status != UCS_OK) Fail("ucp_init", status);
    ucp_worker_params_t worker_params = {};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context, &worker_params, &worker);
    if (status != UCS_OK) Fail("ucp_worker_create", status);
  }
  ~Side() {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }

  void Listen(unsigned id) {
    ucp_am_handler_param_t param = {};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id = id;
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    param.cb = &Side::OnAm;
    param.arg = this;
    const ucs_status_t status = ucp_worker_set_am_recv_handler(worker, &param);
    if (status != UCS_OK) Fail("ucp_worker_set_am_recv_handler", status);
  }

  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param) {
    auto* side = static_cast<Side*>(arg);
    side->touch = header_length == 1 && *static_cast<const uint8_t*>(header) != 0;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) side->reply_ep = param->reply_ep;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
      // Past the rendezvous threshold the receiver fetches the payload into its own buffer
      // whatever the kind: a rendezvous message is always delivered.
      side->Fetch(data, length);
      return UCS_OK;
    }
    if (side->touch) std::memcpy(side->buffer.data(), data, std::min(length, side->buffer.size()));
    side->received = true;
    return UCS_OK;
  }

  void Fetch(void* descriptor, size_t length) {
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &Side::OnFetched;
    param.user_data = this;
    ucs_status_ptr_t request = ucp_am_recv_data_nbx(worker, descriptor, buffer.data(),
                                                    std::min(length, buffer.size()), &param);
    if (UCS_PTR_IS_ERR(request)) Fail("ucp_am_recv_data_nbx", UCS_PTR_STATUS(request));
    if (request == nullptr) received = true;
  }

  static void OnFetched(void* request, ucs_status_t status, size_t /*length*/, void* arg) {
    if (status != UCS_OK) Fail("rendezvous receive", status);
    static_cast<Side*>(arg)->received = true;
    ucp_request_free(request);
  }

  void WaitForMessage() {
    while (!received) ucp_worker_progress(worker);
    received = false;
  }

  // Sends the buffer as active message `id` with `touch` as its header, and waits until UCX is
  // done with it.
  void Send(ucp_ep_h ep, unsigned id, uint8_t* touch_header, bool ask_for_reply_ep) {
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = ask_for_reply_ep ? UCP_AM_SEND_FLAG_REPLY : 0;
    ucs_status_ptr_t request =
        ucp_am_send_nbx(ep, id, touch_header, 1, buffer.data(), buffer.size(), &param);
    if (UCS_PTR_IS_ERR(request)) Fail("ucp_am_send_nbx", UCS_PTR_STATUS(request));
    if (request == nullptr) return;
    while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(request);
  }

  std::string Address() {
    ucp_address_t* address = nullptr;
    size_t length = 0;
    const ucs_status_t status = ucp_worker_get_address(worker, &address, &length);
    if (status != UCS_OK) Fail("ucp_worker_get_address", status);
    std::string bytes(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(worker, address);
    return bytes;
  }
};

void Respond(int address_pipe, size_t size, int round_trips) {
  hetps::bench::PinToCpuOrExit(absl::GetFlag(FLAGS_responder_cpu), "ucx-pingpong");
  Side side(size);
  side.Listen(kPingAm);
  const std::string address = side.Address();
  const uint64_t length = address.size();
  if (write(address_pipe, &length, sizeof(length)) != sizeof(length) ||
      write(address_pipe, address.data(), length) != static_cast<ssize_t>(length)) {
    std::exit(2);
  }
  close(address_pipe);
  for (int i = 0; i < round_trips; ++i) {
    side.WaitForMessage();
    if (side.reply_ep == nullptr) Fail("a ping without a reply endpoint", UCS_ERR_INVALID_PARAM);
    uint8_t touch = side.touch ? 1 : 0;
    side.Send(side.reply_ep, kPongAm, &touch, false);
  }
  // Stay until the initiator has closed its endpoint (its last flush needs this side).
  const int64_t until = hetps::NowNanos() + 200'000'000;
  while (hetps::NowNanos() < until) ucp_worker_progress(side.worker);
}

int Initiate(int address_pipe, size_t size) {
  hetps::bench::PinToCpuOrExit(absl::GetFlag(FLAGS_initiator_cpu), "ucx-pingpong");
  uint64_t length = 0;
  if (read(address_pipe, &length, sizeof(length)) != sizeof(length)) return 2;
  std::string address(length, '\0');
  for (size_t got = 0; got < length;) {
    const ssize_t n = read(address_pipe, address.data() + got, length - got);
    if (n <= 0) return 2;
    got += static_cast<size_t>(n);
  }
  Side side(size);
  side.Listen(kPongAm);
  ucp_ep_params_t ep_params = {};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(side.worker, &ep_params, &ep);
  if (status != UCS_OK) Fail("ucp_ep_create", status);

  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  for (const bool touch : {false, true}) {
    hetps::bench::LatencySamples samples;
    for (int i = 0; i < warmup + iterations; ++i) {
      uint8_t header = touch ? 1 : 0;
      const int64_t start = hetps::NowNanos();
      side.Send(ep, kPingAm, &header, true);
      side.WaitForMessage();
      if (i >= warmup) samples.Add(hetps::NowNanos() - start);
    }
    std::printf("%-10s %8d %9.2f %9.2f %9.2f\n", touch ? "delivered" : "untouched", iterations,
                samples.Percentile(50) / 1e3, samples.Percentile(90) / 1e3,
                samples.Percentile(99) / 1e3);
  }
  ucp_request_param_t close_param = {};
  ucs_status_ptr_t closing = ucp_ep_close_nbx(ep, &close_param);
  if (closing != nullptr && !UCS_PTR_IS_ERR(closing)) {
    while (ucp_request_check_status(closing) == UCS_INPROGRESS) ucp_worker_progress(side.worker);
    ucp_request_free(closing);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Raw UCX active-message round trips, with and without the payload "
                          "delivered into the receiver's buffer.");
  const int64_t size = absl::GetFlag(FLAGS_size);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (size <= 0 || iterations <= 0 || warmup < 0) {
    std::fprintf(stderr, "ucx-pingpong: --size and --iterations must be positive\n");
    return 2;
  }
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return 2;
  // Both processes end by themselves if the other never answers.
  const unsigned timeout_s = static_cast<unsigned>(absl::GetFlag(FLAGS_timeout_s));
  const pid_t responder = fork();
  if (responder < 0) return 2;
  if (responder == 0) {
    close(pipe_fds[0]);
    alarm(timeout_s);
    Respond(pipe_fds[1], static_cast<size_t>(size), 2 * (warmup + iterations));
    std::_Exit(0);
  }
  close(pipe_fds[1]);
  alarm(timeout_s);
  std::printf("%-10s %8s %9s %9s %9s\n", "kind", "trips", "p50_us", "p90_us", "p99_us");
  const int result = Initiate(pipe_fds[0], static_cast<size_t>(size));
  if (result != 0) kill(responder, SIGKILL);
  int status = 0;
  waitpid(responder, &status, 0);
  if (result == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) return 2;
  return result;
}
