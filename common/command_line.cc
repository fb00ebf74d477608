#include "common/command_line.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace hetps {

void ParseCommandLine(int argc, char** argv, absl::string_view main_file, absl::string_view usage,
                      std::vector<std::string> more_files) {
  // Flags are reported with paths relative to where the build ran; match on the file's name.
  const size_t slash = main_file.rfind('/');
  more_files.emplace_back(slash == absl::string_view::npos ? main_file
                                                           : main_file.substr(slash + 1));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [names = std::move(more_files)](absl::string_view path) {
    for (const std::string& name : names) {
      if (absl::EndsWith(path, "/" + name) || path == name) return true;
    }
    return false;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  absl::ParseCommandLine(argc, argv);
}

}  // namespace hetps
