// Process-wide settings hetps wants from its dependencies, applied once by every entry point
// (Client::Create, ShardServer::Start).
#ifndef HETPS_COMMON_RUNTIME_H_
#define HETPS_COMMON_RUNTIME_H_

namespace hetps {

// In optimized builds, turns off Abseil's mutex deadlock detection: Debian's Abseil is built
// with it on, and it updates a lock graph on every nested lock (four times the cost of the
// lock). Debug builds keep it. Idempotent and thread-safe.
void ConfigureRuntime();

}  // namespace hetps

#endif  // HETPS_COMMON_RUNTIME_H_
