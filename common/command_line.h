// Command-line parsing for hetps programs: absl flags, with --help listing the flags defined in
// the program's own main file (absl would look for a file named after the binary).
//
//   int main(int argc, char** argv) {
//     hetps::ParseCommandLine(argc, argv, __FILE__, "Runs one shard ...");
#ifndef HETPS_COMMON_COMMAND_LINE_H_
#define HETPS_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace hetps {

// `more_files`: other files (by name) whose flags --help lists too.
void ParseCommandLine(int argc, char** argv, absl::string_view main_file, absl::string_view usage,
                      std::vector<std::string> more_files = {});

}  // namespace hetps

#endif  // HETPS_COMMON_COMMAND_LINE_H_
