// A fuzz target: LLVMFuzzerTestOneInput takes one input (bytes as they would arrive from the
// network) and aborts only on a bug; HetpsFuzzSeeds gives valid inputs, made with the real
// encoders, that seed its corpus (tests/fuzz/corpus/<target>/, written by --write_seeds).
//
// Built with HETPS_FUZZ=ON (clang), a target links libFuzzer; otherwise replay_main.cc drives
// it in the suite: its corpus, then seeded random mutations of it for a few seconds.
#ifndef HETPS_TESTS_FUZZ_FUZZ_TARGET_H_
#define HETPS_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Protobuf logs every string field that is not UTF-8: millions of lines in a fuzzing run.
inline const bool kHetpsFuzzQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

std::vector<std::string> HetpsFuzzSeeds();

// A property the decoders must keep (e.g. decoding what was encoded gives it back): a broken
// one is a bug, reported as a crash.
#define HETPS_FUZZ_CHECK(condition)                                                              \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property broken: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

#endif  // HETPS_TESTS_FUZZ_FUZZ_TARGET_H_
