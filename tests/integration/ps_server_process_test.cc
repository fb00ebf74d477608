// ps-server as an operator meets it: flags checked with messages that name them, --help, SIGHUP
// and SIGPIPE, and a training job run twice against the same shards.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/version.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/call.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "worker/client.h"

namespace hetps {
namespace {

using testing::BinaryPath;
using testing::LocalCluster;
using testing::ReadFile;
using testing::ScopedTempDir;
using testing::Subprocess;

struct ServerRun {
  int exit_code = -1;
  std::string output;
};

ServerRun RunServer(const std::vector<std::string>& args,
                    const std::vector<std::string>& env = {}) {
  ScopedTempDir dir;
  std::vector<std::string> argv = {BinaryPath("server/ps-server")};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = dir.path() + "/out";
  Subprocess server(argv, log, env);
  std::optional<int> code = server.Wait(absl::Seconds(30));
  return ServerRun{code.value_or(-1), ReadFile(log)};
}

TEST(PsServerFlagsTest, BadValuesEndTheProgramNamingTheFlag) {
  const struct {
    std::vector<std::string> args;
    std::string says;
    int exit_code = 2;
  } cases[] = {
      {{"--port=70000"}, "--port must be between 0 and 65535, not 70000"},
      {{"--port=65536"}, "--port must be between 0 and 65535"},
      {{"--port=-1"}, "--port must be"},
      {{"--threads=100000"}, "--threads must be between 0 and 1024"},
      {{"--lifetime_s=-1"}, "--lifetime_s must be"},
      {{"--lifetime_s=nan"}, "--lifetime_s must be"},
      {{"--max_wait_s=0"}, "--max_wait_s must be"},
      {{"--idle_timeout_s=-1"}, "--idle_timeout_s must be"},
      {{"--auth_token_file=/nonexistent/token"}, "cannot read the token file /nonexistent/token"},
      {{"--keepalive_s=0"}, "--keepalive_s must be"},
      {{"--max_unsent_reply_bytes=1000"}, "--max_unsent_reply_bytes must be"},
      {{"--num_shards=0"}, "--num_shards must be"},
      {{"--num_shards=2", "--shard_index=2"}, "--shard_index must be between 0 and 1"},
      {{"--num_workers=0"}, "--num_workers must be"},
      {{"--max_message_bytes=10"}, "--max_message_bytes must be"},
      {{"--max_pending_steps=0"}, "--max_pending_steps must be"},
      {{"--replicas=3"}, "--replicas must be between 1 and 2"},
      {{"--replicas=2", "--num_shards=2"}, "replicas 2 needs etcd (--etcd host:port)", 1},
      {{"--replicas=2", "--etcd=127.0.0.1:1"}, "replicas 2 needs 2 shards or more", 1},
      {{"--replicas=2", "--num_shards=2", "--etcd=127.0.0.1:1", "--servers=127.0.0.1:1"},
       "servers lists 1 addresses for 2 shards",
       1},
      {{"--lease_s=0.5"}, "--lease_s must be between 1 and 3600"},
      {{"--metrics_port=70000"}, "--metrics_port must be between -1 and 65535"},
      {{"--ucx_port_range=9-3"}, "--ucx_port_range must be LOW-HIGH"},
      {{"--ucx_port_range=7000"}, "--ucx_port_range must be LOW-HIGH"},
      {{"--ucx_clients_per_worker=0"}, "--ucx_clients_per_worker must be at least 1"},
      {{"--replicas=2", "--num_shards=2", "--etcd=127.0.0.1:1", "--lifetime_s=5"},
       "etcd at 127.0.0.1:1 cannot be reached",
       1},
      {{"--lifetime_s=1", "stray"}, "unexpected argument 'stray'"},
      // absl's own parse errors exit with status 1.
      {{"--no_such_flag=1"}, "Unknown command line flag 'no_such_flag'", 1},
      {{"--port=abc"}, "Illegal value 'abc' specified for flag 'port'", 1},
  };
  for (const auto& c : cases) {
    const ServerRun run = RunServer(c.args);
    EXPECT_EQ(run.exit_code, c.exit_code) << absl::StrJoin(c.args, " ") << ": " << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, c.says)) << run.output;
  }
}

TEST(PsServerFlagsTest, UnknownEnvironmentValuesAreRefused) {
  ServerRun run = RunServer({"--lifetime_s=0.1"}, {"HETPS_LOG_LEVEL=verbose"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "HETPS_LOG_LEVEL=verbose")) << run.output;
  run = RunServer({"--lifetime_s=0.1"}, {"HETPS_SIMD=sse9"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "HETPS_SIMD=sse9")) << run.output;
  run = RunServer({"--lifetime_s=0.1"}, {"HETPS_LOG_LEVEL=warning", "HETPS_SIMD=baseline"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(PsServerFlagsTest, HelpDocumentsEveryFlagAndExitsZero) {
  const ServerRun run = RunServer({"--help"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* flag :
       {"--host", "--port ", "--port_file", "--shard_index", "--num_shards", "--num_workers",
        "--job_id", "--threads", "--max_message_bytes", "--max_pending_steps", "--max_wait_s",
        "--max_memory_bytes", "--lifetime_s", "--transport", "--ucx_net_devices", "--ucx_busy_poll",
        "--ucx_clients_per_worker"}) {
    EXPECT_TRUE(absl::StrContains(run.output, flag)) << flag << " is not in --help:\n"
                                                     << run.output;
  }
}

TEST(PsServerFlagsTest, VersionSaysWhichHetps) {
  const ServerRun run = RunServer({"--version"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, absl::StrCat("ps-server (hetps) ", Version())))
      << run.output;
}

// The TCP ports that process `pid` listens on, from /proc (its sockets' inodes).
std::set<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fds = absl::StrCat("/proc/", pid, "/fd");
  for (const auto& entry : std::filesystem::directory_iterator(fds)) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (absl::StartsWith(target, "socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(ReadFile(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // local_address is field 1 ("ADDR:PORT" in hex), st field 3 (0A: listening), inode 9.
      if (fields.size() < 10 || fields[3] != "0A" || !inodes.count(fields[9])) continue;
      ports.insert(std::stoi(fields[1].substr(fields[1].rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// UCX over TCP listens on a port of its own besides the shard's: --ucx_port_range keeps it in
// a range a firewall can open, and workers train through it.
TEST(PsServerUcxTest, UcxListensWithinThePortRangeAndWorkersTrainThroughIt) {
#ifndef HETPS_HAVE_UCX
  GTEST_SKIP() << "this build has no UCX";
#else
  // A range of ports that were free a moment ago, away from the ephemeral ones in use.
  const int low = 20000 + static_cast<int>(getpid() % 2000) * 10;
  const std::string range = absl::StrCat(low, "-", low + 9);
  LocalCluster cluster;
  // No gRPC bulk port (--grpc_bulk_port), so every port but --port is UCX's.
  ASSERT_OK(cluster.Start(1, 1,
                          {"--transport=ucx", "--ucx_port_range=" + range, "--grpc_bulk_port=-1"},
                          {"UCX_TLS=tcp"}));
  const std::string log = cluster.dir() + "/worker.log";
  Subprocess worker(
      {BinaryPath("worker/examples/linear_regression"), "--servers=" + cluster.servers_flag(),
       "--rank=0", "--world_size=1", "--steps=5", "--transport=ucx", "--dim=64", "--samples=64"},
      log, {"UCX_TLS=tcp"});
  EXPECT_EQ(worker.Wait(absl::Seconds(60)), 0) << ReadFile(log);
  const std::string address = cluster.addresses()[0];
  const int grpc_port = std::stoi(address.substr(address.rfind(':') + 1));
  std::set<int> ucx_ports = ListeningPorts(cluster.shard(0).pid());
  ucx_ports.erase(grpc_port);
  ASSERT_FALSE(ucx_ports.empty()) << "UCX listens on no port of its own";
  for (int port : ucx_ports) {
    EXPECT_GE(port, low) << range;
    EXPECT_LE(port, low + 9) << range;
  }
#endif
}

// System V shared-memory segments mapped into process `pid` (UCX's shared-memory FIFOs).
int MappedSysvSegments(int pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += absl::StrContains(line, "/SYSV");
  return count;
}

// UCX 1.13 keeps the endpoint of every connection made to a shard's UCX worker, with the
// worker's shared-memory segment attached (two mappings), until that UCX worker goes: a shard
// serving job after job gathered them. New connections now go to a new UCX worker once a few
// have left the old one (--ucx_clients_per_worker), which ends when its last one leaves.
TEST(PsServerUcxTest, ConnectionsThatComeAndGoLeaveNoSharedMemoryBehind) {
#ifndef HETPS_HAVE_UCX
  GTEST_SKIP() << "this build has no UCX";
#else
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--transport=ucx", "--ucx_clients_per_worker=4"}));
  const int shard = cluster.shard(0).pid();
  auto echo = [&](transport::Connection& connection) {
    transport::Request request;
    request.method = hetps::v1::METHOD_ECHO;
    request.deadline = absl::Now() + absl::Seconds(10);
    return testing::CallAndWait(connection, std::move(request)).status();
  };
  auto connect = [&](transport::Transport& transport) {
    return transport.Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                             testing::WorkerGreeting(0, 1, 0, 1));
  };
  std::shared_ptr<transport::Transport> first = testing::NewTestTransport("ucx");
  auto staying = connect(*first);
  ASSERT_TRUE(staying.ok()) << staying.status();
  ASSERT_OK(echo(**staying));
  const int mapped_before = MappedSysvSegments(shard);
  // Workers that come and go: processes that end (connections from this process, which stays,
  // left nothing behind when tried).
  constexpr int kRuns = 20;
  for (int i = 0; i < kRuns; ++i) {
    const std::string log = absl::StrCat(cluster.dir(), "/bench", i, ".log");
    Subprocess bench(
        {BinaryPath("bench/ps-bench"), "--servers=" + cluster.servers_flag(), "--transport=ucx",
         "-b", "4K", "-e", "4K", "--op=pushpull", "--duration_s=0.01", "--warmup=0"},
        log);
    ASSERT_EQ(bench.Wait(absl::Seconds(60)), 0) << ReadFile(log);
  }
  // Each run's two connections kept two mappings each with one UCX worker: 80 here. Now at
  // most the connections gone from the newest UCX worker and from the one it replaced (which
  // ends at the next connection), 4 each, and the receive checks of those two workers (each a
  // second UCX worker with a queue of its own, and the checked worker's queue mapped again).
  const int left_behind = MappedSysvSegments(shard) - mapped_before;
  EXPECT_LE(left_behind, 2 * (4 + 4 + 2) + 2 * 2) << 4 * kRuns << " with one UCX worker\n"
                                                  << ReadFile(cluster.shard_log(0));
  EXPECT_TRUE(echo(**staying).ok()) << "the first connection, on the first UCX worker";
  (*staying)->Shutdown();
  ASSERT_TRUE(cluster.shard(0).running()) << ReadFile(cluster.shard_log(0));
#endif
}

// SIGHUP is what an operator sends to make a daemon reopen its logs; UCX would otherwise take
// it for its debug mode, and the default action ends the process.
TEST(PsServerSignalsTest, SighupIsLoggedAndTheShardKeepsServing) {
  for (const std::string transport : {"ucx", "grpc"}) {
    LocalCluster cluster;
    ASSERT_OK(cluster.Start(1, 1, {"--transport=" + transport}));
    auto log = [&] { return ReadFile(cluster.shard_log(0)); };
    cluster.shard(0).Signal(SIGHUP);
    testing::AwaitCondition(
        [&] { return absl::StrContains(log(), "SIGHUP") || !cluster.shard(0).running(); },
        absl::Seconds(20));
    ASSERT_TRUE(cluster.shard(0).running()) << transport << ": " << log();
    EXPECT_TRUE(absl::StrContains(log(), "SIGHUP")) << log();
    cluster.shard(0).Signal(SIGTERM);
    EXPECT_EQ(cluster.shard(0).Wait(absl::Seconds(20)), 0) << log();
  }
}

// A worker that dies mid-answer leaves the shard writing to a closed socket; SIGPIPE's default
// action would end the shard without a line in its log.
TEST(PsServerSignalsTest, SigpipeDoesNotEndTheShard) {
  for (const std::string transport : {"ucx", "grpc"}) {
    LocalCluster cluster;
    ASSERT_OK(cluster.Start(1, 1, {"--transport=" + transport}));
    cluster.shard(0).Signal(SIGPIPE);
    // Answered after the signal: a process it ends is gone, or going, by the time kill returns.
    std::shared_ptr<transport::Transport> grpc = testing::NewTestTransport("grpc");
    auto connection = grpc->Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                                    testing::WorkerGreeting(0, 1, 0, 1));
    ASSERT_TRUE(connection.ok()) << transport << ": " << connection.status();
    transport::Request request;
    request.method = hetps::v1::METHOD_ECHO;
    request.deadline = absl::Now() + absl::Seconds(10);
    EXPECT_TRUE(testing::CallAndWait(**connection, std::move(request)).ok()) << transport;
    (*connection)->Shutdown();
    ASSERT_TRUE(cluster.shard(0).running()) << transport << ": " << ReadFile(cluster.shard_log(0));
    cluster.shard(0).Signal(SIGTERM);
    EXPECT_EQ(cluster.shard(0).Wait(absl::Seconds(20)), 0) << ReadFile(cluster.shard_log(0));
  }
}

// The token comes from a file, so it is not in the shard's command line (`ps`); it is in no log
// line either, and a host that keeps presenting a wrong one is logged once.
TEST(PsServerAuthTest, TheTokenComesFromAFileAndShowsNowhere) {
  const std::string token = "a-secret-that-must-not-leak";
  ScopedTempDir dir;
  const std::string file = dir.path() + "/token";
  std::ofstream(file) << token << "\n";
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--transport=grpc", "--auth_token_file=" + file}));
  const std::string command_line =
      ReadFile(absl::StrCat("/proc/", cluster.shard(0).pid(), "/cmdline"));
  EXPECT_FALSE(command_line.empty());
  EXPECT_FALSE(absl::StrContains(command_line, token));

  std::shared_ptr<transport::Transport> grpc = testing::NewTestTransport("grpc");
  for (int i = 0; i < 20; ++i) {
    auto connection = grpc->Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                                    testing::WorkerGreeting(0, 1, 0, 1, "hetps", token + "-wrong"));
    ASSERT_TRUE(connection.ok()) << connection.status();
    transport::Request request;
    request.method = hetps::v1::METHOD_ECHO;
    request.deadline = absl::Now() + absl::Seconds(10);
    EXPECT_EQ(testing::CallAndWait(**connection, std::move(request)).status().code(),
              absl::StatusCode::kUnauthenticated);
    (*connection)->Shutdown();
  }
  ClientOptions options;
  options.servers = cluster.addresses();
  options.transport = "grpc";
  options.auth_token_file = file;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->Shutdown();

  const std::string log = ReadFile(cluster.shard_log(0));
  EXPECT_FALSE(absl::StrContains(log, token)) << log;
  size_t refusals = 0;
  for (size_t at = log.find("refused connection"); at != std::string::npos;
       at = log.find("refused connection", at + 1)) {
    ++refusals;
  }
  EXPECT_EQ(refusals, 1u) << log;
}

// Every malformed string field makes protobuf log a line: a client must not be able to fill the
// shard's log with them.
TEST(PsServerLogTest, MalformedHeadersCannotFloodTheLog) {
  LocalCluster cluster;
  const absl::Status started = cluster.Start(1, 1, {"--transport=grpc"});
  ASSERT_TRUE(started.ok()) << started;
  std::shared_ptr<transport::Transport> grpc = testing::NewTestTransport("grpc");
  auto connection = grpc->Connect(cluster.addresses()[0], absl::Now() + absl::Seconds(10),
                                  testing::WorkerGreeting(0, 1, 0, 1));
  ASSERT_TRUE(connection.ok()) << connection.status();
  for (int i = 0; i < 300; ++i) {
    transport::Request request;
    request.method = hetps::v1::METHOD_HELLO;
    request.header = std::string("\x12\x02\xff\xfe", 4);  // job_id: not UTF-8
    request.deadline = absl::Now() + absl::Seconds(10);
    EXPECT_EQ(testing::CallAndWait(**connection, std::move(request)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  (*connection)->Shutdown();
  const std::string log = ReadFile(cluster.shard_log(0));
  size_t lines = 0;
  for (size_t at = log.find("UTF-8"); at != std::string::npos; at = log.find("UTF-8", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 10u) << "300 malformed requests, " << lines << " log lines";
}

// The README's example run a second time against the same shards: the shards hold the first
// run's weights at its last step, and the second run must be told so, not shown them as its
// own result.
TEST(PsServerJobTest, ASecondRunOfAJobAgainstTheSameShardsFailsAndSaysWhy) {
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--transport=grpc"}));
  for (int run = 0; run < 2; ++run) {
    const std::string log = absl::StrCat(cluster.dir(), "/run", run, ".log");
    Subprocess worker(
        {BinaryPath("worker/examples/linear_regression"), "--servers=" + cluster.servers_flag(),
         "--rank=0", "--world_size=1", "--steps=3", "--transport=grpc", "--dim=64", "--samples=64"},
        log);
    const std::optional<int> code = worker.Wait(absl::Seconds(60));
    ASSERT_TRUE(code.has_value()) << ReadFile(log);
    if (run == 0) {
      EXPECT_EQ(*code, 0) << ReadFile(log);
    } else {
      EXPECT_NE(*code, 0) << ReadFile(log);
      EXPECT_TRUE(absl::StrContains(ReadFile(log), "earlier run of the job")) << ReadFile(log);
    }
  }
}

// A client shut down while several threads push to a stalled shard (SIGSTOP): calls are in
// flight and threads are inside the client's calls. Shutdown waits for what it owns (no fixed
// time), every operation ends, and nothing is used after it was freed (run under ASan too).
TEST(ClientShutdownTest, ShutdownWithCallsInFlightToAStalledShardEndsEveryOperation) {
  for (const std::string& transport : testing::TransportsUnderTest({})) {
    SCOPED_TRACE(transport);
    LocalCluster cluster;
    std::vector<std::string> env;
    if (transport == "ucx-tcp") env.push_back("UCX_TLS=tcp");
    ASSERT_OK(cluster.Start(
        1, 1, {absl::StrCat("--transport=", transport == "grpc" ? "grpc" : "ucx")}, env));
    ClientOptions options;
    options.servers = cluster.addresses();
    options.call_timeout = absl::Seconds(30);
    options.transport_instance = testing::NewTestTransport(transport);
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    const TensorSpec spec = testing::Spec("w", 4096, 0.1, SyncMode::kAsp);
    auto id = (*client)->Declare(spec);
    ASSERT_TRUE(id.ok()) << id.status();

    ASSERT_TRUE(cluster.shard(0).Stop());
    const std::vector<float> gradient(spec.num_elements, 1.0f);
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    std::vector<std::vector<Operation>> operations(4);
    std::vector<std::thread> pushers;
    for (int t = 0; t < 4; ++t) {
      pushers.emplace_back([&, t] {
        while (!stop.load()) {
          operations[t].push_back((*client)->Push(*id, gradient, 0));
          started.fetch_add(1);
          std::this_thread::yield();
        }
      });
    }
    const absl::Time enough = absl::Now() + absl::Seconds(10);
    while (started.load() < 200 && absl::Now() < enough) absl::SleepFor(absl::Milliseconds(1));
    const absl::Time start = absl::Now();
    (*client)->Shutdown();
    const absl::Duration took = absl::Now() - start;
    stop.store(true);
    for (std::thread& pusher : pushers) pusher.join();
    // gRPC may take up to its 5 s teardown grace (grpc_connection.cc); calls last up to 30 s.
    EXPECT_LT(took, absl::Seconds(15)) << "the calls' deadline is 30 s";
    int ended = 0, failed = 0;
    for (auto& list : operations) {
      for (Operation& operation : list) {
        failed += operation.Wait().ok() ? 0 : 1;  // returns: the operation ended
        ++ended;
      }
    }
    EXPECT_GE(ended, 200);
    EXPECT_EQ(failed, ended) << "no push can have reached a stopped shard";
    client->reset();  // the client goes while the shard is still stopped
    cluster.shard(0).Signal(SIGCONT);
  }
}

// Shards that tests restart keep their ports: each is below the kernel's ephemeral range, where
// no other process's outgoing connection can take it while the shard is down.
TEST(LocalClusterTest, ShardsListenWhereNoOutgoingConnectionCanTakeTheirPorts) {
  int ephemeral_low = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  if (ephemeral_low < 11000) GTEST_SKIP() << "the ephemeral range starts at " << ephemeral_low;
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(2, 1));
  for (int i = 0; i < 2; ++i) {
    const std::string& address = cluster.addresses()[i];
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
    EXPECT_LT(port, ephemeral_low) << "shard " << i << " listens on " << address;
  }
  const std::string address = cluster.addresses()[0];
  cluster.shard(0).Signal(SIGKILL);
  ASSERT_TRUE(cluster.Restart(0).ok()) << ReadFile(cluster.shard_log(0));
  EXPECT_EQ(cluster.addresses()[0], address);
}

}  // namespace
}  // namespace hetps
