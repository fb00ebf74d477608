// delay-link: a network link with a one-way delay, what tc netem's `delay` makes, for a zone on
// one machine whose kernel has no netem (bench/zone_cluster.sh's DELAY_MS). It creates two TAP
// devices, --outer in this process's network namespace and --inner in the namespace --netns (a
// name `ip netns add` made), and forwards every frame from one to the other --delay_ms after it
// left, both ways, in order. One end on the zone's bridge and the other in a node's namespace
// stand in for a veth pair: addresses, routes and tc's rate limits are set on them the same
// way. Rates belong in tc (tbf on both devices), not here: a qdisc holds a socket's packets
// until they leave, which keeps TCP's small-queue limits and the sharing between flows working,
// where a queue in this process would take whole windows at once (tried: 2 workers x 2 shards
// then ran 1.3x to 3x slower than through veth pairs with the same tbf).
//
// The devices carry the kernel's segmentation and checksum offloads in virtio-net headers, as
// a VM's tap does, so a TCP segment of up to 64 KiB crosses as one frame and forwarding costs
// little CPU. It writes --ready_file once both devices exist, and runs until SIGTERM or SIGINT,
// or for --lifetime_s at most; the devices go away with it.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "common/clock.h"
#include "common/command_line.h"

ABSL_FLAG(std::string, outer, "", "Name of the TAP device made in this network namespace");
ABSL_FLAG(std::string, inner, "", "Name of the TAP device made in the namespace --netns");
ABSL_FLAG(std::string, netns, "", "Network namespace (a name under /run/netns) of --inner");
ABSL_FLAG(double, delay_ms, 1.0, "One-way delay of every frame, each direction");
ABSL_FLAG(std::string, ready_file, "", "Written (\"ready\") once both devices exist");
ABSL_FLAG(int, lifetime_s, 3600, "Ends by itself after this long");

namespace {

// A frame, its virtio-net header in front, can hold a 64 KiB segment and its headers.
constexpr size_t kMaxFrame = 128 << 10;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "delay-link: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

int OpenTap(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) Die("open /dev/net/tun");
  ifreq request{};
  request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(request.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &request) < 0) Die("creating TAP device " + name);
  // Frames read from the device may be segments of up to 64 KiB with their checksums left to
  // the receiver: what the other device, given the same header, takes as they are.
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
  if (ioctl(fd, TUNSETOFFLOAD, offloads) < 0) Die("offloads of " + name);
  return fd;
}

// Makes the TAP device inside network namespace `netns`: the calling thread enters it for the
// device's creation and returns to its own.
int OpenTapIn(const std::string& netns, const std::string& name) {
  const int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int target = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (own < 0 || target < 0) Die("opening network namespace " + netns);
  if (setns(target, CLONE_NEWNET) < 0) Die("entering network namespace " + netns);
  const int fd = OpenTap(name);
  if (setns(own, CLONE_NEWNET) < 0) Die("returning to this network namespace");
  close(own);
  close(target);
  return fd;
}

struct Frame {
  int64_t due_ns;
  std::vector<char> bytes;
};

// Moves frames from `from` to `to`, each `delay_ns` after it was read, in order, until `stop`.
// A frame the receiving device refuses is dropped, as a link would.
void Forward(int from, int to, int64_t delay_ns, const std::atomic<bool>* stop) {
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake-ups to the microsecond, not the default 50
  std::deque<Frame> queue;
  std::vector<char> buffer(kMaxFrame);
  while (!stop->load(std::memory_order_relaxed)) {
    int64_t now = hetps::NowNanos();
    while (!queue.empty() && queue.front().due_ns <= now) {
      const std::vector<char>& bytes = queue.front().bytes;
      (void)!write(to, bytes.data(), bytes.size());
      queue.pop_front();
    }
    // Wake for the next frame due, a new one, or (every 100 ms) to look at `stop`.
    const int64_t wait_ns = queue.empty() ? 100'000'000 : queue.front().due_ns - now;
    const timespec timeout{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
    pollfd readable{from, POLLIN, 0};
    const int ready = ppoll(&readable, 1, &timeout, nullptr);
    if (ready <= 0 || (readable.revents & POLLIN) == 0) {
      // A device that is down reports errors until it is up: not a reason to spin.
      if (ready > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    now = hetps::NowNanos();
    for (int frames = 0; frames < 64; ++frames) {
      const ssize_t got = read(from, buffer.data(), buffer.size());
      if (got <= 0) break;
      queue.push_back(Frame{now + delay_ns, std::vector<char>(buffer.data(), buffer.data() + got)});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Forwards frames between two TAP devices after a fixed delay.");
  const std::string outer = absl::GetFlag(FLAGS_outer);
  const std::string inner = absl::GetFlag(FLAGS_inner);
  const std::string netns = absl::GetFlag(FLAGS_netns);
  if (outer.empty() || inner.empty() || netns.empty()) {
    hetps::ExitWithUsageError("--outer, --inner and --netns are required");
  }
  if (outer.size() >= IFNAMSIZ || inner.size() >= IFNAMSIZ) {
    hetps::ExitWithUsageError("device names are at most 15 characters");
  }
  const double delay_ms = absl::GetFlag(FLAGS_delay_ms);
  hetps::RequireFlagInRange("delay_ms", delay_ms, 0.0, 10'000.0);
  hetps::RequireFlagInRange("lifetime_s", int64_t{absl::GetFlag(FLAGS_lifetime_s)}, 1, 86'400);

  // Signals are taken by the main thread alone (sigtimedwait below).
  sigset_t ending;
  sigemptyset(&ending);
  sigaddset(&ending, SIGTERM);
  sigaddset(&ending, SIGINT);
  pthread_sigmask(SIG_BLOCK, &ending, nullptr);

  const int outer_fd = OpenTap(outer);
  const int inner_fd = OpenTapIn(netns, inner);
  const auto delay_ns = static_cast<int64_t>(delay_ms * 1e6);
  std::atomic<bool> stop{false};
  std::thread outward(Forward, inner_fd, outer_fd, delay_ns, &stop);
  std::thread inward(Forward, outer_fd, inner_fd, delay_ns, &stop);

  const std::string ready_file = absl::GetFlag(FLAGS_ready_file);
  if (!ready_file.empty()) {
    const std::string temporary = ready_file + ".tmp";
    FILE* file = std::fopen(temporary.c_str(), "w");
    if (file == nullptr || std::fputs("ready\n", file) < 0 || std::fclose(file) != 0 ||
        std::rename(temporary.c_str(), ready_file.c_str()) != 0) {
      Die("writing " + ready_file);
    }
  }
  const timespec lifetime{absl::GetFlag(FLAGS_lifetime_s), 0};
  sigtimedwait(&ending, nullptr, &lifetime);
  stop.store(true);
  outward.join();
  inward.join();
  return 0;
}
