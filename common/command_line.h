// Command-line parsing for hetps programs: absl flags, with --help listing the flags defined in
// the program's own main file (absl would look for a file named after the binary).
//
//   int main(int argc, char** argv) {
//     hetps::ParseCommandLine(argc, argv, __FILE__, "Runs one shard ...");
#ifndef HETPS_COMMON_COMMAND_LINE_H_
#define HETPS_COMMON_COMMAND_LINE_H_

#include "absl/strings/string_view.h"

namespace hetps {

void ParseCommandLine(int argc, char** argv, absl::string_view main_file, absl::string_view usage);

}  // namespace hetps

#endif  // HETPS_COMMON_COMMAND_LINE_H_
