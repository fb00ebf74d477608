// tcp-pingpong: raw TCP round trips between two processes over loopback, the floor beside the
// figures of everything that rides TCP (hetps over gRPC or UCX's TCP transport, ps-lite over
// ZeroMQ; bench/pslite_vs_hetps.sh). The initiator (this process) forks a responder; each round
// trip, the initiator sends --size bytes and the responder, once it has received all of them into
// its own buffer, sends them back, received likewise: the payload is delivered both ways, as a
// parameter server's push+pull delivers it. No framing, TCP_NODELAY on every socket.
//
// --connections N splits each message over N connections (size / N bytes on each, all under way
// at once), to show what a transport that spreads one transfer over several sockets could reach;
// --congestion_control names the TCP congestion control of every socket (TCP_CONGESTION; empty:
// the system's, net.ipv4.tcp_congestion_control), to show what the host's choice costs.
//
// Prints one line: connections, round trips, p50 / p90 / p99 of the round trip in microseconds.
// Exit status 2 when a socket call fails; both processes give up after --timeout_s.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

ABSL_FLAG(int64_t, size, 1 << 20, "Payload bytes of each message (each way)");
ABSL_FLAG(int, connections, 1, "Connections each message is split over");
ABSL_FLAG(std::string, congestion_control, "",
          "TCP congestion control of every socket (empty: the system's)");
ABSL_FLAG(int, iterations, 2000, "Measured round trips");
ABSL_FLAG(int, warmup, 200, "Unmeasured round trips before them");
ABSL_FLAG(int, initiator_cpu, -1, "Pin the initiator to this CPU (-1: no pinning)");
ABSL_FLAG(int, responder_cpu, -1, "Pin the responder to this CPU (-1: no pinning)");
ABSL_FLAG(int, timeout_s, 120, "Both processes give up after this long");

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tcp-pingpong: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

void Configure(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) Fail("TCP_NODELAY");
  const std::string congestion = absl::GetFlag(FLAGS_congestion_control);
  if (!congestion.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(), congestion.size()) != 0) {
    Fail("TCP_CONGESTION");
  }
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// One connection's share of a message, and how far it has come in each direction.
struct Share {
  int fd = -1;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t moved = 0;
};

// Moves every share's bytes one way (`send`: out of, else into, its data), all connections at
// once, until each is complete.
void MoveAll(std::vector<Share>& shares, bool send) {
  for (Share& share : shares) share.moved = 0;
  std::vector<pollfd> polls(shares.size());
  for (;;) {
    size_t waiting = 0;
    for (Share& share : shares) {
      if (share.moved == share.bytes) continue;
      polls[waiting++] = pollfd{share.fd, static_cast<short>(send ? POLLOUT : POLLIN), 0};
    }
    if (waiting == 0) return;
    if (poll(polls.data(), waiting, -1) < 0 && errno != EINTR) Fail("poll");
    for (Share& share : shares) {
      if (share.moved == share.bytes) continue;
      const ssize_t n =
          send ? ::send(share.fd, share.data + share.moved, share.bytes - share.moved,
                        MSG_DONTWAIT | MSG_NOSIGNAL)
               : recv(share.fd, share.data + share.moved, share.bytes - share.moved, MSG_DONTWAIT);
      if (n > 0) {
        share.moved += static_cast<size_t>(n);
      } else if (n == 0) {
        errno = ECONNRESET;
        Fail("the peer closed its connection");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        Fail(send ? "send" : "recv");
      }
    }
  }
}

// Splits `buffer` over the connections.
std::vector<Share> SharesOf(std::vector<uint8_t>& buffer, const std::vector<int>& fds) {
  std::vector<Share> shares(fds.size());
  const size_t base = buffer.size() / fds.size();
  size_t offset = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    const size_t bytes = i + 1 == fds.size() ? buffer.size() - offset : base;
    shares[i] = Share{fds[i], buffer.data() + offset, bytes, 0};
    offset += bytes;
  }
  return shares;
}

void Respond(int listener, size_t size, int connections, int round_trips) {
  hetps::bench::PinToCpuOrExit(absl::GetFlag(FLAGS_responder_cpu), "tcp-pingpong");
  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) Fail("accept");
    Configure(fd);
    fds.push_back(fd);
  }
  std::vector<uint8_t> buffer(size, 2);
  std::vector<Share> shares = SharesOf(buffer, fds);
  for (int i = 0; i < round_trips; ++i) {
    MoveAll(shares, /*send=*/false);
    MoveAll(shares, /*send=*/true);
  }
}

int Initiate(uint16_t port, size_t size, int connections) {
  hetps::bench::PinToCpuOrExit(absl::GetFlag(FLAGS_initiator_cpu), "tcp-pingpong");
  std::vector<int> fds;
  const sockaddr_in address = Loopback(port);
  for (int i = 0; i < connections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) Fail("socket");
    Configure(fd);  // before connecting, so the handshake already uses the congestion control
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      Fail("connect");
    }
    fds.push_back(fd);
  }
  std::vector<uint8_t> buffer(size, 1);
  std::vector<Share> shares = SharesOf(buffer, fds);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  hetps::bench::LatencySamples samples;
  for (int i = 0; i < warmup + iterations; ++i) {
    const int64_t start = hetps::NowNanos();
    MoveAll(shares, /*send=*/true);
    MoveAll(shares, /*send=*/false);
    if (i >= warmup) samples.Add(hetps::NowNanos() - start);
  }
  std::printf("%11d %8d %9.2f %9.2f %9.2f\n", connections, iterations, samples.Percentile(50) / 1e3,
              samples.Percentile(90) / 1e3, samples.Percentile(99) / 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Raw TCP round trips over loopback, the payload delivered both ways.");
  const int64_t size = absl::GetFlag(FLAGS_size);
  const int connections = absl::GetFlag(FLAGS_connections);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (size <= 0 || iterations <= 0 || warmup < 0 || connections <= 0 || connections > size) {
    std::fprintf(stderr,
                 "tcp-pingpong: --size, --iterations and --connections must be positive, and "
                 "--connections at most --size\n");
    return 2;
  }
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof(address);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener, connections) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    Fail("listening on 127.0.0.1");
  }
  // Both processes end by themselves if the other never answers.
  const unsigned timeout_s = static_cast<unsigned>(absl::GetFlag(FLAGS_timeout_s));
  const pid_t responder = fork();
  if (responder < 0) Fail("fork");
  if (responder == 0) {
    alarm(timeout_s);
    Respond(listener, static_cast<size_t>(size), connections, warmup + iterations);
    std::_Exit(0);
  }
  close(listener);
  alarm(timeout_s);
  std::printf("%11s %8s %9s %9s %9s\n", "connections", "trips", "p50_us", "p90_us", "p99_us");
  const int result = Initiate(ntohs(address.sin_port), static_cast<size_t>(size), connections);
  if (result != 0) kill(responder, SIGKILL);
  int status = 0;
  waitpid(responder, &status, 0);
  return result != 0 ? result : (WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2);
}
