// Direct landing (PullOptions::landing = Landing::direct): the same bits as the transactional
// pull for every layer dtype, wire format, donor count, momentum, chunk size and deadline, on
// both transports; and a direct pull that fails midway says so (PartialPullError), leaves
// the window usable and releases its pins.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

/// Every layer dtype, layers of 0 and 1 element, one layer larger than the small chunks.
struct Model {
  pw::Layout layout;
  std::vector<std::vector<std::byte>> layers;
  Model() {
    layout.add("a", std::size_t{70001});
    layout.add("b", std::size_t{3001}, pw::DType::float64);
    layout.add("c", std::size_t{777}, pw::DType::bfloat16);
    layout.add("none", std::size_t{0});
    layout.add("d", std::size_t{1501}, pw::DType::float16);
    layout.add("one", std::size_t{1});
    for (const pw::LayerSpec& l : layout.layers()) {
      layers.emplace_back(l.count * pw::dtype_size(l.dtype));
    }
  }
  /// Values with fraction bits everywhere, different per rank and version.
  void fill(int rank, std::uint64_t version) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const pw::DType dt = layout[l].dtype;
      for (std::size_t i = 0; i < layout[l].count; ++i) {
        const double x =
            static_cast<double>((i * 2654435761U + static_cast<std::size_t>(rank) * 977U +
                                 version * 131U + l * 17U) %
                                100003U) /
                977.0 -
            50.0;
        std::byte* at = layers[l].data() + i * pw::dtype_size(dt);
        if (dt == pw::DType::float32) {
          const auto f = static_cast<float>(x);
          std::memcpy(at, &f, 4);
        } else if (dt == pw::DType::float64) {
          std::memcpy(at, &x, 8);
        } else if (dt == pw::DType::bfloat16) {
          const pw::bfloat16 h = pw::to_bfloat16(static_cast<float>(x));
          std::memcpy(at, &h, 2);
        } else {
          const pw::float16 h = pw::to_float16(static_cast<float>(x));
          std::memcpy(at, &h, 2);
        }
      }
    }
  }
  std::vector<pw::LayerRef> refs() {
    std::vector<pw::LayerRef> r;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      r.emplace_back(layout[l].name, layers[l].data(), layout[l].count, layout[l].dtype);
    }
    return r;
  }
  std::vector<pw::ConstLayerRef> crefs() {
    std::vector<pw::ConstLayerRef> r;
    for (const pw::LayerRef& ref : refs()) r.push_back(ref.as_const());
    return r;
  }
};

class DirectLanding : public ::testing::TestWithParam<pw::Transport> {};

TEST_P(DirectLanding, SameBitsAsTheTransactionalPull) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  long compared = 0;
  long direct = 0;
  for (const pw::WireFormat wire :
       {pw::WireFormat::native, pw::WireFormat::bfloat16, pw::WireFormat::float16}) {
    Model model;
    pw::ParameterWindow<> win(MPI_COMM_WORLD, model.layout,
                              {.transport = GetParam(), .wire = wire});
    model.fill(rank, 1);
    ASSERT_TRUE(win.publish(model.crefs()).published);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<std::vector<int>> donor_sets = {{1}};
      if (n >= 4) donor_sets.push_back({3, 1, 2});
      for (const std::vector<int>& donors : donor_sets) {
        for (const double momentum : {0.0, 0.5}) {
          for (const std::size_t chunk : {std::size_t{0}, std::size_t{4096}}) {
            for (const double timeout : {0.0, 60.0}) {
              for (const bool weighted : {false, true}) {
                if (weighted && donors.size() == 1) continue;
                pw::PullOptions opt;
                opt.momentum = momentum;
                opt.chunk_bytes = chunk;
                opt.timeout_seconds = timeout;
                if (weighted) {
                  opt.reduction = pw::Reduction::weighted;
                  opt.weights = {1.0, 2.5, 0.25};
                }
                Model a;
                Model b;
                a.fill(0, 99);  // what momentum blends with
                b.fill(0, 99);
                opt.landing = pw::Landing::transactional;
                auto ra = a.refs();
                const pw::PullResult t = win.pull(donors, ra, opt);
                opt.landing = pw::Landing::direct;
                auto rb = b.refs();
                const pw::PullResult d = win.pull(donors, rb, opt);
                const std::string what =
                    "wire " + std::to_string(static_cast<int>(wire)) + ", k " +
                    std::to_string(donors.size()) + ", momentum " + std::to_string(momentum) +
                    ", chunk " + std::to_string(chunk) + ", timeout " + std::to_string(timeout);
                EXPECT_EQ(t.landing, pw::Landing::transactional) << what;
                // Same-node pulls read pinned slots straight into the output already, and
                // stay transactional; RMA pulls land directly.
                EXPECT_EQ(d.landing, GetParam() == pw::Transport::rma ? pw::Landing::direct
                                                                      : pw::Landing::transactional)
                    << what;
                direct += d.landing == pw::Landing::direct ? 1 : 0;
                ASSERT_EQ(d.donors.size(), donors.size());
                for (std::size_t i = 0; i < donors.size(); ++i) {
                  EXPECT_EQ(d.donors[i].version, 1U) << what;
                  EXPECT_EQ(d.donors[i].weight, t.donors[i].weight) << what;
                  EXPECT_TRUE(d.donors[i].pinned) << what;
                }
                for (std::size_t l = 0; l < a.layers.size(); ++l) {
                  EXPECT_EQ(a.layers[l], b.layers[l])
                      << "layer " << a.layout[l].name << " differs, " << what;
                }
                ++compared;
              }
            }
          }
        }
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) {
    std::printf("[ direct  ] %s: %ld pulls compared bit for bit, %ld landed directly\n",
                std::string(pw::transport_name(GetParam())).c_str(), compared, direct);
    EXPECT_GT(compared, 0);
  }
}

TEST_P(DirectLanding, BadOptionsAreRefusedAndChangeNothing) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  Model model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, model.layout, {.transport = GetParam()});
  model.fill(rank, 1);
  ASSERT_TRUE(win.publish(model.crefs()).published);
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % pw::test::world_size();
  Model out;
  out.fill(rank, 5);
  const Model before = out;
  auto refs = out.refs();
  pw::PullOptions opt;
  opt.landing = static_cast<pw::Landing>(7);
  EXPECT_THROW((void)win.pull(std::span<const int>(&donor, 1), refs, opt), pw::InvalidArgument);
  opt.landing = pw::Landing::direct;
  opt.read_mode = pw::ReadMode::optimistic;
  EXPECT_THROW((void)win.pull(std::span<const int>(&donor, 1), refs, opt), pw::InvalidArgument);
  EXPECT_EQ(out.layers, before.layers);
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, DirectLanding,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma),
                         [](const auto& param_info) {
                           return std::string(pw::transport_name(param_info.param));
                         });

// A direct pull with small chunks and a deadline far shorter than its many round trips gets
// some chunks, writes them, and runs out of time on the rest. It must say that the output is
// partly written; afterwards the window works and the donor can publish (the pins were
// released). The donor serves (progress()) until the reader is done, so whether this MPI's
// gets need the target (MPICH over UCX: messages, or one-sided CMA reads where the kernel
// allows them) does not matter; the deadline adapts to the machine: a round that timed out
// before anything landed triples it, a round that finished whole (and read the right bytes)
// divides it by three.
TEST(DirectLandingFailure, DeadlineMidwayIsAPartialPullErrorAndTheWindowRecovers) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  constexpr std::size_t kN = std::size_t{8} << 20;  // 32 MiB of float32: 131072 chunks of 256 B
  pw::Layout layout;
  layout.add("w", kN);
  std::vector<float> w(kN);
  for (std::size_t i = 0; i < kN; ++i) w[i] = static_cast<float>(i % 1000) + 0.5F;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = pw::Transport::rma});
  if (rank == 1) {
    ASSERT_TRUE(win.publish(std::vector<pw::ConstLayerRef>{w}).published);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Outcome of a round, decided on rank 0 and broadcast: what the next round does.
  enum Outcome : int { kPartial = 0, kNothingInTime = 1, kWhole = 2 };
  int outcome = kNothingInTime;
  double deadline = 0.02;
  // Made once, before the rounds: filling 32 MiB is slow under the sanitizers.
  std::vector<float> out(rank == 0 ? kN : 0);
  for (int round = 0; round < 10 && outcome != kPartial; ++round) {
    if (rank == 0) std::fill(out.begin(), out.end(), -1.0F);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      MPI_Request done = MPI_REQUEST_NULL;
      MPI_Irecv(nullptr, 0, MPI_BYTE, 0, 77, MPI_COMM_WORLD, &done);
      int finished = 0;
      while (finished == 0) {
        win.progress();
        MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
      }
    } else if (rank == 0) {
      pw::PullOptions opt;
      opt.landing = pw::Landing::direct;
      opt.chunk_bytes = 256;  // many round trips: the pull outlasts its deadline
      opt.timeout_seconds = deadline;
      const int donor = 1;
      std::vector<pw::LayerRef> refs{out};
      try {
        (void)win.pull(std::span<const int>(&donor, 1), refs, opt);
        outcome = kWhole;  // a fast transport: the whole pull fit in the deadline
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < kN; ++i) {
          wrong += out[i] != static_cast<float>(i % 1000) + 0.5F ? 1U : 0U;
        }
        EXPECT_EQ(wrong, 0U) << "a pull that finished returned wrong values";
      } catch (const pw::PartialPullError& e) {
        outcome = kPartial;
        EXPECT_EQ(e.rank(), 1);
        EXPECT_TRUE(e.timed_out());
        EXPECT_NE(std::string(e.what()).find("partly written"), std::string::npos) << e.what();
        std::size_t changed = 0;
        for (std::size_t i = 0; i < kN; ++i) changed += out[i] != -1.0F ? 1U : 0U;
        EXPECT_GT(changed, 0U) << "a partial pull wrote nothing";
        EXPECT_LT(changed, kN) << "a partial pull wrote everything";
      } catch (const pw::TimeoutError&) {
        // Nothing landed in time (a loaded machine): a plain timeout, output unchanged.
        outcome = kNothingInTime;
        std::size_t changed = 0;
        for (std::size_t i = 0; i < kN; ++i) changed += out[i] != -1.0F ? 1U : 0U;
        EXPECT_EQ(changed, 0U) << "a plain timeout changed the output";
      }
      std::printf("[ direct  ] round %d, deadline %.4f s: %s\n", round, deadline,
                  outcome == kPartial         ? "partial pull"
                  : outcome == kNothingInTime ? "nothing in time"
                                              : "finished whole");
      MPI_Send(nullptr, 0, MPI_BYTE, 1, 77, MPI_COMM_WORLD);
    }
    MPI_Bcast(&outcome, 1, MPI_INT, 0, MPI_COMM_WORLD);
    deadline = outcome == kNothingInTime ? deadline * 3.0 : deadline / 3.0;
  }
  EXPECT_EQ(outcome, kPartial) << "ten rounds without a partial pull";
  // Recovery: the donor can publish again (the reader's pins are released) and a direct
  // pull without a deadline reads it whole.
  if (rank == 1) {
    for (float& x : w) x += 1.0F;
    bool published = false;
    const double t0 = MPI_Wtime();
    while (!published && MPI_Wtime() - t0 < 20.0) {
      published = win.publish(std::vector<pw::ConstLayerRef>{w}).published;
      win.progress();
    }
    EXPECT_TRUE(published) << "a pin of the failed pull was never released";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::fill(out.begin(), out.end(), -1.0F);
    pw::PullOptions opt;
    opt.landing = pw::Landing::direct;
    const int donor = 1;
    std::vector<pw::LayerRef> refs{out};
    const pw::PullResult r = win.pull(std::span<const int>(&donor, 1), refs, opt);
    EXPECT_EQ(r.landing, pw::Landing::direct);
    EXPECT_EQ(r.donors[0].version, 2U);
    for (std::size_t i = 0; i < kN; i += 997) {
      ASSERT_EQ(out[i], static_cast<float>(i % 1000) + 1.5F) << i;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  while (win.pending_rma() > 0) win.progress();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
