#include "tests/testing/ports.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

namespace hetps::testing {
namespace {

// Binds a socket to 127.0.0.1:`port` as a server would (SO_REUSEADDR), and returns the port
// bound (the kernel's pick for 0), or 0 if it is taken.
int TryBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    bound = ntohs(address.sin_port);
  }
  close(fd);
  return bound;
}

// Locks a file named after `port` (for this process's lifetime: the descriptor stays open, and
// is not inherited by the servers it starts); false if some process holds it already.
bool Reserve(int port) {
  static const std::string directory = [] {
    const std::string path = "/tmp/hetps-test-ports";
    // Shared by every user's tests: writable by all and sticky, like /tmp (past the umask).
    if (mkdir(path.c_str(), 01777) == 0) chmod(path.c_str(), 01777);
    return path;
  }();
  const std::string path = directory + "/" + std::to_string(port);
  const int fd = open(path.c_str(), O_CREAT | O_RDONLY | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return false;
  }
  return true;  // fd kept: the lock lasts until the process exits
}

}  // namespace

int FreePort() { return TryBind(0); }

int StablePort() {
  constexpr int kLowest = 10000;
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  if (ephemeral_low - kLowest < 1000) return FreePort();
  return StablePortIn(kLowest, ephemeral_low - 1);
}

int StablePortIn(int lowest, int highest) {
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(lowest, highest);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = pick(random);
    if (!Reserve(port)) continue;  // another test process's (or this one's) already
    if (TryBind(port) != 0) return port;
  }
  return FreePort();
}

}  // namespace hetps::testing
