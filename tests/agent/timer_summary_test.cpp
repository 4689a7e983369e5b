// TimerAccumulator: exact count / min / max / mean / total in fixed memory, an exact median up
// to the reservoir's size, a median within the documented rank bound beyond, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "paramwin/event.hpp"
#include "paramwin/timer_summary.hpp"

namespace pw = paramwin;

// Every heap allocation of this test binary is counted, so "memory does not grow" is measured
// rather than assumed: a loop of add()/record() must allocate nothing.
namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

// GCC's -Wmismatched-new-delete sees free() in a delete that gtest's `new TestClass` inlines and
// cannot see that the matching operator new below is malloc(): a false positive (the sanitized
// build's inlining shows it).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*bytes*/) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {

constexpr std::size_t kK = pw::TimerAccumulator::kReservoirSize;

// Fraction of @p sorted strictly below @p x and at most @p x: the rank interval of x.
std::pair<double, double> rank_of(const std::vector<double>& sorted, double x) {
  const auto lo = std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin();
  const auto hi = std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin();
  const auto n = static_cast<double>(sorted.size());
  return {static_cast<double>(lo) / n, static_cast<double>(hi) / n};
}

// A deterministic, scrambled permutation-ish sequence of values in [0, 1).
double scrambled(std::uint64_t i) {
  std::uint64_t z = i * 0x9e3779b97f4a7c15ULL + 12345U;
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 31U;
  return static_cast<double>(z >> 11U) * 0x1.0p-53;
}

TEST(TimerAccumulator, EmptyIsAllZero) {
  const pw::TimerAccumulator a;
  const pw::TimerSummary t = a.summary();
  EXPECT_EQ(t.count, 0U);
  EXPECT_EQ(t.min, 0.0);
  EXPECT_EQ(t.max, 0.0);
  EXPECT_EQ(t.median, 0.0);
  EXPECT_EQ(t.total, 0.0);
  EXPECT_EQ(t.mean, 0.0);
  EXPECT_TRUE(t.median_exact);
  EXPECT_EQ(a.reservoir_capacity(), 0U);  // nothing allocated for a timer that never ran
}

TEST(TimerAccumulator, SmallCountsAreExact) {
  pw::TimerAccumulator a;
  a.add(3.0);
  EXPECT_EQ(a.median(), 3.0);
  a.add(1.0);
  EXPECT_EQ(a.median(), 2.0);  // mean of the two middle ones
  a.add(10.0);
  a.add(2.0);
  const pw::TimerSummary t = a.summary();
  EXPECT_EQ(t.count, 4U);
  EXPECT_EQ(t.min, 1.0);
  EXPECT_EQ(t.max, 10.0);
  EXPECT_EQ(t.median, 2.5);
  EXPECT_EQ(t.total, 16.0);
  EXPECT_EQ(t.mean, 4.0);
  EXPECT_TRUE(t.median_exact);
  // Negative values and NaN (ignored).
  a.add(-5.0);
  a.add(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(a.count(), 5U);
  EXPECT_EQ(a.min(), -5.0);
  EXPECT_EQ(a.median(), 2.0);
}

TEST(TimerAccumulator, MedianExactUpToTheReservoirSize) {
  for (const std::size_t n : {kK - 1, kK}) {
    pw::TimerAccumulator a;
    std::vector<double> all;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = scrambled(i);
      a.add(x);
      all.push_back(x);
    }
    std::sort(all.begin(), all.end());
    const double expected = n % 2 == 1 ? all[n / 2] : (all[n / 2 - 1] + all[n / 2]) / 2.0;
    EXPECT_EQ(a.median(), expected) << n;
    EXPECT_TRUE(a.median_exact());
    EXPECT_EQ(a.reservoir_size(), n);
  }
}

TEST(TimerAccumulator, MillionSamplesExactStatsFixedMemory) {
  constexpr std::size_t kN = 1'000'000;
  pw::TimerAccumulator a;
  const std::size_t before_first = g_allocations.load();
  a.add(0.5);
  EXPECT_EQ(g_allocations.load(), before_first + 1);  // the counter works: one allocation
  const std::size_t capacity = a.reservoir_capacity();
  EXPECT_EQ(capacity, kK);
  a.clear();
  EXPECT_EQ(a.count(), 0U);
  // Integers: every partial sum is exact in a double, so total and mean must be exact.
  const std::size_t allocations = g_allocations.load();
  for (std::size_t i = 1; i <= kN; ++i) {
    a.add(static_cast<double>((i * 7919U) % kN + 1));  // a permutation of 1..kN
  }
  EXPECT_EQ(g_allocations.load(), allocations);  // not one allocation in a million samples
  EXPECT_EQ(a.reservoir_capacity(), capacity);
  EXPECT_EQ(a.count(), kN);
  EXPECT_EQ(a.min(), 1.0);
  EXPECT_EQ(a.max(), static_cast<double>(kN));
  EXPECT_EQ(a.total(), static_cast<double>(kN) * static_cast<double>(kN + 1) / 2.0);
  EXPECT_EQ(a.mean(), static_cast<double>(kN + 1) / 2.0);
  EXPECT_FALSE(a.median_exact());
  EXPECT_EQ(a.reservoir_size(), kK);
}

TEST(TimerAccumulator, CompensatedTotalOfTimerLikeSamples) {
  // 1e6 samples of ~1 us: a naive running sum drifts; the compensated one matches a long
  // double reference to within a couple of ulps.
  pw::TimerAccumulator a;
  long double reference = 0.0L;
  for (std::uint64_t i = 0; i < 1'000'000; ++i) {
    const double x = 1e-6 * (1.0 + scrambled(i));
    a.add(x);
    reference += static_cast<long double>(x);
  }
  const auto ref = static_cast<double>(reference);
  EXPECT_NEAR(a.total(), ref, 4 * std::numeric_limits<double>::epsilon() * ref);
  EXPECT_NEAR(a.mean(), ref / 1e6, 4 * std::numeric_limits<double>::epsilon() * ref / 1e6);
}

// The documented bound: the estimate's rank lies within 0.5 +/- 0.05 (probability > 98.8%
// per run; deterministic here, so it either always holds for these inputs or never).
TEST(TimerAccumulator, LargeCountMedianWithinTheStatedRankBound) {
  constexpr double kEps = 0.05;
  constexpr std::size_t kN = 200'000;
  enum class Order { ascending, descending, scrambled, heavy_tail };
  for (const Order order :
       {Order::ascending, Order::descending, Order::scrambled, Order::heavy_tail}) {
    pw::TimerAccumulator a;
    std::vector<double> all;
    all.reserve(kN);
    for (std::size_t i = 0; i < kN; ++i) {
      double x = 0.0;
      switch (order) {
        case Order::ascending: x = static_cast<double>(i); break;
        case Order::descending: x = static_cast<double>(kN - i); break;
        case Order::scrambled: x = scrambled(i); break;
        // Timer-like: mostly ~1 us, 1% stalls of ~10 ms.
        case Order::heavy_tail: x = i % 100 == 0 ? 1e-2 : 1e-6 * (1.0 + scrambled(i)); break;
      }
      a.add(x);
      all.push_back(x);
    }
    std::sort(all.begin(), all.end());
    const auto [lo, hi] = rank_of(all, a.median());
    EXPECT_LE(lo, 0.5 + kEps) << static_cast<int>(order);
    EXPECT_GE(hi, 0.5 - kEps) << static_cast<int>(order);
    EXPECT_FALSE(a.median_exact());
  }
}

TEST(TimerAccumulator, Deterministic) {
  auto run = [](std::uint64_t seed) {
    pw::TimerAccumulator a(seed);
    for (std::uint64_t i = 0; i < 50'000; ++i) a.add(scrambled(i));
    return a.summary();
  };
  const pw::TimerSummary x = run(pw::TimerAccumulator::kDefaultSeed);
  const pw::TimerSummary y = run(pw::TimerAccumulator::kDefaultSeed);
  EXPECT_EQ(x.median, y.median);
  EXPECT_EQ(x.total, y.total);
  // clear() restarts the stream: the same samples again give the same median.
  pw::TimerAccumulator a;
  for (std::uint64_t i = 0; i < 50'000; ++i) a.add(scrambled(i));
  const double first = a.median();
  a.clear();
  for (std::uint64_t i = 0; i < 50'000; ++i) a.add(scrambled(i));
  EXPECT_EQ(a.median(), first);
  EXPECT_EQ(first, x.median);
  // Copies carry the reservoir and keep it fixed-size.
  const pw::TimerAccumulator copy = a;
  EXPECT_EQ(copy.median(), first);
  EXPECT_EQ(copy.reservoir_capacity(), kK);
}

TEST(AgentStatsMemory, TimersDoNotGrowWithSteps) {
  pw::AgentStats s;
  pw::StepEvent e;
  e.published = true;
  e.seconds.publish = 2e-6;
  s.record(e);  // allocates the reservoirs of the timers that ran (decide, publish)
  const std::size_t allocations = g_allocations.load();
  for (int i = 1; i < 300'000; ++i) {
    e.seconds.decide = 1e-6 * static_cast<double>(i % 1000);
    s.record(e);
  }
  EXPECT_EQ(g_allocations.load(), allocations);  // constant memory however long the run
  const pw::TimerSummary d = s.timer(pw::Phase::decide);
  EXPECT_EQ(d.count, 300'000U);
  EXPECT_EQ(d.min, 0.0);
  EXPECT_EQ(d.max, 1e-6 * 999.0);
  EXPECT_NEAR(d.mean, 499.5e-6, 1e-15);
  EXPECT_NEAR(d.median, 499.5e-6, 0.05 * 1000e-6);  // the rank bound on a uniform 0..999 us
  EXPECT_FALSE(d.median_exact);
  EXPECT_EQ(s.timer(pw::Phase::publish).median, 2e-6);
  EXPECT_EQ(s.timer(pw::Phase::pull).count, 0U);
}

}  // namespace
