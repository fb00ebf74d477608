// Minimal logging to stderr: one line per message, with time, severity and process id.
//
//   hetps::LogInfo("listening on %s", address);
//
// Thread-safe: each message is written with a single write().
#ifndef HETPS_COMMON_LOG_H_
#define HETPS_COMMON_LOG_H_

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace hetps {

enum class LogSeverity { kInfo, kWarning, kError };

void LogMessage(LogSeverity severity, absl::string_view message);

// Messages below this severity are dropped (default: kInfo, or HETPS_LOG_LEVEL=warning|error).
// An unknown HETPS_LOG_LEVEL is reported on stderr and kInfo used.
void SetMinLogSeverity(LogSeverity severity);

// InvalidArgument naming HETPS_LOG_LEVEL when it is set to an unknown value (programs refuse
// to start with it).
absl::Status CheckLogLevelEnvironment();

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogSeverity::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogSeverity::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogSeverity::kError, absl::StrFormat(format, args...));
}

}  // namespace hetps

#endif  // HETPS_COMMON_LOG_H_
