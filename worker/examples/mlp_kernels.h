// The MLP's elementwise kernels (mlp_kernels.cu); the matrix products are cuBLAS's.
// Matrices are column-major: element (r, c) of a rows x cols matrix is m[r + rows * c].
#ifndef HETPS_WORKER_EXAMPLES_MLP_KERNELS_H_
#define HETPS_WORKER_EXAMPLES_MLP_KERNELS_H_

#include <cuda_runtime.h>

namespace hetps::examples {

// z = max(z + bias[r], 0) for a rows x cols z.
cudaError_t LaunchBiasRelu(float* z, const float* bias, int rows, int cols, cudaStream_t stream);
// With y the output before its bias: dy = 2 (y + b2 - t) / batch and squared = (y + b2 - t)^2.
cudaError_t LaunchOutputGradient(const float* y, const float* b2, const float* targets, float* dy,
                                 float* squared, int batch, cudaStream_t stream);
// gradient = 0 where the ReLU's output was 0.
cudaError_t LaunchReluGradient(float* gradient, const float* activation, int n,
                               cudaStream_t stream);
// out[r] = scale * sum over c of m(r, c).
cudaError_t LaunchRowSums(const float* m, int rows, int cols, float scale, float* out,
                          cudaStream_t stream);

}  // namespace hetps::examples

#endif  // HETPS_WORKER_EXAMPLES_MLP_KERNELS_H_
