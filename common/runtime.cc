#include "common/runtime.h"

#include <mutex>

#include "absl/synchronization/mutex.h"

namespace hetps {

void ConfigureRuntime() {
#ifdef NDEBUG
  static std::once_flag once;
  std::call_once(once, [] { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); });
#endif
}

}  // namespace hetps
