// What the gRPC transport does with frames that do not follow the protocol (a server refuses
// them with a specific error and keeps serving everyone else), and which connection large calls
// take.
#include "transport/grpc/grpc_transport.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/frame.pb.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "transport/grpc/frame_codec.h"

namespace hetps::transport {
namespace {

using testing::EchoHandler;

using testing::CallAndWait;

Request Echo(std::string header, Payload payload = Payload()) {
  Request request;
  request.method = 1;
  request.header = std::move(header);
  request.payload = std::move(payload);
  request.deadline = absl::Now() + absl::Seconds(10);
  return request;
}

// Sends raw bytes as one message on a stream and returns the first reply (or the stream's
// status), with a deadline.
struct RawResult {
  grpc::Status status;
  bool got_message = false;
  grpc::ByteBuffer message;
};

RawResult SendRaw(const std::string& address, const std::string& method,
                  const grpc::ByteBuffer& frame) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::CompletionQueue queue;
  auto call = stub.PrepareCall(&context, method, &queue);
  RawResult result;
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  queue.Next(&tag, &ok);
  call->Write(frame, reinterpret_cast<void*>(2));
  queue.Next(&tag, &ok);
  call->Read(&result.message, reinterpret_cast<void*>(3));
  queue.Next(&tag, &ok);
  result.got_message = ok;
  call->WritesDone(reinterpret_cast<void*>(4));
  queue.Next(&tag, &ok);
  call->Finish(&result.status, reinterpret_cast<void*>(5));
  while (queue.Next(&tag, &ok)) {
    if (tag == reinterpret_cast<void*>(5)) break;
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return result;
}

class GrpcFrameTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions server_options;
    server_options.max_message_bytes = 1 << 20;
    server_transport_ = NewGrpcTransport(server_options);
    auto listener = server_transport_->Listen("127.0.0.1:0", &handler_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
  }

  std::unique_ptr<Connection> Connect(size_t max_message_bytes) {
    TransportOptions options;
    options.max_message_bytes = max_message_bytes;
    client_transports_.push_back(NewGrpcTransport(options));
    auto connection =
        client_transports_.back()->Connect(listener_->address(), absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(connection.ok()) << connection.status();
    return connection.ok() ? *std::move(connection) : nullptr;
  }

  EchoHandler handler_;
  std::shared_ptr<Transport> server_transport_;
  std::vector<std::shared_ptr<Transport>> client_transports_;
  std::unique_ptr<Listener> listener_;
};

TEST_F(GrpcFrameTest, FrameOverTheServersLimitIsRefusedAndOthersAreServed) {
  // This client allows larger frames than the server does.
  std::unique_ptr<Connection> big_client = Connect(8 << 20);
  std::unique_ptr<Connection> other_client = Connect(8 << 20);
  ASSERT_NE(big_client, nullptr);
  ASSERT_NE(other_client, nullptr);
  ASSERT_OK(CallAndWait(*other_client, Echo("before")));

  std::vector<uint8_t> big(2 << 20, 1);
  absl::StatusOr<Response> refused = CallAndWait(*big_client, Echo("big", Payload::Borrow(big)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();

  absl::StatusOr<Response> other = CallAndWait(*other_client, Echo("after"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->header, "after");
  // The refused client reconnects on its next call.
  absl::StatusOr<Response> again = CallAndWait(*big_client, Echo("again"));
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST_F(GrpcFrameTest, TruncatedFrameGetsInvalidArgumentForItsCall) {
  hetps::v1::FrameHeader header;
  header.set_call_id(42);
  header.set_method(1);
  std::vector<uint8_t> bytes(100, 3);
  grpc::ByteBuffer frame = grpc_internal::EncodeFrame(header, Payload::Borrow(bytes));
  // Re-encode with a header that announces more payload than follows.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(frame.Dump(&slices).ok());
  std::string flat;
  for (const auto& slice : slices)
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  flat.resize(flat.size() - 10);
  grpc::Slice truncated(flat);
  RawResult result =
      SendRaw(listener_->address(), grpc_internal::kStreamMethod, grpc::ByteBuffer(&truncated, 1));
  ASSERT_TRUE(result.got_message);
  grpc_internal::DecodeError error;
  absl::StatusOr<grpc_internal::Frame> reply = grpc_internal::DecodeFrame(result.message, &error);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header.call_id(), 42u);
  EXPECT_EQ(reply->header.status_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(reply->header.status_message().find("truncated"), std::string::npos);
}

TEST_F(GrpcFrameTest, GarbageFrameEndsOnlyItsOwnStream) {
  std::unique_ptr<Connection> client = Connect(1 << 20);
  ASSERT_NE(client, nullptr);
  grpc::Slice garbage(std::string("\xff\xff\xff\x7f garbage"));
  RawResult result =
      SendRaw(listener_->address(), grpc_internal::kStreamMethod, grpc::ByteBuffer(&garbage, 1));
  EXPECT_FALSE(result.got_message);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_OK(CallAndWait(*client, Echo("fine")));
}

TEST_F(GrpcFrameTest, UnknownGrpcMethodIsUnimplemented) {
  grpc::Slice empty(std::string(""));
  RawResult result =
      SendRaw(listener_->address(), "/hetps.v1.Transport/Nope", grpc::ByteBuffer(&empty, 1));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

// Answers with the id of the connection the request came on, and its payload.
class ConnectionEchoHandler : public RequestHandler {
 public:
  void HandleRequest(Request request, ReplyCallback reply) override {
    Response response;
    response.header = absl::StrCat(request.connection);
    response.payload = request.payload;
    reply(std::move(response));
  }
};

class GrpcBulkTest : public ::testing::Test {
 protected:
  // Starts a server with `bulk_port` (TransportOptions::grpc_bulk_port) and connects to it.
  void Start(int bulk_port) {
    TransportOptions server_options;
    server_options.grpc_bulk_port = bulk_port;
    server_transport_ = NewGrpcTransport(server_options);
    auto listener = server_transport_->Listen("127.0.0.1:0", &handler_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    client_transport_ = NewGrpcTransport({});
    auto connection =
        client_transport_->Connect(listener_->address(), absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = *std::move(connection);
  }

  // The server-side connection id that the call came on.
  std::string ConnectionOf(size_t request_bytes, size_t burst_bytes = 0) {
    std::vector<uint8_t> bytes(request_bytes, 7);
    Request request = Echo("", Payload::Borrow(bytes));
    request.burst_bytes = burst_bytes;
    absl::StatusOr<Response> response = CallAndWait(*connection_, std::move(request));
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return "";
    EXPECT_EQ(response->payload.size(), request_bytes);
    return response->header;
  }

  // Calls of a large burst until one takes a connection other than `first` (the bulk one
  // connects in the background), within 10 s; its id, or empty.
  std::string BulkConnection(const std::string& first) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      std::string connection = ConnectionOf(1 << 20, grpc_internal::kBulkBurstBytes);
      if (connection.empty()) return "";
      if (connection != first) return connection;
    }
    return "";
  }

  ConnectionEchoHandler handler_;
  std::shared_ptr<Transport> server_transport_;
  std::shared_ptr<Transport> client_transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> connection_;
};

TEST_F(GrpcBulkTest, CallsOfLargeBurstsTakeTheBulkConnectionAndOthersStay) {
  Start(/*bulk_port=*/0);
  const std::string first = ConnectionOf(100);
  ASSERT_FALSE(first.empty());
  const std::string bulk = BulkConnection(first);
  ASSERT_FALSE(bulk.empty()) << "no call of a large burst left the first connection within 10 s";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ConnectionOf(1 << 20, grpc_internal::kBulkBurstBytes), bulk);
    // A small request of a burst whose responses are large (a pull).
    EXPECT_EQ(ConnectionOf(100, grpc_internal::kBulkBurstBytes), bulk);
    EXPECT_EQ(ConnectionOf(1 << 20, grpc_internal::kBulkBurstBytes - 1), first);
    // From 16 MiB on the first connection's probe stalls transfers (bench/PERFORMANCE.md).
    EXPECT_EQ(ConnectionOf(1 << 20, size_t{16} << 20), bulk);
    EXPECT_EQ(ConnectionOf(4 << 20, size_t{8} << 20), first);
    EXPECT_EQ(ConnectionOf(4 << 20), first);
    EXPECT_EQ(ConnectionOf(100), first);
  }
}

TEST_F(GrpcBulkTest, WithoutABulkPortEveryCallSharesOneConnection) {
  Start(/*bulk_port=*/-1);
  const std::string first = ConnectionOf(100);
  ASSERT_FALSE(first.empty());
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ConnectionOf(1 << 20, grpc_internal::kBulkBurstBytes), first);
    EXPECT_EQ(ConnectionOf(100, grpc_internal::kBulkBurstBytes), first);
  }
}

TEST_F(GrpcBulkTest, AfterTheServerRestartsLargeBurstsTakeItsNewBulkPort) {
  Start(/*bulk_port=*/0);
  ASSERT_FALSE(BulkConnection(ConnectionOf(100)).empty());
  const std::string address = listener_->address();
  listener_->Shutdown();
  listener_.reset();
  auto listener = server_transport_->Listen(address, &handler_);  // another free bulk port
  ASSERT_TRUE(listener.ok()) << listener.status();
  listener_ = *std::move(listener);
  // The first calls may find the old connection gone; the client reconnects by itself.
  std::string first;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (first.empty() && absl::Now() < deadline) {
    absl::StatusOr<Response> response = CallAndWait(*connection_, Echo("after the restart"));
    if (response.ok()) first = response->header;
  }
  ASSERT_FALSE(first.empty()) << "the client did not reconnect within 10 s";
  EXPECT_FALSE(BulkConnection(first).empty())
      << "no call of a large burst reached the restarted server's bulk port within 10 s";
}

TEST_F(GrpcBulkTest, ABusyBulkPortFailsTheListenerAndSaysWhichPort) {
  Start(/*bulk_port=*/-1);
  const std::string taken = listener_->address();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(taken.substr(taken.rfind(':') + 1), &port)) << taken;
  TransportOptions options;
  options.grpc_bulk_port = port;
  std::shared_ptr<Transport> transport = NewGrpcTransport(options);
  auto listener = transport->Listen("127.0.0.1:0", &handler_);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kUnavailable) << listener.status();
  EXPECT_NE(listener.status().message().find("grpc_bulk_port"), absl::string_view::npos)
      << listener.status();
}

TEST(FrameCodecTest, RoundTripsHeaderAndPayloadWithoutCopyingIt) {
  hetps::v1::FrameHeader header;
  header.set_call_id(7);
  header.set_header("method header");
  std::vector<float> values(1000, 2.5f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(values)));
  grpc::ByteBuffer frame = grpc_internal::EncodeFrame(header, payload);
  EXPECT_EQ(frame.Length(), grpc_internal::EncodedFrameSize(header, payload));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(frame.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[1].begin(), reinterpret_cast<const uint8_t*>(values.data()));
  grpc_internal::DecodeError error;
  absl::StatusOr<grpc_internal::Frame> decoded = grpc_internal::DecodeFrame(frame, &error);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.call_id(), 7u);
  EXPECT_EQ(decoded->header.header(), "method header");
  EXPECT_EQ(decoded->payload.ToString(), payload.ToString());
}

}  // namespace
}  // namespace hetps::transport
