// ClientImpl: the worker client behind worker/client.h, in three files: worker/client_impl.cc
// (connecting, declaring, shutting down), worker/internal/client_data.cc (push, pull,
// push-pull) and worker/internal/client_control.cc (hyperparameters, state, barriers,
// checkpoints, drops, stats).
#ifndef HETPS_WORKER_INTERNAL_CLIENT_IMPL_H_
#define HETPS_WORKER_INTERNAL_CLIENT_IMPL_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/buffer_pool.h"
#include "common/cycle_clock.h"
#include "common/http_endpoint.h"
#include "common/partitioning.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "common/timer_queue.h"
#include "proto/ps.pb.h"
#include "worker/client.h"
#include "worker/internal/client_metrics.h"
#include "worker/internal/message_plan.h"
#include "worker/internal/shard_channel.h"

namespace hetps::internal {

// How much memory a client keeps for converting gradients to a 16-bit wire format: a push of
// up to twice this many fp32 bytes reuses the last one's buffers.
inline constexpr size_t kKeptConversionBytes = size_t{1} << 30;

// What this client knows of a tensor it declared.
struct DeclaredTensor {
  std::string name;
  uint64_t num_elements;
  PartitionLayout layout;
  FloatFormat push_format;
  FloatFormat pull_format;
};

class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options, std::shared_ptr<transport::Transport> transport,
             std::string auth_token)
      : options_(options),
        transport_(std::move(transport)),
        auth_token_(std::move(auth_token)),
        timers_(std::make_unique<TimerQueue>()),
        incarnation_(NewRandomId()) {}

  ~ClientImpl() override {
    Shutdown();
    timers_.reset();
  }

  absl::Status Connect();
  // With ClientOptions::metrics_port: counts from now on, and serves the counts.
  absl::Status StartMetrics() {
    CycleClock::Calibrate();
    metrics_ = std::make_shared<internal::ClientMetrics>();
    HETPS_ASSIGN_OR_RETURN(metrics_endpoint_,
                           internal::ServeClientMetrics(&options_, metrics_.get()));
    return absl::OkStatus();
  }
  const std::shared_ptr<internal::ClientMetrics>& metrics() const { return metrics_; }
  std::string metrics_address() const override {
    return metrics_endpoint_ != nullptr ? metrics_endpoint_->address() : "";
  }

  absl::StatusOr<TensorId> Declare(const TensorSpec& spec,
                                   absl::Span<const float> initial_values) override;
  Operation Push(absl::Span<const PushItem> gradients, uint64_t step, DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PUSH, gradients, {}, step, std::move(done));
  }
  Operation Pull(absl::Span<const PullItem> weights, uint64_t min_version,
                 DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PULL, {}, weights, min_version, std::move(done));
  }
  Operation PushPull(absl::Span<const PushItem> gradients, absl::Span<const PullItem> weights,
                     uint64_t step, DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PUSH_PULL, gradients, weights, step, std::move(done));
  }
  const ClientOptions& options() const override { return options_; }
  absl::StatusOr<std::vector<TensorPartition>> Partitions(TensorId tensor) override;
  absl::Status SetHyperparameters(TensorId tensor, uint64_t from_step,
                                  const std::map<std::string, double>& changes) override;
  absl::StatusOr<TensorState> ReadState(TensorId tensor) override {
    return ReadStateOf(tensor, /*backup=*/false);
  }
  absl::StatusOr<TensorState> ReadBackupState(TensorId tensor) override {
    return ReadStateOf(tensor, /*backup=*/true);
  }
  absl::StatusOr<TensorState> ReadStateOf(TensorId tensor, bool backup);
  absl::Status WriteState(TensorId tensor, const TensorState& state) override;
  absl::Status Barrier() override;
  uint64_t ResumeStep() const override { return resume_step_; }
  absl::Status Checkpoint(uint64_t step) override;
  absl::StatusOr<DropResult> Drop(absl::Span<const std::string> names) override;
  absl::StatusOr<DropResult> DropAll() override;
  absl::Status StopShard(uint32_t shard) override;
  absl::StatusOr<std::vector<ShardStats>> Stats() override;
  void Shutdown() override;

 private:
  using ChannelList = std::vector<std::shared_ptr<ShardChannel>>;
  // The shard channels, by shard (set once by Connect, so callers share the list instead of
  // copying it), or FailedPrecondition before Connect and once shut down.
  absl::StatusOr<std::shared_ptr<const ChannelList>> Channels();
  absl::StatusOr<const DeclaredTensor*> FindTensor(TensorId id);
  // Cuts the items into per-shard pieces, checking each against its declaration.
  absl::StatusOr<std::vector<std::vector<Piece>>> PlanPieces(hetps::v1::Method method,
                                                             absl::Span<const PushItem> gradients,
                                                             absl::Span<const PullItem> weights);
  // After a declaration: DataLoss when some shards created the tensor's partitions while others
  // had applied steps to theirs (those shards restarted without their state; they are told to
  // mark the tensor lost, for every worker).
  absl::Status CheckNoShardForgot(const ChannelList& channels, hetps::v1::DeclareRequest request,
                                  const std::vector<uint32_t>& message_shards,
                                  const std::vector<transport::Response>& responses);
  Operation StartData(hetps::v1::Method method, absl::Span<const PushItem> gradients,
                      absl::Span<const PullItem> weights, uint64_t step_or_version,
                      DoneCallback done);

  const ClientOptions options_;
  const std::shared_ptr<transport::Transport> transport_;
  const std::string auth_token_;  // the job's secret, or empty
  std::unique_ptr<TimerQueue> timers_;
  // This run of the worker (see HelloRequest.incarnation); its pushes are numbered from 1.
  const uint64_t incarnation_;
  std::atomic<uint64_t> next_sequence_{1};
  // Gradients converted to the wire's 16-bit format go into these (the last push's, reused).
  const std::shared_ptr<BufferPool> conversion_buffers_ = BufferPool::Create(kKeptConversionBytes);
  uint64_t resume_step_ = 0;  // set by Connect
  uint32_t replicas_ = 1;     // copies of each partition the shards keep; set by Connect

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const ChannelList> channels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TensorId, std::unique_ptr<DeclaredTensor>> tensors_ ABSL_GUARDED_BY(mu_);
  // Dropped declarations: kept, as an operation started before the drop may still read them.
  std::vector<std::unique_ptr<DeclaredTensor>> dropped_tensors_ ABSL_GUARDED_BY(mu_);
  // With ClientOptions::metrics_port (else null): counted here, served by the endpoint.
  std::shared_ptr<internal::ClientMetrics> metrics_;
  std::unique_ptr<HttpEndpoint> metrics_endpoint_;
  uint64_t barrier_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_CLIENT_IMPL_H_
