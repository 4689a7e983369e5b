// AveragingAgent: every gossip mix equals the exact weighted mix of the peer versions it
// recorded (every rank publishes known values, gathered at the end); consensus for every
// topology with training off; paused and silent peers skipped, never waited for; warm-up and
// cool-down are exact allreduce means; background averaging keeps the local progress (read
// inline or on the worker thread, whose reads never make a step wait and are dropped safely by
// pause, finish and destruction); bad input throws on every rank with nothing changed.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kW = 8;  // float32 layer
constexpr std::size_t kB = 3;  // float64 layer
constexpr std::size_t kN = kW + kB;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW);
  l.add("b", kB, pw::DType::float64);
  return l;
}

/// One agent's parameters.
struct Params {
  std::vector<float> w = std::vector<float>(kW);
  std::vector<double> b = std::vector<double>(kB);

  std::vector<pw::LayerRef> refs() { return {w, b}; }
  std::vector<pw::ConstLayerRef> crefs() const { return {w, b}; }
  [[nodiscard]] std::vector<double> flat() const {
    std::vector<double> out(w.begin(), w.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
  void set(const std::vector<double>& v) {
    for (std::size_t i = 0; i < kW; ++i) {
      w[i] = static_cast<float>(v[i]);
    }
    for (std::size_t i = 0; i < kB; ++i) {
      b[i] = v[kW + i];
    }
  }
  void init(int rank) {
    for (std::size_t i = 0; i < kN; ++i) {
      const double v = std::fmod(0.137 * (rank + 1) + 0.071 * static_cast<double>(i), 1.0);
      if (i < kW) {
        w[i] = static_cast<float>(v);
      } else {
        b[i - kW] = v;
      }
    }
  }
  /// Local "training": a known, rank- and step-dependent move.
  void train(int rank, std::int64_t step) {
    for (std::size_t i = 0; i < kN; ++i) {
      const double d =
          0.01 * std::sin(0.3 * static_cast<double>(step) + rank + 0.5 * static_cast<double>(i));
      if (i < kW) {
        w[i] = static_cast<float>(w[i] + d);
      } else {
        b[i - kW] += d;
      }
    }
  }
};

bool close(double got, double want, std::size_t i) {
  const double tol = i < kW ? 2e-6 * std::max(1.0, std::abs(want)) : 1e-12;
  return std::abs(got - want) <= tol;
}

/// Every rank's published values by (rank, version), with the stamp, gathered everywhere.
struct Published {
  std::map<std::pair<int, std::uint64_t>, std::pair<std::uint64_t, std::vector<double>>> table;

  void add(int rank, std::uint64_t version, std::uint64_t stamp, const Params& p) {
    table[{rank, version}] = {stamp, p.flat()};
  }
  void gather() {
    std::vector<double> mine;
    for (const auto& [key, value] : table) {
      mine.push_back(key.first);
      mine.push_back(static_cast<double>(key.second));
      mine.push_back(static_cast<double>(value.first));
      mine.insert(mine.end(), value.second.begin(), value.second.end());
    }
    const std::vector<double> all = pw::test::allgather_doubles(mine);
    for (std::size_t at = 0; at < all.size(); at += 3 + kN) {
      std::vector<double> v(all.begin() + static_cast<std::ptrdiff_t>(at + 3),
                            all.begin() + static_cast<std::ptrdiff_t>(at + 3 + kN));
      table[{static_cast<int>(all[at]), static_cast<std::uint64_t>(all[at + 1])}] =
          {static_cast<std::uint64_t>(all[at + 2]), v};
    }
  }
};

/// One step as the test saw it.
struct Record {
  std::vector<double> before;  // after training, before step()
  std::vector<double> after;
  pw::AveragingRound round;
};

/// Trains and steps @p steps times (no barrier: the ranks interleave freely), recording every
/// step and every publish.
std::vector<Record> run(pw::AveragingAgent& agent, Params& p, Published& published, int steps) {
  const int rank = agent.rank();
  std::vector<Record> records;
  for (int t = 1; t <= steps; ++t) {
    p.train(rank, t);
    Record rec{.before = p.flat(), .after = {}, .round = {}};
    rec.round = agent.step(p.refs());
    rec.after = p.flat();
    if (rec.round.published) {
      published.add(rank, rec.round.version, static_cast<std::uint64_t>(t), p);
    }
    records.push_back(std::move(rec));
  }
  return records;
}

/// Checks one inline gossip round against the published table; returns whether peers mixed.
bool check_inline_mix(const Record& rec, const Published& published) {
  std::vector<double> want(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    want[i] = rec.round.self_weight * rec.before[i];
  }
  double total = rec.round.self_weight;
  for (const pw::AveragingPeer& peer : rec.round.peers) {
    if (peer.skipped != pw::SkipReason::none) {
      EXPECT_EQ(peer.weight, 0.0);
      continue;
    }
    const auto it = published.table.find({peer.rank, peer.version});
    EXPECT_NE(it, published.table.end()) << "rank " << peer.rank << " v" << peer.version;
    if (it == published.table.end()) {
      return false;
    }
    EXPECT_EQ(peer.stamp, it->second.first) << "stamp of rank " << peer.rank;
    for (std::size_t i = 0; i < kN; ++i) {
      want[i] += peer.weight * it->second.second[i];
    }
    total += peer.weight;
  }
  EXPECT_NEAR(total, 1.0, 1e-12) << "weights of step " << rec.round.step;
  for (std::size_t i = 0; i < kN; ++i) {
    EXPECT_TRUE(close(rec.after[i], want[i], i)) << "step " << rec.round.step << " element " << i
                                                 << ": " << rec.after[i] << " != " << want[i];
  }
  return rec.round.applied;
}

/// Runs @p options for 30 steps with training on and checks every step against the table.
int exact_mixes(const pw::AveragingOptions& options) {
  const int rank = pw::test::world_rank();
  Params p;
  p.init(rank);
  Published published;
  int mixed = 0;
  {
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), options);
    EXPECT_EQ(agent.background_inline_reason(), "background averaging is off");
    const pw::PublishResult first = agent.publish(p.crefs());
    published.add(rank, first.version, 0, p);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<Record> records = run(agent, p, published, 30);
    MPI_Barrier(MPI_COMM_WORLD);  // every publish done before the table is gathered
    published.gather();
    for (const Record& rec : records) {
      if (rec.round.kind == pw::RoundKind::gossip && rec.round.applied) {
        mixed += check_inline_mix(rec, published) ? 1 : 0;
      } else if (rec.round.kind == pw::RoundKind::none) {
        EXPECT_EQ(rec.after, rec.before) << "step " << rec.round.step << " changed without a round";
      }
      const pw::Transport want = options.window.transport == pw::Transport::rma
                                     ? pw::Transport::rma
                                     : pw::Transport::shm;  // one node: shared memory
      for (const pw::AveragingPeer& peer : rec.round.peers) {
        if (peer.skipped == pw::SkipReason::none) {
          EXPECT_EQ(peer.transport, want) << "rank " << peer.rank;
        }
      }
      if (rec.round.kind == pw::RoundKind::gossip && options.self_weight >= 0.0) {
        EXPECT_EQ(rec.round.self_weight, options.self_weight);
      }
    }
  }
  return mixed;
}

TEST(AveragingExact, EveryMixEqualsTheWeightedMixOfTheRecordedPeerVersions) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  std::vector<pw::AveragingOptions> cases(6);
  cases[1].topology = pw::Topology::random_peers(1, 7);
  cases[2].topology = pw::Topology::ring_peers();
  cases[3].topology = pw::Topology::exponential_peers();
  cases[3].interval = 3;
  cases[4].topology = pw::Topology::ring_peers();  // weights given: self 0.4, peers 0.6
  cases[4].self_weight = 0.4;
  cases[4].peer_weights = n == 2 ? std::vector<double>{0.6} : std::vector<double>{0.2, 0.4};
  cases[5].topology = pw::Topology::custom_peers([](std::int64_t round, int rank, int size) {
    return std::vector<int>{static_cast<int>((rank + 1 + round % (size - 1)) % size)};
  });
  cases[5].self_weight = 0.25;
  cases.emplace_back();  // every read over RMA (the peers' steps let MPI progress)
  cases.back().window.transport = pw::Transport::rma;
  cases.back().timeout_seconds = 30.0;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const int mixed = exact_mixes(cases[c]);
    EXPECT_GT(mixed, 0) << "case " << c << " never mixed a peer in";
  }
}

TEST(AveragingExact, GivenWeightsAreSplitInTheirProportionsAndNormalisedOnlyWhenAsked) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  // Rank r reads r + 1 and r + 2 (one peer, r + 1, on 2 ranks).
  std::vector<std::vector<int>> lists(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    lists[static_cast<std::size_t>(r)] = {(r + 1) % n};
    if (n > 2) {
      lists[static_cast<std::size_t>(r)].push_back((r + 2) % n);
    }
  }
  pw::AveragingOptions o;
  o.topology = pw::Topology::neighbour_lists(lists);
  o.self_weight = 1.0;  // with normalize_weights: 1 : 1 : 2 -> 0.25, 0.25, 0.5 (1 : 3 on 2 ranks)
  o.peer_weights = n > 2 ? std::vector<double>{1.0, 2.0} : std::vector<double>{3.0};
  o.normalize_weights = true;
  const int rank = pw::test::world_rank();
  Params p;
  p.init(rank);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  const pw::AveragingRound r = agent.step(p.refs());
  ASSERT_EQ(r.kind, pw::RoundKind::gossip);
  ASSERT_TRUE(r.applied);
  EXPECT_DOUBLE_EQ(r.self_weight, 0.25);
  ASSERT_EQ(r.peers.size(), n > 2 ? 2U : 1U);
  EXPECT_EQ(r.peers[0].rank, (rank + 1) % n);
  if (n > 2) {
    EXPECT_DOUBLE_EQ(r.peers[0].weight, 0.25);
    EXPECT_DOUBLE_EQ(r.peers[1].weight, 0.5);
  } else {
    EXPECT_DOUBLE_EQ(r.peers[0].weight, 0.75);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- consensus with training off -------------------------------------------------------------

/// Largest spread (max - min over the ranks) of any element (a collective).
double spread(const Params& p) { return pw::test::spread_over_ranks(p.flat()); }

/// Mean over ranks and elements.
double population_mean(const Params& p) {
  const std::vector<double> mine = p.flat();
  double sum = 0.0;
  for (const double v : mine) {
    sum += v;
  }
  double all = 0.0;
  MPI_Allreduce(&sum, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return all / (static_cast<double>(kN) * pw::test::world_size());
}

/// Steps (training off; the spread after each, a collective, so every rank's step is done)
/// until every element agrees within 1e-6 on every rank; returns the rounds taken (-1: not
/// within @p limit).
int rounds_to_consensus(const pw::AveragingOptions& o, int limit, double& drift) {
  Params p;
  p.init(pw::test::world_rank());
  const double mean0 = population_mean(p);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_GT(spread(p), 0.1);
  for (int t = 1; t <= limit; ++t) {
    (void)agent.step(p.refs());
    if (spread(p) <= 1e-6) {
      drift = population_mean(p) - mean0;
      return t;
    }
  }
  return -1;
}

TEST(AveragingConsensus, EveryTopologyReachesOneValueWithin1e6) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  std::vector<std::vector<int>> directed(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    directed[static_cast<std::size_t>(r)] = {(r + 1) % n};
  }
  const std::vector<std::pair<std::string, pw::Topology>> topologies =
      {{"all", pw::Topology::all_peers()},
       {"random k=1", pw::Topology::random_peers(1, 3)},
       {"ring", pw::Topology::ring_peers()},
       {"exponential", pw::Topology::exponential_peers()},
       {"neighbours (directed ring)", pw::Topology::neighbour_lists(directed)},
       {"custom", pw::Topology::custom_peers([](std::int64_t round, int rank, int size) {
          return std::vector<int>{static_cast<int>((rank + 1 + round % (size - 1)) % size)};
        })}};
  for (const auto& [name, topology] : topologies) {
    pw::AveragingOptions o;
    o.topology = topology;
    double drift = 0.0;
    const int rounds = rounds_to_consensus(o, 400, drift);
    EXPECT_GT(rounds, 0) << name << " did not reach consensus in 400 rounds";
    if (pw::test::world_rank() == 0) {
      std::printf("consensus np%d %-28s %4d rounds, population mean drift %+.3e\n", n, name.c_str(),
                  rounds, drift);
    }
  }
}

// --- skipped peers --------------------------------------------------------------------------

TEST(AveragingSkip, APausedPeerIsSkippedAndReadAgainAfterResume) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int quiet = n - 1;
  Params p;
  p.init(rank);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), {});
  (void)agent.publish(p.crefs());
  if (rank == quiet) {
    agent.pause();
    EXPECT_TRUE(agent.is_paused());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 0; t < 3; ++t) {
    const std::vector<double> before = p.flat();
    const pw::AveragingRound r = agent.step(p.refs());
    if (rank == quiet) {
      EXPECT_TRUE(r.paused);
      EXPECT_EQ(r.kind, pw::RoundKind::none);
      EXPECT_FALSE(r.published);
      EXPECT_EQ(p.flat(), before);  // reads nobody
    } else {
      for (const pw::AveragingPeer& peer : r.peers) {
        EXPECT_EQ(peer.skipped == pw::SkipReason::paused, peer.rank == quiet) << peer.rank;
      }
      if (n == 2) {
        EXPECT_FALSE(r.applied);
        EXPECT_NE(r.note.find("rank 1 paused"), std::string::npos) << r.note;
        EXPECT_EQ(p.flat(), before);
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == quiet) {
    agent.resume();
    EXPECT_TRUE(agent.step(p.refs()).published);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != quiet) {
    const pw::AveragingRound r = agent.step(p.refs());
    EXPECT_TRUE(r.applied);
    for (const pw::AveragingPeer& peer : r.peers) {
      EXPECT_EQ(peer.skipped, pw::SkipReason::none) << peer.rank;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingSkip, APeerThatStopsPublishingIsSkippedAsStaleNeverWaitedFor) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int silent = n - 1;
  pw::AveragingOptions o;
  o.stale_steps = 2;
  Params p;
  p.init(rank);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == silent) {
    // Silent: no step, no publish, until every other rank has finished its steps (they send
    // it a message only then: a step that waited for this rank would never return).
    for (int r = 0; r < n - 1; ++r) {
      int done = 0;
      MPI_Recv(&done, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  } else {
    for (int t = 1; t <= 6; ++t) {
      const pw::AveragingRound r = agent.step(p.refs());
      for (const pw::AveragingPeer& peer : r.peers) {
        if (peer.rank == silent) {
          // Seen first at step 1 (version 1); unchanged for 2 of this agent's steps: stale.
          EXPECT_EQ(peer.skipped, t >= 3 ? pw::SkipReason::stale : pw::SkipReason::none)
              << "step " << t;
        }
      }
    }
    const int done = 1;
    MPI_Send(&done, 1, MPI_INT, silent, 7, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- synchronous warm-up and cool-down ------------------------------------------------------

TEST(AveragingSync, WarmupAndCooldownStepsAreTheExactAllreduceMean) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.warmup_steps = 3;
  o.cooldown_steps = 2;
  o.total_steps = 8;
  Params p;
  p.init(rank);
  // The mean every rank must hold, computed from the known values of every rank.
  std::vector<Params> all(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    all[static_cast<std::size_t>(r)].init(r);
  }
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  if (rank == 0) {
    agent.pause();  // synchronous steps are collective: a paused agent still takes part
  }
  for (std::int64_t t = 1; t <= 8; ++t) {
    p.train(rank, t);
    if (t == 4 && rank == 0) {
      agent.resume();
    }
    const pw::AveragingRound r = agent.step(p.refs());
    EXPECT_EQ(r.paused, rank == 0 && t <= 3);
    const bool sync = t <= 3 || t > 6;
    EXPECT_EQ(r.kind, sync ? pw::RoundKind::synchronous : pw::RoundKind::gossip) << "step " << t;
    if (!sync) {
      MPI_Barrier(MPI_COMM_WORLD);
      continue;
    }
    std::vector<double> want(kN, 0.0);
    for (int q = 0; q < n; ++q) {
      std::vector<double> mine = p.flat();
      MPI_Bcast(mine.data(), static_cast<int>(kN), MPI_DOUBLE, q, MPI_COMM_WORLD);
      if (q == 0) {
        want = mine;  // every rank holds the same after a synchronous step
      } else {
        for (std::size_t i = 0; i < kN; ++i) {
          EXPECT_EQ(mine[i], want[i]) << "rank " << q << " differs at " << i;
        }
      }
    }
    if (t <= 3) {  // from the known values: mean of (previous mean or init) + training
      std::vector<double> expect(kN, 0.0);
      for (int q = 0; q < n; ++q) {
        Params& a = all[static_cast<std::size_t>(q)];
        a.train(q, t);
        const std::vector<double> v = a.flat();
        for (std::size_t i = 0; i < kN; ++i) {
          expect[i] += v[i] / n;
        }
      }
      for (int q = 0; q < n; ++q) {
        all[static_cast<std::size_t>(q)].set(expect);
      }
      for (std::size_t i = 0; i < kN; ++i) {
        EXPECT_TRUE(close(want[i], expect[i], i)) << "step " << t << " element " << i;
      }
    }
  }
  const pw::AveragingRound f = agent.finish(p.refs());
  EXPECT_EQ(f.kind, pw::RoundKind::synchronous);
  EXPECT_TRUE(f.published);
  EXPECT_LE(spread(p), 0.0);
}

// --- background averaging ------------------------------------------------------------------

TEST(AveragingBackground, TheCorrectionIsAppliedAtTheNextStepKeepingTheLocalProgress) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.background = true;
  o.background_worker = false;  // read inside step(), applied at the next step
  o.topology = pw::Topology::random_peers(1, 11);
  Params p;
  p.init(rank);
  Published published;
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  EXPECT_EQ(agent.background_inline_reason(), "AveragingOptions::background_worker is false");
  const pw::PublishResult first = agent.publish(p.crefs());
  published.add(rank, first.version, 0, p);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<Record> records = run(agent, p, published, 20);
  MPI_Barrier(MPI_COMM_WORLD);
  published.gather();
  int kept = 0;
  for (std::size_t t = 1; t < records.size(); ++t) {
    const Record& read = records[t - 1];             // the round that read
    const Record& rec = records[t];                  // the step that applied it
    if (read.round.kind == pw::RoundKind::gossip) {  // reported by the step that read it
      EXPECT_FALSE(read.round.overlapped);
      EXPECT_EQ(read.round.read_step, read.round.step);
    }
    EXPECT_EQ(rec.round.background_applied,
              read.round.kind == pw::RoundKind::gossip && read.round.note.empty());
    if (!rec.round.background_applied) {
      continue;
    }
    // own_now + (mix - own_at_read), mix = self * own_at_read + sum w_i peer_i.
    std::vector<double> want = rec.before;
    for (std::size_t i = 0; i < kN; ++i) {
      want[i] -= (1.0 - read.round.self_weight) * read.after[i];
    }
    for (const pw::AveragingPeer& peer : read.round.peers) {
      if (peer.skipped == pw::SkipReason::none) {
        const auto& v = published.table.at({peer.rank, peer.version}).second;
        for (std::size_t i = 0; i < kN; ++i) {
          want[i] += peer.weight * v[i];
        }
      }
    }
    for (std::size_t i = 0; i < kN; ++i) {
      EXPECT_TRUE(close(rec.after[i], want[i], i)) << "step " << t + 1 << " element " << i;
    }
    ++kept;
  }
  EXPECT_GT(kept, 10);
}

/// Whether MPI runs MPI_THREAD_MULTIPLE (the test main asks for it): background reads run on
/// the worker only then (AveragingAgent::background_inline_reason).
bool thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

#define PARAMWIN_REQUIRE_WORKER()                                                       \
  if (!thread_multiple()) {                                                             \
    GTEST_SKIP() << "MPI did not provide MPI_THREAD_MULTIPLE: background reads inline"; \
  }

/// Background on the worker: trains and steps, with @p pause_ms between steps (the workers'
/// time to finish), until @p corrections landed or @p limit_seconds passed (a rank done
/// waits in a barrier, where MPI serves the others' reads of it), then checks every step against
/// the published table: a collected correction is (1 - self)(mix of the recorded peer versions -
/// own_at_read), own_at_read being the parameters after the step that began the read, added to the
/// parameters as they are when it lands; every round begun is collected once, in order, at a
/// later step (but the last, which may still run). Returns the corrections checked.
int worker_rounds_keep_the_local_progress(const pw::AveragingOptions& o, int corrections,
                                          double limit_seconds, int pause_ms) {
  const int rank = pw::test::world_rank();
  Params p;
  p.init(rank);
  Published published;
  std::vector<Record> records;
  {
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
    EXPECT_EQ(agent.background_inline_reason(), "");  // the tests run MPI_THREAD_MULTIPLE
    const pw::PublishResult first = agent.publish(p.crefs());
    published.add(rank, first.version, 0, p);
    MPI_Barrier(MPI_COMM_WORLD);
    const double end = MPI_Wtime() + limit_seconds;
    int landed = 0;
    for (int t = 1; landed < corrections && MPI_Wtime() < end; ++t) {
      p.train(rank, t);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      Record rec{.before = p.flat(), .after = {}, .round = {}};
      rec.round = agent.step(p.refs());
      rec.after = p.flat();
      landed += rec.round.background_applied ? 1 : 0;
      if (rec.round.published) {
        published.add(rank, rec.round.version, static_cast<std::uint64_t>(t), p);
      }
      records.push_back(std::move(rec));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  published.gather();
  std::vector<std::int64_t> begun;  // step of each round begun, by round index
  std::int64_t next_collected = 0;
  int kept = 0;
  for (const Record& rec : records) {
    const pw::AveragingRound& r = rec.round;
    if (r.kind == pw::RoundKind::gossip) {  // a round collected from the worker
      EXPECT_TRUE(r.overlapped);
      EXPECT_EQ(r.round, next_collected++) << "step " << r.step;
      EXPECT_EQ(r.read_step, begun.at(static_cast<std::size_t>(r.round))) << "step " << r.step;
      EXPECT_LT(r.read_step, r.step);
      EXPECT_EQ(r.background_applied, r.note.empty()) << r.note;
    }
    if (r.started_round >= 0) {
      EXPECT_EQ(r.started_round, static_cast<std::int64_t>(begun.size()));
      begun.push_back(r.step);
    }
    if (!r.background_applied) {
      EXPECT_EQ(rec.after, rec.before) << "step " << r.step << " changed without a correction";
      continue;
    }
    const std::vector<double>& at_read =
        records.at(static_cast<std::size_t>(r.read_step - 1)).after;
    std::vector<double> want = rec.before;
    for (std::size_t i = 0; i < kN; ++i) {
      want[i] -= (1.0 - r.self_weight) * at_read[i];
    }
    double total = r.self_weight;
    for (const pw::AveragingPeer& peer : r.peers) {
      if (peer.skipped == pw::SkipReason::none) {
        const auto& v = published.table.at({peer.rank, peer.version}).second;
        for (std::size_t i = 0; i < kN; ++i) {
          want[i] += peer.weight * v[i];
        }
        total += peer.weight;
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    for (std::size_t i = 0; i < kN; ++i) {
      EXPECT_TRUE(close(rec.after[i], want[i], i))
          << "step " << r.step << " (read at " << r.read_step << ") element " << i;
    }
    ++kept;
  }
  // Every round begun was collected, but at most the last one (still running at the end).
  EXPECT_GE(next_collected + 1, static_cast<std::int64_t>(begun.size()));
  return kept;
}

TEST(AveragingBackground, OnTheWorkerEveryCorrectionKeepsTheLocalProgressExactly) {
  PARAMWIN_REQUIRE_RANKS(2);
  PARAMWIN_REQUIRE_WORKER();
  pw::AveragingOptions o;
  o.background = true;
  o.topology = pw::Topology::random_peers(1, 11);
  EXPECT_GE(worker_rounds_keep_the_local_progress(o, 5, 30.0, 2), 5);
  // Every read over RMA, from the worker thread, on up to 4 ranks. Such a read waits until
  // the peer's process runs and enters MPI; on MPICH 4.0.2 ch4:ucx with the ranks sharing this
  // VM's 2 cores, single reads of a ring's 2 peers stalled 5-60 s (measured idle, 2026-12-02):
  // on 8 ranks some ranks collected no round in 96 s, so 8 ranks check the worker over shared
  // memory only (above). The check is the exactness of every collected correction; a rank
  // collects up to 3 and must collect at least 1 within the 90 s.
  if (pw::test::world_size() > 4) {
    if (pw::test::world_rank() == 0) {
      std::printf("np%d: worker reads over RMA checked on 2 and 4 ranks only\n",
                  pw::test::world_size());
    }
    return;
  }
  o.topology = pw::Topology::all_peers();
  o.window.transport = pw::Transport::rma;
  o.timeout_seconds = 60.0;
  EXPECT_GE(worker_rounds_keep_the_local_progress(o, 3, 90.0, 2), 1);
}

bool is_mpich() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  return std::string(version).find("MPICH") != std::string::npos;
}

/// Bounds of the worker's timing tests, derived from the steps measured on this machine now
/// (8 ranks share 2 cores here; a constant bound once failed under load).
struct TimingBounds {
  double measured = 0.0;  // the longest step with nobody sleeping, over every rank
  double step = 0.0;      // no step that does not wait for a read takes longer
  double timeout = 0.0;   // a read's deadline: a step that waited for one would take about this
  double sleep = 0.0;     // how long the slow rank stays out of MPI: longer than the timeout
};

/// Runs 25 steps of background reads of every peer over RMA on the worker, nobody sleeping
/// (10 ms between steps, as the timing tests), and derives the bounds from the longest step
/// (after the first) of any rank: step = 4x it, at least 0.3 s and at most 3 s; timeout = 2x
/// step; sleep = timeout + 0.9 s. Collective.
TimingBounds timing_bounds() {
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.background = true;
  o.topology = pw::Topology::all_peers();
  o.window.transport = pw::Transport::rma;
  o.timeout_seconds = 60.0;
  Params p;
  p.init(rank);
  double longest = 0.0;
  {
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
    (void)agent.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 1; t <= 25; ++t) {
      p.train(rank, t);
      const double start = MPI_Wtime();
      (void)agent.step(p.refs());
      longest = t > 1 ? std::max(longest, MPI_Wtime() - start) : longest;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  TimingBounds b;
  MPI_Allreduce(&longest, &b.measured, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  b.step = std::clamp(4.0 * b.measured, 0.3, 3.0);
  b.timeout = 2.0 * b.step;
  b.sleep = b.timeout + 0.9;
  if (rank == 0) {
    std::printf("np%d: longest step without a sleeper %.4f s: bound %.2f s, timeout %.2f s, "
                "sleep %.2f s\n",
                pw::test::world_size(), b.measured, b.step, b.timeout, b.sleep);
  }
  return b;
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

TEST(AveragingBackground, APeerBusyForSecondsNeverMakesAStepWait) {
  PARAMWIN_REQUIRE_RANKS(2);
  PARAMWIN_REQUIRE_WORKER();
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int slow = n - 1;
  const TimingBounds bounds = timing_bounds();
  pw::AveragingOptions o;
  o.background = true;
  // Every other rank reads the slow one only (on 8 ranks sharing 2 cores a round over RMA of
  // all 7 peers took seconds, so one round fell in the test's window).
  std::vector<std::vector<int>> lists(static_cast<std::size_t>(n), std::vector<int>{slow});
  lists[static_cast<std::size_t>(slow)] = {0};
  o.topology = pw::Topology::neighbour_lists(lists);
  // Over RMA, which on MPICH completes a read only once its target enters MPI: the slow rank
  // sleeps outside MPI for longer than the reads' deadline between its steps, so a read of it
  // waits until the deadline (a step that waited for it would take about as long).
  o.window.transport = pw::Transport::rma;
  o.timeout_seconds = bounds.timeout;
  Params p;
  p.init(rank);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == slow) {
    for (int t = 1; t <= 2; ++t) {
      std::this_thread::sleep_for(millis(bounds.sleep));
      p.train(rank, t);
      (void)agent.step(p.refs());
    }
  } else {
    double longest = 0.0;
    int busy = 0;
    bool slow_unreachable = false;
    std::map<pw::SkipReason, int> slow_seen;  // how the reads of the slow rank ended
    const double end = MPI_Wtime() + 2.0 * bounds.sleep + 0.3;
    for (int t = 1; MPI_Wtime() < end; ++t) {
      p.train(rank, t);
      const double start = MPI_Wtime();
      const pw::AveragingRound r = agent.step(p.refs());
      longest = std::max(longest, MPI_Wtime() - start);
      busy += r.busy ? 1 : 0;
      for (const pw::AveragingPeer& peer : r.peers) {
        slow_unreachable =
            slow_unreachable || (peer.rank == slow && peer.skipped == pw::SkipReason::unreachable);
        slow_seen[peer.skipped] += peer.rank == slow ? 1 : 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_LT(longest, bounds.step)
        << "a step waited for a read (deadline " << bounds.timeout << " s)";
    if (is_mpich()) {  // the reads of the slow rank ran into the deadline on the worker
      EXPECT_TRUE(slow_unreachable);
      EXPECT_GT(busy, 0);
    }
    std::string seen;
    for (const auto& [reason, count] : slow_seen) {
      seen += " " + std::string(pw::enum_name(reason)) + ":" + std::to_string(count);
    }
    std::printf("rank %d: longest step %.4f s, %d steps found a read still running; reads of "
                "the slow rank:%s\n",
                rank, longest, busy, seen.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingBackground, PauseFinishAndDestructionWithAReadInFlightNeitherHangNorApplyIt) {
  PARAMWIN_REQUIRE_RANKS(2);
  PARAMWIN_REQUIRE_WORKER();
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int slow = n - 1;
  const TimingBounds bounds = timing_bounds();
  pw::AveragingOptions o;
  o.background = true;
  o.topology = pw::Topology::all_peers();
  o.window.transport = pw::Transport::rma;  // a read of the sleeping rank stays in flight
  Params p;
  p.init(rank);
  {
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
    (void)agent.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == slow) {
      std::this_thread::sleep_for(millis(std::max(0.8, bounds.step + 0.5)));
      (void)agent.step(p.refs());
    } else {
      EXPECT_EQ(agent.step(p.refs()).started_round, 0);
      const double start = MPI_Wtime();
      agent.pause();  // does not wait for the read of round 0
      EXPECT_LT(MPI_Wtime() - start, bounds.step);
      const std::vector<double> before = p.flat();
      const pw::AveragingRound paused = agent.step(p.refs());
      EXPECT_TRUE(paused.paused);
      EXPECT_EQ(paused.kind, pw::RoundKind::none);
      EXPECT_EQ(p.flat(), before);
      agent.resume();
      (void)agent.window();  // waits for the read of round 0 (the slow rank's step serves it)
      const pw::AveragingRound next = agent.step(p.refs());
      EXPECT_FALSE(next.background_applied);  // round 0 was dropped by the pause
      EXPECT_NE(next.kind, pw::RoundKind::gossip);
      EXPECT_EQ(next.started_round, 1);
      EXPECT_EQ(p.flat(), before);
    }
    // finish() with a read in flight: waits for it, drops it, and every rank holds the mean.
    (void)agent.step(p.refs());
    const pw::AveragingRound f = agent.finish(p.refs());
    EXPECT_EQ(f.kind, pw::RoundKind::synchronous);
    EXPECT_FALSE(f.background_applied);
    EXPECT_LE(spread(p), 0.0);
    // Destruction with a read in flight: the slow rank stays out of MPI for a while first.
    (void)agent.step(p.refs());
    if (rank == slow) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- bad input: every rank throws, nothing changes ------------------------------------------

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Constructing with @p o throws InvalidArgument on every rank; the failing rank's message
/// holds @p text, the others' name the failing rank.
void refused(const pw::AveragingOptions& o, const std::string& text,
             const pw::Layout& l = layout()) {
  std::string what;
  try {
    pw::AveragingAgent agent(MPI_COMM_WORLD, l, o);
  } catch (const pw::InvalidArgument& e) {
    what = e.what();
  }
  EXPECT_TRUE(has(what, text) || has(what, "failed: paramwin: "))
      << "expected '" << text << "', got '" << what << "'";
  int mine = has(what, text) ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(any, 1) << "no rank said '" << text << "'";
}

TEST(AveragingBadInput, BadOptionsThrowOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  auto with = [](auto change) {
    pw::AveragingOptions o;
    change(o);
    return o;
  };
  // check_options: the same checks without an agent, on this rank only.
  EXPECT_EQ(pw::check_options({}, rank, n), "");
  EXPECT_TRUE(has(pw::check_options(with([](pw::AveragingOptions& o) { o.interval = 0; }), rank, n),
                  "interval must be >= 1"));
  refused(with([](pw::AveragingOptions& o) { o.interval = 0; }), "interval must be >= 1 (got 0)");
  refused(with([rank](pw::AveragingOptions& o) { o.interval = rank == 1 ? 0 : 1; }),
          "interval must be >= 1");
  refused(with([](pw::AveragingOptions& o) { o.interval_ms = -1.0; }), "interval_ms must be");
  refused(with([](pw::AveragingOptions& o) { o.self_weight = -0.1; }), "self_weight must be in");
  refused(with([](pw::AveragingOptions& o) { o.self_weight = 1.0; }), "self_weight must be in");
  refused(with([n](pw::AveragingOptions& o) {
            o.self_weight = 0.5;
            o.peer_weights.assign(static_cast<std::size_t>(n - 1), std::nan(""));
          }),
          "peer_weights[0] must be finite and >= 0");
  refused(with([n](pw::AveragingOptions& o) {
            o.self_weight = 0.5;
            o.peer_weights.assign(static_cast<std::size_t>(n - 1), -1.0);
          }),
          "must be finite and >= 0");
  refused(with([n](pw::AveragingOptions& o) {
            o.self_weight = 0.5;
            o.peer_weights.assign(static_cast<std::size_t>(n - 1), 0.4 / (n - 1));
          }),
          "not 1 (set normalize_weights");
  refused(with([n](pw::AveragingOptions& o) {
            o.peer_weights.assign(static_cast<std::size_t>(n - 1), 1.0 / n);
          }),
          "need AveragingOptions::self_weight");
  refused(with([](pw::AveragingOptions& o) {
            o.self_weight = 0.5;
            o.peer_weights = {0.25, 0.125, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
          }),
          "weights but topology all gives rank");
  refused(with([n](pw::AveragingOptions& o) { o.topology = pw::Topology::random_peers(n); }),
          "k must be in 1..");
  refused(with([n](pw::AveragingOptions& o) {
            std::vector<std::vector<int>> lists(static_cast<std::size_t>(n), {0});
            lists[0] = {1};
            lists[1] = {n};
            o.topology = pw::Topology::neighbour_lists(lists);
          }),
          "is outside the population");
  refused(with([n](pw::AveragingOptions& o) {
            std::vector<std::vector<int>> lists(static_cast<std::size_t>(n), {1});
            lists[1] = {0};
            lists[0] = {0};
            o.topology = pw::Topology::neighbour_lists(lists);
          }),
          "rank 0: peer 0 is the agent itself");
  refused(with([](pw::AveragingOptions& o) { o.topology = pw::Topology::neighbour_lists({{1}}); }),
          "1 lists for");
  refused(with([](pw::AveragingOptions& o) {
            o.topology = pw::Topology::custom_peers([](std::int64_t round, int me, int size) {
              return std::vector<int>{round == 1 && me == 0 ? 0 : (me + 1) % size};
            });
          }),
          "round 1: peer 0 is the agent itself");
  refused(with([](pw::AveragingOptions& o) { o.topology.kind = pw::TopologyKind::custom; }),
          "no callable");
  refused(with([](pw::AveragingOptions& o) { o.cooldown_steps = 2; }), "needs total_steps");
  refused(with([](pw::AveragingOptions& o) { o.publish_every = 0; }), "publish_every must be");
  pw::Layout half;
  half.add("h", 4, pw::DType::bfloat16);
  refused(with([](pw::AveragingOptions& o) { o.warmup_steps = 1; }), "float32 or float64 layers",
          half);
  refused(with([](pw::AveragingOptions& o) { o.background = true; }), "float32 or float64 layers",
          half);
}

TEST(AveragingBadInput, DifferentLayoutsAreRefusedOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::AveragingOptions o;
  o.window.layout_check = pw::LayoutCheck::per_donor;
  pw::Layout l = layout();
  if (pw::test::world_rank() == 1) {
    l.add("extra", 2);
  }
  EXPECT_THROW(
      {
        try {
          pw::AveragingAgent agent(MPI_COMM_WORLD, l, o);
        } catch (const pw::LayoutMismatch& e) {
          EXPECT_TRUE(has(e.what(), "every rank needs the same layout, but rank 1")) << e.what();
          throw;
        }
      },
      pw::LayoutMismatch);
}

TEST(AveragingBadInput, WrongSizesThrowBeforeAnythingChanges) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.warmup_steps = 1;
  // Bad at round size + 3 only: after the rounds the creation's check probes (max(size, 4)).
  const int bad_round = pw::test::world_size() + 3;
  o.topology = pw::Topology::custom_peers([](std::int64_t round, int me, int size) {
    return std::vector<int>{round == size + 3 ? size : (me + 1) % size};
  });
  Params p;
  p.init(rank);
  const std::vector<double> start = p.flat();
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  std::vector<float> short_w(kW - 1);
  // Warm-up step (collective): rank 0 passes a short layer; every rank throws, none changed.
  std::string what;
  try {
    if (rank == 0) {
      (void)agent.step({pw::LayerRef(short_w), pw::LayerRef(p.b)});
    } else {
      (void)agent.step(p.refs());
    }
  } catch (const pw::InvalidArgument& e) {
    what = e.what();
  }
  EXPECT_TRUE(rank == 0 ? has(what, "AveragingAgent::step") : has(what, "rank 0 failed")) << what;
  EXPECT_EQ(p.flat(), start);
  EXPECT_EQ(agent.steps(), 0);
  (void)agent.step(p.refs());  // the warm-up step, now valid
  MPI_Barrier(MPI_COMM_WORLD);
  // Asynchronous step: only the rank that passed it throws (nobody waits for it).
  const std::vector<double> before = p.flat();
  if (rank == 0) {
    EXPECT_THROW((void)agent.step({pw::LayerRef(short_w), pw::LayerRef(p.b)}), pw::InvalidArgument);
    EXPECT_EQ(p.flat(), before);
  }
  // The custom topology names a rank outside the population at that round: refused then.
  for (int t = 0; t < bad_round; ++t) {
    (void)agent.step(p.refs());
  }
  const std::vector<double> at_bad = p.flat();
  EXPECT_THROW(
      {
        try {
          (void)agent.step(p.refs());
        } catch (const pw::InvalidArgument& e) {
          EXPECT_TRUE(has(e.what(), "round " + std::to_string(bad_round) + ": peer")) << e.what();
          throw;
        }
      },
      pw::InvalidArgument);
  EXPECT_EQ(p.flat(), at_bad);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- non-finite peers, time-based interval, the event log -----------------------------------

TEST(AveragingSkip, APeerHoldingNonFiniteValuesIsLeftOutAndAloneChangesNothing) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int bad = n - 1;
  Params p;
  p.init(rank);
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), {});
  if (rank == bad) {
    Params nan = p;
    nan.w[2] = std::numeric_limits<float>::quiet_NaN();
    (void)agent.publish(nan.crefs());
  } else {
    (void)agent.publish(p.crefs());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != bad) {
    const std::vector<double> before = p.flat();
    const pw::AveragingRound r = agent.step(p.refs());
    for (const pw::AveragingPeer& peer : r.peers) {
      EXPECT_EQ(peer.skipped == pw::SkipReason::non_finite, peer.rank == bad) << peer.rank;
      if (peer.rank == bad) {
        EXPECT_EQ(peer.weight, 0.0);
      }
    }
    for (const double v : p.flat()) {
      EXPECT_TRUE(std::isfinite(v));
    }
    if (n == 2) {  // the only peer is non-finite: the read fails, nothing changes
      EXPECT_FALSE(r.applied);
      EXPECT_TRUE(has(r.note, "read failed, parameters unchanged")) << r.note;
      EXPECT_EQ(p.flat(), before);
    } else {  // the others share the weight: self keeps 1 / (peers + 1) of the roster's count
      EXPECT_TRUE(r.applied);
      double total = r.self_weight;
      for (const pw::AveragingPeer& peer : r.peers) {
        total += peer.weight;
      }
      EXPECT_NEAR(total, 1.0, 1e-12);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingSchedule, IntervalMsRoundsOnlyOnceTheTimeHasPassed) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  Params p;
  p.init(rank);
  {
    pw::AveragingOptions o;
    o.interval_ms = 1e9;  // never within this test
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
    (void)agent.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(agent.step(p.refs()).kind, pw::RoundKind::none);
    }
    EXPECT_EQ(agent.rounds(), 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  pw::AveragingOptions o;
  o.interval_ms = 1.0;
  o.interval = 1000;  // ignored when interval_ms > 0
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 0; t < 5; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(agent.step(p.refs()).kind, pw::RoundKind::gossip) << "step " << t + 1;
  }
  EXPECT_EQ(agent.rounds(), 5);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingEvents, TheLogHasOneJsonLinePerAveragingStepWithItsPeers) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const std::string pattern = ::testing::TempDir() + "averaging_events.{rank}.jsonl";
  std::string path = pattern;
  path.replace(path.find("{rank}"), 6, std::to_string(rank));
  Params p;
  p.init(rank);
  std::vector<pw::AveragingRound> rounds;
  {
    pw::AveragingOptions o;
    o.warmup_steps = 1;
    o.interval = 2;
    o.event_log = pattern;
    pw::AveragingAgent agent(MPI_COMM_WORLD, layout(), o);
    (void)agent.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < 7; ++t) {  // step 1 warm-up, gossip at 3, 5, 7
      rounds.push_back(agent.step(p.refs()));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 4U) << path;
  EXPECT_EQ(lines[0], pw::to_json(rounds[0]));
  EXPECT_TRUE(has(lines[0], "\"kind\":\"synchronous\"")) << lines[0];
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const pw::AveragingRound& r = rounds[2 * i];
    EXPECT_EQ(r.step, static_cast<std::int64_t>(2 * i + 1));
    EXPECT_EQ(lines[i], pw::to_json(r));
    EXPECT_TRUE(has(lines[i], "\"kind\":\"gossip\"")) << lines[i];
    EXPECT_TRUE(has(lines[i], "\"peers\":[{\"rank\":")) << lines[i];
    EXPECT_TRUE(has(lines[i], "\"version\":" + std::to_string(r.peers.at(0).version))) << lines[i];
  }
}

}  // namespace
