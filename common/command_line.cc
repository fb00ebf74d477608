#include "common/command_line.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/simd.h"
#include "common/version.h"

namespace hetps {
namespace {

template <typename T>
void RequireInRange(absl::string_view flag, T value, T min, T max) {
  if (value >= min && value <= max) return;
  ExitWithUsageError(
      absl::StrCat("--", flag, " must be between ", min, " and ", max, ", not ", value));
}

}  // namespace

void ExitWithUsageError(absl::string_view message) {
  std::fprintf(stderr, "%s: %s\n", absl::flags_internal::ShortProgramInvocationName().c_str(),
               std::string(message).c_str());
  std::exit(2);
}

void RequireFlagInRange(absl::string_view flag, int64_t value, int64_t min, int64_t max) {
  RequireInRange(flag, value, min, max);
}
void RequireFlagInRange(absl::string_view flag, uint64_t value, uint64_t min, uint64_t max) {
  RequireInRange(flag, value, min, max);
}
void RequireFlagInRange(absl::string_view flag, double value, double min, double max) {
  RequireInRange(flag, value, min, max);
}

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
  // --version
  config.version_string = [program = std::string(argc > 0 ? argv[0] : "hetps")] {
    const size_t slash = program.rfind('/');
    return absl::StrCat(slash == std::string::npos ? program : program.substr(slash + 1),
                        " (hetps) ", Version(), "\n");
  };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  // absl's own handling of --help exits with status 1, as if asking for help were an error.
  const std::vector<char*> positional = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  if (absl::flags_internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) != -1) {
    std::exit(0);
  }
  if (positional.size() > 1) {
    ExitWithUsageError(absl::StrCat("unexpected argument '", positional[1],
                                    "' (flags are written --name=value; see --help)"));
  }
  for (const absl::Status& status : {CheckLogLevelEnvironment(), CheckSimdEnvironment()}) {
    if (!status.ok()) ExitWithUsageError(status.message());
  }
}

}  // namespace hetps
