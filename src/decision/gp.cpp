// The time-varying Gaussian process of PB2: kernel, exact posterior through a Cholesky
// factor, log marginal likelihood, and the deterministic grid fit of the kernel.
#include "decision/gp.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;

// Added to the diagonal (times the signal variance) besides the noise, for a factor that
// exists when two observations coincide and the noise is tiny.
constexpr double kJitter = 1e-10;
// Smallest signal variance the fit assigns (targets that are all equal).
constexpr double kMinVariance = 1e-8;

double squared_distance(const double* a, const double* b, std::size_t dim) noexcept {
  double s = 0.0;
  for (std::size_t i = 0; i < dim; ++i) {
    const double d = a[i] - b[i];
    s += d * d;
  }
  return s;
}

double time_factor(double epsilon, double dt) noexcept {
  return epsilon == 0.0 ? 1.0 : std::pow(1.0 - epsilon, std::fabs(dt) / 2.0);
}

void check_data(const GpData& d) {
  if (d.size() == 0) {
    throw InvalidArgument("paramwin: GP: no observations");
  }
  if (d.x.size() != d.size() * d.dim || d.y.size() != d.size()) {
    throw InvalidArgument("paramwin: GP: " + std::to_string(d.size()) + " times, " +
                          std::to_string(d.x.size()) + " input values for dimension " +
                          std::to_string(d.dim) + ", " + std::to_string(d.y.size()) + " targets");
  }
}

void check_kernel(const GpKernel& k) {
  if (!(k.lengthscale > 0.0 && std::isfinite(k.lengthscale)) ||
      !(k.variance > 0.0 && std::isfinite(k.variance)) || !(k.epsilon >= 0.0 && k.epsilon < 1.0) ||
      !(k.noise > 0.0 && std::isfinite(k.noise))) {
    throw InvalidArgument("paramwin: GP: kernel needs lengthscale, variance, noise > 0 and "
                          "epsilon in [0, 1)");
  }
}

double log_det(const Eigen::LLT<Matrix>& llt) {
  return 2.0 * llt.matrixLLT().diagonal().array().log().sum();
}

constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)

}  // namespace

double tv_kernel(const GpKernel& k, double t, std::span<const double> x, double t2,
                 std::span<const double> x2) {
  const double s = squared_distance(x.data(), x2.data(), std::min(x.size(), x2.size()));
  return k.variance * std::exp(-s / (2.0 * k.lengthscale * k.lengthscale)) *
         time_factor(k.epsilon, t - t2);
}

struct TimeVaryingGp::Impl {
  GpData data;
  GpKernel kernel;
  Eigen::LLT<Matrix> llt;
  Vector alpha;
  double lml = 0.0;
};

TimeVaryingGp::TimeVaryingGp(GpData data, GpKernel kernel) {
  check_data(data);
  check_kernel(kernel);
  auto impl = std::make_shared<Impl>();
  const std::size_t n = data.size();
  const auto ni = static_cast<Eigen::Index>(n);
  const std::size_t d = data.dim;
  Matrix K(ni, ni);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      const double v = tv_kernel(kernel, data.t[i], {data.x.data() + i * d, d}, data.t[j],
                                 {data.x.data() + j * d, d});
      K(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = v;
      K(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)) = v;
    }
  }
  K.diagonal().array() += kernel.noise + kJitter * kernel.variance;
  impl->llt.compute(K);
  if (impl->llt.info() != Eigen::Success) {
    throw Error("paramwin: GP: the covariance of " + std::to_string(n) +
                " observations is not positive definite");
  }
  const Eigen::Map<const Vector> y(data.y.data(), ni);
  impl->alpha = impl->llt.solve(y);
  impl->lml =
      -0.5 * y.dot(impl->alpha) - 0.5 * log_det(impl->llt) - 0.5 * static_cast<double>(n) * kLog2Pi;
  impl->data = std::move(data);
  impl->kernel = kernel;
  impl_ = std::move(impl);
}

double TimeVaryingGp::log_marginal_likelihood() const noexcept { return impl_->lml; }

const GpKernel& TimeVaryingGp::kernel() const noexcept { return impl_->kernel; }

const GpData& TimeVaryingGp::data() const noexcept { return impl_->data; }

TimeVaryingGp::Prediction TimeVaryingGp::predict(double t, std::span<const double> x) const {
  const GpData& data = impl_->data;
  if (x.size() != data.dim) {
    throw InvalidArgument("paramwin: GP: predict at a point of dimension " +
                          std::to_string(x.size()) + ", the data's is " + std::to_string(data.dim));
  }
  const std::size_t n = data.size();
  Vector ks(static_cast<Eigen::Index>(n));
  for (std::size_t i = 0; i < n; ++i) {
    ks(static_cast<Eigen::Index>(i)) =
        tv_kernel(impl_->kernel, t, x, data.t[i], {data.x.data() + i * data.dim, data.dim});
  }
  const double mean = ks.dot(impl_->alpha);
  const Vector v = impl_->llt.matrixL().solve(ks);
  const double prior = tv_kernel(impl_->kernel, t, x, t, x);
  return Prediction{.mean = mean, .variance = std::max(0.0, prior - v.squaredNorm())};
}

GpKernel fit_kernel(const GpData& data) {
  check_data(data);
  const std::size_t n = data.size();
  const auto ni = static_cast<Eigen::Index>(n);
  const std::size_t d = data.dim;
  Matrix d2(ni, ni);
  Matrix dt(ni, ni);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const auto a = static_cast<Eigen::Index>(i);
      const auto b = static_cast<Eigen::Index>(j);
      d2(a, b) = squared_distance(data.x.data() + i * d, data.x.data() + j * d, d);
      dt(a, b) = std::fabs(data.t[i] - data.t[j]);
    }
  }
  const Eigen::Map<const Vector> y(data.y.data(), ni);
  const double nd = static_cast<double>(n);
  GpKernel best{};
  double best_lml = -std::numeric_limits<double>::infinity();
  bool found = false;
  for (const double l : kGpLengthscales) {
    const Matrix se = (-d2.array() / (2.0 * l * l)).exp().matrix();
    for (const double eps : kGpEpsilons) {
      Matrix corr = se;
      if (eps != 0.0) corr.array() *= (dt.array() * (0.5 * std::log1p(-eps))).exp();
      for (const double g : kGpNoiseRatios) {
        Matrix r = corr;
        r.diagonal().array() += g + kJitter;
        const Eigen::LLT<Matrix> llt(r);
        if (llt.info() != Eigen::Success) continue;
        const double q = y.dot(llt.solve(y));
        const double s2 = std::max(q / nd, kMinVariance);
        // log N(y; 0, s2 R) = -q / (2 s2) - n/2 log s2 - 1/2 log|R| - n/2 log 2 pi.
        const double lml =
            -0.5 * q / s2 - 0.5 * nd * std::log(s2) - 0.5 * log_det(llt) - 0.5 * nd * kLog2Pi;
        if (lml > best_lml) {
          best_lml = lml;
          best = GpKernel{.lengthscale = l, .variance = s2, .epsilon = eps, .noise = g * s2};
          found = true;
        }
      }
    }
  }
  if (!found) {
    throw Error("paramwin: GP: no kernel of the grid gives a positive definite covariance for " +
                std::to_string(n) + " observations");
  }
  return best;
}

}  // namespace paramwin::detail
