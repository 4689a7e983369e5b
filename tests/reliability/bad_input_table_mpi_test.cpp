// Bad input, table-driven: every public entry point (Layout, ParameterWindow constructor,
// publish, pull, roster, live_span, Agent constructor, step, options parsing, AgentGroups,
// ShardPlan, GroupAgent constructor / step / publish, the report) with each bad
// input. Each row names the entry point, the input, the exception type and a fragment of its
// message; after each row the test checks that nothing changed: the caller's output, this
// rank's version and roster, and that the window still serves a correct pull.
// docs/reliability.md lists the rows (keep the two in step).
#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

enum class Kind { invalid_argument, donor_error, layout_mismatch, error };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::invalid_argument: return "InvalidArgument";
    case Kind::donor_error: return "DonorError";
    case Kind::layout_mismatch: return "LayoutMismatch";
    case Kind::error: return "Error";
  }
  return "?";
}

struct Row {
  const char* entry;     ///< public entry point
  const char* input;     ///< the bad input
  Kind kind;             ///< exception type expected
  std::string fragment;  ///< part of the message
  std::function<void()> call;
};

/// Runs @p row; returns "" when it threw the expected type with the fragment, else why not.
std::string run_row(const Row& row) {
  try {
    row.call();
  } catch (const pw::DonorError& e) {
    if (row.kind != Kind::donor_error) return std::string("DonorError: ") + e.what();
    return std::string(e.what()).find(row.fragment) == std::string::npos
               ? std::string("message: ") + e.what()
               : "";
  } catch (const pw::InvalidArgument& e) {
    if (row.kind != Kind::invalid_argument) return std::string("InvalidArgument: ") + e.what();
    return std::string(e.what()).find(row.fragment) == std::string::npos
               ? std::string("message: ") + e.what()
               : "";
  } catch (const pw::LayoutMismatch& e) {
    if (row.kind != Kind::layout_mismatch) return std::string("LayoutMismatch: ") + e.what();
    return std::string(e.what()).find(row.fragment) == std::string::npos
               ? std::string("message: ") + e.what()
               : "";
  } catch (const pw::Error& e) {
    if (row.kind != Kind::error) return std::string("Error: ") + e.what();
    return std::string(e.what()).find(row.fragment) == std::string::npos
               ? std::string("message: ") + e.what()
               : "";
  } catch (const std::exception& e) {
    return std::string("non-paramwin exception: ") + e.what();
  }
  return "no exception";
}

constexpr std::size_t kW = 64;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW).add("b", {4}, pw::DType::float64);
  return l;
}

TEST(BadInputTable, EveryEntryPointEveryBadInputNothingChanges) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int donor = (rank + 1) % n;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout());
  // A second window whose rank 0 publishes NaN/Inf (the others publish finite data).
  pw::ParameterWindow<> nanwin(MPI_COMM_WORLD, layout());
  std::vector<float> w(kW, 7.0F);
  std::vector<double> b(4, 9.0);
  (void)win.publish({w, b});
  std::vector<float> wn(kW, 1.0F);
  std::vector<double> bn(4, 1.0);
  if (rank == 0) {
    wn[3] = static_cast<float>(nan);
    bn[1] = inf;
  }
  (void)nanwin.publish({wn, bn});
  MPI_Barrier(MPI_COMM_WORLD);

  // The caller's output every row must leave untouched.
  std::vector<float> ow(kW, -3.0F);
  std::vector<double> ob(4, -4.0);
  const std::vector<float> ow0 = ow;
  const std::vector<double> ob0 = ob;
  std::vector<float> short_w(kW - 1);
  std::vector<float> b_as_float(4);
  std::vector<float> wide_w(kW + 1);

  pw::Layout lay;
  lay.add("x", std::size_t{2});
  const pw::Layout lay0 = lay;
  // Every second element of a 2-column grid: a strided view of the layer's size.
  const Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> grid("grid", kW, 2);
  const auto strided = Kokkos::subview(grid, Kokkos::ALL, 0);

  // A window with an 8x8 layer, for the rules on multi-dimensional Kokkos views: a view of
  // rank 2 or more must have the layer's shape, in row-major order.
  pw::Layout grid_layout;
  grid_layout.add("g", {8, 8});
  pw::ParameterWindow<> gridwin(MPI_COMM_WORLD, grid_layout);
  using Right = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const Right g8("g8", 8, 8);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 8; ++j)
      g8(i, j) = static_cast<float>(rank * 100) + static_cast<float>(i * 8 + j);
  (void)gridwin.publish({pw::ConstLayerRef(g8)});
  MPI_Barrier(MPI_COMM_WORLD);
  // Each of the right element count, each refused; as outputs they must stay untouched.
  const Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace> left8("left8", 8, 8);
  const Right r4x16("r4x16", 4, 16);
  const Kokkos::View<float***, Kokkos::HostSpace> cube("cube", 4, 4, 4);
  Kokkos::deep_copy(left8, -5.0F);
  Kokkos::deep_copy(r4x16, -5.0F);
  Kokkos::deep_copy(cube, -5.0F);
  auto grid_outputs_intact = [&] {
    for (std::size_t i = 0; i < 64; ++i) {
      if (left8.data()[i] != -5.0F || r4x16.data()[i] != -5.0F || cube.data()[i] != -5.0F) {
        return false;
      }
    }
    return true;
  };
  const std::uint64_t grid_version_before = gridwin.version();

  const auto roster_before = win.roster(rank);
  const std::uint64_t version_before = win.version();

  auto bad_options = [&](auto&& edit) {
    return [&, edit] {
      pw::AgentOptions o;
      o.selection.shortfall = pw::Shortfall::clamp;
      edit(o);
      pw::Agent<> a(MPI_COMM_WORLD, layout(), o);  // collective: throws on every rank
    };
  };

  // Layouts and values with hyperparameters, for the PBT rows.
  auto hyper_layout = [] {
    pw::Layout l = layout();
    l.add_hyperparameter("lr");
    l.add_hyperparameter("batch", pw::HyperType::int64);
    return l;
  };
  pw::Layout full_hyper;
  for (std::size_t i = 0; i < pw::kMaxHyperparameters; ++i) {
    full_hyper.add_hyperparameter(std::string("h").append(std::to_string(i)));
  }
  const pw::Layout full_hyper0 = full_hyper;
  pw::Hyperparameters hyper_values = hyper_layout().make_hyperparameters();
  hyper_values.set("lr", 0.5);
  const pw::Hyperparameters hyper_values0 = hyper_values;
  pw::AgentOptions hyper_agent_options;
  hyper_agent_options.selection.shortfall = pw::Shortfall::clamp;
  pw::Agent<> hyper_agent(MPI_COMM_WORLD, hyper_layout(), hyper_agent_options);
  const pw::Hyperparameters hyper_agent0 = hyper_agent.hyperparameters();
  auto bad_hyper_options = [&](auto&& edit) {
    return [&, edit] {
      pw::AgentOptions o;
      o.selection.shortfall = pw::Shortfall::clamp;
      edit(o);
      pw::Agent<> a(MPI_COMM_WORLD, hyper_layout(), o);  // collective: throws on every rank
    };
  };
  lay.add_hyperparameter("lr");
  const pw::Layout lay_h = lay;

  std::vector<Row> rows = {
      // Layout
      {"Layout::add", "empty name", Kind::invalid_argument, "is invalid",
       [&] { lay.add("", std::size_t{1}); }},
      {"Layout::add", "duplicate name", Kind::invalid_argument, "duplicate layer name 'x'",
       [&] { lay.add("x", std::size_t{1}); }},
      {"Layout::add", "negative count", Kind::invalid_argument, "negative element count",
       [&] { lay.add("y", -3); }},
      {"Layout::add", "out-of-range dtype", Kind::invalid_argument, "invalid dtype",
       [&] { lay.add("y", std::size_t{1}, static_cast<pw::DType>(99)); }},
      {"Layout::add", "a layer of more than 2^64 bytes", Kind::invalid_argument,
       "more than 2^64 bytes",
       [&] {
         lay.add("huge", std::vector<std::size_t>{std::size_t{1} << 61, 2});
       }},
      {"Layout::add", "layout total over 2^64 bytes", Kind::invalid_argument, "overflow 2^64",
       [&] {
         lay.add("huge", std::vector<std::size_t>{(std::size_t{1} << 63) - 1}, pw::DType::float16);
       }},
      {"Layout::operator[]", "index out of range", Kind::invalid_argument, "out of range",
       [&] { (void)lay[5]; }},
      {"Layout::index_of", "unknown name", Kind::invalid_argument, "unknown layer 'nope'",
       [&] { (void)lay.index_of("nope"); }},
      {"Layout::deserialize", "malformed text", Kind::invalid_argument, "malformed",
       [&] { (void)pw::Layout::deserialize("garbage without fields"); }},
      // ParameterWindow constructor
      {"ParameterWindow()", "MPI_COMM_NULL", Kind::invalid_argument, "MPI_COMM_NULL",
       [&] { pw::ParameterWindow<> x(MPI_COMM_NULL, layout()); }},
      {"ParameterWindow()", "out-of-range transport", Kind::invalid_argument, "out-of-range",
       [&] {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.transport = static_cast<pw::Transport>(9)});
       }},
      {"ParameterWindow()", "progress_interval_us 0", Kind::invalid_argument,
       "progress_interval_us",
       [&] {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.progress_thread = true, .progress_interval_us = 0});
       }},
      {"ParameterWindow()", "layout differs on rank 0", Kind::layout_mismatch, "",
       [&] {
         pw::Layout l = layout();
         if (rank == 0) l.add("extra", std::size_t{1});
         pw::ParameterWindow<> x(MPI_COMM_WORLD, l);
       }},
      {"ParameterWindow()", "windows created in opposite orders (named)", Kind::invalid_argument,
       "windows must be created in the same order on every rank",
       [&] {
         pw::ParameterWindow<> first(MPI_COMM_WORLD, layout(), {.name = rank == 0 ? "A" : "B"});
         pw::ParameterWindow<> second(MPI_COMM_WORLD, layout(), {.name = rank == 0 ? "B" : "A"});
       }},
      {"ParameterWindow()", "verify on every rank but rank 0", Kind::invalid_argument,
       "WindowOptions differ across ranks: verify is false on rank 0, true on rank 1",
       [&] { pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(), {.verify = rank != 0}); }},
      {"ParameterWindow()", "layout_check strict on rank 0, per_donor on the others",
       Kind::invalid_argument, "layout_check is strict on rank 0, per_donor on rank 1",
       [&] {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.layout_check = rank == 0 ? pw::LayoutCheck::strict
                                                            : pw::LayoutCheck::per_donor});
       }},
      {"ParameterWindow()", "out-of-range exposure on rank 0 only", Kind::invalid_argument,
       "out-of-range enumerator",
       [&] {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.exposure = rank == 0 ? static_cast<pw::Exposure>(7)
                                                        : pw::Exposure::snapshot});
       }},
      {"ParameterWindow()", "a window larger than the node (2^40 float32)", Kind::error,
       "cannot be allocated",
       [&] {
         pw::Layout l;
         l.add("x", std::size_t{1} << 40);
         pw::ParameterWindow<> x(MPI_COMM_WORLD, l);
       }},
      // publish
      {"publish", "span one element short", Kind::invalid_argument, "expects 64 elements, got 63",
       [&] {
         (void)win.publish({short_w, b});
       }},
      {"publish", "span one element long", Kind::invalid_argument, "expects 64 elements, got 65",
       [&] {
         (void)win.publish({wide_w, b});
       }},
      {"publish", "float32 for a float64 layer", Kind::invalid_argument,
       "expects dtype float64, got float32",
       [&] {
         (void)win.publish({w, b_as_float});
       }},
      {"publish", "one layer of two", Kind::invalid_argument, "got 1 layers, the layout has 2",
       [&] { (void)win.publish({w}); }},
      {"publish", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
       [&] {
         (void)win.publish({pw::ConstLayerRef("w", w), pw::ConstLayerRef("bias", b)});
       }},
      {"publish", "strided unnamed view", Kind::invalid_argument,
       "layer #0 (w) is a view that is not contiguous",
       [&] {
         (void)win.publish({pw::ConstLayerRef(strided), pw::ConstLayerRef(b)});
       }},
      {"publish", "no layers on a snapshot window", Kind::invalid_argument, "Exposure::live",
       [&] { (void)win.publish(); }},
      {"publish", "LayoutLeft 8x8 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view whose elements are not in row-major (C) order",
       [&] { (void)gridwin.publish({pw::ConstLayerRef(left8)}); }},
      {"publish", "4x16 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x16",
       [&] { (void)gridwin.publish({pw::ConstLayerRef(r4x16)}); }},
      {"publish", "4x4x4 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x4x4",
       [&] { (void)gridwin.publish({pw::ConstLayerRef("g", cube)}); }},
      {"publish", "8x8 view for a flat layer of 64", Kind::invalid_argument,
       "'w' [64 float32] got a view of shape 8x8",
       [&] {
         (void)win.publish({pw::ConstLayerRef(g8), pw::ConstLayerRef(b)});
       }},
      // pull
      {"pull", "output one element short", Kind::invalid_argument, "expects 64 elements, got 63",
       [&] {
         (void)win.pull({donor}, {short_w, ob});
       }},
      {"pull", "output dtype mismatch", Kind::invalid_argument, "expects dtype float64",
       [&] {
         (void)win.pull({donor}, {ow, b_as_float});
       }},
      {"pull", "LayoutLeft 8x8 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view whose elements are not in row-major (C) order",
       [&] { (void)gridwin.pull({donor}, {pw::LayerRef(left8)}); }},
      {"pull", "4x16 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x16",
       [&] { (void)gridwin.pull({donor}, {pw::LayerRef("g", r4x16)}); }},
      {"pull", "4x4x4 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x4x4",
       [&] { (void)gridwin.pull({donor}, {pw::LayerRef(cube)}); }},
      {"pull", "layer named twice", Kind::invalid_argument, "given twice",
       [&] {
         (void)win.pull({donor}, {pw::LayerRef("w", ow), pw::LayerRef("w", ow)});
       }},
      {"pull", "some layers named", Kind::invalid_argument, "either name every layer or none",
       [&] {
         (void)win.pull({donor}, {pw::LayerRef("w", ow), ob});
       }},
      {"pull", "donor rank == size", Kind::invalid_argument, "out of range",
       [&] {
         (void)win.pull({n}, {ow, ob});
       }},
      {"pull", "donor rank -1", Kind::invalid_argument, "rank -1 is out of range",
       [&] {
         (void)win.pull({-1}, {ow, ob});
       }},
      {"pull", "self as donor", Kind::invalid_argument, "is this rank itself",
       [&] {
         (void)win.pull({rank}, {ow, ob});
       }},
      {"pull", "duplicate donor", Kind::invalid_argument, "is listed twice",
       [&] {
         (void)win.pull({donor, donor}, {ow, ob});
       }},
      {"pull", "empty donor list", Kind::invalid_argument, "donor list is empty",
       [&] {
         (void)win.pull(std::span<const int>(), {ow, ob});
       }},
      {"pull", "weights count != donors", Kind::invalid_argument, "got 2 weights for 1 donors",
       [&] {
         (void)win.pull({donor}, {ow, ob},
                        {.reduction = pw::Reduction::weighted, .weights = {1.0, 2.0}});
       }},
      {"pull", "NaN weight", Kind::invalid_argument, "finite and >= 0",
       [&] {
         (void)win.pull({donor}, {ow, ob},
                        {.reduction = pw::Reduction::weighted, .weights = {nan}});
       }},
      {"pull", "weights sum to 0", Kind::invalid_argument, "weights sum to 0",
       [&] {
         (void)win.pull({donor}, {ow, ob},
                        {.reduction = pw::Reduction::weighted, .weights = {0.0}});
       }},
      {"pull", "momentum 1", Kind::invalid_argument, "outside [0, 1)",
       [&] {
         (void)win.pull({donor}, {ow, ob}, {.momentum = 1.0});
       }},
      {"pull", "momentum NaN", Kind::invalid_argument, "momentum",
       [&] {
         (void)win.pull({donor}, {ow, ob}, {.momentum = nan});
       }},
      {"pull", "negative timeout", Kind::invalid_argument, "timeout_seconds",
       [&] {
         (void)win.pull({donor}, {ow, ob}, {.timeout_seconds = -1.0});
       }},
      {"pull", "chunk_bytes 8", Kind::invalid_argument, "chunk_bytes 8",
       [&] {
         (void)win.pull({donor}, {ow, ob}, {.chunk_bytes = 8});
       }},
      {"pull", "out-of-range landing", Kind::invalid_argument, "unknown landing",
       [&] {
         (void)win.pull({donor}, {ow, ob}, {.landing = static_cast<pw::Landing>(9)});
       }},
      {"pull", "Landing::direct with ReadMode::optimistic", Kind::invalid_argument,
       "never pins first",
       [&] {
         (void)win.pull({donor}, {ow, ob},
                        {.read_mode = pw::ReadMode::optimistic, .landing = pw::Landing::direct});
       }},
      {"pull", "donor holds NaN/Inf (non_finite = fail)", Kind::donor_error, "donor 0",
       [&] {
         if (rank == 0) throw pw::DonorError(0, "donor 0 (self: row not applicable)");
         (void)nanwin.pull({0}, {ow, ob});
       }},
      {"pull", "only donor holds NaN/Inf (skip_donor)", Kind::donor_error,
       "every donor was left out for non-finite",
       [&] {
         if (rank == 0) throw pw::DonorError(0, "every donor was left out for non-finite");
         (void)nanwin.pull({0}, {ow, ob}, {.non_finite = pw::NonFinitePolicy::skip_donor});
       }},
      // roster, set_status, live_span
      {"roster", "rank == size", Kind::invalid_argument, "out of range",
       [&] { (void)win.roster(n); }},
      {"roster", "rank -1", Kind::invalid_argument, "out of range", [&] { (void)win.roster(-1); }},
      {"roster", "negative timeout", Kind::invalid_argument, "timeout_seconds must be finite",
       [&] { (void)win.roster(donor, -1.0); }},
      {"roster_all", "NaN timeout", Kind::invalid_argument, "timeout_seconds must be finite",
       [&] { (void)win.roster_all(nan); }},
      {"set_status", "out-of-range state", Kind::invalid_argument, "out-of-range AgentState",
       [&] { win.set_status({.state = static_cast<pw::AgentState>(7)}); }},
      {"live_span", "snapshot window", Kind::invalid_argument, "Exposure::live",
       [&] { (void)win.live_span<float>("w"); }},
      {"live_span", "unknown layer", Kind::invalid_argument, "unknown layer 'nope'",
       [&] { (void)win.live_span<float>("nope"); }},
      {"live_span", "wrong element type", Kind::invalid_argument, "has another dtype",
       [&] { (void)win.live_span<double>("w"); }},
      // Agent constructor (collective validation)
      {"Agent()", "selection.k = 0", Kind::invalid_argument, "selection.k must be >= 1",
       bad_options([](pw::AgentOptions& o) { o.selection.k = 0; })},
      {"Agent()", "age lo > hi", Kind::invalid_argument, "lo 9 > hi 3",
       bad_options(
           [](pw::AgentOptions& o) { o.triggers.age = {.enabled = true, .lo = 9, .hi = 3}; })},
      {"Agent()", "worst fraction 1.5", Kind::invalid_argument, "is outside [0, 1]",
       bad_options([](pw::AgentOptions& o) {
         o.triggers.worst_fraction = {.enabled = true, .fraction = 1.5, .every = 1};
       })},
      {"Agent()", "momentum 1", Kind::invalid_argument, "mixing.momentum",
       bad_options([](pw::AgentOptions& o) { o.mixing.momentum = 1.0; })},
      {"Agent()", "weights count != k", Kind::invalid_argument, "mixing.weights has 3 entries",
       bad_options([](pw::AgentOptions& o) {
         o.mixing.kind = pw::MixingKind::weighted;
         o.mixing.weights = {1, 2, 3};
       })},
      {"Agent()", "weights whose sum overflows", Kind::invalid_argument, "sum to infinity",
       bad_options([](pw::AgentOptions& o) {
         o.selection.k = 2;
         o.mixing.kind = pw::MixingKind::weighted;
         o.mixing.weights = {1e308, 1e308};
       })},
      {"Agent()", "reset without callback", Kind::invalid_argument, "needs a reset callback",
       bad_options([](pw::AgentOptions& o) { o.mixing.kind = pw::MixingKind::reset; })},
      {"Agent()", "negative staleness bound", Kind::invalid_argument, "max_staleness_seconds",
       bad_options([](pw::AgentOptions& o) { o.selection.max_staleness_seconds = -1.0; })},
      {"Agent()", "negative step bound", Kind::invalid_argument, "read.timeout_seconds",
       bad_options([](pw::AgentOptions& o) { o.read.timeout_seconds = -0.5; })},
      {"Agent()", "read chunk of 8 bytes", Kind::invalid_argument, "read.chunk_bytes",
       bad_options([](pw::AgentOptions& o) { o.read.chunk_bytes = 8; })},
      {"Agent()", "read.landing direct without a reset callback", Kind::invalid_argument,
       "needs a reset callback",
       bad_options([](pw::AgentOptions& o) { o.read.landing = pw::Landing::direct; })},
      {"Agent()", "read.landing direct with read_mode optimistic", Kind::invalid_argument,
       "never pins first", bad_options([](pw::AgentOptions& o) {
         o.read.landing = pw::Landing::direct;
         o.read.read_mode = pw::ReadMode::optimistic;
         o.reset = [](std::span<const pw::LayerRef>, std::uint64_t) {};
       })},
      {"Agent()", "out-of-range read.landing", Kind::invalid_argument,
       "read.landing holds an out-of-range",
       bad_options([](pw::AgentOptions& o) { o.read.landing = static_cast<pw::Landing>(9); })},
      {"Agent()", "progress thread polling every 0 us", Kind::invalid_argument,
       "serve.progress_interval_us", bad_options([](pw::AgentOptions& o) {
         o.serve.progress_thread = true;
         o.serve.progress_interval_us = 0;
       })},
      {"Agent()", "negative post-rebirth publish wait", Kind::invalid_argument,
       "publish.rebirth_wait_ms",
       bad_options([](pw::AgentOptions& o) { o.publish.rebirth_wait_ms = -1.0; })},
      {"Agent()", "negative publish.every", Kind::invalid_argument, "publish.every must be >= 0",
       bad_options([](pw::AgentOptions& o) { o.publish.every = -1; })},
      {"Agent()", "out-of-range paused_deaths", Kind::invalid_argument,
       "paused_deaths is out of range", bad_options([](pw::AgentOptions& o) {
         o.paused_deaths = static_cast<pw::PausedDeaths>(9);
       })},
      {"Agent()", "k > population - 1 (defer)", Kind::invalid_argument, "other agent(s) can donate",
       bad_options([&](pw::AgentOptions& o) {
         o.selection.k = n;
         o.selection.shortfall = pw::Shortfall::defer;
       })},
      {"Agent()", "bad options on rank 0 only", Kind::invalid_argument, "",
       bad_options([&](pw::AgentOptions& o) { o.selection.k = rank == 0 ? 0 : 1; })},
      // Hyperparameters and PBT's explore options
      {"Layout::add_hyperparameter", "duplicate name", Kind::invalid_argument,
       "duplicate hyperparameter name 'lr'", [&] { lay.add_hyperparameter("lr"); }},
      {"Layout::add_hyperparameter", "empty name", Kind::invalid_argument, "is invalid",
       [&] { lay.add_hyperparameter(""); }},
      {"Layout::add_hyperparameter", "out-of-range type", Kind::invalid_argument, "invalid type",
       [&] { lay.add_hyperparameter("t", static_cast<pw::HyperType>(9)); }},
      {"Layout::add_hyperparameter", "one more than 32", Kind::invalid_argument, "at most 32",
       [&] { full_hyper.add_hyperparameter("h32"); }},
      {"Hyperparameters::set", "non-integral value for an int64", Kind::invalid_argument,
       "is not an int64 value", [&] { hyper_values.set("batch", 2.5); }},
      {"Hyperparameters::get", "unknown name", Kind::invalid_argument,
       "unknown hyperparameter 'nope' (declared: 'lr', 'batch')",
       [&] { (void)hyper_values.get("nope"); }},
      {"ParameterWindow::set_hyperparameters", "other declarations", Kind::invalid_argument,
       "but the layout declares []", [&] { win.set_hyperparameters(hyper_values); }},
      {"Agent()", "explore rule for an undeclared hyperparameter", Kind::invalid_argument,
       "no such hyperparameter in the layout (declared: none)",
       bad_options([](pw::AgentOptions& o) { o.explore.rules = {{.name = "lr"}}; })},
      {"Agent()", "explore rule lo > hi", Kind::invalid_argument, "lo 2.000000 > hi 1.000000",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {
             {.name = "lr", .distribution = pw::HyperDistribution::uniform, .lo = 2, .hi = 1}};
       })},
      {"Agent()", "log_uniform with lo <= 0", Kind::invalid_argument, "positive bounds",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {
             {.name = "lr", .distribution = pw::HyperDistribution::log_uniform, .lo = 0, .hi = 1}};
       })},
      {"Agent()", "log scale with lo <= 0", Kind::invalid_argument, "positive bounds",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "lr", .lo = -1, .hi = 1, .scale = pw::HyperScale::log}};
       })},
      {"Agent()", "uniform without bounds", Kind::invalid_argument, "finite bounds",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "lr", .distribution = pw::HyperDistribution::uniform}};
       })},
      {"Agent()", "int range on a float64", Kind::invalid_argument,
       "float64 hyperparameter with distribution int", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {
             {.name = "lr", .distribution = pw::HyperDistribution::int_range, .lo = 1, .hi = 4}};
       })},
      {"Agent()", "uniform on an int64", Kind::invalid_argument,
       "int64 hyperparameter with distribution uniform", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {
             {.name = "batch", .distribution = pw::HyperDistribution::uniform, .lo = 1, .hi = 4}};
       })},
      {"Agent()", "non-integral int range", Kind::invalid_argument, "must be integers",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "batch",
                             .distribution = pw::HyperDistribution::int_range,
                             .lo = 1.5,
                             .hi = 4}};
       })},
      {"Agent()", "empty choice list", Kind::invalid_argument, "at least one value",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "batch", .distribution = pw::HyperDistribution::choice}};
       })},
      {"Agent()", "non-integral choice for an int64", Kind::invalid_argument, "non-integral choice",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "batch",
                             .distribution = pw::HyperDistribution::choice,
                             .choices = {8, 12.5}}};
       })},
      {"Agent()", "duplicate explore rule", Kind::invalid_argument, "listed twice",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "lr"}, {.name = "lr"}};
       })},
      {"Agent()", "resample probability 1.5", Kind::invalid_argument,
       "explore.resample_probability 1.500000 is outside [0, 1]",
       bad_hyper_options([](pw::AgentOptions& o) { o.explore.resample_probability = 1.5; })},
      {"Agent()", "perturb factor 0", Kind::invalid_argument, "explore.perturb_factors[1]",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.perturb_factors = {0.8, 0.0};
       })},
      {"Agent()", "no perturb factors", Kind::invalid_argument, "perturb_factors is empty",
       bad_hyper_options([](pw::AgentOptions& o) { o.explore.perturb_factors.clear(); })},
      {"Agent()", "out-of-range hyper inheritance", Kind::invalid_argument,
       "explore.inherit is out of range", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.inherit = static_cast<pw::HyperInherit>(7);
       })},
      {"Agent::set_hyperparameters", "other declarations", Kind::invalid_argument,
       "set_hyperparameters", [&] { hyper_agent.set_hyperparameters(win.hyperparameters()); }},
      {"parse_agent_options", "unknown explore distribution", Kind::invalid_argument,
       "an explore rule", [&] { (void)pw::parse_agent_options("explore.lr=gauss:0..1"); }},
      {"parse_agent_options", "malformed explore range", Kind::invalid_argument, "a range",
       [&] { (void)pw::parse_agent_options("explore.lr=uniform:0-1"); }},
      {"parse_agent_options", "unknown explore scale", Kind::invalid_argument, "linear, log",
       [&] { (void)pw::parse_agent_options("explore_scale.lr=cubic"); }},
      {"parse_agent_options", "unknown hyper_inherit", Kind::invalid_argument, "best, mix, keep",
       [&] { (void)pw::parse_agent_options("hyper_inherit=worst"); }},
      {"parse_agent_options", "malformed perturb factor", Kind::invalid_argument, "is not a number",
       [&] { (void)pw::parse_agent_options("perturb_factors=0.8,x"); }},
      {"parse_agent_options", "malformed resample probability", Kind::invalid_argument,
       "is not a number", [&] { (void)pw::parse_agent_options("resample_probability=half"); }},
      {"parse_agent_options", "explore key without a name", Kind::invalid_argument,
       "unknown option 'explore.'", [&] { (void)pw::parse_agent_options("explore.=perturb"); }},
      // options parsing
      {"parse_agent_options", "unknown key", Kind::invalid_argument, "unknown option 'kk'",
       [&] { (void)pw::parse_agent_options("kk=2"); }},
      {"parse_agent_options", "malformed integer", Kind::invalid_argument, "is not an integer",
       [&] { (void)pw::parse_agent_options("k=two"); }},
      {"parse_agent_options", "malformed number", Kind::invalid_argument, "is not a number",
       [&] { (void)pw::parse_agent_options("momentum=0.x"); }},
      {"parse_agent_options", "unknown selection", Kind::invalid_argument, "",
       [&] { (void)pw::parse_agent_options("selection=best_ever"); }},
      {"parse_agent_options", "malformed age range", Kind::invalid_argument, "a range",
       [&] { (void)pw::parse_agent_options("age=50-150"); }},
      {"parse_agent_options", "unknown paused_deaths", Kind::invalid_argument, "defer, honour",
       [&] { (void)pw::parse_agent_options("paused_deaths=sometimes"); }},
      {"parse_agent_options", "invalid result (k=0)", Kind::invalid_argument, "selection.k",
       [&] { pw::validate(pw::parse_agent_options("k=0"), 4); }},
  };

  if (n >= 3) {  // two donors exist
    rows.push_back(
        {"pull", "weights whose sum overflows", Kind::invalid_argument, "sum to infinity", [&] {
           (void)win.pull({donor, (rank + 2) % n}, {ow, ob},
                          {.reduction = pw::Reduction::weighted, .weights = {1e308, 1e308}});
         }});
  }
  int rows_checked = 0;
  for (const Row& row : rows) {
    const std::string why = run_row(row);
    EXPECT_EQ(why, "") << row.entry << " / " << row.input << ": expected " << kind_name(row.kind)
                       << " containing '" << row.fragment << "'";
    // Nothing changed.
    EXPECT_EQ(ow, ow0) << row.entry << " / " << row.input << " touched the output";
    EXPECT_EQ(ob, ob0) << row.entry << " / " << row.input << " touched the output";
    EXPECT_EQ(win.version(), version_before) << row.entry << " / " << row.input;
    const pw::RosterEntry r = win.roster(rank);
    EXPECT_EQ(r.version, roster_before.version) << row.entry << " / " << row.input;
    EXPECT_EQ(r.status_updates, roster_before.status_updates) << row.entry << " / " << row.input;
    EXPECT_TRUE(lay == lay_h) << row.entry << " / " << row.input << " changed the layout";
    EXPECT_EQ(lay.fingerprint(), lay_h.fingerprint()) << row.entry << " / " << row.input;
    EXPECT_TRUE(full_hyper == full_hyper0) << row.entry << " / " << row.input;
    EXPECT_TRUE(hyper_values == hyper_values0) << row.entry << " / " << row.input;
    EXPECT_TRUE(hyper_agent.hyperparameters() == hyper_agent0) << row.entry << " / " << row.input;
    EXPECT_EQ(win.hyperparameters().size(), 0U) << row.entry << " / " << row.input;
    EXPECT_EQ(lay.total_bytes(), lay0.total_bytes()) << row.entry << " / " << row.input;
    EXPECT_EQ(lay.total_elements(), lay0.total_elements()) << row.entry << " / " << row.input;
    EXPECT_TRUE(grid_outputs_intact()) << row.entry << " / " << row.input << " touched a view";
    EXPECT_EQ(gridwin.version(), grid_version_before) << row.entry << " / " << row.input;
    ++rows_checked;
  }

  // Agent::step with bad parameters: refused before anything happens.
  {
    pw::AgentOptions o;
    o.selection.shortfall = pw::Shortfall::clamp;
    pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
    std::vector<float> aw(kW, 1.0F);
    std::vector<double> ab(4, 1.0);
    const std::vector<Row> step_rows = {
        {"Agent::step", "span one element short", Kind::invalid_argument,
         "expects 64 elements, got 63",
         [&] {
           (void)agent.step(0, 1.0, {short_w, ab});
         }},
        {"Agent::step", "dtype mismatch", Kind::invalid_argument, "expects dtype float64",
         [&] {
           (void)agent.step(0, 1.0, {aw, b_as_float});
         }},
        {"Agent::step", "one layer of two", Kind::invalid_argument, "got 1 layers",
         [&] { (void)agent.step(0, 1.0, {aw}); }},
        {"Agent::step", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
         [&] {
           (void)agent.step(0, 1.0, {pw::LayerRef("w", aw), pw::LayerRef("bias", ab)});
         }},
        {"Agent::step", "4x16 view for a flat layer of 64", Kind::invalid_argument,
         "'w' [64 float32] got a view of shape 4x16",
         [&] {
           (void)agent.step(0, 1.0, {pw::LayerRef(r4x16), pw::LayerRef(ab)});
         }},
    };
    const pw::RosterEntry before = agent.window().roster(rank);
    for (const Row& row : step_rows) {
      EXPECT_EQ(run_row(row), "") << row.entry << " / " << row.input;
      EXPECT_EQ(agent.steps(), 0) << row.input;
      EXPECT_EQ(agent.age(), 0) << row.input;
      EXPECT_EQ(agent.window().version(), 0U) << row.input;
      EXPECT_EQ(agent.window().roster(rank).status_updates, before.status_updates) << row.input;
      ++rows_checked;
    }
    EXPECT_EQ(agent.step(0, 1.0, {aw, ab}).step, 1);  // and it still works
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // Agent groups: the split, the shard cut, GroupAgent construction and step, the report.
  {
    pw::AgentOptions k1;
    k1.selection.k = 1;
    auto group_agent = [&](pw::GroupOptions go, pw::AgentOptions o, pw::WindowOptions wo) {
      return [go, o, wo] {
        pw::AgentGroups g(MPI_COMM_WORLD, go);
        pw::GroupAgent a(g, layout(), o, wo);
      };
    };
    pw::AgentOptions bad_k = k1;
    bad_k.selection.k = 0;
    const std::vector<Row> group_rows = {
        {"AgentGroups()", "ranks_per_agent 0", Kind::invalid_argument, "must be >= 1",
         [&] { pw::AgentGroups g(MPI_COMM_WORLD, {.ranks_per_agent = 0}); }},
        {"AgentGroups()", "size not a multiple of g", Kind::invalid_argument,
         "not a multiple of ranks_per_agent",
         [&] { pw::AgentGroups g(MPI_COMM_WORLD, {.ranks_per_agent = n + 1}); }},
        {"AgentGroups()", "every rank a buffer rank", Kind::invalid_argument, "need at least one",
         [&] { pw::AgentGroups g(MPI_COMM_WORLD, {.buffer_ranks = n}); }},
        {"AgentGroups()", "assignment of the wrong size", Kind::invalid_argument,
         "entries, the communicator has",
         [&] { pw::AgentGroups g(MPI_COMM_WORLD, {.assignment = {0}}); }},
        {"AgentGroups()", "options differ across ranks", Kind::invalid_argument,
         "differ across ranks",
         [&] { pw::AgentGroups g(MPI_COMM_WORLD, {.buffer_ranks = rank == 0 ? 1 : 0}); }},
        {"ShardPlan()", "0 shards", Kind::invalid_argument, "shards = 0 must be >= 1",
         [&] { pw::ShardPlan p(layout(), 0); }},
        {"ShardPlan::shard_layout", "shard out of range", Kind::invalid_argument, "no shard 2",
         [&] { (void)pw::ShardPlan(layout(), 2).shard_layout(2); }},
        {"GroupAgent()", "live exposure", Kind::invalid_argument, "Exposure::live",
         group_agent({}, k1, {.exposure = pw::Exposure::live})},
        {"GroupAgent()", "invalid options (k = 0)", Kind::invalid_argument, "selection.k",
         group_agent({}, bad_k, {})},
        {"PopulationReport::write_json", "unwritable path", Kind::invalid_argument, "cannot open",
         [&] { pw::PopulationReport{}.write_json("/nonexistent-dir/r.json"); }},
    };
    for (const Row& row : group_rows) {
      EXPECT_EQ(run_row(row), "") << row.entry << " / " << row.input;
      ++rows_checked;
    }
    // GroupAgent::step with bad parameters: refused on every rank of the agent, nothing done.
    pw::AgentGroups groups(MPI_COMM_WORLD, {});
    pw::GroupAgent agent(groups, layout(), k1);
    std::vector<float> aw(kW, 1.0F);
    std::vector<double> ab(4, 1.0);
    (void)agent.publish({aw, ab});
    const std::uint64_t epoch = agent.epoch();
    const std::vector<Row> step_rows = {
        {"GroupAgent::step", "span one element short", Kind::invalid_argument,
         "expects 64 elements, got 63",
         [&] {
           (void)agent.step(0, 1.0, {short_w, ab});
         }},
        {"GroupAgent::step", "dtype mismatch", Kind::invalid_argument, "expects dtype float64",
         [&] {
           (void)agent.step(0, 1.0, {aw, b_as_float});
         }},
        {"GroupAgent::step", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
         [&] {
           (void)agent.step(0, 1.0, {pw::LayerRef("w", aw), pw::LayerRef("bias", ab)});
         }},
        {"GroupAgent::step", "layer named twice", Kind::invalid_argument, "given twice",
         [&] {
           (void)agent.step(0, 1.0, {pw::LayerRef("w", aw), pw::LayerRef("w", aw)});
         }},
        {"GroupAgent::step", "LayoutLeft 8x8 view for a flat layer of 64", Kind::invalid_argument,
         "'w' [64 float32] got a view of shape 8x8",
         [&] {
           (void)agent.step(0, 1.0, {pw::LayerRef("w", left8), pw::LayerRef("b", ab)});
         }},
        {"GroupAgent::publish", "one layer of two", Kind::invalid_argument, "got 1 layers",
         [&] { (void)agent.publish({aw}); }},
    };
    const pw::RosterEntry before = agent.window().roster(agent.agent());
    for (const Row& row : step_rows) {
      EXPECT_EQ(run_row(row), "") << row.entry << " / " << row.input;
      EXPECT_EQ(agent.steps(), 0) << row.input;
      EXPECT_EQ(agent.epoch(), epoch) << row.input;
      EXPECT_EQ(agent.window().version(), 1U) << row.input;
      EXPECT_EQ(agent.window().roster(agent.agent()).status_updates, before.status_updates)
          << row.input;
      ++rows_checked;
    }
    EXPECT_EQ(agent.step(0, 1.0, {aw, ab}).step, 1);  // and it still works
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // The window still serves an exact pull after all of that.
  std::vector<float> gw(kW);
  std::vector<double> gb(4);
  const pw::PullResult r = win.pull({donor}, {gw, gb});
  EXPECT_EQ(r.donors[0].version, 1U);
  EXPECT_EQ(gw, w);
  EXPECT_EQ(gb, b);
  // And the grid window an exact pull into a row-major 8x8 view.
  const Right pg("pg", 8, 8);
  EXPECT_EQ(gridwin.pull({donor}, {pw::LayerRef(pg)}).donors[0].version, 1U);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 8; ++j)
      EXPECT_EQ(pg(i, j), static_cast<float>(donor * 100) + static_cast<float>(i * 8 + j));
  if (rank == 0) {
    std::printf("[ table   ] %d bad inputs tried, each with its error and no state change\n",
                rows_checked);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
