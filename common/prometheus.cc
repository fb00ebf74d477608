#include "common/prometheus.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hetps {
namespace {

// Shortest text that reads back as the same double, in the spelling Prometheus expects for the
// special values.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

double ParseOrZero(const std::string& text) {
  double value = 0;
  return absl::SimpleAtod(text, &value) ? value : 0;
}

constexpr std::array<int64_t, LatencyHistogram::kBuckets> kUpperBoundsNanoseconds = {
    10'000,         25'000,         50'000,         100'000,        250'000,       500'000,
    1'000'000,      2'500'000,      5'000'000,      10'000'000,     25'000'000,    50'000'000,
    100'000'000,    250'000'000,    500'000'000,    1'000'000'000,  2'500'000'000, 5'000'000'000,
    10'000'000'000, 25'000'000'000, 50'000'000'000, 100'000'000'000};

}  // namespace

const std::array<double, LatencyHistogram::kBuckets>& LatencyHistogram::UpperBoundsSeconds() {
  static const std::array<double, kBuckets> bounds = [] {
    std::array<double, kBuckets> seconds{};
    for (int i = 0; i < kBuckets; ++i) seconds[i] = kUpperBoundsNanoseconds[i] / 1e9;
    return seconds;
  }();
  return bounds;
}

void LatencyHistogram::ObserveNanoseconds(int64_t nanoseconds) {
  nanoseconds = std::max<int64_t>(0, nanoseconds);  // a clock that stepped back: 0
  // A bucket counts values up to and including its bound ("le").
  const auto bucket = std::lower_bound(kUpperBoundsNanoseconds.begin(),
                                       kUpperBoundsNanoseconds.end(), nanoseconds) -
                      kUpperBoundsNanoseconds.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_nanoseconds_.fetch_add(static_cast<uint64_t>(nanoseconds), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot snapshot;
  for (int i = 0; i <= kBuckets; ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
    snapshot.count += snapshot.counts[i];
  }
  snapshot.sum_seconds = sum_nanoseconds_.load(std::memory_order_relaxed) / 1e9;
  return snapshot;
}

void ExpositionWriter::Family(absl::string_view name, absl::string_view type,
                              absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void ExpositionWriter::WriteLabels(Labels labels, absl::string_view extra_name,
                                   absl::string_view extra_value) {
  if (labels.size() == 0 && extra_name.empty()) return;
  text_ += '{';
  bool first = true;
  auto write = [&](absl::string_view name, absl::string_view value) {
    if (!first) text_ += ',';
    first = false;
    absl::StrAppend(&text_, name, "=\"");
    for (const char c : value) {
      if (c == '\\') {
        text_ += "\\\\";
      } else if (c == '"') {
        text_ += "\\\"";
      } else if (c == '\n') {
        text_ += "\\n";
      } else {
        text_ += c;
      }
    }
    text_ += '"';
  };
  for (const auto& [name, value] : labels) write(name, value);
  if (!extra_name.empty()) write(extra_name, extra_value);
  text_ += '}';
}

void ExpositionWriter::Sample(absl::string_view name, Labels labels, double value) {
  text_.append(name.data(), name.size());
  WriteLabels(labels);
  absl::StrAppend(&text_, " ", FormatValue(value), "\n");
}

void ExpositionWriter::Histogram(absl::string_view name, Labels labels,
                                 const LatencyHistogram& histogram) {
  const LatencyHistogram::Snapshot snapshot = histogram.Read();
  const auto& bounds = LatencyHistogram::UpperBoundsSeconds();
  uint64_t cumulative = 0;
  for (int i = 0; i <= LatencyHistogram::kBuckets; ++i) {
    cumulative += snapshot.counts[i];
    absl::StrAppend(&text_, name, "_bucket");
    WriteLabels(labels, "le", i < LatencyHistogram::kBuckets ? FormatValue(bounds[i]) : "+Inf");
    absl::StrAppend(&text_, " ", cumulative, "\n");
  }
  absl::StrAppend(&text_, name, "_sum");
  WriteLabels(labels);
  absl::StrAppend(&text_, " ", FormatValue(snapshot.sum_seconds), "\n", name, "_count");
  WriteLabels(labels);
  absl::StrAppend(&text_, " ", cumulative, "\n");
}

void WriteProcessMetrics(ExpositionWriter& out) {
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page_bytes = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
  // field 3 onwards.
  const size_t name_end = stat.rfind(')');
  if (name_end != std::string::npos) {
    std::istringstream fields(stat.substr(name_end + 2));
    std::vector<std::string> field((std::istream_iterator<std::string>(fields)),
                                   std::istream_iterator<std::string>());
    // field[i] is /proc/self/stat's field i + 3 (proc(5)).
    if (field.size() > 21) {
      const double cpu_ticks = ParseOrZero(field[11]) + ParseOrZero(field[12]);
      out.Family("process_cpu_seconds_total", "counter", "User and system CPU time spent.");
      out.Sample("process_cpu_seconds_total", {}, cpu_ticks / ticks_per_second);
      out.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size.");
      out.Sample("process_virtual_memory_bytes", {}, ParseOrZero(field[20]));
      out.Family("process_resident_memory_bytes", "gauge", "Resident memory size.");
      out.Sample("process_resident_memory_bytes", {}, ParseOrZero(field[21]) * page_bytes);
      std::ifstream system_stat("/proc/stat");
      std::string key;
      double boot_time = -1;
      while (system_stat >> key) {
        if (key == "btime") {
          system_stat >> boot_time;
          break;
        }
      }
      if (boot_time >= 0) {
        out.Family("process_start_time_seconds", "gauge",
                   "Start time of the process since the Unix epoch.");
        out.Sample("process_start_time_seconds", {},
                   boot_time + ParseOrZero(field[19]) / ticks_per_second);
      }
    }
  }
  if (DIR* fds = opendir("/proc/self/fd")) {
    int open = 0;
    while (const dirent* entry = readdir(fds)) {
      if (entry->d_name[0] != '.') ++open;
    }
    closedir(fds);
    out.Family("process_open_fds", "gauge", "Open file descriptors.");
    out.Sample("process_open_fds", {}, open - 1);  // less the one listing them
  }
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    out.Family("process_max_fds", "gauge", "Limit on open file descriptors.");
    out.Sample("process_max_fds", {}, static_cast<double>(files.rlim_cur));
  }
}

}  // namespace hetps
