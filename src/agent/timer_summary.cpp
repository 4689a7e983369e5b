// TimerAccumulator: exact count / min / max / compensated total, and a fixed-size reservoir
// for the median (include/paramwin/timer_summary.hpp states the error bound).
#include "paramwin/timer_summary.hpp"

#include <algorithm>
#include <cmath>

namespace paramwin {

std::uint64_t TimerAccumulator::next_random() noexcept {
  // SplitMix64 (Steele, Lea, Flood 2014): a full-period 64-bit stream, good enough to pick
  // reservoir slots and cheap enough to draw once per sample.
  std::uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

void TimerAccumulator::add(double sample) {
  if (std::isnan(sample)) {
    return;  // no place in an order; would break the median's nth_element
  }
  if (reservoir_.empty()) {
    reservoir_.resize(kReservoirSize);  // the one allocation, at the first sample
  }
  if (count_ == 0) {
    min_ = sample;
    max_ = sample;
  } else {
    min_ = std::min(min_, sample);
    max_ = std::max(max_, sample);
  }
  // Neumaier's compensated sum: keeps the bits of the smaller addend that sum_ drops.
  const double t = sum_ + sample;
  if (std::abs(sum_) >= std::abs(sample)) {
    compensation_ += (sum_ - t) + sample;
  } else {
    compensation_ += (sample - t) + sum_;
  }
  sum_ = t;

  ++count_;
  if (count_ <= kReservoirSize) {
    reservoir_[count_ - 1] = sample;
  } else {
    // Algorithm R: the new sample replaces a uniformly chosen slot with probability K / n.
    // The modulo's bias is below n / 2^64: negligible for any count a run can reach.
    const std::uint64_t j = next_random() % static_cast<std::uint64_t>(count_);
    if (j < kReservoirSize) {
      reservoir_[static_cast<std::size_t>(j)] = sample;
    }
  }
}

void TimerAccumulator::clear() noexcept {
  rng_ = seed_;
  count_ = 0;
  min_ = 0.0;
  max_ = 0.0;
  sum_ = 0.0;
  compensation_ = 0.0;
}

double TimerAccumulator::mean() const noexcept {
  return count_ == 0 ? 0.0 : total() / static_cast<double>(count_);
}

std::size_t TimerAccumulator::reservoir_size() const noexcept {
  return std::min(count_, kReservoirSize);
}

double TimerAccumulator::median() const {
  const std::size_t n = reservoir_size();
  if (n == 0) {
    return 0.0;
  }
  std::vector<double> s(reservoir_.begin(), reservoir_.begin() + static_cast<std::ptrdiff_t>(n));
  const std::size_t mid = n / 2;
  const auto mid_it = s.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(s.begin(), mid_it, s.end());
  if (n % 2 == 1) {
    return *mid_it;
  }
  // The lower middle one is the largest of the elements before mid.
  const double lower = *std::max_element(s.begin(), mid_it);
  return (lower + *mid_it) / 2.0;
}

TimerSummary TimerAccumulator::summary() const {
  TimerSummary t;
  t.count = count_;
  t.min = min();
  t.max = max();
  t.total = total();
  t.mean = mean();
  t.median = median();
  t.median_exact = median_exact();
  return t;
}

}  // namespace paramwin
