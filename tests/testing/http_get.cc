#include "tests/testing/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace hetps::testing {

absl::StatusOr<HttpResponse> HttpExchange(absl::string_view address, absl::string_view request,
                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("not host:port: ", address));
  }
  std::string host(address.substr(0, colon));
  if (host == "0.0.0.0") host = "127.0.0.1";
  sockaddr_in peer = {};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &peer.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  auto fail = [fd](absl::Status status) {
    close(fd);
    return status;
  };
  if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0) {
    return fail(absl::UnavailableError(absl::StrCat("connect ", address, ": ", strerror(errno))));
  }
  if (!request.empty() && send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
                              static_cast<ssize_t>(request.size())) {
    return fail(absl::UnavailableError(absl::StrCat("send: ", strerror(errno))));
  }
  std::string answer;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    pollfd entry = {fd, POLLIN, 0};
    if (left <= absl::ZeroDuration() ||
        poll(&entry, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) == 0) {
      return fail(absl::DeadlineExceededError(absl::StrCat("no whole answer from ", address)));
    }
    char buffer[8192];
    const ssize_t received = recv(fd, buffer, sizeof(buffer), 0);
    if (received < 0 && errno == EINTR) continue;
    if (received < 0) return fail(absl::UnavailableError(strerror(errno)));
    if (received == 0) break;
    answer.append(buffer, static_cast<size_t>(received));
  }
  close(fd);
  const size_t end_of_headers = answer.find("\r\n\r\n");
  HttpResponse response;
  if (end_of_headers == std::string::npos || answer.size() < 12 ||
      !absl::SimpleAtoi(answer.substr(9, 3), &response.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: '", answer, "'"));
  }
  response.headers = answer.substr(0, end_of_headers);
  response.body = answer.substr(end_of_headers + 4);
  return response;
}

absl::StatusOr<HttpResponse> HttpGet(absl::string_view address, absl::string_view path,
                                     absl::Duration timeout) {
  return HttpExchange(
      address, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", address, "\r\n\r\n"), timeout);
}

std::map<std::string, double> ScrapeSamples(absl::string_view address) {
  absl::StatusOr<HttpResponse> page = HttpGet(address, "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return {};
  EXPECT_EQ(page->status, 200) << page->body;
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(page->body, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      ADD_FAILURE() << "not a sample: " << line;
      continue;
    }
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

}  // namespace hetps::testing
