// HttpEndpoint: the smallest HTTP/1.1 server that Prometheus scrapes and Kubernetes probes
// need: GET (or HEAD) of a few fixed paths, each answered by a handler, one connection at a time
// on one thread, closed after the answer.
//
//   HETPS_ASSIGN_OR_RETURN(std::unique_ptr<HttpEndpoint> endpoint,
//                          HttpEndpoint::Start("0.0.0.0:9400", {{"/metrics", [&] {
//                            return HttpEndpoint::Reply{200, kPrometheusText, RenderMetrics()};
//                          }}}));
//   ... endpoint->address() ...   // "0.0.0.0:9400"
//   endpoint.reset();             // stops
//
// Written by hand rather than taken from an HTTP library so that the client library, which
// embeds it, adds no dependency to every training job that links it.
//
// A connection must send its request within kRequestTimeout and take the answer within as long,
// or it is closed: a slow or silent peer delays other scrapers by that much at most and never
// blocks the server. Requests over 16 KiB, other methods and unknown paths get 4xx answers.
// Handlers run on the endpoint's thread, one at a time; they must not block for long.
#ifndef HETPS_COMMON_HTTP_ENDPOINT_H_
#define HETPS_COMMON_HTTP_ENDPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace hetps {

// Content type of Prometheus' text exposition format.
inline constexpr absl::string_view kPrometheusTextType = "text/plain; version=0.0.4; charset=utf-8";

class HttpEndpoint {
 public:
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(5);

  struct Reply {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Reply()>;

  // `address`: "host:port" ("[v6]:port" for IPv6); port 0 picks a free one. Handlers by exact
  // path; a query string is ignored. InvalidArgument for a malformed address, Unavailable when
  // it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      absl::string_view address, std::map<std::string, Handler> handlers);
  ~HttpEndpoint();  // stops listening, after the connection being answered, if any
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // "host:port" as bound, with the chosen port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  HttpEndpoint(int listen_fd, int wake_fd, std::string address, int port,
               std::map<std::string, Handler> handlers);
  void Serve();
  void Answer(int connection);

  const int listen_fd_;
  const int wake_fd_;  // an eventfd that the destructor signals
  const std::string address_;
  const int port_;
  const std::map<std::string, Handler> handlers_;
  std::thread thread_;
};

}  // namespace hetps

#endif  // HETPS_COMMON_HTTP_ENDPOINT_H_
