#include "bench/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth_token.h"
#include "common/half.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "proto/ps.pb.h"
#include "worker/internal/wire_format.h"

namespace hetps::bench {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

FloatFormat FormatOf(DType dtype) {
  return dtype == DType::kBf16   ? FloatFormat::kBf16
         : dtype == DType::kFp16 ? FloatFormat::kFp16
                                 : FloatFormat::kFp32;
}

// A BSP shard holds at most this many steps ahead of a partition's version (ps-server's
// default --max_pending_steps): pushes without pulls are paced to stay inside it.
constexpr int kBspPushWindow = 4;

// The values ps-bench pushes and declares: small integers, exact in every dtype.
float GradientValue(uint32_t rank, uint64_t i) {
  return static_cast<float>(static_cast<int64_t>((i * 7 + rank * 29) % 61) - 30);
}
float InitialValue(uint64_t i) { return static_cast<float>(static_cast<int64_t>(i % 61) - 30); }

// `count` values in `format`, as bytes.
std::vector<uint8_t> Encode(const std::vector<float>& values, FloatFormat format) {
  std::vector<uint8_t> bytes(values.size() * BytesPerElement(format));
  ConvertFloats(values.data(), FloatFormat::kFp32, bytes.data(), format, values.size());
  return bytes;
}

// The floats that `bytes` in `format` hold.
std::vector<float> Decode(const std::vector<uint8_t>& bytes, FloatFormat format) {
  std::vector<float> values(bytes.size() / BytesPerElement(format));
  ConvertFloats(bytes.data(), format, values.data(), FloatFormat::kFp32, values.size());
  return values;
}

// Counts the elements of `got` that differ from `want` (both in `format`).
uint64_t CountWrong(const uint8_t* got, const std::vector<uint8_t>& want, FloatFormat format) {
  if (std::memcmp(got, want.data(), want.size()) == 0) return 0;
  const size_t size = BytesPerElement(format);
  uint64_t wrong = 0;
  for (size_t offset = 0; offset < want.size(); offset += size) {
    wrong += std::memcmp(got + offset, want.data() + offset, size) != 0;
  }
  return wrong;
}

// The operations of one measurement, as the window below drives them.
class OperationSource {
 public:
  virtual ~OperationSource() = default;
  // Starts operation `index` in `slot`; `done` runs once when it ends, on any thread.
  virtual void Issue(size_t slot, uint64_t index, absl::AnyInvocable<void(absl::Status)> done) = 0;
  // After operation `index` in `slot` has ended: the wrong values it brought back.
  virtual uint64_t Check(size_t slot, uint64_t index) { return 0; }
  // Called with no operation outstanding every PaceEvery() operations.
  virtual absl::Status Pace() { return absl::OkStatus(); }
  virtual int PaceEvery() const { return 0; }
  virtual uint64_t PayloadBytes() const = 0;
};

// Runs operations first_index, first_index + 1, ... (`warmup` of them, then `iterations`
// measured ones) with up to `inflight` outstanding, and records the latency of the measured ones:
// from issue to completion, timed when the completion arrives, whatever order they are looked
// at in. An operation's index is its step. Waits drive `transport` (see Transport::Drive), as
// the client's own waits do.
absl::StatusOr<WorkerMeasurement> RunWindow(transport::Transport& transport,
                                            OperationSource& source, uint64_t first_index,
                                            int warmup, int iterations, int inflight) {
  struct Slot {
    absl::Mutex mu;
    bool busy ABSL_GUARDED_BY(mu) = false;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::atomic<bool> ended{true};  // !busy || done, for Drive to poll
    absl::Status status ABSL_GUARDED_BY(mu);
    int64_t issued = 0;
    int64_t finished ABSL_GUARDED_BY(mu) = 0;
    uint64_t index = 0;
  };
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < inflight; ++i) slots.push_back(std::make_unique<Slot>());

  WorkerMeasurement result;
  int64_t measured_start = 0, measured_end = 0;
  // Waits for `slot`'s operation and accounts for it.
  auto settle = [&](Slot& slot, size_t slot_index) -> absl::Status {
    int64_t finished;
    transport.Drive([&slot] { return slot.ended.load(); });
    {
      absl::MutexLock lock(&slot.mu);
      if (!slot.busy) return absl::OkStatus();
      slot.mu.Await(absl::Condition(&slot.done));  // every call has a deadline
      slot.busy = false;
      HETPS_RETURN_IF_ERROR(slot.status);
      finished = slot.finished;
    }
    if (slot.index >= first_index + warmup) {
      result.latency.Add(finished - slot.issued);
      ++result.operations;
      result.payload_bytes += source.PayloadBytes();
      measured_end = std::max(measured_end, finished);
    }
    result.wrong += source.Check(slot_index, slot.index);
    return absl::OkStatus();
  };
  auto drain = [&]() -> absl::Status {
    for (size_t s = 0; s < slots.size(); ++s) HETPS_RETURN_IF_ERROR(settle(*slots[s], s));
    return absl::OkStatus();
  };

  const uint64_t end = first_index + static_cast<uint64_t>(warmup) + iterations;
  for (uint64_t index = first_index; index < end; ++index) {
    if (source.PaceEvery() > 0 && index > 0 && index % source.PaceEvery() == 0) {
      HETPS_RETURN_IF_ERROR(drain());
      HETPS_RETURN_IF_ERROR(source.Pace());
    }
    const size_t s = index % slots.size();
    Slot& slot = *slots[s];
    HETPS_RETURN_IF_ERROR(settle(slot, s));
    {
      absl::MutexLock lock(&slot.mu);
      slot.busy = true;
      slot.done = false;
      slot.ended.store(false);
    }
    slot.index = index;
    slot.issued = NowNanos();
    if (index == first_index + warmup) measured_start = slot.issued;
    source.Issue(s, index, [&slot](absl::Status status) {
      const int64_t now = NowNanos();
      absl::MutexLock lock(&slot.mu);
      slot.status = std::move(status);
      slot.finished = now;
      slot.done = true;
      slot.ended.store(true);
    });
  }
  HETPS_RETURN_IF_ERROR(drain());
  result.wall = absl::Nanoseconds(std::max<int64_t>(1, measured_end - measured_start));
  return result;
}

// Push, pull or push-pull of one tensor through the client.
class HetpsSource : public OperationSource {
 public:
  HetpsSource(Client* client, const MeasureSettings& settings, TensorId tensor, uint32_t rank,
              uint32_t world_size, uint64_t elements)
      : client_(client),
        settings_(settings),
        tensor_(tensor),
        format_(FormatOf(settings.host_dtype)),
        outputs_(settings.inflight, std::vector<uint8_t>(elements * BytesPerElement(format_))) {
    const FloatFormat wire_format = FormatOf(settings.dtype);
    std::vector<float> mine(elements);
    for (uint64_t i = 0; i < elements; ++i) mine[i] = GradientValue(rank, i);
    gradient_ = Encode(mine, format_);
    if (!settings.check) return;
    // What a pull must return: the declared values, or (BSP sum) the step's sum of every
    // worker's gradient as the shard computes it: widened to fp32, added in rank order.
    std::vector<float> expected(elements);
    if (settings.op == "pull") {
      for (uint64_t i = 0; i < elements; ++i) expected[i] = InitialValue(i);
    } else {
      std::vector<float> theirs(elements), widened(elements);
      for (uint32_t r = 0; r < world_size; ++r) {
        for (uint64_t i = 0; i < elements; ++i) theirs[i] = GradientValue(r, i);
        const std::vector<uint8_t> wire = Encode(theirs, wire_format);
        ConvertFloats(wire.data(), wire_format, widened.data(), FloatFormat::kFp32, elements);
        for (uint64_t i = 0; i < elements; ++i) {
          expected[i] = r == 0 ? widened[i] : expected[i] + widened[i];
        }
      }
    }
    // The sum travels back in the wire format and lands in the host's.
    expected_ = Encode(Decode(Encode(expected, wire_format), wire_format), format_);
  }

  void Issue(size_t slot, uint64_t index, absl::AnyInvocable<void(absl::Status)> done) override {
    const ConstTensorView gradient = ConstView(gradient_);
    const TensorView weights = MutableView(outputs_[slot]);
    DoneCallback callback = [done = std::move(done)](const absl::Status& s) mutable { done(s); };
    if (settings_.op == "push") {
      client_->Push(tensor_, gradient, index, std::move(callback));
    } else if (settings_.op == "pull") {
      client_->Pull(tensor_, weights, 0, std::move(callback));
    } else {
      client_->PushPull(tensor_, gradient, weights, index, std::move(callback));
    }
  }

  uint64_t Check(size_t slot, uint64_t index) override {
    if (settings_.op == "push") return 0;
    std::vector<uint8_t>& got = outputs_[slot];
    if (settings_.corrupt_every > 0 && ++pulled_ % settings_.corrupt_every == 0) {
      got[0] ^= 0x5a;  // the test hook: as if the reply had been damaged
    }
    if (!settings_.check) return 0;
    return CountWrong(got.data(), expected_, format_);
  }

  // BSP pushes without pulls would run ahead of the slower workers: meet every few pushes.
  int PaceEvery() const override {
    if (settings_.op != "push" || settings_.sync != SyncMode::kBsp) return 0;
    return std::max(1, kBspPushWindow - settings_.inflight);
  }
  absl::Status Pace() override { return client_->Barrier(); }

  uint64_t PayloadBytes() const override {
    return settings_.op == "pushpull" ? 2 * settings_.bytes : settings_.bytes;
  }

 private:
  ConstTensorView ConstView(const std::vector<uint8_t>& bytes) const {
    const size_t n = bytes.size() / BytesPerElement(format_);
    if (format_ == FloatFormat::kFp32) {
      return absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()), n);
    }
    const auto half = absl::MakeConstSpan(reinterpret_cast<const uint16_t*>(bytes.data()), n);
    return format_ == FloatFormat::kBf16 ? ConstTensorView::Bf16(half)
                                         : ConstTensorView::Fp16(half);
  }
  TensorView MutableView(std::vector<uint8_t>& bytes) const {
    const size_t n = bytes.size() / BytesPerElement(format_);
    if (format_ == FloatFormat::kFp32) {
      return absl::MakeSpan(reinterpret_cast<float*>(bytes.data()), n);
    }
    const auto half = absl::MakeSpan(reinterpret_cast<uint16_t*>(bytes.data()), n);
    return format_ == FloatFormat::kBf16 ? TensorView::Bf16(half) : TensorView::Fp16(half);
  }

  Client* const client_;
  const MeasureSettings settings_;
  const TensorId tensor_;
  const FloatFormat format_;
  std::vector<uint8_t> gradient_;
  std::vector<uint8_t> expected_;
  std::vector<std::vector<uint8_t>> outputs_;  // one per slot
  uint64_t pulled_ = 0;
};

// The same payload as echo calls, cut into the same message sizes over the same shards.
class EchoSource : public OperationSource {
 public:
  EchoSource(const std::vector<std::unique_ptr<transport::Connection>>& connections,
             const MeasureSettings& settings, absl::Duration timeout)
      : connections_(connections),
        settings_(settings),
        timeout_(timeout),
        payload_(settings.op == "pull" ? 0 : settings.bytes) {}

  void Issue(size_t slot, uint64_t index, absl::AnyInvocable<void(absl::Status)> done) override {
    struct Join {
      absl::Mutex mu;
      size_t remaining ABSL_GUARDED_BY(mu);
      absl::Status status ABSL_GUARDED_BY(mu);
      absl::AnyInvocable<void(absl::Status)> done;
    };
    const uint64_t chunk = settings_.chunk_bytes;
    const uint64_t chunks = (settings_.bytes + chunk - 1) / chunk;
    auto join = std::make_shared<Join>();
    join->done = std::move(done);
    {
      absl::MutexLock lock(&join->mu);
      join->remaining = chunks;
    }
    const absl::Time deadline = absl::Now() + timeout_;
    // What each connection carries of the operation, as the client names it
    // (transport::Request::burst_bytes), so the floor takes the connections hetps takes.
    std::vector<size_t> burst(connections_.size(), 0);
    for (uint64_t c = 0; c < chunks; ++c) {
      burst[c % connections_.size()] += std::min(chunk, settings_.bytes - c * chunk);
    }
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t offset = c * chunk;
      const uint64_t size = std::min(chunk, settings_.bytes - offset);
      // push: bytes out, an empty acknowledgement back; pull: bytes back; push-pull: both.
      hetps::v1::EchoRequest echo;
      echo.set_reply_bytes(settings_.op == "push" ? 0 : size);
      transport::Request request;
      request.method = hetps::v1::METHOD_ECHO;
      request.deadline = deadline;
      request.header = echo.SerializeAsString();
      request.burst_bytes = burst[c % connections_.size()];
      if (settings_.op != "pull") {
        request.payload = transport::Payload::Borrow(
            transport::ByteSpan(payload_.data() + offset, static_cast<size_t>(size)));
      }
      connections_[c % connections_.size()]->Call(
          std::move(request), [join](absl::StatusOr<transport::Response> response) {
            absl::AnyInvocable<void(absl::Status)> done;
            absl::Status status;
            {
              absl::MutexLock lock(&join->mu);
              if (!response.ok() && join->status.ok()) join->status = response.status();
              if (--join->remaining > 0) return;
              done = std::move(join->done);
              status = join->status;
            }
            done(status);
          });
    }
  }

  uint64_t PayloadBytes() const override {
    return settings_.op == "pushpull" ? 2 * settings_.bytes : settings_.bytes;
  }

 private:
  const std::vector<std::unique_ptr<transport::Connection>>& connections_;
  const MeasureSettings settings_;
  const absl::Duration timeout_;
  std::vector<uint8_t> payload_;
};

}  // namespace

absl::StatusOr<uint64_t> ElementsOf(uint64_t bytes, DType dtype) {
  const uint64_t size = BytesPerElement(FormatOf(dtype));
  if (bytes == 0 || bytes % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes are not a whole number of %d-byte elements", bytes, size));
  }
  return bytes / size;
}

HetpsRunner::HetpsRunner(Client* client, std::shared_ptr<transport::Transport> transport,
                         uint32_t rank, uint32_t world_size)
    : client_(client), transport_(std::move(transport)), rank_(rank), world_size_(world_size) {}

absl::StatusOr<int> HetpsRunner::AgreeIterations(int proposal) {
  if (control_ == 0) {
    // A one-element tensor through which rank 0 tells the others (ASP, sum: each push sets it).
    TensorSpec spec;
    spec.name = "ps-bench/control";
    spec.num_elements = 1;
    spec.sync = SyncMode::kAsp;
    spec.optimizer = {"sum", {}};
    HETPS_ASSIGN_OR_RETURN(control_, client_->Declare(spec));
  }
  const uint64_t round = ++agreements_;
  float count = static_cast<float>(proposal);
  if (rank_ == 0)
    HETPS_RETURN_IF_ERROR(client_->Push(control_, absl::MakeConstSpan(&count, 1), round).Wait());
  HETPS_RETURN_IF_ERROR(client_->Pull(control_, absl::MakeSpan(&count, 1), round).Wait());
  return static_cast<int>(count);
}

absl::StatusOr<DurationFit> FitToDuration(absl::Duration duration, int warmup, int inflight,
                                          RunOperations run,
                                          absl::FunctionRef<absl::StatusOr<int>(int)> agree) {
  constexpr double kFewest = 10, kMost = 100000;
  const double seconds = absl::ToDoubleSeconds(duration);
  warmup = std::max(1, warmup);
  HETPS_ASSIGN_OR_RETURN(const WorkerMeasurement first, run(0, warmup, 1));
  const double warmup_pace = absl::ToDoubleSeconds(first.wall) / warmup;
  const double calibration_fit = seconds / 10 / std::max(warmup_pace, 1e-7) * inflight;
  HETPS_ASSIGN_OR_RETURN(
      const int calibration,
      agree(static_cast<int>(std::round(std::clamp(calibration_fit, kFewest, kMost / 10)))));
  HETPS_ASSIGN_OR_RETURN(WorkerMeasurement calibrated, run(warmup, calibration, inflight));
  // The pace once warm: the calibration's 10th percentile (most of the calibration may still be
  // slow; warm operations are steady enough that this fits the duration within about a third),
  // over the `inflight` operations that overlap.
  const double pace = static_cast<double>(calibrated.latency.Percentile(10)) * 1e-9 / inflight;
  DurationFit fit;
  fit.first_index = static_cast<uint64_t>(warmup) + static_cast<uint64_t>(calibration);
  HETPS_ASSIGN_OR_RETURN(fit.iterations, agree(static_cast<int>(std::round(std::clamp(
                                             seconds / std::max(pace, 1e-7), kFewest, kMost)))));
  return fit;
}

absl::StatusOr<WorkerMeasurement> HetpsRunner::Measure(const MeasureSettings& settings) {
  HETPS_ASSIGN_OR_RETURN(const uint64_t elements, ElementsOf(settings.bytes, settings.dtype));
  // A fresh tensor per measurement, named alike on every worker.
  TensorSpec spec;
  spec.name = absl::StrCat("ps-bench/", settings.transport, "/", settings.op, "/", settings.bytes,
                           "/", ++measurements_);
  spec.num_elements = elements;
  spec.sync = settings.sync;
  spec.push_dtype = spec.pull_dtype = settings.dtype;
  if (settings.optimizer == "sum") {
    spec.optimizer = {"sum", {}};
  } else if (settings.optimizer == "sgd") {
    spec.optimizer = {"sgd", {{"lr", 1e-3}}};
  } else {
    spec.optimizer = {settings.optimizer, {}};
  }
  std::vector<float> initial(elements);
  for (uint64_t i = 0; i < elements; ++i) initial[i] = InitialValue(i);
  HETPS_ASSIGN_OR_RETURN(const TensorId tensor, client_->Declare(spec, initial));
  HETPS_RETURN_IF_ERROR(client_->Barrier());

  HetpsSource source(client_, settings, tensor, rank_, world_size_, elements);
  if (settings.iterations > 0) {
    iterations_ = settings.iterations;
    HETPS_ASSIGN_OR_RETURN(
        WorkerMeasurement measured,
        RunWindow(*transport_, source, 0, settings.warmup, settings.iterations, settings.inflight));
    HETPS_RETURN_IF_ERROR(DropOnceAllAreDone(spec.name));
    return measured;
  }
  // As many operations as fit in the duration at rank 0's pace; the measured operations take
  // the steps after the warm-up's and the calibration's.
  HETPS_ASSIGN_OR_RETURN(const DurationFit fit,
                         FitToDuration(
                             settings.duration, settings.warmup, settings.inflight,
                             [&](uint64_t first_index, int count, int inflight) {
                               return RunWindow(*transport_, source, first_index, 0, count,
                                                inflight);
                             },
                             [this](int proposal) { return AgreeIterations(proposal); }));
  iterations_ = fit.iterations;
  HETPS_RETURN_IF_ERROR(client_->Barrier());
  HETPS_ASSIGN_OR_RETURN(WorkerMeasurement measured, RunWindow(*transport_, source, fit.first_index,
                                                               0, iterations_, settings.inflight));
  HETPS_RETURN_IF_ERROR(DropOnceAllAreDone(spec.name));
  return measured;
}

absl::Status HetpsRunner::DropOnceAllAreDone(const std::string& name) {
  HETPS_RETURN_IF_ERROR(client_->Barrier());
  if (rank_ != 0) return absl::OkStatus();
  const std::string names[] = {name};
  return client_->Drop(names).status();
}

absl::Status HetpsRunner::Finish() {
  if (control_ == 0) return absl::OkStatus();
  control_ = 0;
  return DropOnceAllAreDone("ps-bench/control");
}

absl::StatusOr<std::unique_ptr<FloorRunner>> FloorRunner::Connect(
    std::shared_ptr<transport::Transport> transport, const ClientOptions& options,
    absl::Duration call_timeout) {
  std::unique_ptr<FloorRunner> runner(new FloorRunner());
  runner->transport_ = std::move(transport);
  runner->call_timeout_ = call_timeout;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const uint64_t incarnation = NewRandomId();
  HETPS_ASSIGN_OR_RETURN(const std::string auth_token, LoadAuthToken(options.auth_token_file));
  const auto num_shards = static_cast<uint32_t>(options.servers.size());
  for (uint32_t shard = 0; shard < num_shards; ++shard) {
    transport::ConnectOptions connect;
    connect.greeting = internal::MakeHello(options, shard, num_shards, incarnation, auth_token)
                           .SerializeAsString();
    HETPS_ASSIGN_OR_RETURN(std::unique_ptr<transport::Connection> connection,
                           runner->transport_->Connect(options.servers[shard], deadline, connect));
    runner->connections_.push_back(std::move(connection));
  }
  return runner;
}

absl::StatusOr<WorkerMeasurement> FloorRunner::Measure(const MeasureSettings& settings,
                                                       int iterations) {
  EchoSource source(connections_, settings, call_timeout_);
  return RunWindow(*transport_, source, 0, settings.warmup, iterations, settings.inflight);
}

}  // namespace hetps::bench
