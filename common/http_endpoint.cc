#include "common/http_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log.h"

namespace hetps {
namespace {

constexpr size_t kMaxRequestBytes = 16 << 10;
// How long an answered connection may keep sending before it is closed.
constexpr absl::Duration kDrainTimeout = absl::Seconds(1);

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

// Waits until `fd` is ready for `events` or `deadline` passes (false then).
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - hetps::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd entry = {fd, events, 0};
    const int ready = poll(&entry, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

bool SendAll(int fd, absl::string_view bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t sent = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLOUT, deadline)) {
      continue;
    }
    return false;
  }
  return true;
}

struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> SplitAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", address, "' is not host:port"));
  }
  absl::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", address, "' has no port from 0 to 65535"));
  }
  return HostPort{std::string(host.empty() ? "0.0.0.0" : host), absl::StrCat(port)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    absl::string_view address, std::map<std::string, Handler> handlers) {
  absl::StatusOr<HostPort> host_port = SplitAddress(address);
  if (!host_port.ok()) return host_port.status();
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error =
          getaddrinfo(host_port->host.c_str(), host_port->port.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", address, "': ", gai_strerror(error)));
  }
  int listen_fd = -1;
  std::string last_error = "no address";
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    listen_fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       candidate->ai_protocol);
    if (listen_fd < 0) continue;
    const int on = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(listen_fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        listen(listen_fd, 16) == 0) {
      break;
    }
    last_error = std::strerror(errno);
    close(listen_fd);
    listen_fd = -1;
  }
  freeaddrinfo(found);
  if (listen_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on '", address, "': ", last_error));
  }
  sockaddr_storage bound = {};
  socklen_t bound_size = sizeof(bound);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_size);
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    close(listen_fd);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  const std::string host = host_port->host.find(':') != std::string::npos
                               ? absl::StrCat("[", host_port->host, "]")
                               : host_port->host;
  return std::unique_ptr<HttpEndpoint>(new HttpEndpoint(
      listen_fd, wake_fd, absl::StrCat(host, ":", port), port, std::move(handlers)));
}

HttpEndpoint::HttpEndpoint(int listen_fd, int wake_fd, std::string address, int port,
                           std::map<std::string, Handler> handlers)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      address_(std::move(address)),
      port_(port),
      handlers_(std::move(handlers)) {
  thread_ = std::thread([this] { Serve(); });
}

HttpEndpoint::~HttpEndpoint() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    LogError("HTTP endpoint %s: cannot wake its thread: %s", address_, std::strerror(errno));
  }
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void HttpEndpoint::Serve() {
  while (true) {
    pollfd entries[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(entries, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LogError("HTTP endpoint %s stops: poll: %s", address_, std::strerror(errno));
      return;
    }
    if (entries[1].revents != 0) return;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) continue;  // gone already, or out of descriptors for now
    Answer(connection);
    close(connection);
  }
}

void HttpEndpoint::Answer(int connection) {
  const absl::Time deadline = hetps::Now() + kRequestTimeout;
  std::string request;
  Reply reply;
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      reply = {413, "text/plain; charset=utf-8", "request too large\n"};
      break;
    }
    char buffer[4096];
    const ssize_t received = recv(connection, buffer, sizeof(buffer), 0);
    if (received > 0) {
      request.append(buffer, static_cast<size_t>(received));
      continue;
    }
    if (received == 0) return;  // closed before a whole request
    if (errno == EINTR) continue;
    if ((errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(connection, POLLIN, deadline)) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      reply = {408, "text/plain; charset=utf-8", "request not received in time\n"};
    } else {
      return;
    }
    break;
  }
  bool head = false;
  if (reply.status == 200) {
    // "METHOD /path?query HTTP/1.1"
    const absl::string_view line = absl::string_view(request).substr(0, request.find("\r\n"));
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
      reply = {400, "text/plain; charset=utf-8", "malformed request line\n"};
    } else if (parts[0] != "GET" && parts[0] != "HEAD") {
      reply = {405, "text/plain; charset=utf-8", "only GET and HEAD are served\n"};
    } else {
      head = parts[0] == "HEAD";
      const std::string path(parts[1].substr(0, parts[1].find('?')));
      const auto handler = handlers_.find(path);
      if (handler == handlers_.end()) {
        reply = {404, "text/plain; charset=utf-8", absl::StrCat("no page ", path, "\n")};
      } else {
        reply = handler->second();
      }
    }
  }
  std::string response = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
      reply.status, ReasonPhrase(reply.status), reply.content_type, reply.body.size());
  if (!head) response += reply.body;
  if (!SendAll(connection, response, deadline)) return;
  // Closing with unread bytes (a refused request's rest) would reset the connection and could
  // discard the answer before the peer reads it: end our side, and read until the peer closes.
  shutdown(connection, SHUT_WR);
  const absl::Time drain_deadline = std::min(deadline, hetps::Now() + kDrainTimeout);
  char discard[4096];
  while (true) {
    const ssize_t received = recv(connection, discard, sizeof(discard), 0);
    if (received > 0 || (received < 0 && errno == EINTR)) continue;
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        WaitFor(connection, POLLIN, drain_deadline)) {
      continue;
    }
    return;
  }
}

}  // namespace hetps
