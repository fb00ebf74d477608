// The MLP's math on the CPU: plain loops, the same operations as the cuBLAS version.
#include <algorithm>
#include <vector>

#include "worker/examples/mlp_model.h"

namespace hetps::examples {
namespace {

class CpuMlp final : public MlpModel {
 public:
  explicit CpuMlp(const MlpShape& shape)
      : shape_(shape),
        w1_(shape.hidden * shape.inputs),
        b1_(shape.hidden),
        w2_(shape.hidden),
        b2_(1),
        gw1_(w1_.size()),
        gb1_(b1_.size()),
        gw2_(w2_.size()),
        gb2_(1) {}

  std::vector<MlpTensor> tensors() override {
    return {{"mlp.w1", w1_.size(), shape_.inputs, w1_.data(), gw1_.data()},
            {"mlp.b1", b1_.size(), shape_.inputs, b1_.data(), gb1_.data()},
            {"mlp.w2", w2_.size(), shape_.hidden, w2_.data(), gw2_.data()},
            {"mlp.b2", b2_.size(), shape_.hidden, b2_.data(), gb2_.data()}};
  }
  GpuStream stream() override { return nullptr; }

  absl::StatusOr<float> Step(const std::vector<float>& x, const std::vector<float>& t) override {
    const int d = shape_.inputs, h = shape_.hidden, b = shape_.batch;
    std::vector<float> a(static_cast<size_t>(h) * b), dy(b), da(a.size());
    float loss = 0;
    for (int s = 0; s < b; ++s) {
      float y = b2_[0];
      for (int r = 0; r < h; ++r) {
        float z = b1_[r];
        for (int c = 0; c < d; ++c) z += w1_[r + h * c] * x[c + d * s];
        a[r + h * s] = std::max(z, 0.0f);
        y += w2_[r] * a[r + h * s];
      }
      const float error = y - t[s];
      loss += error * error / static_cast<float>(b);
      dy[s] = 2 * error / static_cast<float>(b);
    }
    std::fill(gw1_.begin(), gw1_.end(), 0.0f);
    std::fill(gb1_.begin(), gb1_.end(), 0.0f);
    std::fill(gw2_.begin(), gw2_.end(), 0.0f);
    gb2_[0] = 0;
    for (int s = 0; s < b; ++s) {
      gb2_[0] += dy[s];
      for (int r = 0; r < h; ++r) {
        gw2_[r] += dy[s] * a[r + h * s];
        const float dz = a[r + h * s] > 0 ? w2_[r] * dy[s] : 0.0f;
        gb1_[r] += dz;
        for (int c = 0; c < d; ++c) gw1_[r + h * c] += dz * x[c + d * s];
      }
    }
    return loss;
  }

 private:
  const MlpShape shape_;
  std::vector<float> w1_, b1_, w2_, b2_, gw1_, gb1_, gw2_, gb2_;
};

}  // namespace

std::unique_ptr<MlpModel> NewCpuMlp(const MlpShape& shape) {
  return std::make_unique<CpuMlp>(shape);
}

}  // namespace hetps::examples
