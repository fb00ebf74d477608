// The push+pull that ps-bench measures, driven through dmlc/ps-lite, so that hetps can be
// compared with it in one run (bench/pslite_vs_hetps.sh builds and starts it). Not part of the
// hetps build: it compiles against a ps-lite source tree that the user fetches.
//
// One process per ps-lite role (DMLC_ROLE = scheduler, server or worker; ps-lite's environment).
// The server keeps one float array per key and adds every pushed gradient into it (what a hetps
// shard does with --optimizer=sum); a pull answers with the array, without copying it. The worker
// sweeps sizes, one key per size, with one ZPushPull in flight, and prints per size:
//   bytes p50_us p99_us gbps iterations
// gbps counts both directions' bytes, as ps-bench does. Every pulled array is checked: after k
// push+pulls of ones each element is k, or the worker exits non-zero.
//
//   pslite-bench [--b=BYTES] [--e=BYTES] [--f=FACTOR] [--duration_s=S] [--warmup=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

struct Options {
  uint64_t smallest_bytes = 4096;
  uint64_t largest_bytes = 64ull << 20;
  uint64_t factor = 4;
  double duration_s = 0.5;
  int warmup = 5;
};

bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(arg, name, length) != 0 || arg[length] != '=') return false;
  *value = arg + length + 1;
  return true;
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (ParseFlag(argv[i], "--b", &value)) {
      options.smallest_bytes = std::stoull(value);
    } else if (ParseFlag(argv[i], "--e", &value)) {
      options.largest_bytes = std::stoull(value);
    } else if (ParseFlag(argv[i], "--f", &value)) {
      options.factor = std::max<uint64_t>(2, std::stoull(value));
    } else if (ParseFlag(argv[i], "--duration_s", &value)) {
      options.duration_s = std::stod(value);
    } else if (ParseFlag(argv[i], "--warmup", &value)) {
      options.warmup = std::stoi(value);
    } else {
      std::fprintf(stderr, "pslite-bench: unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return options;
}

// Touched only by ps-lite's single customer thread of the server.
std::unordered_map<ps::Key, std::vector<float>> g_store;

void HandleRequest(const ps::KVMeta& meta, const ps::KVPairs<float>& request,
                   ps::KVServer<float>* server) {
  ps::KVPairs<float> response;
  if (meta.push && !request.keys.empty()) {
    const size_t per_key = request.vals.size() / request.keys.size();
    for (size_t k = 0; k < request.keys.size(); ++k) {
      std::vector<float>& values = g_store[request.keys[k]];
      if (values.size() != per_key) values.assign(per_key, 0.0f);
      const float* gradient = request.vals.data() + k * per_key;
      for (size_t i = 0; i < per_key; ++i) values[i] += gradient[i];
    }
  }
  if (meta.pull && request.keys.size() == 1) {
    // The one-key request of this driver: answer from the store itself (ps-lite's zero copy; the
    // worker sends nothing else until this answer arrives).
    std::vector<float>& values = g_store[request.keys[0]];
    response.keys = request.keys;
    response.vals = ps::SArray<float>(values.data(), values.size(), /*deletable=*/false);
  } else if (meta.pull) {
    response.keys = request.keys;
    for (ps::Key key : request.keys) {
      const std::vector<float>& values = g_store[key];
      response.vals.append(ps::SArray<float>(const_cast<float*>(values.data()), values.size()));
    }
  }
  server->Response(meta, response);
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(fraction * values.size()));
  return values[index];
}

int RunWorker(const Options& options) {
  ps::KVWorker<float> worker(0, 0);
  ps::Key key = 0;
  for (uint64_t bytes = options.smallest_bytes; bytes <= options.largest_bytes;
       bytes *= options.factor, ++key) {
    const size_t count = bytes / sizeof(float);
    ps::SArray<ps::Key> keys(1, key);
    ps::SArray<float> gradient(count, 1.0f);
    ps::SArray<float> weights(count, 0.0f);
    std::vector<double> latencies_us;
    int operations = 0;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const auto before = std::chrono::steady_clock::now();
      worker.Wait(worker.ZPushPull(keys, gradient, &weights));
      const auto after = std::chrono::steady_clock::now();
      ++operations;
      if (weights[0] != operations || weights[count - 1] != operations) {
        std::fprintf(stderr, "pslite-bench: %llu bytes: pulled %g after %d pushes of ones\n",
                     static_cast<unsigned long long>(bytes), weights[0], operations);
        return 1;
      }
      if (operations <= options.warmup) continue;
      latencies_us.push_back(std::chrono::duration<double, std::micro>(after - before).count());
      if (std::chrono::duration<double>(after - start).count() >= options.duration_s &&
          latencies_us.size() >= 10) {
        break;
      }
    }
    const double p50 = Percentile(latencies_us, 0.5);
    std::printf("%llu %.2f %.2f %.3f %zu\n", static_cast<unsigned long long>(bytes), p50,
                Percentile(latencies_us, 0.99), 2.0 * bytes / (p50 * 1e3), latencies_us.size());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  ps::Start(0);
  ps::KVServer<float>* server = nullptr;
  if (ps::IsServer()) {
    server = new ps::KVServer<float>(0);
    server->set_request_handle(HandleRequest);
  }
  const int status = ps::IsWorker() ? RunWorker(options) : 0;
  ps::Finalize(0, /*do_barrier=*/true);
  delete server;
  return status;
}
