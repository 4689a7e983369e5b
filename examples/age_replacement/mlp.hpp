#pragma once
// A small multilayer perceptron (2 -> H -> H -> 1, tanh) trained by plain gradient descent
// with hand-written backpropagation, and the synthetic regression task it learns.
// Nothing here knows about MPI or paramwin: the parameters are plain std::vectors, which is
// what the trainer hands to paramwin as spans.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace age_replacement {

/// Points (x1, x2) in [-1, 1]^2 and targets y = sin(3 x1) cos(2 x2) + noise.
struct Dataset {
  std::vector<float> x;  ///< 2 per point, row-major
  std::vector<float> y;  ///< 1 per point
  [[nodiscard]] std::size_t size() const noexcept { return y.size(); }
};

/// The noiseless function the network should learn.
[[nodiscard]] inline float target_function(float x1, float x2) {
  return std::sin(3.0F * x1) * std::cos(2.0F * x2);
}

/// Deterministic data set of @p n points from @p seed (the same on every rank).
[[nodiscard]] inline Dataset make_dataset(std::size_t n, std::uint64_t seed, float noise) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::normal_distribution<float> g(0.0F, noise);
  Dataset d;
  d.x.resize(2 * n);
  d.y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float x1 = u(rng);
    const float x2 = u(rng);
    d.x[2 * i] = x1;
    d.x[2 * i + 1] = x2;
    d.y[i] = target_function(x1, x2) + (noise > 0.0F ? g(rng) : 0.0F);
  }
  return d;
}

/// The network's parameters, one std::vector per layer, plus same-shaped gradients.
/// Layer order (and names) is what paramwin's Layout describes.
class Mlp {
 public:
  static constexpr std::size_t kInputs = 2;
  static constexpr std::size_t kLayers = 6;

  /// Names of the layers, in order.
  static constexpr const char* kNames[kLayers] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                                                  "fc2.bias",   "out.weight", "out.bias"};

  explicit Mlp(std::size_t hidden) : hidden_(hidden) {
    const std::size_t counts[kLayers] = {hidden * kInputs, hidden, hidden * hidden,
                                         hidden,           hidden, 1};
    for (std::size_t l = 0; l < kLayers; ++l) {
      params_[l].assign(counts[l], 0.0F);
      grads_[l].assign(counts[l], 0.0F);
    }
  }

  [[nodiscard]] std::size_t hidden() const noexcept { return hidden_; }
  /// Shape of layer @p l ({rows, cols} for weights, {n} for biases).
  [[nodiscard]] std::vector<std::size_t> shape(std::size_t l) const {
    switch (l) {
      case 0: return {hidden_, kInputs};
      case 2: return {hidden_, hidden_};
      case 4: return {1, hidden_};
      case 5: return {1};
      default: return {hidden_};
    }
  }
  /// Parameters of layer @p l (the memory paramwin reads and writes).
  [[nodiscard]] std::vector<float>& layer(std::size_t l) noexcept { return params_[l]; }
  [[nodiscard]] const std::vector<float>& layer(std::size_t l) const noexcept { return params_[l]; }

  /// Glorot-uniform weights scaled by @p scale, zero biases, from @p seed.
  void initialise(std::uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    auto fill = [&](std::vector<float>& w, std::size_t fan_in, std::size_t fan_out) {
      const float limit = scale * std::sqrt(6.0F / static_cast<float>(fan_in + fan_out));
      std::uniform_real_distribution<float> u(-limit, limit);
      for (float& v : w) v = u(rng);
    };
    fill(params_[0], kInputs, hidden_);
    fill(params_[2], hidden_, hidden_);
    fill(params_[4], hidden_, 1);
    for (std::size_t l : {std::size_t{1}, std::size_t{3}, std::size_t{5}}) {
      std::fill(params_[l].begin(), params_[l].end(), 0.0F);
    }
  }

  /// Mean squared error on @p data; with @p want_grad, also the gradient (into grads()).
  double loss(const Dataset& data, bool want_grad) {
    const std::size_t h = hidden_;
    const std::vector<float>& w1 = params_[0];
    const std::vector<float>& b1 = params_[1];
    const std::vector<float>& w2 = params_[2];
    const std::vector<float>& b2 = params_[3];
    const std::vector<float>& w3 = params_[4];
    const float b3 = params_[5][0];
    if (want_grad) {
      for (auto& g : grads_) std::fill(g.begin(), g.end(), 0.0F);
    }
    a1_.resize(h);
    a2_.resize(h);
    d1_.resize(h);
    d2_.resize(h);
    const std::size_t n = data.size();
    const float inv_n = 1.0F / static_cast<float>(n);
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const float x1 = data.x[2 * i];
      const float x2 = data.x[2 * i + 1];
      for (std::size_t j = 0; j < h; ++j) {
        a1_[j] = std::tanh(w1[2 * j] * x1 + w1[2 * j + 1] * x2 + b1[j]);
      }
      float out = b3;
      for (std::size_t j = 0; j < h; ++j) {
        const float* row = &w2[j * h];
        float z = b2[j];
        for (std::size_t k = 0; k < h; ++k) z += row[k] * a1_[k];
        a2_[j] = std::tanh(z);
        out += w3[j] * a2_[j];
      }
      const float err = out - data.y[i];
      total += static_cast<double>(err) * static_cast<double>(err);
      if (!want_grad) continue;
      // d(mean err^2)/d out = 2 err / n
      const float dout = 2.0F * err * inv_n;
      grads_[5][0] += dout;
      for (std::size_t j = 0; j < h; ++j) {
        grads_[4][j] += dout * a2_[j];
        d2_[j] = dout * w3[j] * (1.0F - a2_[j] * a2_[j]);
      }
      std::fill(d1_.begin(), d1_.end(), 0.0F);
      for (std::size_t j = 0; j < h; ++j) {
        const float dj = d2_[j];
        grads_[3][j] += dj;
        float* grow = &grads_[2][j * h];
        const float* row = &w2[j * h];
        for (std::size_t k = 0; k < h; ++k) {
          grow[k] += dj * a1_[k];
          d1_[k] += dj * row[k];
        }
      }
      for (std::size_t k = 0; k < h; ++k) {
        const float dk = d1_[k] * (1.0F - a1_[k] * a1_[k]);
        grads_[1][k] += dk;
        grads_[0][2 * k] += dk * x1;
        grads_[0][2 * k + 1] += dk * x2;
      }
    }
    return total / static_cast<double>(n);
  }

  /// One gradient-descent step with learning rate @p lr; the gradient's global norm is
  /// clipped to @p clip so that a too-large learning rate oscillates instead of overflowing.
  void sgd_step(float lr, float clip) {
    double sq = 0.0;
    for (const auto& g : grads_) {
      for (float v : g) sq += static_cast<double>(v) * static_cast<double>(v);
    }
    const double norm = std::sqrt(sq);
    const float factor = norm > static_cast<double>(clip)
                             ? static_cast<float>(static_cast<double>(clip) / norm)
                             : 1.0F;
    for (std::size_t l = 0; l < kLayers; ++l) {
      std::vector<float>& p = params_[l];
      const std::vector<float>& g = grads_[l];
      for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * factor * g[i];
    }
  }

 private:
  std::size_t hidden_;
  std::vector<float> params_[kLayers];
  std::vector<float> grads_[kLayers];
  std::vector<float> a1_, a2_, d1_, d2_;  // per-sample activations and deltas (scratch)
};

}  // namespace age_replacement
