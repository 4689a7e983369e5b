// Bad input, table-driven: every public entry point (Layout, ParameterWindow constructor,
// publish, pull, roster, live_span, Agent constructor, step, options parsing, AgentGroups,
// ShardPlan, GroupAgent constructor / step / publish, the report) with each bad
// input. Each row names the entry point, the input, the exception type and a fragment of its
// message, and is one GoogleTest case (value-parameterised: EveryEntryPoint/BadInputTable.*/
// <entry>_<input>, and likewise for the Agent::step, groups and GroupAgent::step tables).
// After each row the test checks that nothing changed: the caller's output, this rank's
// version and roster; after each table, that the window still serves a correct pull (or the
// agent still steps). A table's state is made once for its suite and shared by its rows, in
// table order, on every rank (the rows are collective: never shuffle them).
// docs/reliability.md lists the rows (keep the two in step).
#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
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

/// One row of a table whose state is @p Ctx.
template <class Ctx>
struct Row {
  const char* entry;     ///< public entry point
  const char* input;     ///< the bad input
  Kind kind;             ///< exception type expected
  std::string fragment;  ///< part of the message
  std::function<void(Ctx&)> call;
  int ranks = 2;  ///< ranks the row needs (skipped with fewer)
};

/// How GoogleTest shows a row (in failures): its entry point and input.
template <class Ctx>
void PrintTo(const Row<Ctx>& row, std::ostream* os) {
  *os << row.entry << " / " << row.input;
}

/// The row's test name: entry point and input, every run of other characters one '_'
/// ("Layout::add", "empty name" -> Layout_add_empty_name).
template <class Ctx>
std::string row_name(const testing::TestParamInfo<Row<Ctx>>& info) {
  const std::string text = std::string(info.param.entry) + " " + info.param.input;
  std::string name;
  for (const char ch : text) {
    const bool alnum =
        (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (alnum) {
      name += ch;
    } else if (!name.empty() && name.back() != '_') {
      name += '_';
    }
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

/// Runs @p row on @p ctx; returns "" when it threw the expected type with the fragment, else
/// why not.
template <class Ctx>
std::string run_row(const Row<Ctx>& row, Ctx& ctx) {
  try {
    row.call(ctx);
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

/// Rows tried on this rank, over every table (printed at the end on rank 0).
int& rows_checked() {
  static int count = 0;
  return count;
}

/// Prints the number of rows tried, after every test, as the one-body test did.
class RowCount : public testing::Environment {
 public:
  void TearDown() override {
    if (pw::test::world_rank() != 0) return;
    std::printf("[ table   ] %d bad inputs tried, each with its error and no state change\n",
                rows_checked());
    // The docs quote this count (docs/reliability.md); the suite's docs_check compares them
    // with the file written here (scripts/check_docs.py, "Counts").
    if (const char* dir = std::getenv("PARAMWIN_DOC_COUNTS_DIR"); dir != nullptr && *dir) {
      const std::string name = "bad_inputs_np" + std::to_string(pw::test::world_size());
      std::ofstream(std::string(dir) + "/" + name + ".tsv")
          << name << '\t' << rows_checked() << '\n';
    }
  }
};
[[maybe_unused]] testing::Environment* const kRowCount =
    testing::AddGlobalTestEnvironment(new RowCount);

/// A suite over the rows of one table: its state (@p Ctx, collective to make and to free) is
/// made before the first row and freed after the last, on every rank.
template <class Ctx>
class TableSuite : public testing::TestWithParam<Row<Ctx>> {
 protected:
  static void SetUpTestSuite() {
    if (pw::test::world_size() >= 2) ctx_ = std::make_unique<Ctx>();
  }
  static void TearDownTestSuite() {
    if (ctx_ != nullptr) ctx_->after_all_rows();
    ctx_.reset();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void SetUp() override { PARAMWIN_REQUIRE_RANKS(this->GetParam().ranks); }
  /// Runs the row, checks its error and counts it.
  Ctx& run() {
    const Row<Ctx>& row = this->GetParam();
    EXPECT_EQ(run_row(row, *ctx_), "")
        << row.entry << " / " << row.input << ": expected " << kind_name(row.kind)
        << " containing '" << row.fragment << "'";
    ++rows_checked();
    return *ctx_;
  }

 private:
  static inline std::unique_ptr<Ctx> ctx_;
};

constexpr std::size_t kW = 64;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW).add("b", {4}, pw::DType::float64);
  return l;
}

/// layout() with two hyperparameters, for the PBT rows.
pw::Layout hyper_layout() {
  pw::Layout l = layout();
  l.add_hyperparameter("lr");
  l.add_hyperparameter("batch", pw::HyperType::int64);
  return l;
}

/// One 8x8 layer, for the rules on multi-dimensional Kokkos views: a view of rank 2 or more
/// must have the layer's shape, in row-major order.
pw::Layout grid_layout() {
  pw::Layout l;
  l.add("g", {8, 8});
  return l;
}

pw::AgentOptions clamp_options() {
  pw::AgentOptions o;
  o.selection.shortfall = pw::Shortfall::clamp;
  return o;
}

using Right = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Left = Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace>;
using Cube = Kokkos::View<float***, Kokkos::HostSpace>;
using Strided = decltype(Kokkos::subview(std::declval<const Right&>(), Kokkos::ALL, 0));

/// Who runs the rows.
struct World {
  int n = pw::test::world_size();
  int rank = pw::test::world_rank();
  int donor = (rank + 1) % n;
  void after_all_rows() {}
};

/// The state of the main table: windows, the caller's buffers and views, layouts and
/// hyperparameters that the rows try to misuse and must leave as they were.
struct Table : World {
  Table();
  /// After the last row: the windows still serve exact pulls.
  void after_all_rows();

  double nan = std::numeric_limits<double>::quiet_NaN();
  double inf = std::numeric_limits<double>::infinity();
  // Named: unnamed, two live windows of one layout over the same ranks would be refused
  // (the row "a second live unnamed window of one layout").
  pw::ParameterWindow<> win{MPI_COMM_WORLD, layout(), {.name = "table"}};
  // A second window whose rank 0 publishes NaN/Inf (the others publish finite data).
  pw::ParameterWindow<> nanwin{MPI_COMM_WORLD, layout(), {.name = "nan"}};
  pw::ParameterWindow<> gridwin{MPI_COMM_WORLD, grid_layout()};
  pw::Agent<> hyper_agent{MPI_COMM_WORLD, hyper_layout(), clamp_options()};
  std::vector<float> w = std::vector<float>(kW, 7.0F);
  std::vector<double> b = std::vector<double>(4, 9.0);
  // The caller's output every row must leave untouched.
  std::vector<float> ow = std::vector<float>(kW, -3.0F);
  std::vector<double> ob = std::vector<double>(4, -4.0);
  const std::vector<float> ow0 = ow;
  const std::vector<double> ob0 = ob;
  std::vector<float> short_w = std::vector<float>(kW - 1);
  std::vector<float> b_as_float = std::vector<float>(4);
  std::vector<float> wide_w = std::vector<float>(kW + 1);
  pw::Layout lay;
  pw::Layout lay0;
  pw::Layout lay_h;
  // Every second element of a 2-column grid: a strided view of the layer's size.
  const Right grid{"grid", kW, 2};
  const Strided strided = Kokkos::subview(grid, Kokkos::ALL, 0);
  const Right g8{"g8", 8, 8};
  // Each of the right element count, each refused; as outputs they must stay untouched.
  const Left left8{"left8", 8, 8};
  const Right r4x16{"r4x16", 4, 16};
  const Cube cube{"cube", 4, 4, 4};
  std::uint64_t grid_version_before = 0;
  pw::RosterEntry roster_before{};
  std::uint64_t version_before = 0;
  pw::Layout full_hyper;
  pw::Layout full_hyper0;
  pw::Hyperparameters hyper_values = hyper_layout().make_hyperparameters();
  pw::Hyperparameters hyper_values0;
  const pw::Hyperparameters hyper_agent0 = hyper_agent.hyperparameters();

  bool grid_outputs_intact() const {
    for (std::size_t i = 0; i < 64; ++i) {
      if (left8.data()[i] != -5.0F || r4x16.data()[i] != -5.0F || cube.data()[i] != -5.0F) {
        return false;
      }
    }
    return true;
  }
};

Table::Table() {
  std::vector<float> wn(kW, 1.0F);
  std::vector<double> bn(4, 1.0);
  if (rank == 0) {
    wn[3] = static_cast<float>(nan);
    bn[1] = inf;
  }
  (void)win.publish({w, b});
  (void)nanwin.publish({wn, bn});
  MPI_Barrier(MPI_COMM_WORLD);
  lay.add("x", std::size_t{2});
  lay0 = lay;
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 8; ++j)
      g8(i, j) = static_cast<float>(rank * 100) + static_cast<float>(i * 8 + j);
  (void)gridwin.publish({pw::ConstLayerRef(g8)});
  MPI_Barrier(MPI_COMM_WORLD);
  Kokkos::deep_copy(left8, -5.0F);
  Kokkos::deep_copy(r4x16, -5.0F);
  Kokkos::deep_copy(cube, -5.0F);
  grid_version_before = gridwin.version();
  roster_before = win.roster(rank);
  version_before = win.version();
  for (std::size_t i = 0; i < pw::kMaxHyperparameters; ++i) {
    full_hyper.add_hyperparameter(std::string("h").append(std::to_string(i)));
  }
  full_hyper0 = full_hyper;
  hyper_values.set("lr", 0.5);
  hyper_values0 = hyper_values;
  lay.add_hyperparameter("lr");
  lay_h = lay;
}

void Table::after_all_rows() {
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
}

/// A row that constructs an Agent with clamp_options() edited by @p edit (collective: throws
/// on every rank).
template <class Edit>
std::function<void(Table&)> bad_options(Edit edit) {
  return [edit](Table&) {
    pw::AgentOptions o = clamp_options();
    edit(o);
    pw::Agent<> a(MPI_COMM_WORLD, layout(), o);
  };
}

/// bad_options for an Agent over hyper_layout().
template <class Edit>
std::function<void(Table&)> bad_hyper_options(Edit edit) {
  return [edit](Table&) {
    pw::AgentOptions o = clamp_options();
    edit(o);
    pw::Agent<> a(MPI_COMM_WORLD, hyper_layout(), o);
  };
}

std::vector<Row<Table>> table_rows() {
  return {
      // Layout
      {"Layout::add", "empty name", Kind::invalid_argument, "is invalid",
       [](Table& c) { c.lay.add("", std::size_t{1}); }},
      {"Layout::add", "duplicate name", Kind::invalid_argument, "duplicate layer name 'x'",
       [](Table& c) { c.lay.add("x", std::size_t{1}); }},
      {"Layout::add", "negative count", Kind::invalid_argument, "negative element count",
       [](Table& c) { c.lay.add("y", -3); }},
      {"Layout::add", "out-of-range dtype", Kind::invalid_argument, "invalid dtype",
       [](Table& c) { c.lay.add("y", std::size_t{1}, static_cast<pw::DType>(99)); }},
      {"Layout::add", "a layer of more than 2^64 bytes", Kind::invalid_argument,
       "more than 2^64 bytes",
       [](Table& c) {
         c.lay.add("huge", std::vector<std::size_t>{std::size_t{1} << 61, 2});
       }},
      {"Layout::add", "layout total over 2^64 bytes", Kind::invalid_argument, "overflow 2^64",
       [](Table& c) {
         c.lay.add("huge", std::vector<std::size_t>{(std::size_t{1} << 63) - 1},
                   pw::DType::float16);
       }},
      {"Layout::operator[]", "index out of range", Kind::invalid_argument, "out of range",
       [](Table& c) { (void)c.lay[5]; }},
      {"Layout::index_of", "unknown name", Kind::invalid_argument, "unknown layer 'nope'",
       [](Table& c) { (void)c.lay.index_of("nope"); }},
      {"Layout::deserialize", "malformed text", Kind::invalid_argument, "malformed",
       [](Table&) { (void)pw::Layout::deserialize("garbage without fields"); }},
      // ParameterWindow constructor
      {"ParameterWindow()", "MPI_COMM_NULL", Kind::invalid_argument, "MPI_COMM_NULL",
       [](Table&) { pw::ParameterWindow<> x(MPI_COMM_NULL, layout()); }},
      {"ParameterWindow()", "out-of-range transport", Kind::invalid_argument, "out-of-range",
       [](Table&) {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.transport = static_cast<pw::Transport>(9)});
       }},
      {"ParameterWindow()", "progress_interval_us 0", Kind::invalid_argument,
       "progress_interval_us",
       [](Table&) {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.progress_thread = true, .progress_interval_us = 0});
       }},
      {"ParameterWindow()", "layout differs on rank 0", Kind::layout_mismatch, "",
       [](Table& c) {
         pw::Layout l = layout();
         if (c.rank == 0) l.add("extra", std::size_t{1});
         pw::ParameterWindow<> x(MPI_COMM_WORLD, l);
       }},
      {"ParameterWindow()", "windows created in opposite orders (named)", Kind::invalid_argument,
       "windows must be created in the same order on every rank",
       [](Table& c) {
         pw::ParameterWindow<> first(MPI_COMM_WORLD, layout(), {.name = c.rank == 0 ? "A" : "B"});
         pw::ParameterWindow<> second(MPI_COMM_WORLD, layout(), {.name = c.rank == 0 ? "B" : "A"});
       }},
      {"ParameterWindow()",
       "a second live unnamed window of one layout (std::optional, opposite orders)",
       Kind::invalid_argument, "name your windows (WindowOptions::name)",
       [](Table& c) {
         std::optional<pw::ParameterWindow<>> a;
         std::optional<pw::ParameterWindow<>> b;
         (c.rank == 0 ? a : b).emplace(MPI_COMM_WORLD, layout());
         (c.rank == 0 ? b : a).emplace(MPI_COMM_WORLD, layout());
       }},
      {"ParameterWindow()", "verify on every rank but rank 0", Kind::invalid_argument,
       "WindowOptions differ across ranks: verify is false on rank 0, true on rank 1",
       [](Table& c) {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(), {.verify = c.rank != 0});
       }},
      {"ParameterWindow()", "layout_check strict on rank 0, per_donor on the others",
       Kind::invalid_argument, "layout_check is strict on rank 0, per_donor on rank 1",
       [](Table& c) {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.layout_check = c.rank == 0 ? pw::LayoutCheck::strict
                                                              : pw::LayoutCheck::per_donor});
       }},
      {"ParameterWindow()", "out-of-range exposure on rank 0 only", Kind::invalid_argument,
       "out-of-range enumerator",
       [](Table& c) {
         pw::ParameterWindow<> x(MPI_COMM_WORLD, layout(),
                                 {.exposure = c.rank == 0 ? static_cast<pw::Exposure>(7)
                                                          : pw::Exposure::snapshot});
       }},
      {"ParameterWindow()", "a window larger than the node (2^40 float32)", Kind::error,
       "cannot be allocated",
       [](Table&) {
         pw::Layout l;
         l.add("x", std::size_t{1} << 40);
         pw::ParameterWindow<> x(MPI_COMM_WORLD, l);
       }},
      // publish
      {"publish", "span one element short", Kind::invalid_argument, "expects 64 elements, got 63",
       [](Table& c) {
         (void)c.win.publish({c.short_w, c.b});
       }},
      {"publish", "span one element long", Kind::invalid_argument, "expects 64 elements, got 65",
       [](Table& c) {
         (void)c.win.publish({c.wide_w, c.b});
       }},
      {"publish", "float32 for a float64 layer", Kind::invalid_argument,
       "expects dtype float64, got float32",
       [](Table& c) {
         (void)c.win.publish({c.w, c.b_as_float});
       }},
      {"publish", "one layer of two", Kind::invalid_argument, "got 1 layers, the layout has 2",
       [](Table& c) { (void)c.win.publish({c.w}); }},
      {"publish", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
       [](Table& c) {
         (void)c.win.publish({pw::ConstLayerRef("w", c.w), pw::ConstLayerRef("bias", c.b)});
       }},
      {"publish", "strided unnamed view", Kind::invalid_argument,
       "layer #0 (w) is a view that is not contiguous",
       [](Table& c) {
         (void)c.win.publish({pw::ConstLayerRef(c.strided), pw::ConstLayerRef(c.b)});
       }},
      {"publish", "no layers on a snapshot window", Kind::invalid_argument, "Exposure::live",
       [](Table& c) { (void)c.win.publish(); }},
      {"publish", "LayoutLeft 8x8 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view whose elements are not in row-major (C) order",
       [](Table& c) { (void)c.gridwin.publish({pw::ConstLayerRef(c.left8)}); }},
      {"publish", "4x16 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x16",
       [](Table& c) { (void)c.gridwin.publish({pw::ConstLayerRef(c.r4x16)}); }},
      {"publish", "4x4x4 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x4x4",
       [](Table& c) { (void)c.gridwin.publish({pw::ConstLayerRef("g", c.cube)}); }},
      {"publish", "8x8 view for a flat layer of 64", Kind::invalid_argument,
       "'w' [64 float32] got a view of shape 8x8",
       [](Table& c) {
         (void)c.win.publish({pw::ConstLayerRef(c.g8), pw::ConstLayerRef(c.b)});
       }},
      // pull
      {"pull", "output one element short", Kind::invalid_argument, "expects 64 elements, got 63",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.short_w, c.ob});
       }},
      {"pull", "output dtype mismatch", Kind::invalid_argument, "expects dtype float64",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.b_as_float});
       }},
      {"pull", "LayoutLeft 8x8 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view whose elements are not in row-major (C) order",
       [](Table& c) { (void)c.gridwin.pull({c.donor}, {pw::LayerRef(c.left8)}); }},
      {"pull", "4x16 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x16",
       [](Table& c) { (void)c.gridwin.pull({c.donor}, {pw::LayerRef("g", c.r4x16)}); }},
      {"pull", "4x4x4 view for an 8x8 layer", Kind::invalid_argument,
       "'g' [8x8 float32] got a view of shape 4x4x4",
       [](Table& c) { (void)c.gridwin.pull({c.donor}, {pw::LayerRef(c.cube)}); }},
      {"pull", "layer named twice", Kind::invalid_argument, "given twice",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {pw::LayerRef("w", c.ow), pw::LayerRef("w", c.ow)});
       }},
      {"pull", "some layers named", Kind::invalid_argument, "either name every layer or none",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {pw::LayerRef("w", c.ow), c.ob});
       }},
      {"pull", "donor rank == size", Kind::invalid_argument, "out of range",
       [](Table& c) {
         (void)c.win.pull({c.n}, {c.ow, c.ob});
       }},
      {"pull", "donor rank -1", Kind::invalid_argument, "rank -1 is out of range",
       [](Table& c) {
         (void)c.win.pull({-1}, {c.ow, c.ob});
       }},
      {"pull", "self as donor", Kind::invalid_argument, "is this rank itself",
       [](Table& c) {
         (void)c.win.pull({c.rank}, {c.ow, c.ob});
       }},
      {"pull", "duplicate donor", Kind::invalid_argument, "is listed twice",
       [](Table& c) {
         (void)c.win.pull({c.donor, c.donor}, {c.ow, c.ob});
       }},
      {"pull", "empty donor list", Kind::invalid_argument, "donor list is empty",
       [](Table& c) {
         (void)c.win.pull(std::span<const int>(), {c.ow, c.ob});
       }},
      {"pull", "weights count != donors", Kind::invalid_argument, "got 2 weights for 1 donors",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob},
                          {.reduction = pw::Reduction::weighted, .weights = {1.0, 2.0}});
       }},
      {"pull", "NaN weight", Kind::invalid_argument, "finite and >= 0",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob},
                          {.reduction = pw::Reduction::weighted, .weights = {c.nan}});
       }},
      {"pull", "weights sum to 0", Kind::invalid_argument, "weights sum to 0",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob},
                          {.reduction = pw::Reduction::weighted, .weights = {0.0}});
       }},
      {"pull", "momentum 1", Kind::invalid_argument, "outside [0, 1)",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob}, {.momentum = 1.0});
       }},
      {"pull", "momentum NaN", Kind::invalid_argument, "momentum",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob}, {.momentum = c.nan});
       }},
      {"pull", "negative timeout", Kind::invalid_argument, "timeout_seconds",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob}, {.timeout_seconds = -1.0});
       }},
      {"pull", "chunk_bytes 8", Kind::invalid_argument, "chunk_bytes 8",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob}, {.chunk_bytes = 8});
       }},
      {"pull", "out-of-range landing", Kind::invalid_argument, "unknown landing",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob}, {.landing = static_cast<pw::Landing>(9)});
       }},
      {"pull", "Landing::direct with ReadMode::optimistic", Kind::invalid_argument,
       "never pins first",
       [](Table& c) {
         (void)c.win.pull({c.donor}, {c.ow, c.ob},
                          {.read_mode = pw::ReadMode::optimistic, .landing = pw::Landing::direct});
       }},
      {"pull", "donor holds NaN/Inf (non_finite = fail)", Kind::donor_error, "donor 0",
       [](Table& c) {
         if (c.rank == 0) throw pw::DonorError(0, "donor 0 (self: row not applicable)");
         (void)c.nanwin.pull({0}, {c.ow, c.ob});
       }},
      {"pull", "only donor holds NaN/Inf (skip_donor)", Kind::donor_error,
       "every donor was left out for non-finite",
       [](Table& c) {
         if (c.rank == 0) throw pw::DonorError(0, "every donor was left out for non-finite");
         (void)c.nanwin.pull({0}, {c.ow, c.ob}, {.non_finite = pw::NonFinitePolicy::skip_donor});
       }},
      // roster, set_status, live_span
      {"roster", "rank == size", Kind::invalid_argument, "out of range",
       [](Table& c) { (void)c.win.roster(c.n); }},
      {"roster", "rank -1", Kind::invalid_argument, "out of range",
       [](Table& c) { (void)c.win.roster(-1); }},
      {"roster", "negative timeout", Kind::invalid_argument, "timeout_seconds must be finite",
       [](Table& c) { (void)c.win.roster(c.donor, -1.0); }},
      {"roster_all", "NaN timeout", Kind::invalid_argument, "timeout_seconds must be finite",
       [](Table& c) { (void)c.win.roster_all(c.nan); }},
      {"set_status", "out-of-range state", Kind::invalid_argument, "out-of-range AgentState",
       [](Table& c) { c.win.set_status({.state = static_cast<pw::AgentState>(7)}); }},
      {"live_span", "snapshot window", Kind::invalid_argument, "Exposure::live",
       [](Table& c) { (void)c.win.live_span<float>("w"); }},
      {"live_span", "unknown layer", Kind::invalid_argument, "unknown layer 'nope'",
       [](Table& c) { (void)c.win.live_span<float>("nope"); }},
      {"live_span", "wrong element type", Kind::invalid_argument, "has another dtype",
       [](Table& c) { (void)c.win.live_span<double>("w"); }},
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
      {"Agent()", "worst fraction 0 (enabled)", Kind::invalid_argument, "can never fire",
       bad_options([](pw::AgentOptions& o) {
         o.triggers.worst_fraction = {.enabled = true, .fraction = 0.0, .every = 1};
       })},
      {"Agent()", "selection.quantile 1.5", Kind::invalid_argument,
       "selection.quantile 1.500000 is outside [0, 1]",
       bad_options([](pw::AgentOptions& o) { o.selection.quantile = 1.5; })},
      {"Agent()", "truncation with quantile 0", Kind::invalid_argument, "the top quantile is empty",
       bad_options([](pw::AgentOptions& o) {
         o.selection.kind = pw::SelectionKind::truncation;
         o.triggers.worst_fraction.fraction = 0.0;
       })},
      {"Agent()", "custom selection without a function", Kind::invalid_argument,
       "needs a selection function",
       bad_options([](pw::AgentOptions& o) { o.selection.kind = pw::SelectionKind::custom; })},
      {"Agent()", "selection function with another kind", Kind::invalid_argument,
       "selection.custom is set", bad_options([](pw::AgentOptions& o) {
         o.selection.custom = [](const pw::SelectionContext&) { return std::vector<int>{}; };
       })},
      {"Agent()", "synchronous without the worst-fraction trigger", Kind::invalid_argument,
       "synchronous needs the worst-fraction trigger enabled",
       bad_options([](pw::AgentOptions& o) { o.triggers.worst_fraction.synchronous = true; })},
      {"Agent()", "synchronous with the age trigger", Kind::invalid_argument,
       "only the worst-fraction trigger may be on", bad_options([](pw::AgentOptions& o) {
         o.triggers.worst_fraction.enabled = true;
         o.triggers.worst_fraction.synchronous = true;
       })},
      {"Agent()", "synchronous on rank 0 only", Kind::invalid_argument,
       "differ across ranks; synchronous PBT",
       [](Table& c) {
         pw::AgentOptions o = pw::AgentOptions::pbt();
         o.triggers.worst_fraction.synchronous = c.rank == 0;
         pw::Agent<> a(MPI_COMM_WORLD, layout(), o);
       }},
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
       bad_options([](pw::AgentOptions& o) {
         o.selection.k = pw::test::world_size();
         o.selection.shortfall = pw::Shortfall::defer;
       })},
      {"Agent()", "bad options on rank 0 only", Kind::invalid_argument, "",
       bad_options(
           [](pw::AgentOptions& o) { o.selection.k = pw::test::world_rank() == 0 ? 0 : 1; })},
      // Hyperparameters and PBT's explore options
      {"Layout::add_hyperparameter", "duplicate name", Kind::invalid_argument,
       "duplicate hyperparameter name 'lr'", [](Table& c) { c.lay.add_hyperparameter("lr"); }},
      {"Layout::add_hyperparameter", "empty name", Kind::invalid_argument, "is invalid",
       [](Table& c) { c.lay.add_hyperparameter(""); }},
      {"Layout::add_hyperparameter", "out-of-range type", Kind::invalid_argument, "invalid type",
       [](Table& c) { c.lay.add_hyperparameter("t", static_cast<pw::HyperType>(9)); }},
      {"Layout::add_hyperparameter", "one more than 32", Kind::invalid_argument, "at most 32",
       [](Table& c) { c.full_hyper.add_hyperparameter("h32"); }},
      {"Hyperparameters::set", "non-integral value for an int64", Kind::invalid_argument,
       "is not an int64 value", [](Table& c) { c.hyper_values.set("batch", 2.5); }},
      {"Hyperparameters::get", "unknown name", Kind::invalid_argument,
       "unknown hyperparameter 'nope' (declared: 'lr', 'batch')",
       [](Table& c) { (void)c.hyper_values.get("nope"); }},
      {"ParameterWindow::set_hyperparameters", "other declarations", Kind::invalid_argument,
       "but the layout declares []", [](Table& c) { c.win.set_hyperparameters(c.hyper_values); }},
      {"Agent()", "explore rule for an undeclared hyperparameter", Kind::invalid_argument,
       "no such hyperparameter in the layout (declared: none)",
       bad_options([](pw::AgentOptions& o) { o.explore.rules = {{.name = "lr"}}; })},
      {"Agent()", "explore clamp_lo > clamp_hi", Kind::invalid_argument,
       "clamp_lo 2.000000 > clamp_hi 1.000000", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.rules = {{.name = "lr", .clamp_lo = 2, .clamp_hi = 1}};
       })},
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
      {"Agent()", "out-of-range explore kind", Kind::invalid_argument,
       "explore.kind is out of range", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.kind = static_cast<pw::ExploreKind>(7);
       })},
      {"Agent()", "pb2 without explore rules", Kind::invalid_argument,
       "needs at least one explore rule",
       bad_hyper_options([](pw::AgentOptions& o) { o.explore.kind = pw::ExploreKind::pb2; })},
      {"Agent()", "pb2 rule without finite bounds", Kind::invalid_argument,
       "explore.kind pb2 needs finite bounds", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.kind = pw::ExploreKind::pb2;
         o.explore.rules = {{.name = "lr", .lo = 0.0}};
       })},
      {"Agent()", "pb2 window 1", Kind::invalid_argument,
       "explore.pb2.window 1 is outside [2, 1000]", bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.kind = pw::ExploreKind::pb2;
         o.explore.pb2.window = 1;
       })},
      {"Agent()", "pb2 min_observations > window", Kind::invalid_argument,
       "explore.pb2.min_observations 20 is outside [2, window 10]",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.kind = pw::ExploreKind::pb2;
         o.explore.pb2.window = 10;
         o.explore.pb2.min_observations = 20;
       })},
      {"Agent()", "pb2 candidates 0", Kind::invalid_argument,
       "explore.pb2.candidates 0 is outside [1, 100000]",
       bad_hyper_options([](pw::AgentOptions& o) {
         o.explore.kind = pw::ExploreKind::pb2;
         o.explore.pb2.candidates = 0;
       })},
      {"Agent::set_hyperparameters", "other declarations", Kind::invalid_argument,
       "set_hyperparameters",
       [](Table& c) { c.hyper_agent.set_hyperparameters(c.win.hyperparameters()); }},
      {"parse_agent_options", "unknown explore distribution", Kind::invalid_argument,
       "an explore rule", [](Table&) { (void)pw::parse_agent_options("explore.lr=gauss:0..1"); }},
      {"parse_agent_options", "malformed explore range", Kind::invalid_argument, "a range",
       [](Table&) { (void)pw::parse_agent_options("explore.lr=uniform:0-1"); }},
      {"parse_agent_options", "unknown explore scale", Kind::invalid_argument, "linear, log",
       [](Table&) { (void)pw::parse_agent_options("explore_scale.lr=cubic"); }},
      {"parse_agent_options", "unknown hyper_inherit", Kind::invalid_argument, "best, mix, keep",
       [](Table&) { (void)pw::parse_agent_options("hyper_inherit=worst"); }},
      {"parse_agent_options", "unknown explore kind", Kind::invalid_argument, "pbt, pb2",
       [](Table&) { (void)pw::parse_agent_options("explore_kind=pb3"); }},
      {"parse_agent_options", "malformed pb2 window", Kind::invalid_argument, "is not an integer",
       [](Table&) { (void)pw::parse_agent_options("pb2_window=big"); }},
      {"parse_agent_options", "malformed perturb factor", Kind::invalid_argument, "is not a number",
       [](Table&) { (void)pw::parse_agent_options("perturb_factors=0.8,x"); }},
      {"parse_agent_options", "malformed resample probability", Kind::invalid_argument,
       "is not a number",
       [](Table&) { (void)pw::parse_agent_options("resample_probability=half"); }},
      {"parse_agent_options", "explore key without a name", Kind::invalid_argument,
       "unknown option 'explore.'",
       [](Table&) { (void)pw::parse_agent_options("explore.=perturb"); }},
      // options parsing
      {"parse_agent_options", "unknown key", Kind::invalid_argument, "unknown option 'kk'",
       [](Table&) { (void)pw::parse_agent_options("kk=2"); }},
      {"parse_agent_options", "malformed integer", Kind::invalid_argument, "is not an integer",
       [](Table&) { (void)pw::parse_agent_options("k=two"); }},
      {"parse_agent_options", "malformed number", Kind::invalid_argument, "is not a number",
       [](Table&) { (void)pw::parse_agent_options("momentum=0.x"); }},
      {"parse_agent_options", "unknown selection", Kind::invalid_argument, "",
       [](Table&) { (void)pw::parse_agent_options("selection=best_ever"); }},
      {"parse_agent_options", "malformed age range", Kind::invalid_argument, "a range",
       [](Table&) { (void)pw::parse_agent_options("age=50-150"); }},
      {"parse_agent_options", "unknown paused_deaths", Kind::invalid_argument, "defer, honour",
       [](Table&) { (void)pw::parse_agent_options("paused_deaths=sometimes"); }},
      {"parse_agent_options", "invalid result (k=0)", Kind::invalid_argument, "selection.k",
       [](Table&) { pw::validate(pw::parse_agent_options("k=0"), 4); }},
      // Two donors exist only from 3 ranks on.
      {"pull", "weights whose sum overflows", Kind::invalid_argument, "sum to infinity",
       [](Table& c) {
         (void)c.win.pull({c.donor, (c.rank + 2) % c.n}, {c.ow, c.ob},
                          {.reduction = pw::Reduction::weighted, .weights = {1e308, 1e308}});
       },
       3},
  };
}

using BadInputTable = TableSuite<Table>;

TEST_P(BadInputTable, ThrowsAndChangesNothing) {
  const Row<Table>& row = GetParam();
  const Table& c = run();
  // Nothing changed.
  EXPECT_EQ(c.ow, c.ow0) << row.entry << " / " << row.input << " touched the output";
  EXPECT_EQ(c.ob, c.ob0) << row.entry << " / " << row.input << " touched the output";
  EXPECT_EQ(c.win.version(), c.version_before) << row.entry << " / " << row.input;
  const pw::RosterEntry r = c.win.roster(c.rank);
  EXPECT_EQ(r.version, c.roster_before.version) << row.entry << " / " << row.input;
  EXPECT_EQ(r.status_updates, c.roster_before.status_updates) << row.entry << " / " << row.input;
  EXPECT_TRUE(c.lay == c.lay_h) << row.entry << " / " << row.input << " changed the layout";
  EXPECT_EQ(c.lay.fingerprint(), c.lay_h.fingerprint()) << row.entry << " / " << row.input;
  EXPECT_TRUE(c.full_hyper == c.full_hyper0) << row.entry << " / " << row.input;
  EXPECT_TRUE(c.hyper_values == c.hyper_values0) << row.entry << " / " << row.input;
  EXPECT_TRUE(c.hyper_agent.hyperparameters() == c.hyper_agent0) << row.entry << " / " << row.input;
  EXPECT_EQ(c.win.hyperparameters().size(), 0U) << row.entry << " / " << row.input;
  EXPECT_EQ(c.lay.total_bytes(), c.lay0.total_bytes()) << row.entry << " / " << row.input;
  EXPECT_EQ(c.lay.total_elements(), c.lay0.total_elements()) << row.entry << " / " << row.input;
  EXPECT_TRUE(c.grid_outputs_intact()) << row.entry << " / " << row.input << " touched a view";
  EXPECT_EQ(c.gridwin.version(), c.grid_version_before) << row.entry << " / " << row.input;
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInputTable, testing::ValuesIn(table_rows()), row_name<Table>);

/// The Agent::step table: steps with bad parameters are refused before anything happens.
struct AgentStep : World {
  /// After the last row: the agent still steps.
  void after_all_rows() {
    EXPECT_EQ(agent.step(0, 1.0, {aw, ab}).step, 1);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  pw::Agent<> agent{MPI_COMM_WORLD, layout(), clamp_options()};
  std::vector<float> aw = std::vector<float>(kW, 1.0F);
  std::vector<double> ab = std::vector<double>(4, 1.0);
  std::vector<float> short_w = std::vector<float>(kW - 1);
  std::vector<float> b_as_float = std::vector<float>(4);
  const Right r4x16{"r4x16", 4, 16};
  const pw::RosterEntry before = agent.window().roster(rank);
};

std::vector<Row<AgentStep>> agent_step_rows() {
  return {
      {"Agent::step", "span one element short", Kind::invalid_argument,
       "expects 64 elements, got 63",
       [](AgentStep& c) {
         (void)c.agent.step(0, 1.0, {c.short_w, c.ab});
       }},
      {"Agent::step", "dtype mismatch", Kind::invalid_argument, "expects dtype float64",
       [](AgentStep& c) {
         (void)c.agent.step(0, 1.0, {c.aw, c.b_as_float});
       }},
      {"Agent::step", "one layer of two", Kind::invalid_argument, "got 1 layers",
       [](AgentStep& c) { (void)c.agent.step(0, 1.0, {c.aw}); }},
      {"Agent::step", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
       [](AgentStep& c) {
         (void)c.agent.step(0, 1.0, {pw::LayerRef("w", c.aw), pw::LayerRef("bias", c.ab)});
       }},
      {"Agent::step", "4x16 view for a flat layer of 64", Kind::invalid_argument,
       "'w' [64 float32] got a view of shape 4x16",
       [](AgentStep& c) {
         (void)c.agent.step(0, 1.0, {pw::LayerRef(c.r4x16), pw::LayerRef(c.ab)});
       }},
  };
}

using BadInputAgentStep = TableSuite<AgentStep>;

TEST_P(BadInputAgentStep, RefusedBeforeAnythingHappens) {
  const Row<AgentStep>& row = GetParam();
  AgentStep& c = run();
  EXPECT_EQ(c.agent.steps(), 0) << row.input;
  EXPECT_EQ(c.agent.age(), 0) << row.input;
  EXPECT_EQ(c.agent.window().version(), 0U) << row.input;
  EXPECT_EQ(c.agent.window().roster(c.rank).status_updates, c.before.status_updates) << row.input;
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInputAgentStep, testing::ValuesIn(agent_step_rows()),
                         row_name<AgentStep>);

// Agent groups: the split, the shard cut, GroupAgent construction, the report.

pw::AgentOptions k1() {
  pw::AgentOptions o;
  o.selection.k = 1;
  return o;
}

pw::AgentOptions bad_k() {
  pw::AgentOptions o = k1();
  o.selection.k = 0;
  return o;
}

pw::AgentOptions sync_pbt() {
  pw::AgentOptions o = pw::AgentOptions::pbt();
  o.triggers.worst_fraction.synchronous = true;
  return o;
}

/// A row that constructs AgentGroups and a GroupAgent over them (collective).
std::function<void(World&)> group_agent(pw::GroupOptions go, pw::AgentOptions o,
                                        pw::WindowOptions wo) {
  return [go, o, wo](World&) {
    pw::AgentGroups g(MPI_COMM_WORLD, go);
    pw::GroupAgent a(g, layout(), o, wo);
  };
}

std::vector<Row<World>> group_rows() {
  return {
      {"AgentGroups()", "ranks_per_agent 0", Kind::invalid_argument, "must be >= 1",
       [](World&) { pw::AgentGroups g(MPI_COMM_WORLD, {.ranks_per_agent = 0}); }},
      {"AgentGroups()", "size not a multiple of g", Kind::invalid_argument,
       "not a multiple of ranks_per_agent",
       [](World& c) { pw::AgentGroups g(MPI_COMM_WORLD, {.ranks_per_agent = c.n + 1}); }},
      {"AgentGroups()", "every rank a buffer rank", Kind::invalid_argument, "need at least one",
       [](World& c) { pw::AgentGroups g(MPI_COMM_WORLD, {.buffer_ranks = c.n}); }},
      {"AgentGroups()", "assignment of the wrong size", Kind::invalid_argument,
       "entries, the communicator has",
       [](World&) { pw::AgentGroups g(MPI_COMM_WORLD, {.assignment = {0}}); }},
      {"AgentGroups()", "options differ across ranks", Kind::invalid_argument,
       "differ across ranks",
       [](World& c) { pw::AgentGroups g(MPI_COMM_WORLD, {.buffer_ranks = c.rank == 0 ? 1 : 0}); }},
      {"ShardPlan()", "0 shards", Kind::invalid_argument, "shards = 0 must be >= 1",
       [](World&) { pw::ShardPlan p(layout(), 0); }},
      {"ShardPlan::shard_layout", "shard out of range", Kind::invalid_argument, "no shard 2",
       [](World&) { (void)pw::ShardPlan(layout(), 2).shard_layout(2); }},
      {"GroupAgent()", "live exposure", Kind::invalid_argument, "Exposure::live",
       group_agent({}, k1(), {.exposure = pw::Exposure::live})},
      {"GroupAgent()", "invalid options (k = 0)", Kind::invalid_argument, "selection.k",
       group_agent({}, bad_k(), {})},
      {"GroupAgent()", "synchronous PBT", Kind::invalid_argument,
       "not supported for sharded agents", group_agent({}, sync_pbt(), {})},
      {"PopulationReport::write_json", "unwritable path", Kind::invalid_argument, "cannot open",
       [](World&) { pw::PopulationReport{}.write_json("/nonexistent-dir/r.json"); }},
  };
}

using BadInputGroups = TableSuite<World>;

TEST_P(BadInputGroups, Throws) { (void)run(); }

INSTANTIATE_TEST_SUITE_P(Rows, BadInputGroups, testing::ValuesIn(group_rows()), row_name<World>);

/// The GroupAgent::step table: refused on every rank of the agent, nothing done.
struct GroupStep : World {
  GroupStep() {
    (void)agent.publish({aw, ab});
    epoch = agent.epoch();
    before = agent.window().roster(agent.agent());
  }
  /// After the last row: the agent still steps.
  void after_all_rows() {
    EXPECT_EQ(agent.step(0, 1.0, {aw, ab}).step, 1);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  pw::AgentGroups groups{MPI_COMM_WORLD, pw::GroupOptions{}};
  pw::GroupAgent agent{groups, layout(), k1()};
  std::vector<float> aw = std::vector<float>(kW, 1.0F);
  std::vector<double> ab = std::vector<double>(4, 1.0);
  std::vector<float> short_w = std::vector<float>(kW - 1);
  std::vector<float> b_as_float = std::vector<float>(4);
  const Left left8{"left8", 8, 8};
  std::uint64_t epoch = 0;
  pw::RosterEntry before{};
};

std::vector<Row<GroupStep>> group_step_rows() {
  return {
      {"GroupAgent::step", "span one element short", Kind::invalid_argument,
       "expects 64 elements, got 63",
       [](GroupStep& c) {
         (void)c.agent.step(0, 1.0, {c.short_w, c.ab});
       }},
      {"GroupAgent::step", "dtype mismatch", Kind::invalid_argument, "expects dtype float64",
       [](GroupStep& c) {
         (void)c.agent.step(0, 1.0, {c.aw, c.b_as_float});
       }},
      {"GroupAgent::step", "unknown layer name", Kind::invalid_argument, "unknown layer 'bias'",
       [](GroupStep& c) {
         (void)c.agent.step(0, 1.0, {pw::LayerRef("w", c.aw), pw::LayerRef("bias", c.ab)});
       }},
      {"GroupAgent::step", "layer named twice", Kind::invalid_argument, "given twice",
       [](GroupStep& c) {
         (void)c.agent.step(0, 1.0, {pw::LayerRef("w", c.aw), pw::LayerRef("w", c.aw)});
       }},
      {"GroupAgent::step", "LayoutLeft 8x8 view for a flat layer of 64", Kind::invalid_argument,
       "'w' [64 float32] got a view of shape 8x8",
       [](GroupStep& c) {
         (void)c.agent.step(0, 1.0, {pw::LayerRef("w", c.left8), pw::LayerRef("b", c.ab)});
       }},
      {"GroupAgent::publish", "one layer of two", Kind::invalid_argument, "got 1 layers",
       [](GroupStep& c) { (void)c.agent.publish({c.aw}); }},
  };
}

using BadInputGroupStep = TableSuite<GroupStep>;

TEST_P(BadInputGroupStep, RefusedOnEveryRankNothingDone) {
  const Row<GroupStep>& row = GetParam();
  GroupStep& c = run();
  EXPECT_EQ(c.agent.steps(), 0) << row.input;
  EXPECT_EQ(c.agent.epoch(), c.epoch) << row.input;
  EXPECT_EQ(c.agent.window().version(), 1U) << row.input;
  EXPECT_EQ(c.agent.window().roster(c.agent.agent()).status_updates, c.before.status_updates)
      << row.input;
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInputGroupStep, testing::ValuesIn(group_step_rows()),
                         row_name<GroupStep>);

}  // namespace
