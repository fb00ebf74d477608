#include "bench/latency.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hetps::bench {

void LatencySamples::Add(int64_t nanoseconds) {
  if (!samples_.empty() && nanoseconds < samples_.back()) sorted_ = false;
  samples_.push_back(nanoseconds);
}

void LatencySamples::Merge(const LatencySamples& other) {
  samples_.insert(samples_.end(), other.samples_.begin(), other.samples_.end());
  sorted_ = false;
}

void LatencySamples::Sort() {
  if (!sorted_) std::sort(samples_.begin(), samples_.end());
  sorted_ = true;
}

int64_t LatencySamples::Percentile(double percent) {
  Sort();
  const double rank = std::ceil(percent / 100.0 * static_cast<double>(samples_.size()));
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return samples_[std::min(index, samples_.size() - 1)];
}

int64_t LatencySamples::Max() {
  Sort();
  return samples_.back();
}

double LatencySamples::MeanNanoseconds() const {
  if (samples_.empty()) return 0;
  return std::accumulate(samples_.begin(), samples_.end(), 0.0) /
         static_cast<double>(samples_.size());
}

}  // namespace hetps::bench
