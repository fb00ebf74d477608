// Random non-zero 64-bit ids naming one run of a process's state (a worker's run, a shard's
// state): two runs must not pick the same one, so they come from the OS's entropy.
#ifndef HETPS_COMMON_RANDOM_ID_H_
#define HETPS_COMMON_RANDOM_ID_H_

#include <cstdint>

namespace hetps {

uint64_t NewRandomId();

}  // namespace hetps

#endif  // HETPS_COMMON_RANDOM_ID_H_
