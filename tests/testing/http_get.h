// HttpGet: fetches one page from an HTTP server on this machine (tests of the /metrics and
// health endpoints), with a deadline.
#ifndef HETPS_TESTS_TESTING_HTTP_GET_H_
#define HETPS_TESTS_TESTING_HTTP_GET_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace hetps::testing {

struct HttpResponse {
  int status = 0;
  std::string headers;  // the status line and header lines
  std::string body;
};

// Sends `request` as it is (a whole HTTP request, or any bytes) to "host:port" (IPv4) and reads
// the answer until the server closes the connection. DeadlineExceeded after `timeout`.
absl::StatusOr<HttpResponse> HttpExchange(absl::string_view address, absl::string_view request,
                                          absl::Duration timeout = absl::Seconds(10));

// GET `path`.
absl::StatusOr<HttpResponse> HttpGet(absl::string_view address, absl::string_view path,
                                     absl::Duration timeout = absl::Seconds(10));

// Every sample of the Prometheus text page at http://<address>/metrics, by "name{labels}" as
// written; a failed fetch or a line that is not a sample fails the test (empty map).
std::map<std::string, double> ScrapeSamples(absl::string_view address);

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_HTTP_GET_H_
