// Early-return helpers for absl::Status / absl::StatusOr (the Abseil in Debian 12 has none).
//
//   HETPS_RETURN_IF_ERROR(DoThing());
//   HETPS_ASSIGN_OR_RETURN(auto conn, transport->Connect(address));
#ifndef HETPS_COMMON_STATUS_MACROS_H_
#define HETPS_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HETPS_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status hetps_status_ = (expr);         \
    if (!hetps_status_.ok()) return hetps_status_; \
  } while (0)

#define HETPS_STATUS_CONCAT_INNER_(a, b) a##b
#define HETPS_STATUS_CONCAT_(a, b) HETPS_STATUS_CONCAT_INNER_(a, b)

#define HETPS_ASSIGN_OR_RETURN(lhs, expr) \
  HETPS_ASSIGN_OR_RETURN_IMPL_(HETPS_STATUS_CONCAT_(hetps_statusor_, __LINE__), lhs, expr)

#define HETPS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // HETPS_COMMON_STATUS_MACROS_H_
