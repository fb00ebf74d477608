// Replication (--replicas 2) over every transport: each partition's backup on the next shard
// holds bit for bit what its primary holds (weights, optimizer state, version, exactly-once
// bookkeeping) after BSP steps, ASP pushes, initial values, hyperparameter changes and state
// writes; and a push is acknowledged only once the backup has it.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "common/version.h"
#include "gtest/gtest.h"
#include "server/random_draws.h"
#include "tests/testing/call.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "worker/client.h"

namespace hetps {
namespace {

constexpr uint64_t kElements = 1000;  // 4 partitions of 256 floats (test clusters' 1 KiB)
constexpr uint64_t kLarge = 3000;     // 12 partitions over 3 shards

std::vector<float> Gradient(uint32_t rank, uint64_t step) {
  std::vector<float> g(kElements);
  for (uint64_t i = 0; i < kElements; ++i) g[i] = std::sin(0.01f * i + rank + 3.0f * step);
  return g;
}

// Push-pulls steps [first, last) of a kLarge-element tensor, a gradient that changes with each
// step; the weights land in `w`.
void TrainLarge(Client& client, TensorId id, uint64_t first, uint64_t last, std::vector<float>& w) {
  for (uint64_t step = first; step < last; ++step) {
    std::vector<float> g(kLarge);
    for (uint64_t i = 0; i < kLarge; ++i) g[i] = std::sin(0.01f * i + 3.0f * step);
    const absl::Status status = client.PushPull(id, g, absl::MakeSpan(w), step).Wait();
    ASSERT_TRUE(status.ok()) << "step " << step << ": " << status;
  }
}

void ExpectSameState(Client& client, TensorId id, const char* what) {
  SCOPED_TRACE(what);
  absl::StatusOr<TensorState> served = client.ReadState(id);
  absl::StatusOr<TensorState> backup = client.ReadBackupState(id);
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_TRUE(backup.ok()) << backup.status();
  EXPECT_EQ(served->version, backup->version);
  EXPECT_EQ(served->weights, backup->weights);  // bitwise: no tolerance
  EXPECT_EQ(served->slots, backup->slots);
}

class ClientReplicationTest : public testing::ClientClusterTest {
 protected:
  void StartReplicated(int shards, int workers, const std::string& auth_token = "") {
    auto etcd = testing::EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    server::ServerOptions options;
    options.auth_token = auth_token;
    options.replicas = 2;
    options.etcd = etcd_->endpoint();
    options.lease_ttl = absl::Seconds(1);
    options.metrics_address = "127.0.0.1:0";
    StartCluster(shards, workers, options);
  }
  // Every primary partition's digest equals its backup's on the next shard.
  void ExpectBackupsEqualPrimaries() {
    const int shards = static_cast<int>(cluster_->addresses().size());
    std::vector<std::vector<server::Shard::PartitionDigest>> digests;
    for (int s = 0; s < shards; ++s) digests.push_back(cluster_->shard(s).PartitionDigests());
    int compared = 0;
    for (int s = 0; s < shards; ++s) {
      for (const auto& primary : digests[s]) {
        if (primary.backup) continue;
        server::Shard::PartitionDigest expected = primary;
        expected.backup = true;
        const auto& next = digests[(s + 1) % shards];
        EXPECT_NE(std::find(next.begin(), next.end(), expected), next.end())
            << "partition " << primary.partition << " of tensor " << primary.tensor_key
            << " on shard " << s << " has no equal backup on shard " << (s + 1) % shards;
        ++compared;
      }
    }
    EXPECT_GT(compared, 0);
  }

  // Sends `replicate` (its changes' bytes: `bytes`) to shard `to`, on a connection of its own
  // that greets with `greeting`.
  absl::Status SendReplicate(int to, const hetps::v1::ReplicateRequest& replicate,
                             absl::Span<const float> bytes,
                             const transport::ConnectOptions& greeting) {
    std::shared_ptr<transport::Transport> transport = testing::NewTestTransport(GetParam());
    if (cluster_->inproc() != nullptr) transport = cluster_->inproc();
    auto connection =
        transport->Connect(cluster_->addresses()[to], absl::Now() + absl::Seconds(10), greeting);
    if (!connection.ok()) return connection.status();
    transport::Request request;
    request.method = hetps::v1::METHOD_REPLICATE;
    request.header = replicate.SerializeAsString();
    request.payload = transport::Payload::Borrow(transport::AsBytes(bytes));
    request.deadline = absl::Now() + absl::Seconds(10);
    absl::Status status = testing::CallAndWait(**connection, std::move(request)).status();
    (*connection)->Shutdown();
    return status;
  }
  // The greeting of a connection that shard `from` opens to shard `to` of `num_shards`.
  static transport::ConnectOptions PeerGreeting(uint32_t from, uint32_t to, uint32_t num_shards,
                                                const std::string& token) {
    hetps::v1::HelloRequest peer;
    peer.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
    peer.set_job_id("hetps");
    peer.set_shard_index(to);
    peer.set_num_shards(num_shards);
    peer.set_peer_shard(from + 1);
    peer.set_initializer_draws(server::kInitializerDraws);
    if (!token.empty()) peer.set_auth_token(token);
    transport::ConnectOptions greeting;
    greeting.greeting = peer.SerializeAsString();
    return greeting;
  }

  // The workers and shards go before etcd (they end their leases there).
  void TearDown() override {
    c0_.reset();
    c1_.reset();
    cluster_.reset();
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
};

TEST_P(ClientReplicationTest, BackupsHoldExactlyWhatTheirPrimariesHold) {
  StartReplicated(3, 2);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  TensorSpec adam = testing::Spec("adam", kElements);
  adam.optimizer = {"adam", {{"lr", 0.01}, {"amsgrad", 1}}};
  adam.init = Initializer::Uniform(-1, 1, 7);
  TensorSpec valued = testing::Spec("valued", kElements);
  valued.optimizer = {"sgd", {{"lr", 0.1}, {"momentum", 0.9}}};
  valued.push_dtype = DType::kBf16;  // converted on the primary, sent to the backup as fp32
  TensorSpec asp = testing::Spec("asp", kElements, 0.05, SyncMode::kAsp);
  std::vector<float> values(kElements);
  for (uint64_t i = 0; i < kElements; ++i) values[i] = 0.001f * i;
  TensorId ids[3];
  for (Client* worker : {c0_.get(), c1_.get()}) {
    ASSERT_TRUE((ids[0] = *worker->Declare(adam)) != 0);
    absl::StatusOr<TensorId> id = worker->Declare(valued, values);
    ASSERT_TRUE(id.ok()) << id.status();
    ids[1] = *id;
    ids[2] = *worker->Declare(asp);
  }
  ExpectSameState(*c0_, ids[1], "initial values");
  ASSERT_OK(c0_->SetHyperparameters(ids[0], 2, {{"lr", 0.002}}));

  std::vector<float> w0(kElements), w1(kElements);
  for (uint64_t step = 0; step < 4; ++step) {
    for (TensorId id : {ids[0], ids[1]}) {
      std::vector<float> g0 = Gradient(0, step), g1 = Gradient(1, step);
      Operation a = c0_->PushPull(id, g0, absl::MakeSpan(w0), step);
      Operation b = c1_->PushPull(id, g1, absl::MakeSpan(w1), step);
      ASSERT_TRUE(a.Wait().ok()) << a.Wait();
      ASSERT_TRUE(b.Wait().ok()) << b.Wait();
      EXPECT_EQ(w0, w1);
    }
    std::vector<float> g = Gradient(0, step + 10);
    ASSERT_OK(c0_->Push(ids[2], g, 0).Wait());
    ASSERT_OK(c1_->PushPull(ids[2], g, absl::MakeSpan(w1), 0).Wait());
  }
  for (TensorId id : ids) ExpectSameState(*c1_, id, "after training");
  ExpectBackupsEqualPrimaries();

  // A state written (a checkpoint loaded) reaches the backups too, and training goes on.
  absl::StatusOr<TensorState> state = c0_->ReadState(ids[0]);
  ASSERT_OK(state);
  for (float& x : state->weights) x *= 0.5f;
  ASSERT_OK(c0_->WriteState(ids[0], *state));
  ExpectSameState(*c0_, ids[0], "after a write");
  std::vector<float> g0 = Gradient(0, 9), g1 = Gradient(1, 9);
  Operation a = c0_->PushPull(ids[0], g0, absl::MakeSpan(w0), state->version);
  ASSERT_OK(c1_->Push(ids[0], g1, state->version).Wait());
  ASSERT_OK(a.Wait());
  ExpectBackupsEqualPrimaries();

  for (int s = 0; s < 3; ++s) {
    const hetps::v1::StatsResponse stats = cluster_->shard(s).Stats();
    EXPECT_GT(stats.backup_partitions(), 0u) << "shard " << s;
  }
}

// Shard 1 is gone (stopped: its etcd lease ends at once): shard 2, which keeps its backups,
// takes its partitions over in etcd and serves them, shard 0 goes on without the copies shard 1
// kept of its partitions, and the worker's calls find the partitions where they are now. The
// training ends exactly as one with no shard lost: no acknowledged step is lost, none is
// applied twice.
TEST_P(ClientReplicationTest, WhenAShardIsGoneItsBackupServesItsPartitionsAndTrainingGoesOn) {
  TensorSpec spec = testing::Spec("w", kLarge);
  spec.optimizer = {"adam", {{"lr", 0.01}}};
  spec.init = Initializer::Uniform(-1, 1, 3);
  // The same training on a cluster that loses nothing.
  auto reference_cluster = testing::TestCluster::Start(GetParam(), 3, 1);
  ASSERT_TRUE(reference_cluster.ok()) << reference_cluster.status();
  auto reference_client = (*reference_cluster)->NewClient(0);
  ASSERT_OK(reference_client);
  std::vector<float> expected(kLarge);
  TensorId reference_id = *(*reference_client)->Declare(spec);
  ASSERT_NO_FATAL_FAILURE(TrainLarge(**reference_client, reference_id, 0, 6, expected));

  StartReplicated(3, 1);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.metrics_port = 0;
  options.metrics_host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  c0_ = *std::move(client);
  absl::StatusOr<TensorId> id = c0_->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> w(kLarge);
  ASSERT_NO_FATAL_FAILURE(TrainLarge(*c0_, *id, 0, 3, w));
  const uint64_t served_by_2 = cluster_->shard(2).Stats().num_partitions();
  std::map<std::string, double> before =
      testing::ScrapeSamples(cluster_->shard(2).metrics_address());
  EXPECT_EQ(before["hetps_shard_served_groups"], 1);
  EXPECT_EQ(before["hetps_shard_lease_held"], 1);
  EXPECT_GT(before["hetps_shard_replication_duration_seconds_count"], 0);
  EXPECT_EQ(before["hetps_shard_info{job=\"hetps\",shard=\"2\",num_shards=\"3\",num_workers=\"1\","
                   "replicas=\"2\",version=\"" +
                   std::string(Version()) + "\"}"],
            1);

  cluster_->shard(1).Shutdown();
  ASSERT_NO_FATAL_FAILURE(TrainLarge(*c0_, *id, 3, 6, w));
  EXPECT_EQ(w, expected);  // bitwise
  // Shard 2 serves shard 1's partitions now, from what were its backups.
  const hetps::v1::StatsResponse stats = cluster_->shard(2).Stats();
  EXPECT_GT(stats.num_partitions(), served_by_2);
  EXPECT_EQ(stats.backup_partitions(), 0u);
  // ... and says so; the worker saw its messages to shard 1 go again, to shard 2.
  std::map<std::string, double> after =
      testing::ScrapeSamples(cluster_->shard(2).metrics_address());
  EXPECT_EQ(after["hetps_shard_served_groups"], 2);
  EXPECT_EQ(after["hetps_shard_partitions{role=\"served\"}"], stats.num_partitions());
  EXPECT_EQ(after["hetps_shard_partitions{role=\"backup\"}"], 0);
  std::map<std::string, double> worker = testing::ScrapeSamples(c0_->metrics_address());
  EXPECT_GT(worker["hetps_client_retries_total"], 0);
  EXPECT_EQ(worker["hetps_client_operations_total{op=\"push_pull\",code=\"OK\"}"], 6);
}

// A learning-rate change while a shard is gone (its partitions served by the next shard, or
// about to be): it reaches every partition that serves, at the step it names, and training
// ends exactly as on a cluster that lost nothing.
TEST_P(ClientReplicationTest, AHyperparameterChangeWhileAShardIsGoneReachesEveryPartition) {
  TensorSpec spec = testing::Spec("w", kLarge);
  spec.optimizer = {"adam", {{"lr", 0.01}}};
  spec.init = Initializer::Uniform(-1, 1, 3);
  auto reference_cluster = testing::TestCluster::Start(GetParam(), 3, 1);
  ASSERT_TRUE(reference_cluster.ok()) << reference_cluster.status();
  auto reference_client = (*reference_cluster)->NewClient(0);
  ASSERT_OK(reference_client);
  std::vector<float> expected(kLarge);
  TensorId reference_id = *(*reference_client)->Declare(spec);
  ASSERT_NO_FATAL_FAILURE(TrainLarge(**reference_client, reference_id, 0, 3, expected));
  ASSERT_OK((*reference_client)->SetHyperparameters(reference_id, 4, {{"lr", 0.002}}));
  ASSERT_NO_FATAL_FAILURE(TrainLarge(**reference_client, reference_id, 3, 7, expected));

  StartReplicated(3, 1);
  c0_ = NewClient(0);
  absl::StatusOr<TensorId> id = c0_->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> w(kLarge);
  ASSERT_NO_FATAL_FAILURE(TrainLarge(*c0_, *id, 0, 3, w));
  cluster_->shard(1).Shutdown();
  const absl::Time start = absl::Now();
  const absl::Status changed = c0_->SetHyperparameters(*id, 4, {{"lr", 0.002}});
  ASSERT_TRUE(changed.ok()) << changed;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_NO_FATAL_FAILURE(TrainLarge(*c0_, *id, 3, 7, w));
  EXPECT_EQ(w, expected);  // bitwise
}

// ASP with a shard lost mid-training: two workers push without pause while shard 1 goes; every
// push that was acknowledged is in the final weights exactly once (SGD with lr 1 on a gradient
// of -1 counts them: each applied push adds 1 to every weight), none twice though the ones in
// flight when the shard went are sent again to the shard that took over.
TEST_P(ClientReplicationTest, AspEveryAcknowledgedPushCountsExactlyOnceAcrossAFailover) {
  constexpr int kPushes = 200;
  StartReplicated(3, 2);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  const TensorSpec spec = testing::Spec("counts", kLarge, 1.0, SyncMode::kAsp);
  TensorId id = 0;
  for (Client* worker : {c0_.get(), c1_.get()}) {
    absl::StatusOr<TensorId> declared = worker->Declare(spec);
    ASSERT_TRUE(declared.ok()) << declared.status();
    id = *declared;
  }
  std::atomic<int> acknowledged{0};
  absl::Notification a_third_pushed;  // by worker 0, or it stopped
  std::vector<absl::Status> failures(2);
  auto push = [&](Client* worker, int rank) {
    const std::vector<float> minus_one(kLarge, -1.0f);
    for (int i = 0; i < kPushes; ++i) {
      const absl::Status status = worker->Push(id, minus_one, 0).Wait();
      if (!status.ok()) {
        failures[rank] = status;
        if (rank == 0 && !a_third_pushed.HasBeenNotified()) a_third_pushed.Notify();
        return;
      }
      acknowledged.fetch_add(1);
      if (rank == 0 && i + 1 == kPushes / 3) a_third_pushed.Notify();
    }
  };
  std::thread w0(push, c0_.get(), 0), w1(push, c1_.get(), 1);
  EXPECT_TRUE(a_third_pushed.WaitForNotificationWithTimeout(absl::Seconds(60)));
  cluster_->shard(1).Shutdown();
  w0.join();
  w1.join();
  ASSERT_TRUE(failures[0].ok()) << failures[0];
  ASSERT_TRUE(failures[1].ok()) << failures[1];
  ASSERT_EQ(acknowledged.load(), 2 * kPushes);
  std::vector<float> w(kLarge);
  ASSERT_OK(c0_->Pull(id, absl::MakeSpan(w), 0).Wait());
  for (uint64_t i = 0; i < kLarge; ++i) {
    ASSERT_EQ(w[i], static_cast<float>(acknowledged.load())) << "element " << i;
  }
}

// etcd stops answering: within its lease's time to live a shard stops serving (UNAVAILABLE,
// which the worker retries until its deadline), and a push it gets then is refused and changes
// nothing: no shard acknowledges an update once another may have taken its partitions over.
TEST_P(ClientReplicationTest, AShardThatCannotRenewItsLeaseAcknowledgesNothing) {
  StartReplicated(2, 1);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.call_timeout = absl::Seconds(1);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  c0_ = *std::move(client);
  absl::StatusOr<TensorId> id = c0_->Declare(testing::Spec("w", kElements));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g = Gradient(0, 0), w(kElements);
  ASSERT_OK(c0_->PushPull(*id, g, absl::MakeSpan(w), 0).Wait());

  ASSERT_TRUE(etcd_->process().Stop());
  const absl::Time stopped = absl::Now();
  absl::Status pulled;
  while (absl::Now() < stopped + absl::Seconds(10)) {
    pulled = c0_->Pull(*id, absl::MakeSpan(w), 1).Wait();
    if (!pulled.ok()) break;
  }
  EXPECT_EQ(pulled.code(), absl::StatusCode::kDeadlineExceeded) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "lost its etcd lease")) << pulled;
  // The lease lasts 1 s, the call 1 s more.
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(4));

  const uint64_t before = cluster_->shard(0).StateDigest() ^ cluster_->shard(1).StateDigest();
  const absl::Status pushed = c0_->PushPull(*id, g, absl::MakeSpan(w), 1).Wait();
  EXPECT_EQ(pushed.code(), absl::StatusCode::kDeadlineExceeded) << pushed;
  EXPECT_TRUE(absl::StrContains(pushed.message(), "lost its etcd lease")) << pushed;
  EXPECT_EQ(cluster_->shard(0).StateDigest() ^ cluster_->shard(1).StateDigest(), before);
  etcd_->process().Signal(SIGCONT);
}

// Only the shard that serves a partition may change its backup: a worker's connection is
// refused the method, another shard its changes, one without the job's token the connection,
// and none changes anything. With the job's token, the shards present it to each other.
TEST_P(ClientReplicationTest, OnlyTheShardThatServesAPartitionMayReplicateToItsBackup) {
  const std::string token = "the-jobs-token";
  StartReplicated(3, 1, token);
  testing::ScopedTempDir dir;
  std::ofstream(dir.path() + "/token") << token;
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.auth_token_file = dir.path() + "/token";
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<TensorId> id = (*client)->Declare(testing::Spec("w", kElements));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g = Gradient(0, 0), w(kElements);
  ASSERT_OK((*client)->PushPull(*id, g, absl::MakeSpan(w), 0).Wait());
  ExpectBackupsEqualPrimaries();  // replicated with the token

  // A step for a partition shard 1 backs up (one of shard 0's), as its primary would send it.
  absl::StatusOr<std::vector<TensorPartition>> partitions = (*client)->Partitions(*id);
  ASSERT_OK(partitions);
  uint32_t of_shard_0 = 0;
  while ((*partitions)[of_shard_0].shard != 0) ++of_shard_0;
  hetps::v1::ReplicateRequest replicate;
  replicate.set_source_shard(0);
  hetps::v1::ReplicatedChange* change = replicate.add_changes();
  change->set_kind(hetps::v1::CHANGE_KIND_STEP);
  change->set_tensor_key(*id);
  change->set_partition(of_shard_0);
  change->set_version(2);
  change->set_num_bytes((*partitions)[of_shard_0].size * sizeof(float));
  std::vector<float> bytes((*partitions)[of_shard_0].size, 1.0f);
  auto attempt = [&](const transport::ConnectOptions& greeting) {
    return SendReplicate(1, replicate, bytes, greeting);
  };
  const uint64_t before = cluster_->shard(1).StateDigest();
  const absl::Status from_worker = attempt(testing::WorkerGreeting(1, 3, 0, 1, "hetps", token));
  EXPECT_EQ(from_worker.code(), absl::StatusCode::kPermissionDenied) << from_worker;
  // Shard 2: not shard 1's primary.
  const absl::Status from_other_shard = attempt(PeerGreeting(2, 1, 3, token));
  EXPECT_EQ(from_other_shard.code(), absl::StatusCode::kPermissionDenied) << from_other_shard;
  EXPECT_TRUE(absl::StrContains(from_other_shard.message(),
                                "shard 2 does not serve the partitions placed on shard 0"))
      << from_other_shard;
  // Its primary, but drawing initial values with other formulas (another hetps build).
  transport::ConnectOptions other_draws = PeerGreeting(0, 1, 3, token);
  hetps::v1::HelloRequest hello;
  ASSERT_TRUE(hello.ParseFromString(other_draws.greeting));
  hello.set_initializer_draws(server::kInitializerDraws + 1);
  other_draws.greeting = hello.SerializeAsString();
  const absl::Status other_build = attempt(other_draws);
  EXPECT_EQ(other_build.code(), absl::StatusCode::kFailedPrecondition) << other_build;
  EXPECT_TRUE(absl::StrContains(other_build.message(), "run one hetps build across a job's shards"))
      << other_build;
  // Its primary, without the token.
  const absl::Status without_token = attempt(PeerGreeting(0, 1, 3, ""));
  EXPECT_EQ(without_token.code(), absl::StatusCode::kUnauthenticated) << without_token;
  // From the partition's server itself, snapshots that do not fit are refused too.
  const transport::ConnectOptions greeting = PeerGreeting(0, 1, 3, token);
  change->set_kind(hetps::v1::CHANGE_KIND_SNAPSHOT);
  change->set_version(7);
  change->mutable_decl()->set_name("w");
  change->mutable_decl()->set_key(*id);
  change->mutable_decl()->mutable_optimizer()->set_name("sgd");
  change->add_schedule()->set_from_version(0);
  for (int rank = 0; rank < 1; ++rank) change->add_run_images();
  bytes.resize(bytes.size() / 2);  // the weights only half there
  change->set_num_bytes(bytes.size() * sizeof(float));
  const absl::Status short_snapshot = attempt(greeting);
  EXPECT_EQ(short_snapshot.code(), absl::StatusCode::kInvalidArgument) << short_snapshot;
  // A tensor shard 1 does not know, whose key is not its name's.
  uint64_t unknown = 1;
  while (ShardOfPartition(unknown, of_shard_0, 3) != 0) ++unknown;
  change->set_tensor_key(unknown);
  change->mutable_decl()->set_key(unknown);
  const absl::Status misnamed = attempt(greeting);
  EXPECT_EQ(misnamed.code(), absl::StatusCode::kInvalidArgument) << misnamed;
  EXPECT_TRUE(absl::StrContains(misnamed.message(), "does not match tensor name")) << misnamed;
  EXPECT_EQ(cluster_->shard(1).StateDigest(), before);
}

// A rejoining shard learns each tensor from a declaration that a primary sends ahead of the
// partitions' snapshots. The copies of the groups it does not serve start as zeros for the
// snapshots to overwrite (a random initializer costs seconds per GiB); if a change comes first
// (a tensor declared while the copying goes on replicates from its start, with no snapshot) or
// a takeover, they take the initializer's values then, as their primaries did.
// Copies declared ahead of a snapshot that never comes (the primary replicates the tensor from
// its declaration) hold zeros until something uses them (PartitionReplicationTest checks
// that); meanwhile, after a step and after a takeover they stand for the primary's values.
TEST_P(ClientReplicationTest,
       ACopyDeclaredAheadOfItsSnapshotAgreesWithThePrimaryBeforeAndAfterUse) {
  StartReplicated(3, 1);
  c0_ = NewClient(0);
  std::vector<TensorId> ids;
  std::vector<TensorState> initial;
  for (const std::string name : {"stepped", "taken over"}) {
    SCOPED_TRACE(name);
    TensorSpec spec = testing::Spec(name, kLarge);
    spec.init = Initializer::Normal(0, 1, 5);
    const TensorId key = TensorKeyFromName(spec.name);
    // Shard 0 declares it to shard 1, which keeps the copies of its partitions; `decl` is what
    // the worker client declares.
    hetps::v1::ReplicateRequest replicate;
    replicate.set_source_shard(0);
    hetps::v1::ReplicatedChange* change = replicate.add_changes();
    change->set_kind(hetps::v1::CHANGE_KIND_DECLARE);
    change->set_tensor_key(key);
    uint32_t of_shard_0 = 0;
    while (ShardOfPartition(key, of_shard_0, 3) != 0) ++of_shard_0;
    change->set_partition(of_shard_0);
    hetps::v1::TensorDecl* decl = change->mutable_decl();
    decl->set_name(spec.name);
    decl->set_key(key);
    decl->set_num_elements(kLarge);
    decl->set_dtype(hetps::v1::DTYPE_FP32);
    decl->set_sync_mode(hetps::v1::SYNC_MODE_BSP);
    decl->set_partition_elements(cluster_->ClientOptionsFor(0).partition_bytes / sizeof(float));
    decl->mutable_init()->set_kind(hetps::v1::INIT_KIND_NORMAL);
    decl->mutable_init()->set_a(0);
    decl->mutable_init()->set_b(1);
    decl->mutable_init()->set_seed(5);
    decl->mutable_optimizer()->set_name("sgd");
    (*decl->mutable_optimizer()->mutable_params())["lr"] = 0.1;
    change->add_schedule()->set_from_version(0);
    const absl::Status declared = SendReplicate(1, replicate, {}, PeerGreeting(0, 1, 3, ""));
    ASSERT_TRUE(declared.ok()) << declared;
    // The job declares it on every shard (shard 1 has it already, declared alike), and its
    // partitions replicate from the start: no snapshot follows.
    absl::StatusOr<TensorId> id = c0_->Declare(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<TensorState> served = c0_->ReadState(*id);
    absl::StatusOr<TensorState> copies = c0_->ReadBackupState(*id);
    absl::StatusOr<std::vector<TensorPartition>> partitions = c0_->Partitions(*id);
    ASSERT_TRUE(served.ok()) << served.status();
    ASSERT_TRUE(copies.ok()) << copies.status();
    ASSERT_TRUE(partitions.ok()) << partitions.status();
    int deferred = 0;
    for (const TensorPartition& partition : *partitions) {
      const auto begin = static_cast<ptrdiff_t>(partition.begin);
      const auto end = static_cast<ptrdiff_t>(partition.begin + partition.size);
      const std::vector<float> primary(served->weights.begin() + begin,
                                       served->weights.begin() + end);
      const std::vector<float> copy(copies->weights.begin() + begin, copies->weights.begin() + end);
      ASSERT_NE(primary, std::vector<float>(partition.size, 0.0f));
      // Shard 1's copies of shard 0's partitions are not drawn yet; they read as drawn.
      deferred += partition.shard == 0;
      EXPECT_EQ(copy, primary) << "begin " << partition.begin;  // bitwise
    }
    EXPECT_GT(deferred, 0);
    ids.push_back(*id);
    initial.push_back(*std::move(served));
  }
  // A step reaches the copies as a change: they start from the initializer's values first.
  std::vector<float> g = Gradient(0, 0), w(kLarge);
  g.resize(kLarge, 0.5f);
  ASSERT_OK(c0_->PushPull(ids[0], g, absl::MakeSpan(w), 0).Wait());
  ExpectSameState(*c0_, ids[0], "after a step");
  // Shard 0 goes: shard 1 serves its partitions from the copies, drawn at the takeover.
  cluster_->shard(0).Shutdown();
  ASSERT_OK(c0_->Pull(ids[1], absl::MakeSpan(w), 0).Wait());
  EXPECT_EQ(w, initial[1].weights);  // bitwise
}

TEST_P(ClientReplicationTest, WithoutReplicationThereIsNoBackupToRead) {
  StartCluster(2, 1);
  c0_ = NewClient(0);
  absl::StatusOr<TensorId> id = c0_->Declare(testing::Spec("w", kElements));
  ASSERT_OK(id);
  const absl::StatusOr<TensorState> backup = c0_->ReadBackupState(*id);
  EXPECT_EQ(backup.status().code(), absl::StatusCode::kFailedPrecondition) << backup.status();
  EXPECT_TRUE(absl::StrContains(backup.status().message(), "no backup")) << backup.status();
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientReplicationTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
