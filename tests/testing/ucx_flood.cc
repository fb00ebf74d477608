// ucx-flood: a peer that floods a UCX worker with active messages until it is killed, for tests
// of what a sender killed mid-message leaves behind (UcxWorker's receive checks). Over shared
// memory each message of --bytes (under UCX's 8 KiB segment) is copied into the receiver's
// queue between taking a slot and marking it full: a SIGKILL lands in between now and then.
// Writes --ready_file once --ready_after messages have gone, so that the test's kill lands at a
// moment it chose at random. Ends by itself after --timeout_s.
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "common/clock.h"
#include "common/command_line.h"

ABSL_FLAG(std::string, address_hex, "", "The receiving UCX worker's address, in hex");
ABSL_FLAG(int, am_id, 3, "Active-message id of the messages (3: a worker's receive check)");
ABSL_FLAG(int, bytes, 8000, "Payload bytes of each message");
ABSL_FLAG(int, ready_after, 100, "Messages sent before --ready_file is written");
ABSL_FLAG(std::string, ready_file, "", "Written once --ready_after messages have gone");
ABSL_FLAG(int, timeout_s, 60, "Ends after this long");

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__, "Floods a UCX worker with active messages.");
  const std::string address = absl::HexStringToBytes(absl::GetFlag(FLAGS_address_hex));
  ucp_config_t* config = nullptr;
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_worker_params_t worker_params = {};
  ucp_ep_params_t ep_params = {};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ucp_ep_h ep = nullptr;
  if (address.empty() || ucp_config_read(nullptr, nullptr, &config) != UCS_OK ||
      ucp_init(&params, config, &context) != UCS_OK ||
      ucp_worker_create(context, &worker_params, &worker) != UCS_OK ||
      ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) {
    std::fprintf(stderr, "ucx-flood: cannot reach the worker\n");
    return 2;
  }
  std::vector<uint8_t> payload(absl::GetFlag(FLAGS_bytes), 0x5a);
  const int64_t give_up = hetps::NowNanos() + int64_t{absl::GetFlag(FLAGS_timeout_s)} * 1000000000;
  ucp_request_param_t send = {};
  for (int64_t sent = 1; hetps::NowNanos() < give_up; ++sent) {
    const ucs_status_ptr_t request = ucp_am_send_nbx(ep, absl::GetFlag(FLAGS_am_id), nullptr, 0,
                                                     payload.data(), payload.size(), &send);
    if (UCS_PTR_IS_ERR(request)) return 2;
    if (request != nullptr) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS && hetps::NowNanos() < give_up) {
        ucp_worker_progress(worker);
      }
      ucp_request_free(request);
    }
    if (sent == absl::GetFlag(FLAGS_ready_after) && !absl::GetFlag(FLAGS_ready_file).empty()) {
      if (FILE* ready = std::fopen(absl::GetFlag(FLAGS_ready_file).c_str(), "w"))
        std::fclose(ready);
    }
  }
  return 0;
}
