#include "common/http_endpoint.h"

#include <atomic>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"

namespace hetps {
namespace {

using ::hetps::testing::HttpExchange;
using ::hetps::testing::HttpGet;
using ::hetps::testing::HttpResponse;
using ::testing::HasSubstr;

class HttpEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> started = HttpEndpoint::Start(
        "127.0.0.1:0",
        {{"/metrics",
          [this] {
            ++scrapes_;
            return HttpEndpoint::Reply{200, std::string(kPrometheusTextType), "up 1\n"};
          }},
         {"/readyz", [] {
            return HttpEndpoint::Reply{503, "text/plain", "not serving\n"};
          }}});
    ASSERT_TRUE(started.ok()) << started.status();
    endpoint_ = *std::move(started);
  }

  std::atomic<int> scrapes_{0};
  std::unique_ptr<HttpEndpoint> endpoint_;
};

TEST_F(HttpEndpointTest, AnswersItsPathsWithTheirHandlersAndOthersWith404) {
  EXPECT_GT(endpoint_->port(), 0);
  absl::StatusOr<HttpResponse> metrics = HttpGet(endpoint_->address(), "/metrics?x=1");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, "up 1\n");
  EXPECT_THAT(metrics->headers, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(metrics->headers, HasSubstr("Content-Length: 5"));

  absl::StatusOr<HttpResponse> ready = HttpGet(endpoint_->address(), "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 503);

  absl::StatusOr<HttpResponse> missing = HttpGet(endpoint_->address(), "/nothing");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(scrapes_.load(), 1);
}

TEST_F(HttpEndpointTest, RefusesBadRequestsAndGoesOnServing) {
  const std::string address = endpoint_->address();
  absl::StatusOr<HttpResponse> post =
      HttpExchange(address, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(post.ok()) << post.status();
  EXPECT_EQ(post->status, 405);
  absl::StatusOr<HttpResponse> garbage = HttpExchange(address, "hello\r\n\r\n");
  ASSERT_TRUE(garbage.ok()) << garbage.status();
  EXPECT_EQ(garbage->status, 400);
  absl::StatusOr<HttpResponse> huge =
      HttpExchange(address, "GET /metrics HTTP/1.1\r\nX: " + std::string(64 << 10, 'a'));
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(huge->status, 413);
  absl::StatusOr<HttpResponse> head = HttpExchange(address, "HEAD /metrics HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(scrapes_.load(), 1);
  absl::StatusOr<HttpResponse> metrics = HttpGet(address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
}

TEST_F(HttpEndpointTest, ASilentConnectionIsClosedAfterTheRequestTimeout) {
  absl::StatusOr<HttpResponse> silent =
      HttpExchange(endpoint_->address(), "", HttpEndpoint::kRequestTimeout + absl::Seconds(5));
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_EQ(silent->status, 408);
  absl::StatusOr<HttpResponse> metrics = HttpGet(endpoint_->address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
}

TEST(HttpEndpointStartTest, RefusesAMalformedAddressAndABusyPort) {
  EXPECT_EQ(HttpEndpoint::Start("localhost", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpEndpoint::Start("127.0.0.1:70000", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> first = HttpEndpoint::Start("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(HttpEndpoint::Start((*first)->address(), {}).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace hetps
