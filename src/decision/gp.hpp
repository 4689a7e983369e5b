#pragma once
// The Gaussian process of PB2 (src/decision/pb2.cpp): a time-varying squared-exponential kernel
// over (time, x), exact posterior, log marginal likelihood, and the grid fit of the kernel's
// hyperparameters. Eigen stays in gp.cpp: this header speaks std::vector.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace paramwin::detail {

/// Hyperparameters of the time-varying kernel
///   k((t, x), (t', x')) = variance * exp(-|x - x'|^2 / (2 lengthscale^2)) * (1 - epsilon)^(|t -
///   t'| / 2)
/// plus noise on the diagonal of the training covariance.
struct GpKernel {
  double lengthscale = 1.0;  ///< > 0, in the units of x
  double variance = 1.0;     ///< > 0, signal variance
  double epsilon = 0.0;      ///< in [0, 1): how fast old observations are forgotten per unit time
  double noise = 1e-2;       ///< > 0, observation noise variance
};

/// The kernel between (@p t, @p x) and (@p t2, @p x2) (x and x2 of equal length).
[[nodiscard]] double tv_kernel(const GpKernel& k, double t, std::span<const double> x, double t2,
                               std::span<const double> x2);

/// Training data: n points (time, x in R^dim, y).
struct GpData {
  std::size_t dim = 0;
  std::vector<double> t{};  ///< n times
  std::vector<double> x{};  ///< n * dim, row-major
  std::vector<double> y{};  ///< n targets
  [[nodiscard]] std::size_t size() const noexcept { return t.size(); }
};

/// The posterior of a zero-mean GP with a fixed GpKernel on GpData (a Cholesky factor of
/// K + noise I, computed once). Copies share the factor.
class TimeVaryingGp {
 public:
  /// Factorises; InvalidArgument on inconsistent sizes or an empty data set. A jitter of
  /// 1e-10 * variance is added to the diagonal besides the noise.
  TimeVaryingGp(GpData data, GpKernel kernel);

  /// log p(y | t, x, kernel).
  [[nodiscard]] double log_marginal_likelihood() const noexcept;

  /// Posterior of the latent f at one point (variance without the noise, >= 0).
  struct Prediction {
    double mean = 0.0;
    double variance = 0.0;
  };
  [[nodiscard]] Prediction predict(double t, std::span<const double> x) const;

  [[nodiscard]] const GpKernel& kernel() const noexcept;
  [[nodiscard]] const GpData& data() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// The grid PB2 fits the kernel on (deterministic): every lengthscale x epsilon x
/// noise-to-signal ratio below; the variance is the likelihood's maximiser given the others
/// (y' (R + g I)^-1 y / n for the correlation matrix R), so the grid maximises over it exactly.
inline constexpr double kGpLengthscales[] = {0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5};
inline constexpr double kGpEpsilons[] = {0.0, 0.01, 0.03, 0.1, 0.2, 0.5};
inline constexpr double kGpNoiseRatios[] = {1e-3, 1e-2, 0.05, 0.2, 1.0};

/// The kernel of the grid with the largest log marginal likelihood on @p data (ties: the
/// first in grid order). InvalidArgument on an empty data set.
[[nodiscard]] GpKernel fit_kernel(const GpData& data);

}  // namespace paramwin::detail
