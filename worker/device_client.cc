// The device client behind worker/device_client.h: the local group's NCCL steps on the job's
// stream, the staging pipeline between them, and the stream wait that hands the weights back.
#include "worker/device_client.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/await.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/task_thread.h"
#include "common/timer_queue.h"
#include "transport/internal/call_scope.h"
#include "worker/device/copy_engine.h"
#include "worker/device/staging_pipeline.h"
#include "worker/internal/client_metrics.h"
#include "worker/internal/operation_state.h"
#include "worker/local_group.h"

namespace hetps {
namespace {

using internal::CopyEngine;
using internal::OperationState;
using internal::StagedMethod;
using internal::StagingPipeline;
using internal::StreamWait;

// How long closing waits for operations in flight beyond their messages' deadline.
constexpr absl::Duration kDrainAllowance = absl::Seconds(10);

class DeviceClientImpl final : public DeviceClient {
 public:
  DeviceClientImpl(std::unique_ptr<CopyEngine> engine, std::shared_ptr<LocalGroup> group)
      : engine_(std::move(engine)), group_(std::move(group)) {}

  absl::Status Init(Client* client, const DeviceClientOptions& options) {
    if (client == nullptr) {  // a non-root rank: no staging
      completions_ = std::make_unique<TaskThread>("device-done");
      return absl::OkStatus();
    }
    metrics_ = internal::MetricsOf(client);
    const ClientOptions& client_options = client->options();
    HETPS_ASSIGN_OR_RETURN(
        pipeline_, StagingPipeline::Create(client, engine_.get(), client_options.partition_bytes,
                                           options.staging_bytes / client_options.partition_bytes,
                                           client_options.call_timeout + kDrainAllowance));
    return absl::OkStatus();
  }

  ~DeviceClientImpl() override {
    pipeline_.reset();  // before the engine it copies with
    {
      // Non-root ranks: the streams must pass their broadcasts (the completions need this).
      absl::MutexLock lock(&mu_);
      auto passed = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_on_streams_ == 0; };
      while (!AwaitFor(mu_, absl::Condition(&passed), kDrainAllowance)) {
        LogError("device client closing: %d operation(s) wait for their streams",
                 pending_on_streams_);
      }
    }
    completions_.reset();
  }

  Operation PushPull(absl::Span<const DeviceItem> items, uint64_t step, GpuStream stream,
                     DoneCallback done) override {
    return Start(StagedMethod::kPushPull, items, step, stream, std::move(done));
  }
  Operation Push(absl::Span<const DeviceItem> items, uint64_t step, GpuStream stream,
                 DoneCallback done) override {
    return Start(StagedMethod::kPush, items, step, stream, std::move(done));
  }
  Operation Pull(absl::Span<const DeviceItem> items, uint64_t min_version, GpuStream stream,
                 DoneCallback done) override {
    return Start(StagedMethod::kPull, items, min_version, stream, std::move(done));
  }

  absl::Duration TakeStreamWaitTime() override {
    CollectStreamWaits();
    return absl::Nanoseconds(stream_wait_nanoseconds_.exchange(0) +
                             host_wait_nanoseconds_->exchange(0));
  }

 private:
  Operation Start(StagedMethod method, absl::Span<const DeviceItem> items, uint64_t step,
                  GpuStream stream, DoneCallback done);
  // The NCCL steps around the staging, each over all tensors in one batch.
  absl::Status LocalStep(absl::Span<const DeviceItem> items, GpuStream stream, bool reduce);

  // Where operations that fail inside Start end (their callbacks never run inside it).
  TimerQueue failures_;
  const std::unique_ptr<CopyEngine> engine_;
  const std::shared_ptr<LocalGroup> group_;
  std::unique_ptr<StagingPipeline> pipeline_;  // null on a local group's non-root ranks
  // Non-root ranks: operations end here, not on CUDA's callback thread (where callbacks could
  // not call CUDA).
  std::unique_ptr<TaskThread> completions_;
  absl::Mutex mu_;
  int pending_on_streams_ ABSL_GUARDED_BY(mu_) = 0;
  const std::shared_ptr<std::atomic<int64_t>> host_wait_nanoseconds_ =
      std::make_shared<std::atomic<int64_t>>(0);
  // Stream waits the engine measured, not yet taken; and the client's metrics (null: none),
  // where both kinds of wait go as well.
  std::atomic<int64_t> stream_wait_nanoseconds_{0};
  std::shared_ptr<internal::ClientMetrics> metrics_;

  // Moves what the engine measured since the last call into the running figures (each
  // operation's start does, so the metrics lag by at most one operation).
  void CollectStreamWaits() {
    const int64_t waited = absl::ToInt64Nanoseconds(engine_->TakeStreamWaitTime());
    if (waited == 0) return;
    stream_wait_nanoseconds_.fetch_add(waited);
    if (metrics_ != nullptr) metrics_->waited_nanoseconds.fetch_add(waited);
  }
};

absl::Status DeviceClientImpl::LocalStep(absl::Span<const DeviceItem> items, GpuStream stream,
                                         bool reduce) {
  HETPS_RETURN_IF_ERROR(group_->BeginBatch());
  absl::Status status;
  for (const DeviceItem& item : items) {
    status = reduce ? group_->ReduceToRoot(item.gradient, item.num_elements, stream)
                    : group_->Broadcast(item.weights, item.num_elements, stream);
    if (!status.ok()) break;
  }
  absl::Status ended = group_->EndBatch();
  return status.ok() ? ended : status;
}

Operation DeviceClientImpl::Start(StagedMethod method, absl::Span<const DeviceItem> items,
                                  uint64_t step, GpuStream stream, DoneCallback done) {
  const bool pushes = method != StagedMethod::kPull;
  const bool pulls = method != StagedMethod::kPush;
  transport::internal::CallScope scope;  // `done` never runs inside this call
  if (absl::Status checked = internal::CheckDeviceItems(method, items); !checked.ok()) {
    return OperationState::Failed(checked, std::move(done), &failures_);
  }
  CollectStreamWaits();
  auto operation = std::make_shared<OperationState>(1, std::move(done));
  operation->CountWaitsIn(host_wait_nanoseconds_);
  if (metrics_ != nullptr) operation->CountWaitsIn(metrics_);
  auto fail = [&](const absl::Status& status) {
    transport::internal::CompleteOutsideCall(
        &failures_, [operation](const absl::Status& outcome) { operation->MessageDone(outcome); },
        status);
    return Operation(operation);
  };
  if (group_ != nullptr && pushes) {
    if (absl::Status s = LocalStep(items, stream, /*reduce=*/true); !s.ok()) return fail(s);
  }
  // The copies start after the work queued so far (the gradients, the reduction); they must be
  // marked before the stream is held, or the stream would wait for copies that wait for it.
  std::shared_ptr<internal::StreamPoint> after;
  if (pipeline_ != nullptr) {
    absl::StatusOr<std::shared_ptr<internal::StreamPoint>> point = engine_->Mark(stream);
    if (!point.ok()) return fail(point.status());
    after = *std::move(point);
  }
  // The stream waits here for the weights (for a push: until its gradients are staged).
  absl::StatusOr<std::unique_ptr<StreamWait>> wait =
      engine_->BeginStreamWait(stream, /*hold=*/pipeline_ != nullptr);
  if (!wait.ok()) return fail(wait.status());
  std::shared_ptr<StreamWait> shared_wait = *std::move(wait);
  absl::Status status;
  if (pipeline_ == nullptr) {
    // A non-root rank: the broadcast itself waits for the root's weights.
    if (pulls) status = LocalStep(items, stream, /*reduce=*/false);
    const absl::Status ended = engine_->EndStreamWait(*shared_wait, stream);
    if (status.ok()) status = ended;
    if (status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++pending_on_streams_;
      }
      status = engine_->NotifyOnStream(stream, [this, operation] {
        completions_->Post([this, operation] {
          operation->MessageDone({});
          absl::MutexLock lock(&mu_);
          --pending_on_streams_;
        });
      });
      if (!status.ok()) {
        absl::MutexLock lock(&mu_);
        --pending_on_streams_;
      }
    }
    shared_wait->Release();
    return status.ok() ? Operation(operation) : fail(status);
  }
  status = engine_->EndStreamWait(*shared_wait, stream);
  if (status.ok() && group_ != nullptr && pulls) {
    status = LocalStep(items, stream, /*reduce=*/false);
  }
  if (!status.ok()) {
    shared_wait->Release();
    return fail(status);
  }
  // A push lets the stream go on once its gradients are staged (it may then overwrite them); the
  // network part goes on without holding the GPU.
  absl::AnyInvocable<void()> staged;
  if (!pulls) staged = [shared_wait] { shared_wait->Release(); };
  status = pipeline_->Start(
      method, items, step, std::move(after),
      [operation, shared_wait](const absl::Status& status) {
        shared_wait->Release();
        operation->MessageDone(status);
      },
      std::move(staged));
  if (!status.ok()) {
    shared_wait->Release();
    return fail(status);
  }
  return Operation(operation);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceClient>> DeviceClient::Create(
    Client* client, const DeviceClientOptions& options) {
  if (client == nullptr && (options.local_group == nullptr || options.local_group->rank() == 0)) {
    return absl::InvalidArgumentError("a client is needed (all but a local group's root have one)");
  }
  if (client != nullptr && options.local_group != nullptr && options.local_group->rank() != 0) {
    return absl::InvalidArgumentError(
        "only a local group's root talks to the shards: pass a null client on the other ranks");
  }
  std::unique_ptr<internal::CopyEngine> engine;
  if (options.memory == MemoryKind::kHost) {
    if (options.local_group != nullptr) {
      return absl::InvalidArgumentError("a local group needs MemoryKind::kCuda");
    }
    engine = internal::NewHostCopyEngine();
  } else {
    HETPS_ASSIGN_OR_RETURN(engine, internal::NewCudaCopyEngine(options.cuda_device));
  }
  auto device_client = std::make_unique<DeviceClientImpl>(std::move(engine), options.local_group);
  HETPS_RETURN_IF_ERROR(device_client->Init(client, options));
  return device_client;
}

}  // namespace hetps
