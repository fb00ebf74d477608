// Command-line parsing for hetps programs: absl flags, with --help listing the flags defined in
// the program's own main file (absl would look for a file named after the binary).
//
//   int main(int argc, char** argv) {
//     hetps::ParseCommandLine(argc, argv, __FILE__, "Runs one shard ...");
//     hetps::RequireFlagInRange("port", absl::GetFlag(FLAGS_port), 0, 65535);
//
// Mistakes end the program with status 2 and a message that names the flag or argument:
// unknown flags, values that do not parse or are out of range, stray positional arguments and
// unknown values of the HETPS_* environment variables. --help (and absl's other usage flags)
// print what was asked for and exit 0.
#ifndef HETPS_COMMON_COMMAND_LINE_H_
#define HETPS_COMMON_COMMAND_LINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace hetps {

// `more_files`: other files (by name) whose flags --help lists too.
void ParseCommandLine(int argc, char** argv, absl::string_view main_file, absl::string_view usage,
                      std::vector<std::string> more_files = {});

// Exits with status 2 and "--<flag> must be between <min> and <max>, not <value>" unless
// min <= value <= max (a NaN is never in range).
void RequireFlagInRange(absl::string_view flag, int64_t value, int64_t min, int64_t max);
void RequireFlagInRange(absl::string_view flag, uint64_t value, uint64_t min, uint64_t max);
void RequireFlagInRange(absl::string_view flag, double value, double min, double max);

// Exits with status 2 and "<program>: <message>".
[[noreturn]] void ExitWithUsageError(absl::string_view message);

}  // namespace hetps

#endif  // HETPS_COMMON_COMMAND_LINE_H_
