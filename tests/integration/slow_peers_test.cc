// A ps-server facing peers that misbehave without breaking any rule of the protocol: a shard
// that stops answering (found by keepalives, then reconnected), thousands of connections that
// never say anything (closed, and cheap meanwhile), and a client that sends requests but never
// reads the replies (backpressure bounds what the shard queues). Memory is the shard process's
// resident set, read from /proc.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_callback.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/frame.pb.h"
#include "proto/ps.pb.h"
#include "tests/testing/call.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "transport/grpc/frame_codec.h"
#include "worker/client.h"

namespace hetps {
namespace {

using testing::LocalCluster;

constexpr uint64_t kMiB = 1 << 20;

transport::Request Echo(absl::Duration timeout) {
  transport::Request request;
  request.method = hetps::v1::METHOD_ECHO;
  request.header = hetps::v1::EchoRequest().SerializeAsString();
  request.deadline = absl::Now() + timeout;
  return request;
}

int PortOf(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  return port;
}

TEST(KeepaliveTest, AShardThatStopsAnsweringIsNoticedBeforeTheCallsDeadlineThenReconnected) {
  for (const std::string& name : testing::TransportsUnderTest({})) {
    SCOPED_TRACE(name);
    LocalCluster cluster;
    std::vector<std::string> env;
    if (name == "ucx-tcp") env.push_back("UCX_TLS=tcp");
    ASSERT_OK(cluster.Start(
        1, 1, {absl::StrCat("--transport=", name == "grpc" ? "grpc" : "ucx"), "--keepalive_s=1"},
        env));
    transport::TransportOptions options;
    options.keepalive_interval = absl::Seconds(1);
    options.keepalive_timeout = absl::Seconds(1);
    std::shared_ptr<transport::Transport> transport = testing::NewTestTransport(name, options);
    auto connection = transport->Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                                         testing::WorkerGreeting(0, 1, 0, 1));
    ASSERT_TRUE(connection.ok()) << connection.status();
    ASSERT_OK(testing::CallAndWait(**connection, Echo(absl::Seconds(10))));

    // Stopped, the shard's kernel still holds the connection open: only keepalives tell.
    ASSERT_TRUE(cluster.shard(0).Stop());
    const absl::Time start = absl::Now();
    const absl::Status silent =
        testing::CallAndWait(**connection, Echo(absl::Seconds(120))).status();
    const absl::Duration noticed = absl::Now() - start;
    EXPECT_EQ(silent.code(), absl::StatusCode::kUnavailable) << silent;
    EXPECT_LT(noticed, absl::Seconds(30)) << "found only at the call's deadline of 120 s";
    std::cout << name << ": a stopped shard was noticed after " << absl::FormatDuration(noticed)
              << " (keepalive every 1 s)\n";

    cluster.shard(0).Signal(SIGCONT);
    absl::Status again;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    do {
      again = testing::CallAndWait(**connection, Echo(absl::Seconds(10))).status();
      if (again.ok()) break;
      absl::SleepFor(absl::Milliseconds(50));
    } while (absl::Now() < give_up);
    EXPECT_TRUE(again.ok()) << "no reconnection once the shard answers again: " << again;
    (*connection)->Shutdown();
  }
}

// A shard killed while a call waits on it (a barrier the other worker never reaches): the call
// fails within a couple of seconds, not at the next keepalive (10 s by default) nor at its
// deadline, so that a worker of a replicated job goes on at the partition's other copy soon.
TEST(KeepaliveTest, AKilledShardFailsTheCallWaitingOnItWithinSeconds) {
  for (const std::string& name : testing::TransportsUnderTest({})) {
    SCOPED_TRACE(name);
    LocalCluster cluster;
    std::vector<std::string> env;
    if (name == "ucx-tcp") env.push_back("UCX_TLS=tcp");
    ASSERT_OK(
        cluster.Start(1, 2, {absl::StrCat("--transport=", name == "grpc" ? "grpc" : "ucx")}, env));
    std::shared_ptr<transport::Transport> transport = testing::NewTestTransport(name);
    auto connection = transport->Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                                         testing::WorkerGreeting(0, 1, 0, 2));
    ASSERT_TRUE(connection.ok()) << connection.status();
    ASSERT_OK(testing::CallAndWait(**connection, Echo(absl::Seconds(10))));
    hetps::v1::BarrierRequest barrier;
    barrier.set_worker_rank(0);
    barrier.set_generation(1);
    barrier.set_incarnation(7);
    transport::Request request;
    request.method = hetps::v1::METHOD_BARRIER;
    request.header = barrier.SerializeAsString();
    request.deadline = absl::Now() + absl::Seconds(120);
    absl::Notification done;
    absl::Status waited;
    (*connection)->Call(std::move(request), [&](absl::StatusOr<transport::Response> result) {
      waited = result.status();
      done.Notify();
    });
    ASSERT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(500)))
        << "the barrier did not wait: " << waited;
    cluster.shard(0).Signal(SIGKILL);
    const absl::Time killed = absl::Now();
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    const absl::Duration noticed = absl::Now() - killed;
    EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
    EXPECT_LT(noticed, absl::Seconds(5)) << waited;
    std::cout << name << ": a killed shard failed the call waiting on it after "
              << absl::FormatDuration(noticed) << "\n";
    (*connection)->Shutdown();
  }
}

// Run as a child process by the test below: rank 1 of 2 pulls a version nobody makes, and waits.
TEST(SlowPeersChild, DISABLED_PullsAndWaits) {
  const char* address = std::getenv("HETPS_TEST_SHARD");
  const char* transport_name = std::getenv("HETPS_TEST_TRANSPORT");
  const char* key = std::getenv("HETPS_TEST_TENSOR_KEY");
  ASSERT_TRUE(address != nullptr && transport_name != nullptr && key != nullptr);
  uint64_t tensor_key = 0;
  ASSERT_TRUE(absl::SimpleAtoi(key, &tensor_key));
  std::shared_ptr<transport::Transport> transport = testing::NewTestTransport(transport_name);
  auto connection = transport->Connect(address, absl::Now() + absl::Seconds(10),
                                       testing::WorkerGreeting(0, 1, 1, 2));
  ASSERT_TRUE(connection.ok()) << connection.status();
  hetps::v1::PullRequest pull;
  pull.set_worker_rank(1);
  pull.set_min_version(1);
  hetps::v1::PartitionItem* item = pull.add_items();
  item->set_tensor_key(tensor_key);
  item->set_partition(0);
  item->set_dtype(hetps::v1::DTYPE_FP32);
  transport::Request request;
  request.method = hetps::v1::METHOD_PULL;
  request.header = pull.SerializeAsString();
  request.deadline = absl::Now() + absl::Seconds(120);
  testing::CallAndWait(**connection, std::move(request)).IgnoreError();
}

// A worker that stops answering (stopped, or its machine gone without a word) while its pull
// waits: the shard's keepalive closes its connection and lets the pull go, long before the
// pull's own deadline.
TEST(KeepaliveTest, AWorkerThatStopsAnsweringIsLetGoByTheShard) {
  for (const std::string& name : testing::TransportsUnderTest({})) {
    SCOPED_TRACE(name);
    LocalCluster cluster;
    std::vector<std::string> env;
    if (name == "ucx-tcp") env.push_back("UCX_TLS=tcp");
    ASSERT_OK(cluster.Start(
        1, 2, {absl::StrCat("--transport=", name == "grpc" ? "grpc" : "ucx"), "--keepalive_s=1"},
        env));
    ClientOptions options;
    options.servers = cluster.addresses();
    options.world_size = 2;
    options.transport = "grpc";
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    auto id = (*client)->Declare(testing::Spec("w", 16, 0.1, SyncMode::kBsp));
    ASSERT_TRUE(id.ok()) << id.status();
    auto waiting = [&]() -> uint64_t {
      auto stats = (*client)->Stats();
      return stats.ok() ? (*stats)[0].requests_waiting : ~uint64_t{0};
    };
    auto await_waiting = [&](uint64_t count, absl::Duration timeout) {
      const absl::Time give_up = absl::Now() + timeout;
      while (waiting() != count && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
      return waiting() == count;
    };

    env.push_back(absl::StrCat("HETPS_TEST_SHARD=", cluster.addresses()[0]));
    env.push_back(absl::StrCat("HETPS_TEST_TRANSPORT=", name));
    env.push_back(absl::StrCat("HETPS_TEST_TENSOR_KEY=", *id));
    testing::Subprocess worker(
        {testing::BinaryPath("tests/integration_test"), "--gtest_also_run_disabled_tests",
         "--gtest_filter=SlowPeersChild.DISABLED_PullsAndWaits"},
        absl::StrCat(cluster.dir(), "/child.log"), env);
    ASSERT_TRUE(await_waiting(1, absl::Seconds(30)))
        << testing::ReadFile(cluster.dir() + "/child.log");
    ASSERT_TRUE(worker.Stop());
    const absl::Time stopped = absl::Now();
    EXPECT_TRUE(await_waiting(0, absl::Seconds(30)))
        << "the shard still holds the pull of a worker that stopped answering";
    std::cout << name << ": the pull of a stopped worker was let go after "
              << absl::FormatDuration(absl::Now() - stopped) << "\n";
    worker.Signal(SIGKILL);
    worker.Wait(absl::Seconds(10));
  }
}

// Raises this process's open-file limit to its hard limit (the shard inherits it).
void RaiseFileLimit(size_t wanted) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, wanted);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
}

// A training step that has to succeed, quickly, whatever else the shard faces.
void TrainOneStep(Client& client, TensorId id, uint64_t elements) {
  const std::vector<float> gradient(elements, 0.0f);
  std::vector<float> weights(elements);
  const absl::Time start = absl::Now();
  absl::Status stepped = client.PushPull(id, gradient, absl::MakeSpan(weights), 0).Wait();
  EXPECT_TRUE(stepped.ok()) << stepped;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(SlowPeersTest, ThousandsOfSilentConnectionsAreClosedAndCostLittle) {
  constexpr int kSilent = 2000;
  RaiseFileLimit(kSilent + 1000);
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--idle_timeout_s=3"}));
  ClientOptions options;
  options.servers = cluster.addresses();
  options.transport = "grpc";
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto id = (*client)->Declare(testing::Spec("w", 1024, 0.1, SyncMode::kAsp));
  ASSERT_TRUE(id.ok()) << id.status();
  TrainOneStep(**client, *id, 1024);
  const uint64_t before = cluster.shard(0).ResidentBytes();

  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(PortOf(cluster.addresses()[0])));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> sockets;
  for (int i = 0; i < kSilent; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0) << "socket " << i;
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
        << "connection " << i;
    sockets.push_back(fd);
  }
  // The shard keeps serving its worker meanwhile.
  TrainOneStep(**client, *id, 1024);
  const uint64_t during = cluster.shard(0).ResidentBytes();
  const double per_connection_kib =
      (static_cast<double>(during) - static_cast<double>(before)) / kSilent / 1024;
  std::cout << "shard memory: " << before / kMiB << " MiB before, " << during / kMiB << " MiB with "
            << kSilent << " silent connections (" << per_connection_kib << " KiB each)\n";
  EXPECT_LT(during, before + 200 * kMiB);

  // Each silent connection is closed by the shard: the socket reads end-of-file or a reset.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  int closed = 0;
  for (int fd : sockets) {
    // What the shard sends first (gRPC's HTTP/2 settings) is read and dropped.
    char bytes[256];
    while (true) {
      pollfd readable{fd, POLLIN, 0};
      const int wait_ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(give_up - absl::Now())));
      if (poll(&readable, 1, wait_ms) != 1) break;
      if (recv(fd, bytes, sizeof(bytes), 0) <= 0) {
        ++closed;
        break;
      }
    }
    close(fd);
  }
  EXPECT_EQ(closed, kSilent) << "connections that never sent anything were kept open";
  TrainOneStep(**client, *id, 1024);
}

// Writes request frames on one stream as fast as the shard takes them and never reads a reply.
class GreedyStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  GreedyStream(grpc::GenericStub* stub, const std::string& greeting,
               std::vector<grpc::ByteBuffer> frames)
      : frames_(std::move(frames)) {
    context_.AddMetadata(transport::grpc_internal::kGreetingMetadata, greeting);
    stub->PrepareBidiStreamingCall(&context_, transport::grpc_internal::kStreamMethod,
                                   grpc::StubOptions(), this);
    StartWrite(&frames_[0]);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (!ok) return;
    ++written_;
    last_write_ = absl::Now();
    if (written_ < frames_.size()) StartWrite(&frames_[written_]);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = status.error_message();
  }
  std::string status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  // Waits until the writes have stalled for `quiet` (or all went out); returns how many did.
  size_t AwaitStall(absl::Duration quiet, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      {
        absl::MutexLock lock(&mu_);
        if (written_ == frames_.size() || absl::Now() - last_write_ >= quiet) return written_;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    absl::MutexLock lock(&mu_);
    return written_;
  }
  void CancelAndWait() {
    context_.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(30));
  }

 private:
  grpc::ClientContext context_;
  std::vector<grpc::ByteBuffer> frames_;
  absl::Mutex mu_;
  size_t written_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_write_ ABSL_GUARDED_BY(mu_) = absl::Now();
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::string status_ ABSL_GUARDED_BY(mu_);
};

TEST(SlowPeersTest, AClientThatNeverReadsItsRepliesCannotMakeTheShardQueueWithoutBound) {
  // Each push-pull of this ASP partition makes a new version, so every reply the greedy client
  // leaves unread would pin its own 1 MiB copy of the weights: 1 GiB for 1024 of them.
  constexpr uint64_t kElements = kMiB / sizeof(float);
  constexpr int kRequests = 1024;
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 2, {"--max_unsent_reply_bytes=8388608"}));
  ClientOptions options;
  options.servers = cluster.addresses();
  options.world_size = 2;
  options.transport = "grpc";
  options.partition_bytes = kMiB;  // one partition, the one the frames below push
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto id = (*client)->Declare(testing::Spec("w", kElements, 0.1, SyncMode::kAsp));
  ASSERT_TRUE(id.ok()) << id.status();
  TrainOneStep(**client, *id, kElements);
  const uint64_t before = cluster.shard(0).ResidentBytes();

  // Rank 1's pushes, straight on the wire.
  const std::vector<float> gradient(kElements, 0.0f);
  const transport::Payload payload =
      transport::Payload::Borrow(transport::AsBytes(absl::MakeConstSpan(gradient)));
  std::vector<grpc::ByteBuffer> frames;
  for (int i = 0; i < kRequests; ++i) {
    hetps::v1::PushRequest push;
    push.set_worker_rank(1);
    push.set_sequence(i + 1);
    push.set_incarnation(4242);
    hetps::v1::PartitionItem* item = push.add_items();
    item->set_tensor_key(*id);
    item->set_partition(0);
    item->set_dtype(hetps::v1::DTYPE_FP32);
    item->set_num_bytes(kMiB);
    hetps::v1::FrameHeader header;
    header.set_call_id(i + 1);
    header.set_method(hetps::v1::METHOD_PUSH_PULL);
    header.set_timeout_us(absl::ToInt64Microseconds(absl::Seconds(120)));
    header.set_header(push.SerializeAsString());
    frames.push_back(transport::grpc_internal::EncodeFrame(std::move(header), payload));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel(cluster.addresses()[0], grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  auto greedy = std::make_unique<GreedyStream>(&stub, testing::WorkerGreeting(0, 1, 1, 2).greeting,
                                               std::move(frames));
  const size_t written = greedy->AwaitStall(absl::Seconds(3), absl::Seconds(120));
  const uint64_t during = cluster.shard(0).ResidentBytes();
  std::cout << "the shard took " << written << " of " << kRequests
            << " push-pulls of 1 MiB from a client that reads nothing; shard memory "
            << before / kMiB << " MiB before, " << during / kMiB << " MiB after; "
            << greedy->status() << "\n";
  EXPECT_LT(written, static_cast<size_t>(kRequests)) << "the shard never stopped reading";
  EXPECT_LT(during, before + 256 * kMiB);

  // Other workers are served meanwhile.
  TrainOneStep(**client, *id, kElements);
  greedy->CancelAndWait();
  TrainOneStep(**client, *id, kElements);
}

}  // namespace
}  // namespace hetps
