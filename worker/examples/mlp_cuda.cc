// The MLP's math on a GPU: cuBLAS for the matrix products, mlp_kernels.cu for the rest, all
// queued on one stream.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/examples/mlp_kernels.h"
#include "worker/examples/mlp_model.h"

namespace hetps::examples {
namespace {

absl::Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: %s", what, cudaGetErrorString(error)));
}

absl::Status Check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("%s: cuBLAS status %d", what, static_cast<int>(status)));
}

#define MLP_CHECK(call) HETPS_RETURN_IF_ERROR(Check((call), #call))

class CudaMlp final : public MlpModel {
 public:
  explicit CudaMlp(const MlpShape& shape) : shape_(shape) {}
  ~CudaMlp() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (loss_ready_ != nullptr) cudaEventDestroy(loss_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaFree(device_);
    cudaFreeHost(host_);
  }

  absl::Status Init(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
      return absl::FailedPreconditionError(
          absl::StrFormat("CUDA device %d cannot be used (%d found)", device, count));
    }
    MLP_CHECK(cudaSetDevice(device));
    MLP_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MLP_CHECK(
        cudaEventCreateWithFlags(&loss_ready_, cudaEventBlockingSync | cudaEventDisableTiming));
    MLP_CHECK(cublasCreate(&blas_));
    MLP_CHECK(cublasSetStream(blas_, stream_));
    const size_t d = shape_.inputs, h = shape_.hidden, b = shape_.batch;
    // Parameters and gradients, then the batch and the activations, in one allocation.
    const size_t sizes[] = {h * d, h, h, 1, h * d, h, h, 1, d * b, b, h * b, b, b, h * b, b, 1};
    size_t total = 0;
    for (size_t size : sizes) total += (size + 63) / 64 * 64;
    MLP_CHECK(cudaMalloc(&device_, total * sizeof(float)));
    MLP_CHECK(cudaMemset(device_, 0, total * sizeof(float)));
    float* next = device_;
    float** fields[] = {&w1_, &b1_, &w2_, &b2_, &gw1_, &gb1_, &gw2_,     &gb2_,
                        &x_,  &t_,  &a_,  &y_,  &dy_,  &da_,  &squared_, &loss_};
    for (size_t i = 0; i < std::size(sizes); ++i) {
      *fields[i] = next;
      next += (sizes[i] + 63) / 64 * 64;
    }
    MLP_CHECK(cudaMallocHost(&host_, (d * b + b + 1) * sizeof(float)));
    return absl::OkStatus();
  }

  std::vector<MlpTensor> tensors() override {
    const size_t d = shape_.inputs, h = shape_.hidden;
    return {{"mlp.w1", h * d, shape_.inputs, w1_, gw1_},
            {"mlp.b1", h, shape_.inputs, b1_, gb1_},
            {"mlp.w2", h, shape_.hidden, w2_, gw2_},
            {"mlp.b2", 1, shape_.hidden, b2_, gb2_}};
  }
  GpuStream stream() override { return reinterpret_cast<GpuStream>(stream_); }

  absl::StatusOr<float> Step(const std::vector<float>& inputs,
                             const std::vector<float>& targets) override {
    const int d = shape_.inputs, h = shape_.hidden, b = shape_.batch;
    // The pinned copies are free: the previous step waited for its loss, after its uploads.
    float* host_inputs = host_;
    float* host_targets = host_ + inputs.size();
    float* host_loss = host_targets + targets.size();
    std::memcpy(host_inputs, inputs.data(), inputs.size() * sizeof(float));
    std::memcpy(host_targets, targets.data(), targets.size() * sizeof(float));
    MLP_CHECK(cudaMemcpyAsync(x_, host_inputs, inputs.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream_));
    MLP_CHECK(cudaMemcpyAsync(t_, host_targets, targets.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream_));
    const float one = 1, zero = 0;
    // Forward: a = relu(W1 x + b1), y = W2 a (+ b2 inside the loss kernel).
    MLP_CHECK(
        cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, h, b, d, &one, w1_, h, x_, d, &zero, a_, h));
    MLP_CHECK(LaunchBiasRelu(a_, b1_, h, b, stream_));
    MLP_CHECK(
        cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 1, b, h, &one, w2_, 1, a_, h, &zero, y_, 1));
    MLP_CHECK(LaunchOutputGradient(y_, b2_, t_, dy_, squared_, b, stream_));
    MLP_CHECK(LaunchRowSums(squared_, 1, b, 1.0f / static_cast<float>(b), loss_, stream_));
    MLP_CHECK(cudaMemcpyAsync(host_loss, loss_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MLP_CHECK(cudaEventRecord(loss_ready_, stream_));
    // Backward.
    MLP_CHECK(
        cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, 1, h, b, &one, dy_, 1, a_, h, &zero, gw2_, 1));
    MLP_CHECK(LaunchRowSums(dy_, 1, b, 1.0f, gb2_, stream_));
    MLP_CHECK(
        cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, h, b, 1, &one, w2_, 1, dy_, 1, &zero, da_, h));
    MLP_CHECK(LaunchReluGradient(da_, a_, h * b, stream_));
    MLP_CHECK(LaunchRowSums(da_, h, b, 1.0f, gb1_, stream_));
    MLP_CHECK(
        cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, h, d, b, &one, da_, h, x_, d, &zero, gw1_, h));
    MLP_CHECK(cudaEventSynchronize(loss_ready_));
    return *host_loss;
  }

 private:
  const MlpShape shape_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t loss_ready_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  float* device_ = nullptr;
  float* host_ = nullptr;
  float *w1_, *b1_, *w2_, *b2_, *gw1_, *gb1_, *gw2_, *gb2_;
  float *x_, *t_, *a_, *y_, *dy_, *da_, *squared_, *loss_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MlpModel>> NewCudaMlp(const MlpShape& shape, int device) {
  auto model = std::make_unique<CudaMlp>(shape);
  HETPS_RETURN_IF_ERROR(model->Init(device));
  return model;
}

}  // namespace hetps::examples
