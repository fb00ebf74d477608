#include "worker/examples/mlp_kernels.h"

namespace hetps::examples {
namespace {

constexpr int kThreads = 256;

int Blocks(int n) { return (n + kThreads - 1) / kThreads; }

__global__ void BiasRelu(float* z, const float* bias, int rows, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = fmaxf(z[i] + bias[i % rows], 0.0f);
}

__global__ void OutputGradient(const float* y, const float* b2, const float* targets, float* dy,
                               float* squared, int batch) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch) {
    const float error = y[i] + b2[0] - targets[i];
    squared[i] = error * error;
    dy[i] = 2.0f * error / static_cast<float>(batch);
  }
}

__global__ void ReluGradient(float* gradient, const float* activation, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && activation[i] <= 0.0f) gradient[i] = 0.0f;
}

__global__ void RowSums(const float* m, int rows, int cols, float scale, float* out) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float sum = 0;
  for (int c = 0; c < cols; ++c) sum += m[r + rows * c];
  out[r] = scale * sum;
}

}  // namespace

cudaError_t LaunchBiasRelu(float* z, const float* bias, int rows, int cols, cudaStream_t stream) {
  BiasRelu<<<Blocks(rows * cols), kThreads, 0, stream>>>(z, bias, rows, rows * cols);
  return cudaGetLastError();
}

cudaError_t LaunchOutputGradient(const float* y, const float* b2, const float* targets, float* dy,
                                 float* squared, int batch, cudaStream_t stream) {
  OutputGradient<<<Blocks(batch), kThreads, 0, stream>>>(y, b2, targets, dy, squared, batch);
  return cudaGetLastError();
}

cudaError_t LaunchReluGradient(float* gradient, const float* activation, int n,
                               cudaStream_t stream) {
  ReluGradient<<<Blocks(n), kThreads, 0, stream>>>(gradient, activation, n);
  return cudaGetLastError();
}

cudaError_t LaunchRowSums(const float* m, int rows, int cols, float scale, float* out,
                          cudaStream_t stream) {
  RowSums<<<Blocks(rows), kThreads, 0, stream>>>(m, rows, cols, scale, out);
  return cudaGetLastError();
}

}  // namespace hetps::examples
