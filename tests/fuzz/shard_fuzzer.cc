// A shard fed a sequence of requests as a hostile or broken client would send them: any
// method, any header bytes, any payload. One input is a list of records
//
//   method (1 byte) | header length (2, little-endian) | payload length (2) | header | payload
//
// Properties: the shard never crashes, answers every request exactly once within a bound, and
// a pull it answers OK carries exactly the bytes its header announces.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/partitioning.h"
#include "proto/ps.pb.h"
#include "server/shard.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using hetps::server::Shard;
using hetps::transport::Payload;
using hetps::transport::Request;
using hetps::transport::Response;

// One shard for many inputs (creating one starts threads); a fresh one now and then, so that
// what inputs leave behind stays bounded.
constexpr int kInputsPerShard = 2000;

Shard& TheShard() {
  static std::unique_ptr<Shard>* shard = new std::unique_ptr<Shard>();
  static int inputs = 0;
  if (*shard == nullptr || ++inputs % kInputsPerShard == 0) {
    shard->reset();
    hetps::SetMinLogSeverity(hetps::LogSeverity::kError);  // expiring waits are expected here
    hetps::server::ShardOptions options;
    options.num_workers = 2;
    options.threads = 2;
    options.max_wait = absl::Milliseconds(50);
    options.max_memory_bytes = 64 << 20;
    *shard = std::make_unique<Shard>(options);
  }
  return **shard;
}

struct Answers {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
};

bool ReturnsWeights(uint32_t method) {
  return method == hetps::v1::METHOD_PULL || method == hetps::v1::METHOD_PUSH_PULL;
}

void CheckPulled(const Response& response) {
  hetps::v1::PullResponse header;
  HETPS_FUZZ_CHECK(header.ParseFromString(response.header));
  uint64_t bytes = 0;
  for (const auto& item : header.items()) bytes += item.num_bytes();
  HETPS_FUZZ_CHECK(bytes == response.payload.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Shard& shard = TheShard();
  auto answers = std::make_shared<Answers>();
  size_t at = 0;
  while (size - at >= 5) {
    const uint32_t method = data[at];
    const size_t header_length = data[at + 1] | data[at + 2] << 8;
    const size_t payload_length = data[at + 3] | data[at + 4] << 8;
    at += 5;
    if (header_length + payload_length > size - at) break;
    Request request;
    request.method = method;
    request.header.assign(reinterpret_cast<const char*>(data + at), header_length);
    request.payload =
        Payload::Copy(hetps::transport::ByteSpan(data + at + header_length, payload_length));
    request.deadline = absl::Now() + absl::Milliseconds(5);
    at += header_length + payload_length;
    {
      absl::MutexLock lock(&answers->mu);
      ++answers->pending;
    }
    shard.HandleRequest(std::move(request), [answers, method](absl::StatusOr<Response> response) {
      if (response.ok() && ReturnsWeights(method)) CheckPulled(*response);
      absl::MutexLock lock(&answers->mu);
      --answers->pending;
      HETPS_FUZZ_CHECK(answers->pending >= 0);
    });
  }
  absl::MutexLock lock(&answers->mu);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(answers->mu) { return answers->pending == 0; };
  // Waits end by their deadlines (5 ms) or the shard's max wait (50 ms); declarations within
  // the 64 MiB cap take well under this.
  HETPS_FUZZ_CHECK(answers->mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
  return 0;
}

namespace {

void Add(std::string& input, hetps::v1::Method method, const google::protobuf::Message& header,
         const std::string& payload = "") {
  const std::string bytes = header.SerializeAsString();
  input.push_back(static_cast<char>(method));
  for (size_t length : {bytes.size(), payload.size()}) {
    input.push_back(static_cast<char>(length & 0xff));
    input.push_back(static_cast<char>(length >> 8));
  }
  input += bytes + payload;
}

hetps::v1::HelloRequest Hello(uint32_t rank) {
  hetps::v1::HelloRequest hello;
  hello.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
  hello.set_job_id("hetps");
  hello.set_worker_rank(rank);
  hello.set_world_size(2);
  hello.set_num_shards(1);
  hello.set_incarnation(100 + rank);
  return hello;
}

hetps::v1::DeclareRequest Declare(const std::string& name, hetps::v1::SyncMode sync) {
  hetps::v1::DeclareRequest declare;
  hetps::v1::TensorDecl* decl = declare.mutable_tensor();
  decl->set_name(name);
  decl->set_key(hetps::TensorKeyFromName(name));
  decl->set_num_elements(64);
  decl->set_dtype(hetps::v1::DTYPE_FP32);
  decl->set_sync_mode(sync);
  decl->set_partition_elements(32);
  decl->mutable_init()->set_kind(hetps::v1::INIT_KIND_CONSTANT);
  decl->mutable_optimizer()->set_name("sgd");
  (*decl->mutable_optimizer()->mutable_params())["lr"] = 0.1;
  return declare;
}

hetps::v1::PartitionItem Item(const std::string& name, uint32_t partition, uint64_t bytes) {
  hetps::v1::PartitionItem item;
  item.set_tensor_key(hetps::TensorKeyFromName(name));
  item.set_partition(partition);
  item.set_dtype(hetps::v1::DTYPE_FP32);
  item.set_num_bytes(bytes);
  return item;
}

hetps::v1::PushRequest Push(const std::string& name, uint32_t rank, uint64_t sequence) {
  hetps::v1::PushRequest push;
  push.set_worker_rank(rank);
  push.set_incarnation(100 + rank);
  push.set_sequence(sequence);
  *push.add_items() = Item(name, 0, 128);
  *push.add_items() = Item(name, 1, 128);
  return push;
}

}  // namespace

std::vector<std::string> HetpsFuzzSeeds() {
  const std::string gradient(256, '\0');
  std::vector<std::string> seeds;
  // BSP: both workers push step 0, then pull version 1.
  std::string bsp;
  Add(bsp, hetps::v1::METHOD_HELLO, Hello(0));
  Add(bsp, hetps::v1::METHOD_DECLARE, Declare("w", hetps::v1::SYNC_MODE_BSP));
  Add(bsp, hetps::v1::METHOD_PUSH, Push("w", 0, 1), gradient);
  Add(bsp, hetps::v1::METHOD_HELLO, Hello(1));
  Add(bsp, hetps::v1::METHOD_PUSH, Push("w", 1, 1), gradient);
  hetps::v1::PullRequest pull;
  pull.set_min_version(1);
  *pull.add_items() = Item("w", 0, 0);
  *pull.add_items() = Item("w", 1, 0);
  Add(bsp, hetps::v1::METHOD_PULL, pull);
  seeds.push_back(bsp);
  // ASP: push-pull, a hyperparameter change, stats and an echo.
  std::string asp;
  Add(asp, hetps::v1::METHOD_DECLARE, Declare("a", hetps::v1::SYNC_MODE_ASP));
  Add(asp, hetps::v1::METHOD_PUSH_PULL, Push("a", 0, 1), gradient);
  hetps::v1::SetOptimizerRequest change;
  change.set_tensor_key(hetps::TensorKeyFromName("a"));
  change.set_from_version(5);
  (*change.mutable_params())["lr"] = 0.5;
  Add(asp, hetps::v1::METHOD_SET_OPTIMIZER, change);
  Add(asp, hetps::v1::METHOD_STATS, hetps::v1::StatsRequest());
  hetps::v1::EchoRequest echo;
  echo.set_reply_bytes(16);
  Add(asp, hetps::v1::METHOD_ECHO, echo, "0123456789abcdef");
  seeds.push_back(asp);
  // A barrier of both workers.
  std::string barrier;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    hetps::v1::BarrierRequest request;
    request.set_worker_rank(rank);
    request.set_generation(1);
    request.set_incarnation(100 + rank);
    Add(barrier, hetps::v1::METHOD_BARRIER, request);
  }
  seeds.push_back(barrier);
  return seeds;
}
