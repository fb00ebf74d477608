// ps-bench as a user runs it: embedded mode with a tiny sweep and --check, its JSON read back;
// a damaged reply counted in #wrong (through the test hook); two benchmark processes measuring
// one real cluster together; token and TLS measured beside plaintext; and an unreachable
// cluster.
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/json.h"
#include "bench/runner.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/testing/burst_recorder.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cluster.h"
#include "worker/client.h"

namespace hetps::bench {
namespace {

using testing::BinaryPath;
using testing::ReadFile;
using testing::Subprocess;

// Operations that take `slow` until index `warm_from`, then `fast`, `inflight` at a time (each
// one's latency is its share of the CPU times the operations in flight).
WorkerMeasurement FakeRun(uint64_t first_index, int count, int inflight, uint64_t warm_from,
                          absl::Duration slow, absl::Duration fast) {
  WorkerMeasurement run;
  for (uint64_t index = first_index; index < first_index + count; ++index) {
    const absl::Duration took = index < warm_from ? slow : fast;
    run.latency.Add(absl::ToInt64Nanoseconds(took * inflight));
    run.wall += took;
    ++run.operations;
  }
  return run;
}

TEST(FitToDurationTest, FillsTheDurationAtThePaceOnceWarmThoughTheFirstOperationsAreSlow) {
  const absl::Duration slow = absl::Microseconds(200), fast = absl::Microseconds(5);
  for (int inflight : {1, 4}) {
    std::vector<int> proposals;
    absl::StatusOr<DurationFit> fit = FitToDuration(
        absl::Milliseconds(100), /*warmup=*/5, inflight,
        [&](uint64_t first_index, int count, int in_flight) -> absl::StatusOr<WorkerMeasurement> {
          return FakeRun(first_index, count, in_flight, /*warm_from=*/30, slow, fast);
        },
        [&](int proposal) -> absl::StatusOr<int> {
          proposals.push_back(proposal);
          return proposal;
        });
    ASSERT_OK(fit);
    // A tenth of the duration at the warm-up's pace calibrates (indices 5 to 54, the first 25
    // slow); 100 ms at 5 us an operation are measured (the warm-up's pace would say 500).
    ASSERT_EQ(proposals.size(), 2u);
    EXPECT_EQ(proposals[0], 50 * inflight);
    EXPECT_EQ(fit->first_index, 5u + 50u * inflight);
    EXPECT_GE(fit->iterations, 18000) << "inflight " << inflight;
    EXPECT_LE(fit->iterations, 22000) << "inflight " << inflight;
    EXPECT_EQ(fit->iterations, proposals[1]);
  }
}

TEST(FitToDurationTest, EveryWorkerRunsTheCountsRankZeroProposed) {
  const absl::Duration each = absl::Microseconds(10);
  absl::StatusOr<DurationFit> fit = FitToDuration(
      absl::Milliseconds(100), /*warmup=*/5, /*inflight=*/1,
      [&](uint64_t first_index, int count, int inflight) -> absl::StatusOr<WorkerMeasurement> {
        return FakeRun(first_index, count, inflight, 0, each, each);
      },
      [](int proposal) -> absl::StatusOr<int> { return proposal / 2; });
  ASSERT_OK(fit);
  EXPECT_EQ(fit->first_index, 5u + 500u);  // a calibration of 1000 proposed, 500 agreed
  EXPECT_EQ(fit->iterations, 5000);        // 10000 proposed
}

// The transports ps-bench measures by default: every one of the build.
#ifdef HETPS_HAVE_UCX
const std::vector<std::string> kTransports = {"grpc", "ucx"};
#else
const std::vector<std::string> kTransports = {"grpc"};
#endif

std::vector<std::string> TinySweep(const std::string& json) {
  return {BinaryPath("bench/ps-bench"),
          "-b",
          "4K",
          "-e",
          "64K",
          "-f",
          "16",
          "--iterations=20",
          "--warmup=2",
          "--check",
          "--json=" + json};
}

// Checks the JSON's shape and returns its total #wrong.
double ValidateJson(const std::string& text, size_t expected_results) {
  absl::StatusOr<JsonValue> json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << text;
  if (!json.ok()) return -1;
  EXPECT_NE(json->Find("config"), nullptr);
  const JsonValue* results = json->Find("results");
  EXPECT_NE(results, nullptr);
  if (results == nullptr) return -1;
  EXPECT_EQ(results->items().size(), expected_results);
  double wrong = 0;
  for (const JsonValue& r : results->items()) {
    auto number = [&](const char* key) {
      const JsonValue* v = r.Find(key);
      EXPECT_NE(v, nullptr) << key;
      return v == nullptr ? -1.0 : v->as_number();
    };
    EXPECT_LE(number("p50_us"), number("p90_us"));
    EXPECT_LE(number("p90_us"), number("p99_us"));
    EXPECT_LE(number("p99_us"), number("p999_us"));
    EXPECT_LE(number("p999_us"), number("max_us"));
    EXPECT_GT(number("p50_us"), 0);
    EXPECT_GT(number("gbps"), 0);
    EXPECT_GT(number("ops_per_s"), 0);
    EXPECT_GT(number("floor_p50_us"), 0);
    EXPECT_GT(number("floor_gbps"), 0);
    EXPECT_EQ(number("workers"), 2);
    EXPECT_EQ(number("samples"), 2 * 20);  // two workers, 20 operations each
    wrong += number("wrong");
  }
  return wrong;
}

TEST(FloorRunnerTest, EveryEchoNamesWhatItsOperationMovesOverItsConnection) {
  auto cluster = testing::TestCluster::Start("inproc", 2, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions options = (*cluster)->ClientOptionsFor(0);
  auto recorder =
      std::make_shared<testing::BurstRecorder>(options.transport_instance, hetps::v1::METHOD_ECHO);
  auto floor = FloorRunner::Connect(recorder, options, absl::Seconds(10));
  ASSERT_TRUE(floor.ok()) << floor.status();
  MeasureSettings settings;
  settings.op = "push";
  settings.bytes = 10000;
  settings.chunk_bytes = 1024;
  settings.warmup = 0;
  ASSERT_OK((*floor)->Measure(settings, /*iterations=*/1));
  // As the client does (ClientBurstTest).
  testing::ExpectEachCallNamesItsConnectionsShare(recorder->TakeSeen(), /*connections=*/2,
                                                  settings.bytes);
}

TEST(PsBenchTest, EmbeddedSweepChecksEveryValueAndWritesJson) {
  testing::ScopedTempDir dir;
  const std::string json = dir.path() + "/out.json";
  std::vector<std::string> args = TinySweep(json);
  args.push_back("--csv=" + dir.path() + "/out.csv");
  args.push_back("--plot=" + dir.path() + "/out.svg");
  Subprocess bench(args, dir.path() + "/log");
  ASSERT_EQ(bench.Wait(absl::Seconds(120)), 0) << ReadFile(dir.path() + "/log");
  // push, pull, pushpull x 4K, 64K, over every transport of the build.
  EXPECT_EQ(ValidateJson(ReadFile(json), 3 * 2 * kTransports.size()), 0);
  for (const std::string& transport : kTransports) {
    EXPECT_NE(ReadFile(json).find("\"transport\": \"" + transport + "\""), std::string::npos)
        << transport;
  }
  EXPECT_NE(ReadFile(dir.path() + "/log").find("pushpull"), std::string::npos);
  EXPECT_NE(ReadFile(dir.path() + "/out.csv").find("floor_gbps"), std::string::npos);
  EXPECT_NE(ReadFile(dir.path() + "/out.svg").find("</svg>"), std::string::npos);
}

TEST(PsBenchTest, DamagedRepliesAreCountedAsWrongAndFailTheRun) {
  testing::ScopedTempDir dir;
  const std::string json = dir.path() + "/out.json";
  std::vector<std::string> args = TinySweep(json);
  args.push_back("--dtype=bf16");
  args.push_back("--test_corrupt_replies_every=7");
  Subprocess bench(args, dir.path() + "/log");
  EXPECT_EQ(bench.Wait(absl::Seconds(120)), 1) << ReadFile(dir.path() + "/log");
  EXPECT_GT(ValidateJson(ReadFile(json), 3 * 2 * kTransports.size()), 0);
  EXPECT_NE(ReadFile(dir.path() + "/log").find("were wrong"), std::string::npos);
}

// The common PyTorch case: fp32 tensors in memory, bf16 on the wire (the client converts both
// ways). Every pulled value is checked against the sum as bf16 carried it back, widened.
TEST(PsBenchTest, MeasuresFp32TensorsSentAsBf16) {
  testing::ScopedTempDir dir;
  const std::string json = dir.path() + "/out.json";
  std::vector<std::string> args = TinySweep(json);
  args.push_back("--dtype=bf16");
  args.push_back("--host_dtype=fp32");
  Subprocess bench(args, dir.path() + "/log");
  ASSERT_EQ(bench.Wait(absl::Seconds(120)), 0) << ReadFile(dir.path() + "/log");
  EXPECT_EQ(ValidateJson(ReadFile(json), 3 * 2 * kTransports.size()), 0);
  EXPECT_NE(ReadFile(json).find("\"dtype\": \"bf16 from fp32\""), std::string::npos);
  // -b and -e count bytes on the wire: 64 KiB of bf16 is 32768 elements.
  EXPECT_NE(ReadFile(json).find("\"bytes\": 65536"), std::string::npos);
}

class PsBenchClusterTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PsBenchClusterTest, TwoBenchmarkProcessesMeasureOneCluster) {
  testing::LocalCluster cluster;
  ASSERT_OK(cluster.Start(2, 2, {"--transport=" + GetParam()}));
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank = 0; rank < 2; ++rank) {
    workers.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{
            BinaryPath("bench/ps-bench"), "--servers=" + cluster.servers_flag(),
            absl::StrCat("--rank=", rank), "--world_size=2", "--op=pushpull",
            "--transport=" + GetParam(), "-b", "64K", "-e", "64K", "--iterations=20", "--check",
            absl::StrCat("--json=", cluster.dir(), "/rank", rank, ".json")},
        absl::StrCat(cluster.dir(), "/rank", rank, ".log")));
  }
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(workers[rank]->Wait(absl::Seconds(120)), 0)
        << ReadFile(absl::StrCat(cluster.dir(), "/rank", rank, ".log"));
    absl::StatusOr<JsonValue> json =
        ParseJson(ReadFile(absl::StrCat(cluster.dir(), "/rank", rank, ".json")));
    ASSERT_OK(json);
    const JsonValue& result = json->Find("results")->items()[0];
    EXPECT_EQ(result.Find("wrong")->as_number(), 0);
    EXPECT_EQ(result.Find("samples")->as_number(), 20);  // this process's worker only
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PsBenchClusterTest, ::testing::ValuesIn(kTransports),
                         [](const auto& info) { return info.param; });

// Certificates for 127.0.0.1 by deploy/tls/make_certs.sh in `dir`; false if openssl failed.
bool MakeCertificates(const std::string& dir) {
  return std::system(absl::StrCat(testing::SourcePath("deploy/tls/make_certs.sh"), " --days 2 ",
                                  dir, " 127.0.0.1 >", dir, ".log 2>&1")
                         .c_str()) == 0;
}

TEST(PsBenchTest, MeasuresTokenAndTlsBesideSecurityOff) {
  testing::ScopedTempDir dir;
  ASSERT_TRUE(MakeCertificates(dir.path() + "/tls")) << ReadFile(dir.path() + "/tls.log");
  const std::string json = dir.path() + "/out.json";
  std::vector<std::string> args = TinySweep(json);
  args.push_back("--op=pushpull");
  args.push_back("--security=off,token,tls,token+tls");
  args.push_back("--tls_dir=" + dir.path() + "/tls");
  Subprocess bench(args, dir.path() + "/log");
  ASSERT_EQ(bench.Wait(absl::Seconds(180)), 0) << ReadFile(dir.path() + "/log");
  EXPECT_EQ(ValidateJson(ReadFile(json), 4 * 2 * kTransports.size()), 0);
  absl::StatusOr<JsonValue> parsed = ParseJson(ReadFile(json));
  ASSERT_OK(parsed);
  std::map<std::string, int> rows;  // per "transport/security"
  for (const JsonValue& r : parsed->Find("results")->items()) {
    ++rows[r.Find("transport")->as_string() + "/" + r.Find("security")->as_string()];
  }
  for (const std::string& transport : kTransports) {
    for (const char* security : {"off", "token", "tls", "token+tls"}) {
      EXPECT_EQ(rows[transport + "/" + security], 2) << transport << " " << security;
    }
  }
  EXPECT_EQ(parsed->Find("config")->Find("security")->as_string(), "off,token,tls,token+tls");
}

TEST(PsBenchTest, MeasuresWithMetricsOnBesideOff) {
  testing::ScopedTempDir dir;
  const std::string json = dir.path() + "/out.json";
  std::vector<std::string> args = TinySweep(json);
  args.push_back("--op=pushpull");
  args.push_back("--metrics=off,on");
  Subprocess bench(args, dir.path() + "/log");
  ASSERT_EQ(bench.Wait(absl::Seconds(120)), 0) << ReadFile(dir.path() + "/log");
  EXPECT_EQ(ValidateJson(ReadFile(json), 2 * 2 * kTransports.size()), 0);
  absl::StatusOr<JsonValue> parsed = ParseJson(ReadFile(json));
  ASSERT_OK(parsed);
  std::map<std::string, int> rows;  // per "transport/metrics"
  for (const JsonValue& r : parsed->Find("results")->items()) {
    ++rows[r.Find("transport")->as_string() + "/" + r.Find("metrics")->as_string()];
  }
  for (const std::string& transport : kTransports) {
    EXPECT_EQ(rows[transport + "/off"], 2) << transport;
    EXPECT_EQ(rows[transport + "/on"], 2) << transport;
  }
  EXPECT_NE(ReadFile(dir.path() + "/log").find("metrics on"), std::string::npos);
}

TEST(PsBenchTest, PresentsTheJobsTokenAndTrustsItsCaAgainstACluster) {
  testing::ScopedTempDir dir;
  ASSERT_TRUE(MakeCertificates(dir.path() + "/tls")) << ReadFile(dir.path() + "/tls.log");
  const std::string token = dir.path() + "/job.token";
  ASSERT_EQ(std::system(absl::StrCat("echo secret-of-the-job >", token).c_str()), 0);
  testing::LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1,
                          {"--transport=grpc", "--auth_token_file=" + token,
                           "--tls_cert_file=" + dir.path() + "/tls/server.pem",
                           "--tls_key_file=" + dir.path() + "/tls/server.key"}));
  auto run = [&](const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> args = {BinaryPath("bench/ps-bench"),
                                     "--servers=" + cluster.servers_flag(),
                                     "--transport=grpc",
                                     "--op=pushpull",
                                     "-b",
                                     "4K",
                                     "-e",
                                     "4K",
                                     "--iterations=5",
                                     "--timeout_s=5",
                                     "--json=" + dir.path() + "/" + name + ".json"};
    args.insert(args.end(), flags.begin(), flags.end());
    Subprocess bench(args, dir.path() + "/" + name + ".log");
    return bench.Wait(absl::Seconds(60));
  };
  const std::string ca = "--tls_ca_file=" + dir.path() + "/tls/ca.pem";
  EXPECT_EQ(run({"--auth_token_file=" + token, ca}, "both"), 0)
      << ReadFile(dir.path() + "/both.log");
  EXPECT_NE(ReadFile(dir.path() + "/both.json").find("\"security\": \"token+tls\""),
            std::string::npos);
  EXPECT_EQ(run({ca}, "no_token"), 2);
  EXPECT_NE(ReadFile(dir.path() + "/no_token.log").find("UNAUTHENTICATED"), std::string::npos)
      << ReadFile(dir.path() + "/no_token.log");
  EXPECT_EQ(run({"--auth_token_file=" + token}, "plaintext"), 2);
  EXPECT_NE(ReadFile(dir.path() + "/plaintext.log").find("cannot reach the cluster"),
            std::string::npos)
      << ReadFile(dir.path() + "/plaintext.log");
}

TEST(PsBenchTest, ASweepThatFailsLateKeepsTheRowsItMeasured) {
  testing::ScopedTempDir dir;
  testing::LocalCluster cluster;
  // Room for the small sizes' tensors, not for 4 MiB.
  ASSERT_OK(cluster.Start(1, 1, {"--transport=grpc", "--max_memory_bytes=4000000"}));
  const std::string csv = dir.path() + "/out.csv";
  Subprocess bench({BinaryPath("bench/ps-bench"), "--servers=" + cluster.servers_flag(),
                    "--transport=grpc", "--op=pushpull", "-b", "4K", "-e", "4M", "-f", "32",
                    "--iterations=5", "--timeout_s=10", "--csv=" + csv},
                   dir.path() + "/log");
  EXPECT_EQ(bench.Wait(absl::Seconds(120)), 2) << ReadFile(dir.path() + "/log");
  EXPECT_NE(ReadFile(dir.path() + "/log").find("RESOURCE_EXHAUSTED"), std::string::npos)
      << ReadFile(dir.path() + "/log");
  // The header, then 4K and 128K: measured before 4M was refused.
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << ReadFile(csv);
  EXPECT_NE(lines[1].find(",4096,"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(",131072,"), std::string::npos) << lines[2];
}

TEST(PsBenchTest, RefusesWhatCannotFitOrBeWrittenBeforeItStarts) {
  testing::ScopedTempDir dir;
  auto refused = [&](const std::vector<std::string>& flags, const std::string& words) {
    std::vector<std::string> args = {BinaryPath("bench/ps-bench"), "--op=pushpull"};
    args.insert(args.end(), flags.begin(), flags.end());
    const absl::Time start = absl::Now();
    Subprocess bench(args, dir.path() + "/log");
    EXPECT_EQ(bench.Wait(absl::Seconds(60)), 2) << ReadFile(dir.path() + "/log");
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "measured before refusing";
    EXPECT_NE(ReadFile(dir.path() + "/log").find(words), std::string::npos)
        << ReadFile(dir.path() + "/log");
  };
  refused({"-b", "4K", "-e", "100G"}, "lower -e");
  refused({"-b", "4K", "-e", "4K", "--csv=" + dir.path() + "/no/such/dir/out.csv"},
          "cannot write the --csv file");
}

TEST(PsBenchTest, FactorOneMeasuresOneSize) {
  testing::ScopedTempDir dir;
  const std::string json = dir.path() + "/out.json";
  Subprocess bench({BinaryPath("bench/ps-bench"), "--transport=grpc", "--op=pull", "-b", "64K",
                    "-f", "1", "--iterations=5", "--json=" + json},
                   dir.path() + "/log");
  ASSERT_EQ(bench.Wait(absl::Seconds(60)), 0) << ReadFile(dir.path() + "/log");
  absl::StatusOr<JsonValue> parsed = ParseJson(ReadFile(json));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->Find("results")->items().size(), 1u);
  EXPECT_EQ(parsed->Find("results")->items()[0].Find("bytes")->as_number(), 65536);
}

TEST(PsBenchTest, MeasuresTheShardsOfTheJobItNames) {
  testing::ScopedTempDir dir;
  testing::LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--transport=grpc", "--job_id=team-a"}));
  auto run = [&](const std::string& job) {
    Subprocess bench(
        {BinaryPath("bench/ps-bench"), "--servers=" + cluster.servers_flag(), "--transport=grpc",
         "--op=pull", "-b", "4K", "-f", "1", "--iterations=5", "--timeout_s=10", "--job_id=" + job},
        dir.path() + "/" + job + ".log");
    return bench.Wait(absl::Seconds(60));
  };
  EXPECT_EQ(run("team-a"), 0) << ReadFile(dir.path() + "/team-a.log");
  EXPECT_EQ(run("hetps"), 2) << ReadFile(dir.path() + "/hetps.log");
  EXPECT_NE(ReadFile(dir.path() + "/hetps.log").find("team-a"), std::string::npos)
      << ReadFile(dir.path() + "/hetps.log");
}

TEST(PsBenchTest, LeavesNothingOnTheShardsSoANextRunMayMeasureAnotherRule) {
  testing::ScopedTempDir dir;
  testing::LocalCluster cluster;
  ASSERT_OK(cluster.Start(1, 1, {"--transport=grpc"}));
  auto run = [&](const std::string& optimizer, const std::string& dtype) {
    Subprocess bench(
        {BinaryPath("bench/ps-bench"), "--servers=" + cluster.servers_flag(), "--transport=grpc",
         "--op=pushpull", "-b", "4K", "-e", "64K", "-f", "16", "--iterations=5", "--timeout_s=10",
         "--optimizer=" + optimizer, "--dtype=" + dtype},
        dir.path() + "/log");
    return bench.Wait(absl::Seconds(60));
  };
  // The same sizes again with another rule and dtype: the same tensor names, declared afresh.
  ASSERT_EQ(run("sum", "fp32"), 0) << ReadFile(dir.path() + "/log");
  ASSERT_EQ(run("adam", "bf16"), 0) << ReadFile(dir.path() + "/log");
  // As an operator's tool asks: the shard holds none of the benchmark's tensors.
  ClientOptions options;
  options.servers = absl::StrSplit(cluster.servers_flag(), ',');
  options.admin = true;
  absl::StatusOr<std::unique_ptr<Client>> admin = Client::Create(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  absl::StatusOr<std::vector<ShardStats>> stats = (*admin)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].num_tensors, 0u);
}

TEST(PsBenchTest, UnreachableClusterFailsWithAClearMessage) {
  testing::ScopedTempDir dir;
  Subprocess bench({BinaryPath("bench/ps-bench"), "--servers=127.0.0.1:1", "--timeout_s=2"},
                   dir.path() + "/log");
  EXPECT_EQ(bench.Wait(absl::Seconds(60)), 2);
  EXPECT_NE(ReadFile(dir.path() + "/log").find("cannot reach the cluster"), std::string::npos)
      << ReadFile(dir.path() + "/log");
}

TEST(PsBenchTest, RefusesWhatItCannotDo) {
  for (const auto& [flag, words] : std::vector<std::pair<std::string, std::string>>{
           {"--optimizer=adam", "--check"},  // with --check below
           {"--pin=3-1", "--pin"},
           {"--transport=rdma", "--transport is all or one of"},
           {"-b=3", "whole number"},  // fp32 elements are 4 bytes
           {"--inflight=9", "--inflight"},
           {"--servers=127.0.0.1:1", "one transport per run"},
           {"--security=tls", "needs --tls_dir"},
           {"--security=off,secret", "off, token, tls or token+tls"},
           {"--metrics=yes", "--metrics takes on, off"},
           {"--host_dtype=int8", "--host_dtype is fp32, bf16 or fp16"}}) {
    testing::ScopedTempDir dir;
    // --transport=all is refused only with --servers; elsewhere it is the embedded default.
    Subprocess bench({BinaryPath("bench/ps-bench"), "--check", "--transport=all", flag},
                     dir.path() + "/log");
    EXPECT_EQ(bench.Wait(absl::Seconds(60)), 2) << flag;
    EXPECT_NE(ReadFile(dir.path() + "/log").find(words), std::string::npos)
        << flag << ": " << ReadFile(dir.path() + "/log");
  }
}

TEST(PsBenchTest, WithAClusterTheShardsDecideSecurity) {
  testing::ScopedTempDir dir;
  Subprocess bench({BinaryPath("bench/ps-bench"), "--servers=127.0.0.1:1", "--transport=grpc",
                    "--security=token"},
                   dir.path() + "/log");
  EXPECT_EQ(bench.Wait(absl::Seconds(60)), 2);
  EXPECT_NE(ReadFile(dir.path() + "/log").find("the shards decide"), std::string::npos)
      << ReadFile(dir.path() + "/log");
}

TEST(PsBenchTest, RunsPinnedToOneCpu) {
  testing::ScopedTempDir dir;
  Subprocess bench({BinaryPath("bench/ps-bench"), "--pin=0", "--op=pull", "-b", "4K", "-e", "4K",
                    "--iterations=5", "--check"},
                   dir.path() + "/log");
  EXPECT_EQ(bench.Wait(absl::Seconds(60)), 0) << ReadFile(dir.path() + "/log");
}

}  // namespace
}  // namespace hetps::bench
