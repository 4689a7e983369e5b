// Soak: every rank publishes as fast as it can on four windows (shm and rma transports,
// native, bfloat16 and float16 wire formats) while pulling one or two random donors from
// each. Layers of very different sizes sit side by side (0 elements, a 0-dim scalar, one
// float64, an odd-sized one, a 2 MiB one). Every pull is verified element by element against
// the version-stamped data the donors publish: one donor must match its reported version
// exactly (else: torn), two donors must give exactly the average of their two reported
// versions (else: wrong average).
//
// Length: PARAMWIN_SOAK_SECONDS (default 3; the long run in docs/reliability.md uses 600).
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kBig = std::size_t{1} << 19;  // 524288 float32 = 2 MiB

pw::Layout soak_layout() {
  pw::Layout l;
  l.add("empty", std::size_t{0});
  l.add("scalar", std::vector<std::size_t>{});
  l.add("one", std::size_t{1}, pw::DType::float64);
  l.add("odd", std::size_t{4099});
  l.add("big", kBig);
  l.add("tail", std::size_t{3}, pw::DType::float64);
  return l;
}

/// The stamp element i of layer l of rank r carries at version v is (start + i) mod m + off,
/// exactly representable in the wire format (float32 layers only are narrowed by
/// bfloat16/float16 wires: integers up to 256 resp. 2048 are exact there). It changes with
/// every version, so a snapshot that mixes two versions matches neither.
struct Pattern {
  std::uint64_t m;
  std::uint64_t start;
  double off;
  Pattern(pw::WireFormat wire, pw::DType dtype, int r, std::uint64_t v, std::size_t l) {
    const auto ur = static_cast<std::uint64_t>(r);
    std::uint64_t ranks = 256;
    m = 65536;  // < 2^24 with the rank offset: exact in float32
    if (dtype == pw::DType::float32 && wire == pw::WireFormat::bfloat16) {
      m = 64;  // <= 255
      ranks = 4;
    } else if (dtype == pw::DType::float32 && wire == pw::WireFormat::float16) {
      m = 256;  // <= 2047
      ranks = 8;
    }
    start = (v * 31 + l * 7) % m;
    off = static_cast<double>((ur % ranks) * m);
  }
  /// Calls f(i, value) for i in [0, n) without a division per element.
  template <class F>
  void each(std::size_t n, F&& f) const {
    std::uint64_t c = start;
    for (std::size_t i = 0; i < n; ++i) {
      f(i, static_cast<double>(c) + off);
      if (++c == m) c = 0;
    }
  }
};

/// The caller's copy of the parameters: float32 and float64 layers.
struct Params {
  pw::Layout layout;
  std::vector<std::vector<float>> f;
  std::vector<std::vector<double>> d;
  explicit Params(const pw::Layout& lay) : layout(lay) {
    for (const pw::LayerSpec& s : layout.layers()) {
      f.emplace_back(s.dtype == pw::DType::float32 ? s.count : 0);
      d.emplace_back(s.dtype == pw::DType::float64 ? s.count : 0);
    }
  }
  void fill(pw::WireFormat wire, int rank, std::uint64_t v) {
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const Pattern p(wire, layout[l].dtype, rank, v, l);
      if (layout[l].dtype == pw::DType::float32) {
        p.each(f[l].size(), [&](std::size_t i, double x) { f[l][i] = static_cast<float>(x); });
      } else {
        p.each(d[l].size(), [&](std::size_t i, double x) { d[l][i] = x; });
      }
    }
  }
  std::vector<pw::LayerRef> refs() {
    std::vector<pw::LayerRef> r;
    for (std::size_t l = 0; l < layout.size(); ++l) {
      if (layout[l].dtype == pw::DType::float32) r.emplace_back(f[l]);
      else r.emplace_back(d[l]);
    }
    return r;
  }
  std::vector<pw::ConstLayerRef> crefs() const {
    std::vector<pw::ConstLayerRef> r;
    for (std::size_t l = 0; l < layout.size(); ++l) {
      if (layout[l].dtype == pw::DType::float32) r.emplace_back(std::span<const float>(f[l]));
      else r.emplace_back(std::span<const double>(d[l]));
    }
    return r;
  }
  /// True when every element is the (exact) mean of the donors' stamps at their versions.
  bool matches(pw::WireFormat wire, const std::vector<int>& donors,
               const std::vector<std::uint64_t>& versions) const {
    const double k = static_cast<double>(donors.size());
    std::vector<double> sum;
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const pw::DType t = layout[l].dtype;
      sum.assign(layout[l].count, 0.0);
      for (std::size_t j = 0; j < donors.size(); ++j) {
        Pattern(wire, t, donors[j], versions[j], l).each(sum.size(), [&](std::size_t i, double x) {
          sum[i] += x;
        });
      }
      for (std::size_t i = 0; i < sum.size(); ++i) {
        const double want = sum[i] / k;  // exact: small integers and halves
        const double got = t == pw::DType::float32 ? static_cast<double>(f[l][i]) : d[l][i];
        if (got != want) return false;
      }
    }
    return true;
  }
};

struct Lane {
  pw::Transport transport;
  pw::WireFormat wire;
  const char* name;
  pw::Landing landing = pw::Landing::automatic;
};

// The direct lanes land pinned RMA reads in the output: rma/direct straight (one donor,
// native wire) or through chunk buffers (two donors), rma/bf16/direct always through chunk
// buffers (widened into the output as they land); shm/direct is the same-node path.
constexpr Lane kLanes[] = {
    {pw::Transport::shm, pw::WireFormat::native, "shm/native"},
    {pw::Transport::rma, pw::WireFormat::native, "rma/native"},
    {pw::Transport::shm, pw::WireFormat::bfloat16, "shm/bfloat16"},
    {pw::Transport::rma, pw::WireFormat::float16, "rma/float16"},
    {pw::Transport::rma, pw::WireFormat::native, "rma/direct", pw::Landing::direct},
    {pw::Transport::rma, pw::WireFormat::bfloat16, "rma/bf16/direct", pw::Landing::direct},
    {pw::Transport::shm, pw::WireFormat::native, "shm/direct", pw::Landing::direct},
};
constexpr std::size_t kLaneCount = std::size(kLanes);

double soak_seconds() {
  double s = 3.0;
  if (pw::test::world_rank() == 0) {
    if (const char* env = std::getenv("PARAMWIN_SOAK_SECONDS"); env != nullptr && *env != '\0') {
      s = std::strtod(env, nullptr);
    }
  }
  MPI_Bcast(&s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return s;
}

TEST(Soak, EveryRankPublishesAndPullsEveryPullVerified) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const double seconds = soak_seconds();
  const pw::Layout layout = soak_layout();

  // Named (the lane): the lanes' windows of one layout live at once over the same ranks.
  std::vector<pw::ParameterWindow<>> wins;
  for (const Lane& lane : kLanes) {
    wins.emplace_back(MPI_COMM_WORLD, layout,
                      pw::WindowOptions{.transport = lane.transport,
                                        .wire = lane.wire,
                                        .name = std::string("soak ") + lane.name});
  }
  Params own(layout);
  Params out(layout);
  for (std::size_t w = 0; w < kLaneCount; ++w) {
    own.fill(kLanes[w].wire, rank, 1);
    ASSERT_TRUE(wins[w].publish(own.crefs()).published);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // Per lane: pulls verified, torn (k = 1 mismatch), wrong averages (k = 2 mismatch),
  // versions that went backwards for a donor, two-donor pulls, bytes, publishes, skips.
  enum { kVerified, kTorn, kWrongAvg, kBackwards, kPairs, kBytes, kPublishes, kSkipped, kN };
  std::vector<long long> counts(kLaneCount * kN, 0);
  auto at = [&](std::size_t w, int c) -> long long& {
    return counts[w * kN + static_cast<std::size_t>(c)];
  };
  std::vector<std::uint64_t> last_seen(kLaneCount * static_cast<std::size_t>(n), 0);

  std::mt19937 rng(1234U + static_cast<unsigned>(rank) * 7919U);
  const double t0 = MPI_Wtime();
  for (std::size_t iter = 0; MPI_Wtime() - t0 < seconds; ++iter) {
    const std::size_t w = iter % kLaneCount;
    pw::ParameterWindow<>& win = wins[w];
    const pw::WireFormat wire = kLanes[w].wire;

    own.fill(wire, rank, win.version() + 1);
    const pw::PublishResult pr = win.publish(own.crefs());
    ++at(w, kPublishes);
    at(w, kSkipped) += pr.published ? 0 : 1;

    // One or two distinct random donors other than this rank.
    const int k = n >= 3 ? 1 + static_cast<int>(rng() % 2U) : 1;
    std::vector<int> donors;
    while (static_cast<int>(donors.size()) < k) {
      const int d = static_cast<int>(rng() % static_cast<unsigned>(n));
      if (d != rank && std::find(donors.begin(), donors.end(), d) == donors.end())
        donors.push_back(d);
    }
    const std::vector<pw::LayerRef> refs = out.refs();
    pw::PullOptions opt;
    opt.landing = kLanes[w].landing;
    const pw::PullResult r = win.pull(donors, refs, opt);
    if (kLanes[w].landing == pw::Landing::direct) {
      EXPECT_EQ(r.landing, kLanes[w].transport == pw::Transport::rma ? pw::Landing::direct
                                                                     : pw::Landing::transactional);
    }
    std::vector<std::uint64_t> versions;
    for (std::size_t j = 0; j < donors.size(); ++j) {
      EXPECT_EQ(r.donors[j].rank, donors[j]);
      versions.push_back(r.donors[j].version);
      std::uint64_t& seen =
          last_seen[w * static_cast<std::size_t>(n) + static_cast<std::size_t>(donors[j])];
      at(w, kBackwards) += r.donors[j].version < seen ? 1 : 0;
      seen = std::max(seen, r.donors[j].version);
    }
    at(w, kBytes) += static_cast<long long>(r.bytes);
    if (out.matches(wire, donors, versions)) {
      ++at(w, kVerified);
      at(w, kPairs) += k == 2 ? 1 : 0;
    } else {
      ++at(w, k == 1 ? kTorn : kWrongAvg);
    }
  }
  const double elapsed = MPI_Wtime() - t0;

  // Finish together, still serving RMA readers (MPI_Test progresses MPI).
  MPI_Request done = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  for (int finished = 0; finished == 0;) MPI_Test(&done, &finished, MPI_STATUS_IGNORE);

  std::vector<long long> total(counts.size(), 0);
  MPI_Allreduce(counts.data(), total.data(), static_cast<int>(counts.size()), MPI_LONG_LONG,
                MPI_SUM, MPI_COMM_WORLD);
  double max_elapsed = 0.0;
  MPI_Allreduce(&elapsed, &max_elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  long long verified = 0;
  for (std::size_t w = 0; w < kLaneCount; ++w) {
    const auto get = [&](int c) { return total[w * kN + static_cast<std::size_t>(c)]; };
    verified += get(kVerified);
    EXPECT_EQ(get(kTorn), 0) << kLanes[w].name;
    EXPECT_EQ(get(kWrongAvg), 0) << kLanes[w].name;
    EXPECT_EQ(get(kBackwards), 0) << kLanes[w].name;
    EXPECT_GT(get(kVerified), 0) << kLanes[w].name;
    if (rank == 0) {
      std::printf("[ soak    ] %-15s %8lld pulls verified (%lld two-donor averages), %lld torn, "
                  "%lld wrong averages, %lld backwards; %lld publishes (%lld skipped for pins); "
                  "%.1f MB pulled\n",
                  kLanes[w].name, get(kVerified), get(kPairs), get(kTorn), get(kWrongAvg),
                  get(kBackwards), get(kPublishes), get(kSkipped),
                  static_cast<double>(get(kBytes)) / 1e6);
    }
  }
  if (rank == 0) {
    std::printf("[ soak    ] %d ranks, %.1f s: %lld pulls verified, %.0f verified pulls/s\n", n,
                max_elapsed, verified, static_cast<double>(verified) / max_elapsed);
  }
}

}  // namespace
