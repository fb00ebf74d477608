#include "transport/ucx/shared_memory.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace hetps::transport::ucx_internal {
namespace {

constexpr absl::string_view kRefusedPayload = "hetps/ucx-mapped-memory-refused";

std::string Namespace(const char* name) {
  struct stat info;
  if (stat(absl::StrCat("/proc/self/ns/", name).c_str(), &info) != 0) return "";
  return absl::StrCat(name, ":", info.st_dev, "/", info.st_ino);
}

bool IsMappedMemoryName(absl::string_view name) {
  return name == "mm" || name == "sysv" || name == "posix" || name == "xpmem";
}
bool IsSharedMemoryAlias(absl::string_view name) { return name == "sm" || name == "shm"; }

}  // namespace

const std::string& MachineAndNamespaces() {
  static const std::string* identity = [] {
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    const std::string ipc = Namespace("ipc");
    const std::string net = Namespace("net");
    return new std::string(
        boot.empty() || ipc.empty() || net.empty() ? "" : absl::StrCat(boot, " ", ipc, " ", net));
  }();
  return *identity;
}

bool WakeupsCannotCross(absl::string_view client, absl::string_view server) {
  const std::vector<absl::string_view> a = absl::StrSplit(client, ' ');
  const std::vector<absl::string_view> b = absl::StrSplit(server, ' ');
  if (client.empty() || server.empty() || a.size() != 3 || b.size() != 3) return false;
  return a[0] == b[0] && a[1] == b[1] && a[2] != b[2];
}

std::string EffectiveTls(const std::string& tls) {
  if (!tls.empty()) return tls;
  const char* environment = std::getenv("UCX_TLS");
  return environment != nullptr ? environment : "";
}

bool MayMapMemory(absl::string_view tls) {
  const std::vector<absl::string_view> names = absl::StrSplit(tls, ',', absl::SkipEmpty());
  if (names.empty()) return true;
  const bool negated = absl::StartsWith(names[0], "^");
  for (size_t i = 0; i < names.size(); ++i) {
    absl::string_view name = absl::StripAsciiWhitespace(names[i]);
    if (i == 0 && negated) name.remove_prefix(1);
    const bool mapped = IsMappedMemoryName(name) || IsSharedMemoryAlias(name) || name == "all";
    if (negated && (name == "mm" || IsSharedMemoryAlias(name))) return false;
    if (!negated && mapped) return true;
  }
  return negated;
}

std::string WithoutMappedMemory(absl::string_view tls) {
  std::vector<std::string> names = absl::StrSplit(tls, ',', absl::SkipEmpty());
  if (names.empty()) return "^mm";
  if (absl::StartsWith(names[0], "^")) return absl::StrCat(tls, ",mm");
  std::vector<std::string> kept;
  for (const std::string& name : names) {
    if (name == "all") return "^mm";
    if (IsSharedMemoryAlias(name)) {
      kept.push_back("cma");
      kept.push_back("knem");
    } else if (!IsMappedMemoryName(name)) {
      kept.push_back(name);
    }
  }
  return absl::StrJoin(kept, ",");
}

absl::Status MappedMemoryRefused(absl::string_view address) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(address,
                   " shares this machine's memory but not its network namespace: UCX's "
                   "memory-mapped transports could not wake it"));
  status.SetPayload(kRefusedPayload, absl::Cord());
  return status;
}

bool IsMappedMemoryRefused(const absl::Status& status) {
  return status.GetPayload(kRefusedPayload).has_value();
}

}  // namespace hetps::transport::ucx_internal
