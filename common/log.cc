#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace hetps {
namespace {

absl::StatusOr<LogSeverity> SeverityNamed(const char* level) {
  if (level == nullptr || absl::EqualsIgnoreCase(level, "info")) return LogSeverity::kInfo;
  if (absl::EqualsIgnoreCase(level, "warning")) return LogSeverity::kWarning;
  if (absl::EqualsIgnoreCase(level, "error")) return LogSeverity::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("HETPS_LOG_LEVEL=", level, " is none of info, warning, error"));
}

LogSeverity SeverityFromEnvironment() {
  absl::StatusOr<LogSeverity> severity = SeverityNamed(std::getenv("HETPS_LOG_LEVEL"));
  if (severity.ok()) return *severity;
  std::fprintf(stderr, "hetps: %s; logging at info\n",
               std::string(severity.status().message()).c_str());
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

absl::Status CheckLogLevelEnvironment() {
  return SeverityNamed(std::getenv("HETPS_LOG_LEVEL")).status();
}

void LogMessage(LogSeverity severity, absl::string_view message) {
  if (severity < MinSeverity().load(std::memory_order_relaxed)) return;
  std::string line =
      absl::StrFormat("%c%s %d] %s\n", SeverityLetter(severity),
                      absl::FormatTime("%m%d %H:%M:%E6S", hetps::WallNow(), absl::LocalTimeZone()),
                      getpid(), message);
  // One write per line keeps lines from different threads and processes whole.
  size_t written = 0;
  while (written < line.size()) {
    ssize_t n = write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

}  // namespace hetps
