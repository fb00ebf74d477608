// The UCX transport's binary frame header, what a server checks in a bootstrap before it opens
// an endpoint (the frame version, and that the worker address can be one), and the rendezvous
// threshold a worker picks.
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/ucx_frame.h"

#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/frame.pb.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/ucx/ucx_lanes.h"
#include "transport/ucx/ucx_server.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {
namespace {

std::string Encode(const UcxFrame& frame) {
  std::string bytes(EncodedUcxFrameSize(frame), '\0');
  EncodeUcxFrameTo(frame, bytes.data());
  return bytes;
}

TEST(UcxFrameTest, EveryFieldAndTheTextSurviveEncoding) {
  UcxFrame frame;
  frame.call_id = 0x0102030405060708;
  frame.connection_id = 42;
  frame.timeout_us = -7;  // signed on the wire
  frame.payload_bytes = uint64_t{1} << 40;
  frame.method = 0x40000002;
  frame.status_code = 13;
  const std::string text("header\0with a zero", 18);
  frame.text = text;
  const std::string bytes = Encode(frame);
  EXPECT_EQ(bytes.size(), kUcxFrameFixedBytes + text.size());

  absl::StatusOr<UcxFrame> decoded = DecodeUcxFrame(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->call_id, frame.call_id);
  EXPECT_EQ(decoded->connection_id, frame.connection_id);
  EXPECT_EQ(decoded->timeout_us, frame.timeout_us);
  EXPECT_EQ(decoded->payload_bytes, frame.payload_bytes);
  EXPECT_EQ(decoded->method, frame.method);
  EXPECT_EQ(decoded->status_code, frame.status_code);
  EXPECT_EQ(decoded->text, text);
  EXPECT_EQ(decoded->text.data(), bytes.data() + kUcxFrameFixedBytes);  // no copy
}

TEST(UcxFrameTest, TheLayoutIsLittleEndianAtFixedOffsets) {
  UcxFrame frame;
  frame.call_id = 1;
  frame.connection_id = 2;
  frame.method = 3;
  const std::string bytes = Encode(frame);
  ASSERT_EQ(bytes.size(), kUcxFrameFixedBytes);
  EXPECT_EQ(bytes[0], 1);   // call_id, bytes 0..7
  EXPECT_EQ(bytes[8], 2);   // connection_id, bytes 8..15
  EXPECT_EQ(bytes[32], 3);  // method, bytes 32..35
}

TEST(UcxFrameTest, AHeaderShorterThanTheFixedPartIsRefused) {
  const std::string bytes = Encode(UcxFrame());
  for (size_t length : {size_t{0}, size_t{1}, kUcxFrameFixedBytes - 1}) {
    absl::StatusOr<UcxFrame> decoded = DecodeUcxFrame(bytes.data(), length);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << length;
  }
  EXPECT_OK(DecodeUcxFrame(bytes.data(), kUcxFrameFixedBytes));
}

// Admits only connections that greet with "member".
class NoHandler : public RequestHandler {
 public:
  absl::Status Admit(const ConnectionInfo& connection) override {
    if (connection.greeting != "member") return absl::UnauthenticatedError("not a member");
    return absl::OkStatus();
  }
  void HandleRequest(Request, ReplyCallback reply) override {
    reply(absl::InternalError("not for this test"));
  }
};

// Bootstraps sent by hand over gRPC to a UCX listener.
class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto listener = ucx_->Listen("127.0.0.1:0", &handler_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    ConnectOptions member;
    member.greeting = "member";
    auto connection = grpc_->Connect(listener_->address(), absl::Now() + absl::Seconds(10), member);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = *std::move(connection);
  }
  void TearDown() override {
    if (connection_ != nullptr) connection_->Shutdown();
    if (listener_ != nullptr) listener_->Shutdown();
  }

  absl::StatusOr<Response> Bootstrap(const hetps::v1::UcxBootstrapRequest& bootstrap,
                                     Connection* connection = nullptr) {
    Request request;
    request.method = kBootstrapMethod;
    request.header = bootstrap.SerializeAsString();
    request.deadline = absl::Now() + absl::Seconds(10);
    return testing::CallAndWait(connection != nullptr ? *connection : *connection_,
                                std::move(request));
  }

  std::string ServerAddress() {
    hetps::v1::UcxBootstrapRequest probe;
    probe.set_address_only(true);
    absl::StatusOr<Response> response = Bootstrap(probe);
    hetps::v1::UcxBootstrapResponse answer;
    EXPECT_TRUE(response.ok() && answer.ParseFromString(response->header));
    return answer.worker_address();
  }

  NoHandler handler_;
  std::shared_ptr<Transport> ucx_ = testing::NewTestTransport("ucx");
  std::shared_ptr<Transport> grpc_ = NewGrpcTransport({});
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> connection_;
};

// A client of another frame layout (an older build sends no version: 0) is refused at
// bootstrap with a reason, before any frame is exchanged.
TEST_F(BootstrapTest, AServerRefusesAnotherFrameVersion) {
  for (uint32_t version : {uint32_t{0}, kUcxFrameVersion + 1}) {
    hetps::v1::UcxBootstrapRequest bootstrap;
    bootstrap.set_worker_address("not used: refused before");
    bootstrap.set_connection_id(1);
    bootstrap.set_frame_version(version);
    absl::StatusOr<Response> response = Bootstrap(bootstrap);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition) << version;
    EXPECT_NE(response.status().message().find("frame version"), absl::string_view::npos)
        << response.status();
  }
}

// UCX aborts the process on a worker address it cannot read: the server refuses such bytes
// with an error and keeps serving.
TEST_F(BootstrapTest, AServerRefusesWhatCannotBeAWorkerAddressAndKeepsServing) {
  for (const std::string& address :
       {std::string("short"), std::string("not a worker address"), std::string(64, '\xff')}) {
    hetps::v1::UcxBootstrapRequest bootstrap;
    bootstrap.set_worker_address(address);
    bootstrap.set_connection_id(1);
    bootstrap.set_frame_version(kUcxFrameVersion);
    absl::StatusOr<Response> response = Bootstrap(bootstrap);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << address;
  }
  hetps::v1::UcxBootstrapRequest probe;
  probe.set_address_only(true);
  absl::StatusOr<Response> response = Bootstrap(probe);
  ASSERT_TRUE(response.ok()) << response.status();
  hetps::v1::UcxBootstrapResponse answer;
  ASSERT_TRUE(answer.ParseFromString(response->header));
  EXPECT_FALSE(answer.worker_address().empty());
}

// The server's own address sent back with a byte changed made UCX fail an assertion (abort):
// an address with the server's own worker id is refused.
TEST_F(BootstrapTest, AServerRefusesItsOwnAddressSentBackAltered) {
  const std::string own = ServerAddress();
  ASSERT_GT(own.size(), 12u);
  for (size_t at : {size_t{0}, size_t{9}, own.size() / 2, own.size() - 1}) {
    std::string altered = own;
    altered[at] = static_cast<char>(altered[at] ^ (at == 0 ? 0x10 : 0x01));
    for (const std::string& address : {own, altered}) {
      hetps::v1::UcxBootstrapRequest bootstrap;
      bootstrap.set_worker_address(address);
      bootstrap.set_connection_id(1);
      bootstrap.set_frame_version(kUcxFrameVersion);
      bootstrap.set_greeting("member");
      absl::StatusOr<Response> response = Bootstrap(bootstrap);
      EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << at;
    }
  }
  EXPECT_EQ(ServerAddress(), own) << "the server restarted or died";
}

// A connection the handler did not admit never reaches the bootstrap (nor its address
// parser), and a bootstrap must carry an admitted greeting of its own.
TEST_F(BootstrapTest, ABootstrapIsAnsweredOnlyToAdmittedConnections) {
  std::unique_ptr<Connection> stranger = *grpc_->Connect(
      listener_->address(), absl::Now() + absl::Seconds(10), ConnectOptions{"stranger"});
  hetps::v1::UcxBootstrapRequest probe;
  probe.set_address_only(true);
  EXPECT_EQ(Bootstrap(probe, stranger.get()).status().code(), absl::StatusCode::kUnauthenticated);
  hetps::v1::UcxBootstrapRequest crafted;
  crafted.set_worker_address(std::string(64, '\x01'));
  crafted.set_connection_id(1);
  crafted.set_frame_version(kUcxFrameVersion);
  crafted.set_greeting("member");
  EXPECT_EQ(Bootstrap(crafted, stranger.get()).status().code(), absl::StatusCode::kUnauthenticated);
  stranger->Shutdown();

  // Over an admitted connection, a bootstrap that names no admitted greeting is refused too.
  crafted.set_greeting("stranger");
  EXPECT_EQ(Bootstrap(crafted).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(ServerAddress().empty());
}

// Pieces that follow each other in memory go to UCX as one contiguous buffer (its zero-copy
// rendezvous); the rest as an IOV of what is left after merging.
TEST(UcxPiecesTest, AdjacentPiecesAreMergedIntoOneBuffer) {
  uint8_t memory[100];
  std::vector<ucp_dt_iov_t> adjacent = {{memory, 10}, {memory + 10, 30}, {memory + 40, 60}};
  UcxBuffer whole = DescribePieces(absl::MakeSpan(adjacent));
  EXPECT_EQ(whole.datatype, ucp_dt_make_contig(1));
  EXPECT_EQ(whole.buffer, memory);
  EXPECT_EQ(whole.count, 100u);

  std::vector<ucp_dt_iov_t> gap = {
      {memory, 10}, {memory + 10, 10}, {memory + 50, 20}, {memory + 70, 5}};
  UcxBuffer two = DescribePieces(absl::MakeSpan(gap));
  EXPECT_EQ(two.datatype, ucp_dt_make_iov());
  ASSERT_EQ(two.count, 2u);
  const auto* pieces = static_cast<const ucp_dt_iov_t*>(two.buffer);
  EXPECT_EQ(pieces[0].buffer, memory);
  EXPECT_EQ(pieces[0].length, 20u);
  EXPECT_EQ(pieces[1].buffer, memory + 50);
  EXPECT_EQ(pieces[1].length, 25u);

  std::vector<ucp_dt_iov_t> none;
  EXPECT_EQ(DescribePieces(absl::MakeSpan(none)).count, 0u);
}

// Without RDMA, eager up to 512 KiB (a rendezvous costs a round trip a copy does not); with an
// RDMA device, or UCX_RNDV_THRESH in the environment, UCX's own; a configured value always.
TEST(RendezvousThresholdTest, EagerUpToHalfAMebibyteUnlessRdmaOrTheUserSaysOtherwise) {
  ASSERT_EQ(std::getenv("UCX_RNDV_THRESH"), nullptr) << "the test sets it itself";
  hetps::testing::ScopedTempDir no_rdma;
  EXPECT_EQ(RendezvousThreshold(0, no_rdma.path().c_str()), size_t{512} << 10);
  EXPECT_EQ(RendezvousThreshold(0, (no_rdma.path() + "/absent").c_str()), size_t{512} << 10);
  EXPECT_EQ(RendezvousThreshold(8192, no_rdma.path().c_str()), 8192u);

  hetps::testing::ScopedTempDir rdma;
  ASSERT_EQ(mkdir((rdma.path() + "/mlx5_0").c_str(), 0755), 0);
  EXPECT_EQ(RendezvousThreshold(0, rdma.path().c_str()), 0u);
  EXPECT_EQ(RendezvousThreshold(8192, rdma.path().c_str()), 8192u);

  setenv("UCX_RNDV_THRESH", "64k", 1);
  EXPECT_EQ(RendezvousThreshold(0, no_rdma.path().c_str()), 0u);
  EXPECT_EQ(RendezvousThreshold(8192, no_rdma.path().c_str()), 8192u);
  unsetenv("UCX_RNDV_THRESH");
}

// Lanes as DescribeLanes gives them (ucp_ep_print_info's lines): TCP through a network device
// may send large messages eagerly; loopback TCP, shared memory and RDMA may not.
TEST(LanesTest, OnlyTcpThroughANetworkDeviceCrossesANetwork) {
  EXPECT_TRUE(LanesCrossANetworkOverTcp(
      "lane[0]:  0:tcp/eth0.0 md[0]   -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup"));
  EXPECT_TRUE(LanesCrossANetworkOverTcp(
      "lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] am; lane[1]:  1:tcp/veth1.0 md[0] "
      "-> md[0]/tcp/sysdev[255] am_bw#0"));
  EXPECT_FALSE(LanesCrossANetworkOverTcp(
      "lane[0]:  0:tcp/lo.0 md[0]   -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup"));
  EXPECT_FALSE(LanesCrossANetworkOverTcp(
      "lane[0]:  2:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am am_bw#0; lane[1]:  "
      "4:cma/memory.0 md[4]  -> md[4]/cma/sysdev[255] rma_bw#0"));
  EXPECT_FALSE(LanesCrossANetworkOverTcp("lane[0]:  1:rc_mlx5/mlx5_0:1.0 md[1] -> am am_bw#0"));
  EXPECT_FALSE(LanesCrossANetworkOverTcp("unknown"));
}

TEST(LanesTest, TcpIsTcpThroughAnyDevice) {
  EXPECT_TRUE(LanesUseTcp("lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] am wireup"));
  EXPECT_TRUE(LanesUseTcp("lane[0]:  0:tcp/eth0.0 md[0] -> md[0]/tcp/sysdev[255] am am_bw#0"));
  EXPECT_FALSE(LanesUseTcp(
      "lane[0]:  2:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am am_bw#0; lane[1]:  "
      "4:cma/memory.0 md[4]  -> md[4]/cma/sysdev[255] rma_bw#0"));
  EXPECT_FALSE(LanesUseTcp("unknown"));
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
