// ASSERT_OK / EXPECT_OK for an absl::Status or absl::StatusOr: on failure they print the
// expression and the status (code and message), where ASSERT_TRUE(x.ok()) prints only "false".
// The expression is evaluated once.
#ifndef HETPS_TESTS_TESTING_STATUS_ASSERTIONS_H_
#define HETPS_TESTS_TESTING_STATUS_ASSERTIONS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace hetps::testing {

inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

template <typename T>
::testing::AssertionResult IsOk(const char* expression, const T& value) {
  const absl::Status& status = StatusOf(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression << ": " << status;
}

}  // namespace hetps::testing

#define ASSERT_OK(expression) ASSERT_PRED_FORMAT1(::hetps::testing::IsOk, expression)
#define EXPECT_OK(expression) EXPECT_PRED_FORMAT1(::hetps::testing::IsOk, expression)

#endif  // HETPS_TESTS_TESTING_STATUS_ASSERTIONS_H_
