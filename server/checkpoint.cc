#include "server/checkpoint.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/partitioning.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"

namespace hetps::server {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'H', 'E', 'T', 'P', 'S', 'C', 'K', '1'};
constexpr size_t kDataAlignment = 64;
constexpr char kManifest[] = "MANIFEST";
constexpr char kStepPrefix[] = "step-";

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrFormat("%s %s: %s", what, path, std::strerror(errno)));
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("open", dir);
  const int synced = ::fsync(fd);
  ::close(fd);
  return synced == 0 ? absl::OkStatus() : Errno("fsync", dir);
}

// A file written under a temporary name and renamed into place once complete and on disk: a
// reader sees the whole file or none.
class DurableFile {
 public:
  explicit DurableFile(std::string path)
      : path_(std::move(path)),
        // Unique: several shards may write the same file (the MANIFEST) at once.
        temporary_(
            (fs::path(path_).parent_path() /
             absl::StrFormat(".%s.%016x.tmp", fs::path(path_).filename().string(), NewRandomId()))
                .string()) {}
  ~DurableFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(temporary_.c_str());
    }
  }

  absl::Status Open() {
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return fd_ >= 0 ? absl::OkStatus() : Errno("create", temporary_);
  }
  absl::Status Append(const void* data, size_t bytes) {
    crc_ = Crc32c(data, bytes, crc_);
    size_ += bytes;
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t written = ::write(fd_, p, bytes);
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) return Errno("write", temporary_);
      p += written;
      bytes -= static_cast<size_t>(written);
    }
    return absl::OkStatus();
  }
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Errno("fsync", temporary_);
    ::close(fd_);
    fd_ = -1;
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) return Errno("rename", temporary_);
    return SyncDirectory(fs::path(path_).parent_path().string());
  }
  uint32_t crc() const { return crc_; }
  uint64_t size() const { return size_; }

 private:
  const std::string path_, temporary_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  uint64_t size_ = 0;
};

absl::Status WriteSmallFile(const std::string& path, const std::string& text) {
  DurableFile file(path);
  HETPS_RETURN_IF_ERROR(file.Open());
  HETPS_RETURN_IF_ERROR(file.Append(text.data(), text.size()));
  return file.Commit();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("%s: missing or unreadable", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string SumName(uint32_t shard_index, uint32_t num_shards) {
  return absl::StrFormat("shard-%d-of-%d.sum", shard_index, num_shards);
}

// The newest step-<S> directory under `dir` that has a MANIFEST; empty if none.
std::string NewestCommitted(const std::string& dir) {
  uint64_t newest = 0;
  std::string found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    uint64_t step = 0;
    if (name.rfind(kStepPrefix, 0) != 0 ||
        !absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), &step)) {
      continue;
    }
    if ((found.empty() || step > newest) && fs::exists(entry.path() / kManifest)) {
      newest = step;
      found = entry.path().string();
    }
  }
  return found;
}

}  // namespace

std::string CheckpointStepDir(const std::string& dir, uint64_t step) {
  return (fs::path(dir) / absl::StrFormat("%s%012d", kStepPrefix, step)).string();
}

std::string CheckpointPartName(uint32_t shard_index, uint32_t num_shards) {
  return absl::StrFormat("shard-%d-of-%d.part", shard_index, num_shards);
}

CheckpointWriter::CheckpointWriter(std::string dir, CheckpointIdentity identity, Catalog catalog,
                                   std::function<size_t()> expected_copies)
    : dir_(std::move(dir)),
      identity_(std::move(identity)),
      catalog_(std::move(catalog)),
      expected_copies_(std::move(expected_copies)),
      writer_(std::make_unique<TaskThread>("checkpoint")) {
  // Writing is background work: training threads come first on a busy machine.
  writer_->Post([] { setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10); });
}

CheckpointWriter::~CheckpointWriter() { writer_->Stop(); }

uint64_t CheckpointWriter::last_durable() const {
  absl::MutexLock lock(&mu_);
  return last_durable_;
}

absl::Time CheckpointWriter::last_durable_time() const {
  absl::MutexLock lock(&mu_);
  return last_durable_time_;
}

void CheckpointWriter::Offer(uint64_t tensor_key, PartitionCopy copy) {
  const uint64_t step = copy.version;
  auto ready = std::make_shared<Copies>();
  {
    absl::MutexLock lock(&mu_);
    Step& gathering = steps_[step];
    if (gathering.handed_off) return;
    const uint32_t index = copy.index;
    gathering.copies.insert_or_assign({tensor_key, index}, std::move(copy));
    if (!HandOffIfComplete(gathering, *ready)) return;
  }
  writer_->Post([this, step, ready] { Write(step, std::move(*ready)); });
}

bool CheckpointWriter::HandOffIfComplete(Step& gathering, Copies& ready) {
  if (gathering.handed_off || gathering.copies.empty() ||
      gathering.copies.size() < expected_copies_()) {
    return false;
  }
  gathering.handed_off = true;
  for (auto& [id, gathered] : gathering.copies) ready.emplace_back(id.first, std::move(gathered));
  gathering.copies.clear();
  return true;
}

void CheckpointWriter::Forget(uint64_t tensor_key) {
  std::vector<std::pair<uint64_t, std::shared_ptr<Copies>>> ready;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [step, gathering] : steps_) {
      if (gathering.handed_off) continue;
      std::erase_if(gathering.copies,
                    [tensor_key](const auto& entry) { return entry.first.first == tensor_key; });
      auto copies = std::make_shared<Copies>();
      if (HandOffIfComplete(gathering, *copies)) ready.emplace_back(step, std::move(copies));
    }
  }
  for (auto& [step, copies] : ready) {
    writer_->Post([this, step = step, copies = copies] { Write(step, std::move(*copies)); });
  }
}

bool CheckpointWriter::TakesPeriodic(uint64_t step) {
  uint64_t writing = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(step);
    if (it != steps_.end()) return !it->second.skipped;
    for (const auto& [earlier, state] : steps_) {
      if (earlier < step && state.handed_off && !state.done) writing = earlier;
    }
    steps_[step].skipped = writing != 0;
  }
  if (writing != 0) {
    LogWarning(
        "shard %d: no checkpoint of step %d: step %d is still being written (a larger "
        "--checkpoint_every, or a faster disk)",
        identity_.shard_index, step, writing);
  }
  return writing == 0;
}

void CheckpointWriter::WhenDurable(uint64_t step, std::function<void(absl::Status)> done) {
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    Step& state = steps_[step];
    if (!state.done) {
      state.waiters.push_back(std::move(done));
      return;
    }
    result = state.result;
  }
  done(result);
}

absl::Status CheckpointWriter::WriteNow(uint64_t step, Copies copies) {
  {
    absl::MutexLock lock(&mu_);
    Step& state = steps_[step];
    if (state.handed_off) return absl::OkStatus();
    state.handed_off = true;
    state.copies.clear();
  }
  Write(step, std::move(copies));
  absl::MutexLock lock(&mu_);
  return steps_[step].result;
}

void CheckpointWriter::Write(uint64_t step, Copies copies) {
  const absl::Time start = hetps::Now();
  absl::Status status = WritePart(step, copies);
  if (status.ok()) status = CommitIfComplete(step);
  if (status.ok()) {
    LogInfo("shard %d: its part of the checkpoint of step %d is durable (%.2f s)",
            identity_.shard_index, step, absl::ToDoubleSeconds(hetps::Now() - start));
  } else {
    LogError("shard %d: checkpoint of step %d failed: %s", identity_.shard_index, step,
             status.ToString());
  }
  std::vector<std::function<void(absl::Status)>> waiters;
  {
    absl::MutexLock lock(&mu_);
    Step& state = steps_[step];
    if (status.ok() && step > last_durable_) {
      last_durable_ = step;
      last_durable_time_ = hetps::Now();
    }
    state.done = true;
    state.result = status;
    waiters = std::move(state.waiters);
    // Every partition has passed `step`: a step before it still gathering never completes
    // (a checkpoint asked for that some partition refused); keep a few finished ones.
    size_t kept = 0;
    for (auto it = steps_.upper_bound(step); it != steps_.begin();) {
      --it;
      const bool drop = !it->second.handed_off || (it->second.done && ++kept > 8);
      if (drop && it->second.waiters.empty()) it = steps_.erase(it);
    }
  }
  for (auto& waiter : waiters) waiter(status);
}

absl::Status CheckpointWriter::WritePart(uint64_t step, Copies& copies) {
  std::sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first, a.second.index) < std::make_pair(b.first, b.second.index);
  });
  const std::map<uint64_t, hetps::v1::TensorImage> catalog = catalog_();
  // Tensors dropped since the cut are left out.
  std::erase_if(copies, [&catalog](const auto& copy) { return !catalog.contains(copy.first); });
  hetps::v1::CheckpointPart part;
  part.set_job_id(identity_.job_id);
  part.set_step(step);
  part.set_shard_index(identity_.shard_index);
  part.set_num_shards(identity_.num_shards);
  part.set_num_workers(identity_.num_workers);
  uint64_t offset = 0;
  hetps::v1::TensorImage* tensor = nullptr;
  for (const auto& [key, copy] : copies) {
    if (tensor == nullptr || tensor->decl().key() != key) {
      auto it = catalog.find(key);
      tensor = part.add_tensors();
      *tensor = it->second;
    }
    hetps::v1::PartitionImage* image = tensor->add_partitions();
    image->set_index(copy.index);
    image->set_version(copy.version);
    image->set_state_slots(copy.state_slots);
    image->set_data_offset(offset);
    image->set_data_bytes(copy.elements * (1 + copy.state_slots) * sizeof(float));
    for (const hetps::v1::WorkerRunImage& run : copy.runs) *image->add_runs() = run;
    offset += image->data_bytes();
  }
  const std::string step_dir = CheckpointStepDir(dir_, step);
  std::error_code error;
  fs::create_directories(step_dir, error);
  if (error) return absl::InternalError(absl::StrFormat("mkdir %s: %s", step_dir, error.message()));

  const std::string name = CheckpointPartName(identity_.shard_index, identity_.num_shards);
  DurableFile file((fs::path(step_dir) / name).string());
  HETPS_RETURN_IF_ERROR(file.Open());
  const std::string header = part.SerializeAsString();
  const uint64_t header_bytes = header.size();
  HETPS_RETURN_IF_ERROR(file.Append(kMagic, sizeof(kMagic)));
  HETPS_RETURN_IF_ERROR(file.Append(&header_bytes, sizeof(header_bytes)));
  HETPS_RETURN_IF_ERROR(file.Append(header.data(), header.size()));
  const std::string padding((kDataAlignment - file.size() % kDataAlignment) % kDataAlignment, '\0');
  HETPS_RETURN_IF_ERROR(file.Append(padding.data(), padding.size()));
  for (auto& [key, copy] : copies) {
    HETPS_RETURN_IF_ERROR(file.Append(copy.weights->data(), copy.elements * sizeof(float)));
    copy.weights.reset();  // give the memory back as soon as it is written
    HETPS_RETURN_IF_ERROR(
        file.Append(copy.state.get(), copy.elements * copy.state_slots * sizeof(float)));
    copy.state.reset();
  }
  HETPS_RETURN_IF_ERROR(file.Commit());
  return WriteSmallFile(
      (fs::path(step_dir) / SumName(identity_.shard_index, identity_.num_shards)).string(),
      absl::StrFormat("%d %d\n", file.size(), file.crc()));
}

absl::Status CheckpointWriter::CommitIfComplete(uint64_t step) {
  const std::string step_dir = CheckpointStepDir(dir_, step);
  hetps::v1::CheckpointManifest manifest;
  manifest.set_job_id(identity_.job_id);
  manifest.set_step(step);
  manifest.set_num_shards(identity_.num_shards);
  manifest.set_num_workers(identity_.num_workers);
  // Every shard declares every tensor, so every shard can tell which shards hold partitions.
  std::vector<bool> holds(identity_.num_shards, false);
  for (const auto& [key, tensor] : catalog_()) {
    absl::StatusOr<PartitionLayout> layout =
        PartitionLayout::Create(tensor.decl().num_elements(), tensor.decl().partition_elements());
    if (!layout.ok()) return layout.status();
    for (uint32_t shard = 0; shard < identity_.num_shards; ++shard) {
      holds[shard] =
          holds[shard] || ShareOfShard(*layout, key, identity_.num_shards, shard).partitions > 0;
    }
  }
  for (uint32_t shard = 0; shard < identity_.num_shards; ++shard) {
    if (!holds[shard]) continue;
    // A part is durable once its .sum is: a shard writes its .sum after its part.
    absl::StatusOr<std::string> sum =
        ReadWholeFile((fs::path(step_dir) / SumName(shard, identity_.num_shards)).string());
    if (!sum.ok()) return absl::OkStatus();  // another shard will commit
    std::vector<std::string> fields = absl::StrSplit(*sum, ' ', absl::SkipWhitespace());
    uint64_t bytes = 0;
    uint32_t crc = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &bytes) ||
        !absl::SimpleAtoi(fields[1], &crc)) {
      return absl::DataLossError(
          absl::StrFormat("%s/%s is malformed", step_dir, SumName(shard, identity_.num_shards)));
    }
    hetps::v1::CheckpointFile* file = manifest.add_files();
    file->set_name(CheckpointPartName(shard, identity_.num_shards));
    file->set_shard_index(shard);
    file->set_bytes(bytes);
    file->set_crc32c(crc);
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(manifest, &text);
  HETPS_RETURN_IF_ERROR(WriteSmallFile((fs::path(step_dir) / kManifest).string(), text));
  LogInfo("checkpoint of step %d committed: %s", step, step_dir);
  return absl::OkStatus();
}

absl::Span<const float> CheckpointPartData::Values(const hetps::v1::PartitionImage& image) const {
  return absl::Span<const float>(
      reinterpret_cast<const float*>(file.data() + data_start + image.data_offset()),
      image.data_bytes() / sizeof(float));
}

absl::StatusOr<CheckpointPartData> LoadCheckpointPart(const std::string& dir,
                                                      const CheckpointIdentity& identity) {
  if (!fs::is_directory(dir)) {
    return absl::NotFoundError(absl::StrFormat("%s: no such checkpoint directory", dir));
  }
  std::string step_dir = dir;
  if (!fs::exists(fs::path(dir) / kManifest)) {
    if (fs::path(dir).filename().string().rfind(kStepPrefix, 0) == 0) {
      return absl::NotFoundError(absl::StrFormat(
          "%s/%s: missing: this checkpoint was never committed (not every shard's part was "
          "written)",
          dir, kManifest));
    }
    step_dir = NewestCommitted(dir);
    if (step_dir.empty()) {
      return absl::NotFoundError(
          absl::StrFormat("%s: no committed checkpoint in it (no step-<S>/%s)", dir, kManifest));
    }
  }
  const std::string manifest_path = (fs::path(step_dir) / kManifest).string();
  HETPS_ASSIGN_OR_RETURN(const std::string manifest_text, ReadWholeFile(manifest_path));
  hetps::v1::CheckpointManifest manifest;
  if (!google::protobuf::TextFormat::ParseFromString(manifest_text, &manifest)) {
    return absl::DataLossError(absl::StrFormat("%s: malformed manifest", manifest_path));
  }
  if (manifest.job_id() != identity.job_id) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: a checkpoint of job '%s'; this shard is of job '%s' (--job_id)",
                        manifest_path, manifest.job_id(), identity.job_id));
  }
  if (manifest.num_shards() != identity.num_shards) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: a checkpoint of %d shards; this shard is one of %d (--num_shards)",
                        manifest_path, manifest.num_shards(), identity.num_shards));
  }
  if (manifest.num_workers() != identity.num_workers) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: a checkpoint of a job of %d workers; this one has %d (--num_workers)",
                        manifest_path, manifest.num_workers(), identity.num_workers));
  }
  const hetps::v1::CheckpointFile* found = nullptr;
  for (const hetps::v1::CheckpointFile& file : manifest.files()) {
    if (file.shard_index() == identity.shard_index) found = &file;
  }
  CheckpointPartData part;
  if (found == nullptr) {  // this shard held no BSP partition: it restores the step alone
    part.path = manifest_path;
    part.header.set_job_id(manifest.job_id());
    part.header.set_step(manifest.step());
    part.header.set_shard_index(identity.shard_index);
    part.header.set_num_shards(manifest.num_shards());
    part.header.set_num_workers(manifest.num_workers());
    return part;
  }
  const hetps::v1::CheckpointFile& listed = *found;
  if (listed.name() != CheckpointPartName(identity.shard_index, identity.num_shards)) {
    return absl::DataLossError(absl::StrFormat("%s: names '%s' as the part of shard %d",
                                               manifest_path, listed.name(), identity.shard_index));
  }
  part.path = (fs::path(step_dir) / listed.name()).string();
  absl::StatusOr<std::string> file = ReadWholeFile(part.path);
  if (!file.ok()) {
    return absl::NotFoundError(
        absl::StrFormat("%s: missing or unreadable (%s lists it)", part.path, manifest_path));
  }
  part.file = *std::move(file);
  if (part.file.size() != listed.bytes()) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes, the manifest says %d (truncated or overwritten)", part.path,
                        part.file.size(), listed.bytes()));
  }
  const uint32_t crc = Crc32c(part.file.data(), part.file.size());
  if (crc != listed.crc32c()) {
    return absl::DataLossError(
        absl::StrFormat("%s: CRC-32C %08x, the manifest says %08x (the file is corrupt)", part.path,
                        crc, listed.crc32c()));
  }
  uint64_t header_bytes = 0;
  if (part.file.size() < sizeof(kMagic) + sizeof(header_bytes) ||
      std::memcmp(part.file.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrFormat("%s: not a hetps checkpoint part", part.path));
  }
  std::memcpy(&header_bytes, part.file.data() + sizeof(kMagic), sizeof(header_bytes));
  const size_t header_start = sizeof(kMagic) + sizeof(header_bytes);
  if (header_bytes > part.file.size() - header_start ||
      !part.header.ParseFromArray(part.file.data() + header_start,
                                  static_cast<int>(header_bytes))) {
    return absl::DataLossError(absl::StrFormat("%s: malformed part header", part.path));
  }
  if (part.header.job_id() != manifest.job_id() || part.header.step() != manifest.step() ||
      part.header.shard_index() != identity.shard_index ||
      part.header.num_shards() != manifest.num_shards()) {
    return absl::DataLossError(absl::StrFormat(
        "%s: the part is of job '%s', step %d, shard %d of %d; the manifest is of job '%s', "
        "step %d",
        part.path, part.header.job_id(), part.header.step(), part.header.shard_index(),
        part.header.num_shards(), manifest.job_id(), manifest.step()));
  }
  part.data_start =
      (header_start + header_bytes + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  for (const hetps::v1::TensorImage& tensor : part.header.tensors()) {
    for (const hetps::v1::PartitionImage& image : tensor.partitions()) {
      if (image.data_bytes() % sizeof(float) != 0 ||
          part.data_start + image.data_offset() + image.data_bytes() > part.file.size()) {
        return absl::DataLossError(
            absl::StrFormat("%s: partition %d of tensor '%s' lies outside the file", part.path,
                            image.index(), tensor.decl().name()));
      }
    }
  }
  return part;
}

}  // namespace hetps::server
