// CRC-32C (Castagnoli), the checksum of checkpoint files: the CPU's crc32 instruction where it
// has one (SSE4.2: several GB/s), a table otherwise.
#ifndef HETPS_COMMON_CRC32C_H_
#define HETPS_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace hetps {

// The CRC of `bytes` bytes at `data` continued from `crc` (0 to start), so a file can be
// checksummed piece by piece: Crc32c(b, n2, Crc32c(a, n1)) == Crc32c(a followed by b).
uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace hetps

#endif  // HETPS_COMMON_CRC32C_H_
