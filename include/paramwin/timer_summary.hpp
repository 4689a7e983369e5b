#pragma once
/// @file timer_summary.hpp
/// TimerSummary (count / min / median / max / total / mean of a timer) and TimerAccumulator,
/// which builds one in constant memory however many samples it is given: the agent's phase
/// timers run for days, so keeping every sample is not an option.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace paramwin {

/// min / median / max / total of one phase timer, in seconds, over the steps it ran.
struct TimerSummary {
  std::size_t count = 0;  ///< samples
  double min = 0.0;       ///< smallest sample
  /// Median sample (mean of the two middle ones for even counts). Exact while `count` is at
  /// most TimerAccumulator::kReservoirSize, an estimate beyond (see TimerAccumulator).
  double median = 0.0;
  double max = 0.0;          ///< largest sample
  double total = 0.0;        ///< sum of the samples
  double mean = 0.0;         ///< total / count (0 without samples)
  bool median_exact = true;  ///< false when `median` is the reservoir's estimate
};

/// Accumulates samples (e.g. seconds) into a TimerSummary in fixed memory.
///
/// count, min, max, total and mean are exact: total is a compensated (Neumaier) sum, so it
/// stays accurate to a few ulps over billions of samples. The median comes from a uniform
/// random sample of kReservoirSize values (reservoir sampling, algorithm R: Knuth, TAOCP
/// 3.4.2; Vitter 1985) drawn with a seeded SplitMix64 stream, so the same samples in the same
/// order always give the same summary:
///  - while count <= kReservoirSize every sample is kept and the median is exact;
///  - beyond, the reported median is the median of the reservoir. Its rank among all the
///    samples (the fraction of samples below it) lies within 0.5 +/- eps with probability at
///    least 1 - 2 exp(-2 kReservoirSize eps^2) (Hoeffding, which holds for sampling without
///    replacement): for kReservoirSize = 1024, within 0.5 +/- 0.05 with probability > 98.8%,
///    within 0.5 +/- 0.06 with probability > 99.8%; the typical rank error is 0.5 / sqrt(1024)
///    = 1.6%. The bound is on the rank, whatever the distribution of the values.
///
/// Memory: the object itself plus kReservoirSize doubles (8 KiB), allocated at the first
/// sample and never grown. NaN samples are ignored (they have no order). Not thread-safe.
class TimerAccumulator {
 public:
  /// Samples kept for the median; the median is exact up to this many samples.
  static constexpr std::size_t kReservoirSize = 1024;
  /// Seed of the reservoir's random stream when none is given.
  static constexpr std::uint64_t kDefaultSeed = 0x5eed'7157'0a11'cafeULL;

  /// An empty accumulator using kDefaultSeed.
  TimerAccumulator() noexcept = default;
  /// An empty accumulator whose reservoir draws from a stream seeded with @p seed.
  explicit TimerAccumulator(std::uint64_t seed) noexcept : seed_(seed), rng_(seed) {}

  /// Adds one sample (ignored when NaN).
  void add(double sample);
  /// Forgets every sample; the reservoir's stream restarts from the seed.
  void clear() noexcept;

  /// Samples added (NaN ones excluded).
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// Smallest sample (0 without samples).
  [[nodiscard]] double min() const noexcept { return count_ == 0 ? 0.0 : min_; }
  /// Largest sample (0 without samples).
  [[nodiscard]] double max() const noexcept { return count_ == 0 ? 0.0 : max_; }
  /// Sum of the samples, compensated.
  [[nodiscard]] double total() const noexcept { return sum_ + compensation_; }
  /// total() / count() (0 without samples).
  [[nodiscard]] double mean() const noexcept;
  /// Median: exact while count() <= kReservoirSize, otherwise the reservoir's (see above).
  [[nodiscard]] double median() const;
  /// True while the median is exact (count() <= kReservoirSize).
  [[nodiscard]] bool median_exact() const noexcept { return count_ <= kReservoirSize; }
  /// Everything above in one struct.
  [[nodiscard]] TimerSummary summary() const;
  /// Samples currently held for the median: min(count(), kReservoirSize).
  [[nodiscard]] std::size_t reservoir_size() const noexcept;
  /// Doubles allocated for the reservoir: 0 before the first sample, then kReservoirSize
  /// for good (clear() keeps the allocation).
  [[nodiscard]] std::size_t reservoir_capacity() const noexcept { return reservoir_.capacity(); }

 private:
  std::uint64_t next_random() noexcept;

  std::uint64_t seed_ = kDefaultSeed;
  std::uint64_t rng_ = kDefaultSeed;  // SplitMix64 state
  std::size_t count_ = 0;
  double min_ = 0.0;
  double max_ = 0.0;
  double sum_ = 0.0;
  double compensation_ = 0.0;        // Neumaier: the low-order bits sum_ lost
  std::vector<double> reservoir_{};  // sized kReservoirSize at the first sample, never grown
};

}  // namespace paramwin
