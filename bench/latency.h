// LatencySamples: every latency sample of a measurement, kept exactly (in nanoseconds), so the
// percentiles ps-bench reports are exact, not read off buckets or derived from a mean.
//
//   LatencySamples samples;
//   samples.Add(1500);
//   int64_t p99 = samples.Percentile(99);
//
// Percentiles use the nearest-rank rule: the p-th percentile of n samples is the smallest sample
// that has at least p% of all samples at or below it, i.e. the ceil(p / 100 * n)-th smallest.
// Not thread-safe.
#ifndef HETPS_BENCH_LATENCY_H_
#define HETPS_BENCH_LATENCY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hetps::bench {

class LatencySamples {
 public:
  void Add(int64_t nanoseconds);
  void Merge(const LatencySamples& other);

  size_t count() const { return samples_.size(); }
  // REQUIRES: count() > 0 and 0 < percent <= 100.
  int64_t Percentile(double percent);
  // REQUIRES: count() > 0.
  int64_t Max();
  double MeanNanoseconds() const;

 private:
  void Sort();

  std::vector<int64_t> samples_;
  bool sorted_ = true;
};

}  // namespace hetps::bench

#endif  // HETPS_BENCH_LATENCY_H_
