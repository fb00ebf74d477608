// optimizer_bench: the server's update rules on one shard's CPU. For every rule, parameter
// counts from 64 KiB to 1 GiB of fp32 and 1..N threads (each thread updating its own share):
//
//   params/s    parameters updated per second (items_per_second)
//   traffic     bytes/s the rule must move: it reads weights, gradient and state and writes
//               weights and state (Adam: 28 bytes per parameter)
//   vs_copy     traffic over the bandwidth of a streaming copy measured in this run at the same
//               size and thread count: 1.0 means the rule runs at the memory's speed. The copy
//               is a plain loop run like the rules (same SIMD level, ordinary stores), so both
//               pay for memory the same way; glibc's memcpy uses other stores for large copies.
//
// Rules labelled _bf16 run as a shard does for a bf16 tensor: one gradient as it arrived in bf16,
// widened as the rule reads it, and the new weights' bf16 copy (what pulls send) written too;
// their traffic counts 2 bytes less for the gradient and 2 more for the copy. sum_scattered runs
// as a shard does for a gradient that came over gRPC: fp32 in receive buffers of 64 KiB, whose
// boundaries fall inside elements, gathered into L1 block by block as the rule reads them.
//
//   optimizer_bench                                   # the whole sweep (a few minutes)
//   optimizer_bench --benchmark_filter='adam/.*/threads:1'
//   optimizer_bench --max_bytes=1048576               # only sizes up to 1 MiB
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "common/aligned_buffer.h"
#include "common/half.h"
#include "common/simd.h"
#include "optimizer/registry.h"

namespace hetps {
namespace {

struct RuleCase {
  std::string label;
  std::string rule;
  OptimizerParams params;
  FloatFormat wire = FloatFormat::kFp32;  // the gradient's and the pulled weights' format
  bool scattered = false;                 // fp32 gradient in gRPC-like pieces
};

const std::vector<RuleCase>& Cases() {
  static const auto* cases = new std::vector<RuleCase>{
      {"sgd", "sgd", {{"lr", 0.01}}},
      {"sgd_momentum", "sgd", {{"lr", 0.01}, {"momentum", 0.9}}},
      {"adagrad", "adagrad", {}},
      {"rmsprop", "rmsprop", {}},
      {"adam", "adam", {}},
      {"adamw", "adamw", {}},
      {"sum", "sum", {}},
      {"adam_bf16", "adam", {}, FloatFormat::kBf16},
      {"sum_bf16", "sum", {}, FloatFormat::kBf16},
      {"sum_scattered", "sum", {}, FloatFormat::kFp32, /*scattered=*/true},
  };
  return *cases;
}

// Parameter counts: 64 KiB, 1 MiB, 16 MiB, 256 MiB and 1 GiB of fp32.
const std::vector<int64_t>& Sizes() {
  static const auto* sizes =
      new std::vector<int64_t>{16 << 10, 256 << 10, 4 << 20, 64 << 20, 256 << 20};
  return *sizes;
}

std::vector<int> ThreadCounts() {
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> counts;
  for (int t = 1; t < cpus; t *= 2) counts.push_back(t);
  counts.push_back(cpus);
  return counts;
}

// Bytes a rule moves per parameter: reads w, g and its state, writes w and its state. The sum
// rule does not read w.
double TrafficPerParameter(const Optimizer& optimizer) {
  if (optimizer.name() == "sum") return 8;
  return 4.0 * (2 * optimizer.state_slots() + 3);
}

struct StreamCopy {
  HETPS_KERNEL static void Run(const float* __restrict src, float* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
};

// Streaming-copy bandwidth (bytes read + written per second) of `threads` threads each copying
// its own `floats` floats, the median of five timed rounds.
double CopyBandwidth(int64_t floats, int threads) {
  std::vector<AlignedBuffer> src, dst;
  for (int t = 0; t < threads; ++t) {
    src.push_back(*AlignedBuffer::AllocateZeroed(floats));
    dst.push_back(*AlignedBuffer::AllocateZeroed(floats));
  }
  const int passes = static_cast<int>(std::max<int64_t>(1, (int64_t{1} << 28) / (floats * 8)));
  std::vector<double> rates;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int p = 0; p < passes; ++p) {
          RunKernel<StreamCopy>(static_cast<const float*>(src[t].data()), dst[t].data(),
                                static_cast<size_t>(floats));
          benchmark::ClobberMemory();
        }
      });
    }
    for (auto& worker : workers) worker.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(8.0 * floats * passes * threads / seconds);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void RunRule(benchmark::State& state, const RuleCase* rule_case,
             const std::map<std::pair<int64_t, int>, double>* copy) {
  std::unique_ptr<Optimizer> optimizer = *CreateOptimizer(rule_case->rule, rule_case->params);
  const int64_t total = state.range(0);
  const int64_t n = total / state.threads();  // this thread's share
  AlignedBuffer weights = *AlignedBuffer::AllocateZeroed(n);
  AlignedBuffer gradient = *AlignedBuffer::AllocateZeroed(n);
  AlignedBuffer state_memory = *AlignedBuffer::AllocateZeroed(n * optimizer->state_slots());
  for (int64_t i = 0; i < n; ++i) gradient.data()[i] = 1e-3f * static_cast<float>(i % 1000);
  std::vector<float*> slots;
  for (int k = 0; k < optimizer->state_slots(); ++k) slots.push_back(state_memory.data() + k * n);
  optimizer->InitializeState(slots, n);
  const float* gradients[] = {gradient.data()};
  // 16-bit: the gradient in the wire format, and room for the weights' copy in it.
  AlignedBuffer narrow_gradient, narrow_weights;
  StreamedGradient narrow[1];
  if (rule_case->wire != FloatFormat::kFp32) {
    narrow_gradient = *AlignedBuffer::AllocateZeroed((n + 1) / 2);
    narrow_weights = *AlignedBuffer::AllocateZeroed((n + 1) / 2);
    auto* bits = reinterpret_cast<uint16_t*>(narrow_gradient.data());
    ConvertFloats(gradient.data(), FloatFormat::kFp32, bits, rule_case->wire, n);
    gradients[0] = nullptr;
    narrow[0] = {bits, rule_case->wire};
  }
  // Scattered: a first piece of an odd length, then 64 KiB each, as gRPC hands a message over.
  std::vector<absl::Span<const uint8_t>> pieces;
  if (rule_case->scattered) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(gradient.data());
    const size_t size = static_cast<size_t>(n) * sizeof(float);
    for (size_t offset = 0; offset < size;) {
      const size_t take = std::min<size_t>(offset == 0 ? 7363 : 65536, size - offset);
      pieces.emplace_back(bytes + offset, take);
      offset += take;
    }
    gradients[0] = nullptr;
    narrow[0].format = FloatFormat::kFp32;
    narrow[0].pieces = pieces;
  }
  UpdateArgs args;
  args.weights_in = weights.data();
  args.weights_out = weights.data();
  args.gradients = gradients;
  if (rule_case->wire != FloatFormat::kFp32) {
    args.streamed_gradients = narrow;
    args.narrow_weights_out = reinterpret_cast<uint16_t*>(narrow_weights.data());
    args.narrow_format = rule_case->wire;
  }
  if (rule_case->scattered) args.streamed_gradients = narrow;
  args.state = slots;
  args.size = static_cast<size_t>(n);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    optimizer->Update(args);
    ++args.step;
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = TrafficPerParameter(*optimizer) * static_cast<double>(n) *
                       static_cast<double>(state.iterations());
  state.SetItemsProcessed(n * state.iterations());
  state.counters["traffic"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  // Threads run side by side, so their rates add up (counters are summed over threads).
  state.counters["vs_copy"] = bytes / seconds / copy->at({total, state.threads()});
}

std::string SizeLabel(int64_t floats) {
  const int64_t bytes = floats * 4;
  if (bytes >= (int64_t{1} << 30)) return absl::StrCat(bytes >> 30, "GiB");
  if (bytes >= (1 << 20)) return absl::StrCat(bytes >> 20, "MiB");
  return absl::StrCat(bytes >> 10, "KiB");
}

}  // namespace
}  // namespace hetps

int main(int argc, char** argv) {
  // --max_bytes=N leaves out the sizes above N bytes of parameters (and their copy floors).
  int64_t max_bytes = int64_t{1} << 30;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--max_bytes=", 0) == 0) {
      max_bytes = std::stoll(arg.substr(12));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("simd", hetps::SimdLevelName(hetps::ActiveSimdLevel()));

  static std::map<std::pair<int64_t, int>, double> copy;
  std::vector<int64_t> sizes;
  for (int64_t size : hetps::Sizes()) {
    if (size * 4 <= max_bytes) sizes.push_back(size);
  }
  for (int64_t size : sizes) {
    for (int threads : hetps::ThreadCounts()) {
      copy[{size, threads}] = hetps::CopyBandwidth(size / threads, threads);
      benchmark::AddCustomContext(
          absl::StrCat("copy_GBps/", hetps::SizeLabel(size), "/threads:", threads),
          absl::StrCat(copy[{size, threads}] / 1e9));
    }
  }
  for (const hetps::RuleCase& rule_case : hetps::Cases()) {
    for (int64_t size : sizes) {
      for (int threads : hetps::ThreadCounts()) {
        benchmark::RegisterBenchmark(
            absl::StrCat(rule_case.label, "/", hetps::SizeLabel(size)).c_str(),
            [&rule_case](benchmark::State& state) { hetps::RunRule(state, &rule_case, &copy); })
            ->Arg(size)
            ->Threads(threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
