// Serial tests of hyperparameters and of PBT's exploit / explore: declarations in the layout
// (fingerprint, serialization, mismatch text), values, inheritance (best, weighted, log-space
// mean), perturbation, resampling with its probability, clamping, the user function through
// Policy, string configuration, validation and the JSON event fields.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/policy.hpp"

namespace pw = paramwin;

namespace {

pw::Layout hyper_layout() {
  pw::Layout l;
  l.add("w", std::size_t{8});
  l.add_hyperparameter("lr");
  l.add_hyperparameter("batch", pw::HyperType::int64);
  return l;
}

pw::Hyperparameters values(double lr, std::int64_t batch) {
  pw::Hyperparameters h = hyper_layout().make_hyperparameters();
  h.set("lr", lr);
  h.set_int("batch", batch);
  return h;
}

}  // namespace

TEST(Hyperparameters, DeclaredWithTheLayoutAndPartOfItsFingerprint) {
  pw::Layout plain;
  plain.add("w", std::size_t{8});
  const pw::Layout with = hyper_layout();
  EXPECT_NE(plain.fingerprint(), with.fingerprint());
  pw::Layout other_type;
  other_type.add("w", std::size_t{8});
  other_type.add_hyperparameter("lr");
  other_type.add_hyperparameter("batch");  // float64, not int64
  EXPECT_NE(other_type.fingerprint(), with.fingerprint());
  // Declaring before or after the layers: the same layout.
  pw::Layout before;
  before.add_hyperparameter("lr");
  before.add_hyperparameter("batch", pw::HyperType::int64);
  before.add("w", std::size_t{8});
  EXPECT_EQ(before.fingerprint(), with.fingerprint());
  EXPECT_TRUE(before == with);
  EXPECT_FALSE(plain == with);

  const pw::Layout back = pw::Layout::deserialize(with.serialize());
  EXPECT_TRUE(back == with);
  EXPECT_EQ(back.fingerprint(), with.fingerprint());
  EXPECT_EQ(pw::Layout::first_difference(with, other_type),
            "hyperparameter 1: 'batch int64' vs 'batch float64'");
  EXPECT_EQ(pw::Layout::first_difference(with, plain),
            "hyperparameter 0: 'lr float64' vs missing (2 vs 0 hyperparameters)");
}

TEST(Hyperparameters, DeclarationErrors) {
  pw::Layout l = hyper_layout();
  EXPECT_THROW(l.add_hyperparameter("lr"), pw::InvalidArgument);
  EXPECT_THROW(l.add_hyperparameter(""), pw::InvalidArgument);
  EXPECT_THROW(l.add_hyperparameter("a b"), pw::InvalidArgument);
  EXPECT_THROW(l.add_hyperparameter("t", static_cast<pw::HyperType>(7)), pw::InvalidArgument);
  pw::Layout many;
  for (std::size_t i = 0; i < pw::kMaxHyperparameters; ++i) {
    many.add_hyperparameter(std::string("h").append(std::to_string(i)));
  }
  EXPECT_THROW(many.add_hyperparameter("one_more"), pw::InvalidArgument);
  EXPECT_EQ(many.hyperparameters().size(), pw::kMaxHyperparameters);
}

TEST(Hyperparameters, ValuesByNameAndType) {
  pw::Hyperparameters h = values(0.01, 32);
  EXPECT_EQ(h.size(), 2U);
  EXPECT_DOUBLE_EQ(h.get("lr"), 0.01);
  EXPECT_EQ(h.get_int("batch"), 32);
  EXPECT_DOUBLE_EQ(h.get("batch"), 32.0);
  h.set("batch", 64.0);
  EXPECT_EQ(h.get_int("batch"), 64);
  EXPECT_THROW(h.set("batch", 2.5), pw::InvalidArgument);
  EXPECT_THROW(h.set("batch", std::nan("")), pw::InvalidArgument);
  EXPECT_THROW((void)h.get_int("lr"), pw::InvalidArgument);
  EXPECT_THROW((void)h.get("nope"), pw::InvalidArgument);
  EXPECT_EQ(h.describe(), "lr=0.01 batch=64");
  // Exactly the words a snapshot carries.
  EXPECT_EQ(h.words()[0], std::bit_cast<std::uint64_t>(0.01));
  EXPECT_EQ(h.words()[1], 64U);
  const pw::Hyperparameters copy = h;
  EXPECT_TRUE(copy == h);
  EXPECT_FALSE(copy == values(0.01, 32));
}

TEST(Exploit, BestCopiesTheFirstDonorMixAveragesKeepKeeps) {
  const pw::Hyperparameters own = values(0.5, 8);
  const std::vector<pw::Hyperparameters> donors = {values(0.01, 16), values(0.04, 64)};
  const std::vector<double> weights = {0.75, 0.25};
  pw::ExploreOptions o;
  o.inherit = pw::HyperInherit::best;
  EXPECT_TRUE(pw::inherit_hyperparameters(o, own, donors, weights) == donors[0]);
  o.inherit = pw::HyperInherit::keep;
  EXPECT_TRUE(pw::inherit_hyperparameters(o, own, donors, weights) == own);
  o.inherit = pw::HyperInherit::mix;
  const pw::Hyperparameters m = pw::inherit_hyperparameters(o, own, donors, weights);
  EXPECT_DOUBLE_EQ(m.get("lr"), 0.75 * 0.01 + 0.25 * 0.04);  // linear without a log rule
  EXPECT_EQ(m.get_int("batch"), 28);                         // 0.75*16 + 0.25*64, rounded
  // Log scale: the weighted geometric mean.
  o.rules = {{.name = "lr", .scale = pw::HyperScale::log}};
  const pw::Hyperparameters g = pw::inherit_hyperparameters(o, own, donors, weights);
  EXPECT_NEAR(g.get("lr"), std::exp(0.75 * std::log(0.01) + 0.25 * std::log(0.04)), 1e-15);
  // log_uniform implies log scale; equal weights of 1e-4 and 1e-2 give 1e-3.
  o.rules = {
      {.name = "lr", .distribution = pw::HyperDistribution::log_uniform, .lo = 1e-5, .hi = 1.0}};
  const std::vector<pw::Hyperparameters> two = {values(1e-4, 1), values(1e-2, 1)};
  const std::vector<double> equal = {0.5, 0.5};
  EXPECT_NEAR(pw::inherit_hyperparameters(o, own, two, equal).get("lr"), 1e-3, 1e-15);
  // No donors (a reset): own values.
  EXPECT_TRUE(pw::inherit_hyperparameters(o, own, {}, {}) == own);
}

TEST(Explore, PerturbMultipliesByADeclaredFactorAndClamps) {
  pw::ExploreOptions o;
  o.rules = {{.name = "lr"}, {.name = "batch", .lo = 1, .hi = 100}};
  std::mt19937_64 rng(1);
  int down = 0;
  int up = 0;
  for (int t = 0; t < 400; ++t) {
    pw::Hyperparameters h = values(0.1, 50);
    pw::explore_hyperparameters(o, h, rng);
    const double lr = h.get("lr");
    EXPECT_TRUE(lr == 0.1 * 0.8 || lr == 0.1 * 1.2) << lr;
    (lr < 0.1 ? down : up) += 1;
    EXPECT_TRUE(h.get_int("batch") == 40 || h.get_int("batch") == 60) << h.get_int("batch");
  }
  EXPECT_GT(down, 150);
  EXPECT_GT(up, 150);
  // Clamped to the bounds.
  for (int t = 0; t < 50; ++t) {
    pw::Hyperparameters h = values(0.1, 99);
    pw::explore_hyperparameters(o, h, rng);
    EXPECT_LE(h.get_int("batch"), 100);
    EXPECT_GE(h.get_int("batch"), 79);
  }
  o.perturb_factors = {3.0};
  pw::Hyperparameters h = values(0.1, 90);
  pw::explore_hyperparameters(o, h, rng);
  EXPECT_EQ(h.get_int("batch"), 100);
  EXPECT_NEAR(h.get("lr"), 0.3, 1e-15);
}

TEST(Explore, ResampleProbabilityIsHonouredWithinStatisticalBounds) {
  // A fixed seed, so the count is deterministic; the bound is what any seed should meet:
  // 10,000 Bernoulli(0.25) trials have sd 43.3, so +-250 is a 5.8-sigma band.
  pw::ExploreOptions o;
  o.rules = {
      {.name = "lr", .distribution = pw::HyperDistribution::uniform, .lo = 10.0, .hi = 20.0}};
  std::mt19937_64 rng(42);
  int resampled = 0;
  const int trials = 10000;
  for (int t = 0; t < trials; ++t) {
    pw::Hyperparameters h = values(1.0, 1);
    pw::explore_hyperparameters(o, h, rng);
    const double lr = h.get("lr");
    if (lr >= 10.0 && lr <= 20.0) {
      ++resampled;  // drawn from [10, 20]
    } else {
      // Perturbed, and not clamped to the distribution's range (Ray Tune's PBT).
      EXPECT_TRUE(lr == 0.8 || lr == 1.2) << lr;
    }
  }
  EXPECT_NEAR(resampled, trials / 4, 250);
  // With clamp bounds, perturbations are clamped (resampled values too).
  o.rules[0].clamp_lo = 10.0;
  o.rules[0].clamp_hi = 15.0;
  for (int t = 0; t < 200; ++t) {
    pw::Hyperparameters h = values(1.0, 1);
    pw::explore_hyperparameters(o, h, rng);
    EXPECT_GE(h.get("lr"), 10.0);
    EXPECT_LE(h.get("lr"), 15.0);
  }
  o.rules[0].clamp_lo = -std::numeric_limits<double>::infinity();
  o.rules[0].clamp_hi = std::numeric_limits<double>::infinity();
  o.resample_probability = 0.0;
  o.rules[0].lo = 0.0;
  for (int t = 0; t < 100; ++t) {
    pw::Hyperparameters h = values(1.0, 1);
    pw::explore_hyperparameters(o, h, rng);
    EXPECT_TRUE(h.get("lr") == 0.8 || h.get("lr") == 1.2);
  }
  o.resample_probability = 1.0;
  for (int t = 0; t < 100; ++t) {
    pw::Hyperparameters h = values(1.0, 1);
    pw::explore_hyperparameters(o, h, rng);
    EXPECT_GE(h.get("lr"), 0.0);
    EXPECT_LE(h.get("lr"), 20.0);
    EXPECT_NE(h.get("lr"), 0.8);
    EXPECT_NE(h.get("lr"), 1.2);
  }
}

TEST(Explore, DistributionsStayInTheirRanges) {
  pw::ExploreOptions o;
  o.resample_probability = 1.0;
  o.rules =
      {{.name = "lr", .distribution = pw::HyperDistribution::log_uniform, .lo = 1e-4, .hi = 1e-1},
       {.name = "batch", .distribution = pw::HyperDistribution::int_range, .lo = 16, .hi = 19}};
  std::mt19937_64 rng(7);
  int below_1e3 = 0;
  std::vector<int> seen(4, 0);
  for (int t = 0; t < 3000; ++t) {
    pw::Hyperparameters h = values(0.01, 16);
    pw::explore_hyperparameters(o, h, rng);
    EXPECT_GE(h.get("lr"), 1e-4);
    EXPECT_LE(h.get("lr"), 1e-1);
    below_1e3 += h.get("lr") < 1e-3 ? 1 : 0;
    const std::int64_t b = h.get_int("batch");
    ASSERT_GE(b, 16);
    ASSERT_LE(b, 19);
    ++seen[static_cast<std::size_t>(b - 16)];
  }
  EXPECT_NEAR(below_1e3, 1000, 150);  // log-uniform: one decade of three
  for (const int s : seen) EXPECT_NEAR(s, 750, 150);
  // Choices: resampled among them; perturbed to a neighbour.
  o.rules = {
      {.name = "batch", .distribution = pw::HyperDistribution::choice, .choices = {8, 16, 32}}};
  o.resample_probability = 0.0;
  pw::Hyperparameters h = values(0.1, 16);
  pw::explore_hyperparameters(o, h, rng);
  EXPECT_TRUE(h.get_int("batch") == 8 || h.get_int("batch") == 32);
}

TEST(Explore, DeterministicFromTheSeed) {
  pw::ExploreOptions o;
  o.rules = {{.name = "lr", .distribution = pw::HyperDistribution::uniform, .lo = 0.0, .hi = 1.0}};
  std::mt19937_64 a(5);
  std::mt19937_64 b(5);
  for (int t = 0; t < 50; ++t) {
    pw::Hyperparameters x = values(0.5, 1);
    pw::Hyperparameters y = values(0.5, 1);
    pw::explore_hyperparameters(o, x, a);
    pw::explore_hyperparameters(o, y, b);
    EXPECT_TRUE(x == y);
  }
}

TEST(Explore, PolicyRunsInheritExploreAndTheUserFunction) {
  pw::AgentOptions opts;
  opts.seed = 3;
  opts.selection.k = 1;
  opts.explore.rules = {{.name = "lr", .lo = 0.0, .hi = 1.0}};
  int calls = 0;
  opts.explore.custom = [&](const pw::ExploreContext& c, pw::Hyperparameters& h) {
    ++calls;
    EXPECT_EQ(c.rank, 1);
    EXPECT_EQ(c.generation, 1U);
    ASSERT_NE(c.before, nullptr);
    EXPECT_DOUBLE_EQ(c.before->get("lr"), 0.5);
    ASSERT_EQ(c.donors.size(), 1U);
    EXPECT_DOUBLE_EQ(c.donors[0].get("lr"), 0.1);
    EXPECT_EQ(c.weights.size(), 1U);
    h.set_int("batch", h.get_int("batch") * 2);
  };
  pw::Policy p(opts, 1, 2);
  const pw::Hyperparameters own = values(0.5, 4);
  const std::vector<pw::Hyperparameters> donors = {values(0.1, 16)};
  const std::vector<double> weights = {1.0};
  const pw::Hyperparameters next = p.exploit_explore(own, donors, weights);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(next.get("lr") == 0.1 * 0.8 || next.get("lr") == 0.1 * 1.2);  // best, perturbed
  EXPECT_EQ(next.get_int("batch"), 32);  // inherited 16, doubled by the user function
  // The same seed and rank: the same exploration.
  pw::Policy q(opts, 1, 2);
  EXPECT_TRUE(q.exploit_explore(own, donors, weights) == next);
}

TEST(Explore, ValidationNamesTheField) {
  const pw::Layout l = hyper_layout();
  auto message = [&](const pw::ExploreOptions& o) -> std::string {
    try {
      pw::validate(o, l);
    } catch (const pw::InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  pw::ExploreOptions o;
  EXPECT_EQ(message(o), "");
  o.resample_probability = 1.5;
  EXPECT_NE(message(o).find("resample_probability"), std::string::npos);
  o = {};
  o.perturb_factors = {0.8, 0.0};
  EXPECT_NE(message(o).find("perturb_factors[1]"), std::string::npos);
  o = {};
  o.perturb_factors = {};
  EXPECT_NE(message(o).find("perturb_factors is empty"), std::string::npos);
  o = {};
  o.rules = {{.name = "lr", .distribution = pw::HyperDistribution::uniform, .lo = 2, .hi = 1}};
  EXPECT_NE(message(o).find("lo 2.000000 > hi 1.000000"), std::string::npos);
  o.rules = {{.name = "lr", .distribution = pw::HyperDistribution::log_uniform, .lo = 0, .hi = 1}};
  EXPECT_NE(message(o).find("positive bounds"), std::string::npos);
  o.rules = {{.name = "lr", .distribution = pw::HyperDistribution::uniform}};
  EXPECT_NE(message(o).find("finite bounds"), std::string::npos);
  o.rules = {{.name = "dropout"}};
  EXPECT_NE(message(o).find("no such hyperparameter in the layout (declared: 'lr', 'batch')"),
            std::string::npos);
  o.rules = {{.name = "lr"}, {.name = "lr"}};
  EXPECT_NE(message(o).find("listed twice"), std::string::npos);
  o.rules = {{.name = "batch", .distribution = pw::HyperDistribution::uniform, .lo = 1, .hi = 9}};
  EXPECT_NE(message(o).find("int64 hyperparameter with distribution uniform"), std::string::npos);
  o.rules = {{.name = "lr", .distribution = pw::HyperDistribution::int_range, .lo = 1, .hi = 9}};
  EXPECT_NE(message(o).find("float64 hyperparameter with distribution int"), std::string::npos);
  o.rules = {{.name = "batch", .distribution = pw::HyperDistribution::choice, .choices = {1.5}}};
  EXPECT_NE(message(o).find("non-integral choice"), std::string::npos);
  o.rules = {{.name = "batch", .distribution = pw::HyperDistribution::choice}};
  EXPECT_NE(message(o).find("at least one value"), std::string::npos);
  // Through the agent's options: the same checks.
  pw::AgentOptions a;
  a.selection.k = 1;
  a.explore.resample_probability = -0.1;
  EXPECT_THROW(pw::validate(a, 2), pw::InvalidArgument);
  a.explore.resample_probability = 0.25;
  a.explore.rules = {{.name = "nope"}};
  EXPECT_NO_THROW(pw::validate(a, 2));  // no layout: names are checked with one
  EXPECT_THROW(pw::validate(a, 2, l), pw::InvalidArgument);
}

TEST(Explore, StringConfigurationRoundTrip) {
  const pw::AgentOptions o = pw::parse_agent_options(
      "hyper_inherit=mix perturb_factors=0.5,2 resample_probability=0.4 "
      "explore.lr=log_uniform:1e-4..1e-1 explore.batch=int:16..256 "
      "explore.momentum=choice:0.9,0.99 explore.wd=perturb:0..0.1 explore_scale.wd=log "
      "explore.dropout=uniform:0..0.5");
  EXPECT_EQ(o.explore.inherit, pw::HyperInherit::mix);
  EXPECT_EQ(o.explore.perturb_factors, (std::vector<double>{0.5, 2.0}));
  EXPECT_DOUBLE_EQ(o.explore.resample_probability, 0.4);
  ASSERT_EQ(o.explore.rules.size(), 5U);
  auto rule = [&](const std::string& name) -> const pw::HyperRule& {
    for (const pw::HyperRule& r : o.explore.rules) {
      if (r.name == name) return r;
    }
    throw std::runtime_error(std::string("no rule ").append(name));
  };
  EXPECT_EQ(rule("lr").distribution, pw::HyperDistribution::log_uniform);
  EXPECT_DOUBLE_EQ(rule("lr").lo, 1e-4);
  EXPECT_DOUBLE_EQ(rule("lr").hi, 1e-1);
  EXPECT_EQ(rule("batch").distribution, pw::HyperDistribution::int_range);
  EXPECT_DOUBLE_EQ(rule("batch").hi, 256.0);
  EXPECT_EQ(rule("momentum").choices, (std::vector<double>{0.9, 0.99}));
  EXPECT_EQ(rule("wd").distribution, pw::HyperDistribution::none);
  EXPECT_EQ(rule("wd").scale, pw::HyperScale::log);
  EXPECT_DOUBLE_EQ(rule("wd").hi, 0.1);
  EXPECT_EQ(rule("dropout").distribution, pw::HyperDistribution::uniform);
  // Defaults match Ray Tune's PBT.
  const pw::AgentOptions d = pw::parse_agent_options("");
  EXPECT_EQ(d.explore.inherit, pw::HyperInherit::best);
  EXPECT_EQ(d.explore.perturb_factors, (std::vector<double>{0.8, 1.2}));
  EXPECT_DOUBLE_EQ(d.explore.resample_probability, 0.25);
  // Malformed values.
  EXPECT_THROW((void)pw::parse_agent_options("explore.lr=gauss:0..1"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("explore.lr=uniform:0-1"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("explore_scale.lr=cubic"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("hyper_inherit=worst"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("perturb_factors=0.8,x"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("explore.=perturb"), pw::InvalidArgument);
}

TEST(Explore, JsonCarriesHyperAndHyperBeforeOnDeaths) {
  pw::StepEvent e;
  e.hyper = values(0.02, 64);
  e.hyper_before = values(0.5, 32);
  std::string j = pw::to_json(e);
  EXPECT_NE(j.find(R"("hyper":{"lr":0.02,"batch":64})"), std::string::npos) << j;
  EXPECT_EQ(j.find("hyper_before"), std::string::npos) << j;
  e.died = true;
  j = pw::to_json(e);
  EXPECT_NE(j.find(R"("hyper_before":{"lr":0.5,"batch":32})"), std::string::npos) << j;
  pw::StepEvent none;
  EXPECT_NE(pw::to_json(none).find(R"("hyper":{})"), std::string::npos);
  // Read back: the names in order, float64 and int64 as written.
  const pw::StepEvent back = pw::step_event_from_json(j);
  ASSERT_EQ(back.hyper.size(), 2U);
  EXPECT_EQ(back.hyper.spec(0).type, pw::HyperType::float64);
  EXPECT_EQ(back.hyper.get("lr"), 0.02);
  EXPECT_EQ(back.hyper.spec(1).type, pw::HyperType::int64);
  EXPECT_EQ(back.hyper.get_int("batch"), 64);
  EXPECT_EQ(back.hyper_before.get("lr"), 0.5);
  EXPECT_EQ(pw::to_json(back), j);
}
