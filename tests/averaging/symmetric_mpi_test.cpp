// Symmetric (mean-preserving) averaging: one exchange moves both sides by the same amount in
// opposite directions (the reader at its step, the peer when it drains its inbox); with
// training off every topology reaches consensus while the population's mean stays where it
// started (to 1e-12 in float64); a checkpoint holds the exchanges still pending; finish() after
// rounds only some ranks made is the exact mean of the starting values; a paused peer's inbox is
// closed; bad input is refused on every rank.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kX = 6;  // float64 layer: the mean is checked to 1e-12
constexpr std::size_t kY = 5;  // float32 layer: to float32 rounding

/// One rank's model: a float64 and a float32 layer with rank-dependent starting values.
struct Model {
  std::vector<double> x = std::vector<double>(kX);
  std::vector<float> y = std::vector<float>(kY);

  explicit Model(int rank) {
    for (std::size_t i = 0; i < kX; ++i) {
      x[i] = std::fmod(0.31 * (rank + 1) + 0.17 * static_cast<double>(i), 1.0);
    }
    for (std::size_t i = 0; i < kY; ++i) {
      y[i] = static_cast<float>(std::fmod(0.23 * (rank + 2) + 0.11 * static_cast<double>(i), 1.0));
    }
  }
  std::vector<pw::LayerRef> refs() { return {x, y}; }
  std::vector<pw::ConstLayerRef> crefs() const { return {x, y}; }
};

pw::Layout model_layout() {
  pw::Layout l;
  l.add("x", kX, pw::DType::float64);
  l.add("y", kY);
  return l;
}

/// Sum over ranks of every element of @p values.
std::vector<double> sum_over_ranks(std::vector<double> values) {
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  return values;
}

std::vector<double> flat(const Model& m) {
  std::vector<double> out(m.x.begin(), m.x.end());
  out.insert(out.end(), m.y.begin(), m.y.end());
  return out;
}

/// Largest difference between ranks over all elements (a collective).
double spread(const Model& m) { return pw::test::spread_over_ranks(flat(m)); }

/// Per element, the population's sum now minus @p start: the largest drift of the float64
/// layer (out.first) and of the float32 layer (out.second), relative to the sum's size.
std::pair<double, double> drift(const Model& m, const std::vector<double>& start) {
  const std::vector<double> now = sum_over_ranks(flat(m));
  std::pair<double, double> out{0.0, 0.0};
  for (std::size_t i = 0; i < now.size(); ++i) {
    const double d = std::abs(now[i] - start[i]) / std::max(1.0, std::abs(start[i]));
    (i < kX ? out.first : out.second) = std::max(i < kX ? out.first : out.second, d);
  }
  return out;
}

/// Mean over ranks and elements of the population sums @p sums.
double mean_of(const std::vector<double>& sums) {
  double total = 0.0;
  for (const double v : sums) {
    total += v;
  }
  return total / (static_cast<double>(sums.size()) * pw::test::world_size());
}

struct ConsensusRun {
  int rounds = -1;
  std::pair<double, double> drift;
  double mean_drift = 0.0;  // AveragingConsensus's measure: the mean at the end minus at the start
};

/// Training off, the spread (a collective, so every rank's step is done) after each step,
/// until every element agrees within 1e-6 at three steps in a row; then every rank pauses and
/// steps once more (draining the exchanges still in its inbox), after which they still agree
/// within 2e-6.
ConsensusRun consensus(pw::AveragingOptions o, int limit) {
  Model m(pw::test::world_rank());
  const std::vector<double> start = sum_over_ranks(flat(m));
  pw::AveragingAgent agent(MPI_COMM_WORLD, model_layout(), std::move(o));
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  ConsensusRun run;
  int agreeing = 0;  // consecutive steps within 1e-6: an exchange still pending undoes one
  for (int t = 1; t <= limit && run.rounds < 0; ++t) {
    (void)agent.step(m.refs());
    agreeing = spread(m) <= 1e-6 ? agreeing + 1 : 0;
    if (agreeing == 3) {
      run.rounds = t;
    }
  }
  agent.pause();
  MPI_Barrier(MPI_COMM_WORLD);  // every round's exchanges are in the inboxes
  (void)agent.step(m.refs());   // paused: drains only
  EXPECT_LE(spread(m), 2e-6) << "the exchanges pending moved the ranks apart";
  run.drift = drift(m, start);
  run.mean_drift = mean_of(sum_over_ranks(flat(m))) - mean_of(start);
  return run;
}

std::vector<std::pair<std::string, pw::Topology>> topologies(int n) {
  std::vector<std::vector<int>> directed(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    directed[static_cast<std::size_t>(r)] = {(r + 1) % n};
  }
  return {{"all", pw::Topology::all_peers()},
          {"random k=1", pw::Topology::random_peers(1, 3)},
          {"ring", pw::Topology::ring_peers()},
          {"exponential", pw::Topology::exponential_peers()},
          {"neighbours (directed ring)", pw::Topology::neighbour_lists(directed)},
          {"custom", pw::Topology::custom_peers([](std::int64_t round, int rank, int size) {
             return std::vector<int>{static_cast<int>((rank + 1 + round % (size - 1)) % size)};
           })}};
}

// Pull-only gossip's drift over the same kind of run is AveragingConsensus's (its test prints
// it; docs/averaging.md has both).
TEST(SymmetricAveraging, EveryTopologyReachesConsensusWithTheMeanKept) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  for (const auto& [name, topology] : topologies(n)) {
    pw::AveragingOptions o;
    o.topology = topology;
    o.symmetric = true;
    const ConsensusRun run = consensus(o, 600);
    EXPECT_GT(run.rounds, 0) << name << ": no consensus in 600 rounds";
    EXPECT_LE(run.drift.first, 1e-12) << name << ": the float64 layer's mean moved";
    EXPECT_LE(run.drift.second, 1e-6) << name << ": the float32 layer's mean moved";
    if (pw::test::world_rank() == 0) {
      std::printf("symmetric consensus np%d %-28s %4d rounds, population mean drift %+.1e; "
                  "largest relative change of an element's population sum: %.1e (float64 "
                  "layer), %.1e (float32 layer)\n",
                  n, name.c_str(), run.rounds, run.mean_drift, run.drift.first, run.drift.second);
    }
  }
}

TEST(SymmetricAveraging, OneExchangeMovesBothSidesByTheSameAmount) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  std::vector<std::vector<int>> lists(static_cast<std::size_t>(n), std::vector<int>{0});
  lists[0] = {1};
  pw::AveragingOptions o;
  o.topology = pw::Topology::neighbour_lists(lists);
  o.symmetric = true;
  Model m(rank);
  const Model peer(rank == 0 ? 1 : 0);  // the other side's starting values (ranks 0 and 1)
  pw::AveragingAgent agent(MPI_COMM_WORLD, model_layout(), o);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const pw::AveragingRound r = agent.step(m.refs());
    ASSERT_EQ(r.peers.size(), 1U);
    EXPECT_EQ(r.peers[0].skipped, pw::SkipReason::none);
    EXPECT_DOUBLE_EQ(r.peers[0].weight, 1.0 / 3.0);  // one usable peer: 1 / (2 * 1 + 1)
    EXPECT_DOUBLE_EQ(r.self_weight, 2.0 / 3.0);
    EXPECT_EQ(r.received, 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's exchange is in rank 1's inbox
  if (rank == 1) {
    agent.pause();  // no round of its own: the step only drains
    const pw::AveragingRound r = agent.step(m.refs());
    EXPECT_EQ(r.received, 1);
    EXPECT_TRUE(r.applied);
    EXPECT_EQ(r.round, -1);
  }
  const Model before(rank);
  if (rank <= 1) {  // both moved a third of the way towards the other's starting values
    for (std::size_t i = 0; i < kX; ++i) {
      EXPECT_NEAR(m.x[i], before.x[i] + (peer.x[i] - before.x[i]) / 3.0, 1e-15) << "x " << i;
    }
    for (std::size_t i = 0; i < kY; ++i) {
      const double want = before.y[i] + (static_cast<double>(peer.y[i]) - before.y[i]) / 3.0;
      EXPECT_NEAR(m.y[i], want, 1e-7) << "y " << i;
    }
  } else {
    EXPECT_EQ(flat(m), flat(before)) << "a rank outside the exchange changed";
  }
}

/// Publishes @p m, then rank 0 makes one round with every other rank (topology all): their
/// halves of its exchanges wait in their inboxes. Returns rank 0's round (empty elsewhere).
pw::AveragingRound exchange_from_rank0(pw::AveragingAgent& agent, Model& m) {
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  pw::AveragingRound round;
  if (pw::test::world_rank() == 0) {
    round = agent.step(m.refs());
  }
  return round;
}

TEST(SymmetricAveraging, APausedPeersInboxIsClosedAndItsPendingExchangesStillLand) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.symmetric = true;
  Model m(rank);
  const std::vector<double> start = sum_over_ranks(flat(m));
  pw::AveragingAgent agent(MPI_COMM_WORLD, model_layout(), o);
  (void)exchange_from_rank0(agent, m);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) {
    agent.pause();  // rank 0's exchange is in; nothing more may come in
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const pw::AveragingRound r = agent.step(m.refs());
    EXPECT_FALSE(r.applied);  // every peer paused: skipped, nothing exchanged
    for (const pw::AveragingPeer& p : r.peers) {
      EXPECT_EQ(p.skipped, pw::SkipReason::paused) << "peer " << p.rank;
    }
  } else {
    const pw::AveragingRound r = agent.step(m.refs());  // paused: drains rank 0's exchange
    EXPECT_EQ(r.received, 1);
  }
  const std::pair<double, double> moved = drift(m, start);
  EXPECT_LE(moved.first, 1e-12);
  EXPECT_LE(moved.second, 1e-6);
}

TEST(SymmetricAveraging, FinishAfterRoundsOfSomeRanksIsTheExactMeanOfTheStart) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::AveragingOptions o;
  o.symmetric = true;
  o.topology = pw::Topology::random_peers(1, 11);
  Model m(rank);
  std::vector<double> mean = sum_over_ranks(flat(m));
  for (double& v : mean) {
    v /= n;
  }
  pw::AveragingAgent agent(MPI_COMM_WORLD, model_layout(), o);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 0; t < 5 * (rank % 2); ++t) {  // odd ranks make rounds, no barrier: deposits
    (void)agent.step(m.refs());               // land in inboxes nobody drains before finish
  }
  const pw::AveragingRound r = agent.finish(m.refs());
  EXPECT_EQ(r.kind, pw::RoundKind::synchronous);
  const std::vector<double> got = flat(m);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], mean[i], i < kX ? 1e-12 : 2e-6) << "element " << i;
  }
}

TEST(SymmetricAveraging, ACheckpointHoldsTheExchangesStillPendingAndALoadEmptiesTheInbox) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  const std::string path = "symmetric_checkpoint_np" + std::to_string(n) + ".h5";
  pw::AveragingOptions o;
  o.symmetric = true;
  Model m(rank);
  const std::vector<double> start = sum_over_ranks(flat(m));
  pw::AveragingAgent agent(MPI_COMM_WORLD, model_layout(), o);
  EXPECT_EQ(exchange_from_rank0(agent, m).applied, rank == 0);
  agent.save_checkpoint(path, m.crefs());
  if (rank != 0) {  // the live run keeps its pending exchanges: they land at the next step
    agent.pause();  // (which then makes no round of its own)
    EXPECT_EQ(agent.step(m.refs()).received, 1);
    agent.resume();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<double> saved = flat(m);  // what the file must hold
  const std::pair<double, double> live = drift(m, start);
  EXPECT_LE(live.first, 1e-12);
  EXPECT_LE(live.second, 1e-6);
  if (rank == 0) {
    (void)agent.step(m.refs());  // more exchanges pending in the others' inboxes
  }
  MPI_Barrier(MPI_COMM_WORLD);
  (void)agent.load_checkpoint(path, m.refs());
  EXPECT_EQ(flat(m), saved) << "the file holds the parameters with the exchanges added";
  agent.pause();
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(agent.step(m.refs()).received, 0) << "the load left exchanges pending";
  const std::pair<double, double> kept = drift(m, start);
  EXPECT_LE(kept.first, 1e-12);
  EXPECT_LE(kept.second, 1e-6);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::remove(path.c_str());
  }
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(SymmetricAveraging, BadCombinationsAreRefusedOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  auto refused_with = [](pw::AveragingOptions o, const pw::Layout& l, const std::string& text) {
    std::string what;
    try {
      pw::AveragingAgent agent(MPI_COMM_WORLD, l, std::move(o));
    } catch (const pw::InvalidArgument& e) {
      what = e.what();
    }
    EXPECT_TRUE(has(what, text)) << "expected '" << text << "', got '" << what << "'";
  };
  pw::AveragingOptions o;
  o.symmetric = true;
  o.background = true;
  refused_with(o, model_layout(), "symmetric averaging runs its rounds inline");
  o.background = false;
  pw::Layout halves;
  halves.add("n", 4, pw::DType::bfloat16);
  refused_with(o, halves, "symmetric averaging need float32 or float64 layers");
  o.window.memory = pw::Memory::cuda;
  refused_with(o, model_layout(), "symmetric averaging exchanges through host memory");
}

}  // namespace
