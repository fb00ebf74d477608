#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hetps {
namespace {

LogSeverity SeverityFromEnvironment() {
  const char* level = std::getenv("HETPS_LOG_LEVEL");
  if (level == nullptr) return LogSeverity::kInfo;
  if (absl::EqualsIgnoreCase(level, "warning")) return LogSeverity::kWarning;
  if (absl::EqualsIgnoreCase(level, "error")) return LogSeverity::kError;
  return LogSeverity::kInfo;
}

std::atomic<LogSeverity>& MinSeverity() {
  static std::atomic<LogSeverity> severity{SeverityFromEnvironment()};
  return severity;
}

char SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { MinSeverity().store(severity); }

void LogMessage(LogSeverity severity, absl::string_view message) {
  if (severity < MinSeverity().load(std::memory_order_relaxed)) return;
  std::string line = absl::StrFormat(
      "%c%s %d] %s\n", SeverityLetter(severity),
      absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()), getpid(), message);
  // One write per line keeps lines from different threads and processes whole.
  size_t written = 0;
  while (written < line.size()) {
    ssize_t n = write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

}  // namespace hetps
