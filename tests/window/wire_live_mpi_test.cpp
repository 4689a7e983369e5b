// Reduced-precision wire formats (error bounds, overflow caught at publish) and the live
// (zero-copy) exposure.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

/// Deterministic values spread over many binades, signs mixed.
float spread(int rank, std::size_t i) {
  const double x =
      std::sin(0.37 * static_cast<double>(i) + rank) *
      std::pow(10.0, static_cast<double>((i + static_cast<std::size_t>(rank)) % 7) - 3.0);
  return static_cast<float>(x);
}

struct WireCase {
  pw::WireFormat wire;
  pw::Transport transport;
  double bound;  // relative half-ulp of the wire type
};

class Wire : public ::testing::TestWithParam<WireCase> {};

TEST_P(Wire, MeanIsWithinTheWireErrorBound) {
  PARAMWIN_REQUIRE_RANKS(3);
  const WireCase c = GetParam();
  pw::Layout layout;
  layout.add("w", std::size_t{20000}).add("d", {16}, pw::DType::float64);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = c.transport, .wire = c.wire});
  const int rank = win.rank();
  const int n = win.size();
  std::vector<float> w(20000);
  std::vector<double> d(16);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = spread(rank, i);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = rank + 1e-12 * static_cast<double>(i);
  // Narrowed on the wire: half the bytes of float32; float64 layers stay exact.
  EXPECT_LT(win.wire_bytes(), 20000U * 4);
  (void)win.publish({w, d});
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<int> donors{(rank + 1) % n, (rank + 2) % n};
  std::vector<float> out(w.size());
  std::vector<double> od(d.size());
  (void)win.pull(donors, {out, od});
  double worst = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double a = spread(donors[0], i);
    const double b = spread(donors[1], i);
    const double exact = 0.5 * (a + b);
    // Each donor value is rounded once (relative error <= bound), the float accumulation adds
    // a few float ulps of the magnitudes involved.
    const double allowed =
        c.bound * 0.5 * (std::fabs(a) + std::fabs(b)) + 4 * 0x1p-24 * (std::fabs(a) + std::fabs(b));
    const double err = std::fabs(out[i] - exact);
    ASSERT_LE(err, allowed) << "element " << i << " exact " << exact << " got " << out[i];
    if (std::fabs(exact) > 1e-3) worst = std::max(worst, err / std::fabs(exact));
  }
  for (std::size_t i = 0; i < od.size(); ++i) {
    EXPECT_DOUBLE_EQ(od[i], 0.5 * (donors[0] + donors[1]) + 1e-12 * static_cast<double>(i));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Wire,
    ::testing::Values(WireCase{pw::WireFormat::bfloat16, pw::Transport::shm, 0x1p-8},
                      WireCase{pw::WireFormat::bfloat16, pw::Transport::rma, 0x1p-8},
                      WireCase{pw::WireFormat::float16, pw::Transport::shm, 0x1p-11},
                      WireCase{pw::WireFormat::float16, pw::Transport::rma, 0x1p-11}));

TEST(Wire, Float16OverflowIsCaughtAsNonFinite) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{100});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.wire = pw::WireFormat::float16});
  std::vector<float> w(100, 1.0F);
  w[50] = 1e6F;  // finite in float32, infinite in float16
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> out(100, -1.0F);
  const int donor = (win.rank() + 1) % win.size();
  try {
    (void)win.pull({donor}, {out});
    ADD_FAILURE() << "overflowed wire value accepted";
  } catch (const pw::DonorError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN or infinity in layer 'w'"), std::string::npos);
  }
  EXPECT_EQ(out, std::vector<float>(100, -1.0F));
  MPI_Barrier(MPI_COMM_WORLD);
}

class Live : public ::testing::TestWithParam<pw::Transport> {};

TEST_P(Live, ParametersLiveInTheWindowAndPublishCopiesNothing) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{5000}).add("b", {3}, pw::DType::float64);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                            {.transport = GetParam(), .exposure = pw::Exposure::live});
  const int rank = win.rank();
  std::span<float> w = win.live_span<float>("w");
  auto b = win.live_view<double>("b");
  ASSERT_EQ(w.size(), 5000U);
  ASSERT_EQ(b.extent(0), 3U);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(rank * 10 + 1);
  for (std::size_t i = 0; i < 3; ++i) b(i) = rank + 0.5;
  const pw::PublishResult p = win.publish();  // no copy: the memory is already exposed
  EXPECT_TRUE(p.published);
  EXPECT_EQ(win.version(), 1U);
  // Publishing the live spans themselves is allowed and also copies nothing.
  EXPECT_TRUE(win.publish({w, std::span<const double>(b.data(), 3)}).published);
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % win.size();
  std::vector<float> out(5000);
  std::vector<double> ob(3);
  const pw::PullResult r = win.pull({donor}, {out, ob});
  EXPECT_EQ(out, std::vector<float>(5000, static_cast<float>(donor * 10 + 1)));
  EXPECT_DOUBLE_EQ(ob[2], donor + 0.5);
  EXPECT_EQ(r.donors[0].version, 2U);
  MPI_Barrier(MPI_COMM_WORLD);
  // A NaN written into live memory is found by the reader (no record exists in live mode).
  w[4999] = std::nanf("");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_THROW((void)win.pull({donor}, {out, ob}), pw::DonorError);
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, Live,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma),
                         [](const auto& param_info) {
                           return std::string(pw::transport_name(param_info.param));
                         });

TEST(Live, MisuseIsRefused) {
  pw::Layout layout;
  layout.add("w", std::size_t{4});
  EXPECT_THROW(pw::ParameterWindow<> bad(MPI_COMM_WORLD, layout,
                                         {.wire = pw::WireFormat::bfloat16,
                                          .exposure = pw::Exposure::live}),
               pw::InvalidArgument);
  pw::ParameterWindow<> snap(MPI_COMM_WORLD, layout, {.name = "snap"});
  EXPECT_THROW((void)snap.live_span<float>("w"), pw::InvalidArgument);
  EXPECT_THROW((void)snap.publish(), pw::InvalidArgument);
  pw::ParameterWindow<> live(MPI_COMM_WORLD, layout,
                             {.exposure = pw::Exposure::live, .name = "live"});
  EXPECT_THROW((void)live.live_span<double>("w"), pw::InvalidArgument);
  EXPECT_THROW((void)live.live_span<float>("nope"), pw::InvalidArgument);
}

}  // namespace
