#pragma once
/// @file explore.hpp
/// Population-based training's exploit and explore steps for hyperparameters: on a rebirth
/// the agent inherits its donors' published hyperparameters (the best donor's, or a
/// weighted mix), then explores them (perturb by a factor, resample from a declared
/// distribution with a probability, clamp to bounds, a user function). Defaults follow Ray
/// Tune's PopulationBasedTraining: copy the best, perturb by 0.8 or 1.2, resample with
/// probability 0.25. ExploreKind::pb2 chooses the values with PB2's time-varying GP bandit
/// instead (docs/agent.md, "Explore: PB2"). MPI-free; Policy::exploit_explore drives it from
/// the agent's seeded streams.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/enum_names.hpp"
#include "paramwin/hyper.hpp"

namespace paramwin {

class Layout;

/// How a reborn agent's hyperparameters come from its donors (exploit).
enum class HyperInherit : std::uint8_t {
  best = 0,  ///< the best donor's values (Ray Tune PBT, LTFB: a model travels with its config)
  mix = 1,   ///< per hyperparameter, the donors' weighted mean with the pull's weights
             ///< (geometric mean for log-scale ones; int64 rounded; choices snapped)
  keep = 2,  ///< keep the agent's own values (weights-only replacement)
};

/// The space a hyperparameter is mixed in.
enum class HyperScale : std::uint8_t {
  linear = 0,  ///< arithmetic mean
  log = 1,     ///< mean of the logarithms (rates); falls back to linear if a value is <= 0
};

/// What a hyperparameter is resampled from.
enum class HyperDistribution : std::uint8_t {
  none = 0,         ///< never resampled: only perturbed (and clamped to lo..hi when finite)
  uniform = 1,      ///< uniform in [lo, hi] (float64 hyperparameters)
  log_uniform = 2,  ///< log-uniform in [lo, hi], 0 < lo (float64; implies HyperScale::log)
  int_range = 3,    ///< uniform integer in [lo, hi] (int64 hyperparameters)
  choice = 4,       ///< one of `choices`, uniformly; a perturbation moves to a neighbour
};

/// How a reborn agent's inherited hyperparameters are explored.
enum class ExploreKind : std::uint8_t {
  pbt = 0,  ///< perturb or resample each rule (Ray Tune's PopulationBasedTraining)
  pb2 = 1,  ///< PB2: a time-varying GP-UCB bandit over the population's recent improvements
            ///< chooses every rule's value within lo..hi (Parker-Holder et al., NeurIPS 2020)
};

namespace detail {
inline constexpr EnumName<ExploreKind> kExploreKindNames[] = {{ExploreKind::pbt, "pbt"},
                                                              {ExploreKind::pb2, "pb2"}};
inline constexpr EnumName<HyperInherit> kHyperInheritNames[] = {{HyperInherit::best, "best"},
                                                                {HyperInherit::mix, "mix"},
                                                                {HyperInherit::keep, "keep"}};
inline constexpr EnumName<HyperScale> kHyperScaleNames[] = {{HyperScale::linear, "linear"},
                                                            {HyperScale::log, "log"}};
inline constexpr EnumName<HyperDistribution> kHyperDistributionNames[] =
    {{HyperDistribution::none, "none"},
     {HyperDistribution::uniform, "uniform"},
     {HyperDistribution::log_uniform, "log_uniform"},
     {HyperDistribution::int_range, "int"},
     {HyperDistribution::choice, "choice"}};
inline constexpr EnumName<HyperDistribution> kHyperDistributionAliases[] =
    {{HyperDistribution::log_uniform, "loguniform"},
     {HyperDistribution::int_range, "int_range"},
     {HyperDistribution::int_range, "randint"}};
}  // namespace detail
/// Names of ExploreKind.
template <>
inline constexpr EnumTable<ExploreKind> enum_table<ExploreKind>{"explore kind",
                                                                detail::kExploreKindNames};
/// Names of HyperInherit.
template <>
inline constexpr EnumTable<HyperInherit> enum_table<HyperInherit>{"hyperparameter inheritance",
                                                                  detail::kHyperInheritNames};
/// Names of HyperScale.
template <>
inline constexpr EnumTable<HyperScale> enum_table<HyperScale>{"scale", detail::kHyperScaleNames};
/// Names of HyperDistribution.
template <>
inline constexpr EnumTable<HyperDistribution>
    enum_table<HyperDistribution>{"distribution", detail::kHyperDistributionNames,
                                  detail::kHyperDistributionAliases};

/// Lower-case name of @p inherit ("best", "mix", "keep").
[[nodiscard]] constexpr std::string_view inherit_name(HyperInherit inherit) noexcept {
  return enum_name(inherit);
}
/// Lower-case name of @p distribution ("none", "uniform", "log_uniform", "int", "choice").
[[nodiscard]] constexpr std::string_view distribution_name(
    HyperDistribution distribution) noexcept {
  return enum_name(distribution);
}
/// Parses "best", "mix" or "keep"; InvalidArgument otherwise.
[[nodiscard]] inline HyperInherit parse_inherit(std::string_view name) {
  return parse_enum<HyperInherit>(name);
}

/// How one declared hyperparameter is explored. Hyperparameters without a rule are
/// inherited only (Ray Tune's hyperparam_mutations: only those listed mutate).
struct HyperRule {
  std::string name;                                          ///< a declared hyperparameter
  HyperDistribution distribution = HyperDistribution::none;  ///< resampled from
  /// Range of the distribution that resampling draws from. A rule without a distribution
  /// (perturb only) has no range: there lo/hi are clamp bounds, as clamp_lo/clamp_hi.
  /// Perturbations of a rule with a distribution are not clamped to this range (Ray Tune's
  /// PBT: 1e-4 * 0.8 = 8e-5 even when the distribution starts at 1e-4); set clamp_lo/clamp_hi
  /// for that.
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();  ///< see lo
  std::vector<double> choices{};                        ///< for HyperDistribution::choice
  HyperScale scale = HyperScale::linear;                ///< mixing space (log_uniform implies log)
  /// Bounds every explored value (perturbed or resampled) is clamped to, where finite;
  /// unbounded by default (no clamp).
  double clamp_lo = -std::numeric_limits<double>::infinity();
  double clamp_hi = std::numeric_limits<double>::infinity();  ///< see clamp_lo
};

/// What a user explore function sees.
struct ExploreContext {
  int rank = -1;                              ///< the agent (its rank or agent id)
  std::uint64_t generation = 0;               ///< times reborn, this rebirth included
  const Hyperparameters* before = nullptr;    ///< the agent's values before the rebirth
  std::span<const Hyperparameters> donors{};  ///< the donors' published values, best first
  std::span<const double> weights{};          ///< the donors' normalised mixing weights
  std::uint64_t seed = 0;                     ///< from the agent's explore stream
};

/// A user explore step: called after the built-in one with the values it produced; may
/// change them (Ray Tune's custom_explore_fn).
using ExploreFunction = std::function<void(const ExploreContext& context, Hyperparameters& hyper)>;

/// PB2's settings (ExploreKind::pb2; docs/agent.md, "Explore: PB2").
struct Pb2Options {
  /// Observations kept (the most recent; one per agent per interval between two roster reads
  /// of it), in [2, 1000]: the GP's fit costs O(window^3) per rebirth.
  std::size_t window = 100;
  /// Fewer observations than this at a rebirth: PBT's perturb / resample explore instead
  /// (the event's note says so); in [2, window].
  std::size_t min_observations = 4;
  /// Random candidates of the acquisition's search (the best few are refined locally),
  /// in [1, 100000].
  std::size_t candidates = 256;
};

/// The exploit / explore policy of an agent (AgentOptions::explore). Only acts when the
/// layout declares hyperparameters.
struct ExploreOptions {
  HyperInherit inherit = HyperInherit::best;  ///< exploit: whose values a reborn agent takes
  std::vector<HyperRule> rules{};             ///< explore: one per mutated hyperparameter
  /// A perturbation multiplies by one of these, drawn uniformly; each finite and > 0.
  std::vector<double> perturb_factors{0.8, 1.2};
  /// Chance, in [0, 1], that a rule with a distribution resamples instead of perturbing.
  double resample_probability = 0.25;
  ExploreFunction custom{};  ///< optional, after the built-in explore
  /// pbt: perturb / resample (above); pb2: the GP bandit within every rule's finite lo..hi.
  ExploreKind kind = ExploreKind::pbt;
  Pb2Options pb2{};  ///< PB2's settings (kind pb2)
};

/// Checks what needs no layout (InvalidArgument naming the field): factors, probability,
/// ranges (lo > hi, non-positive log bounds, unbounded uniform ranges, non-integral int
/// ranges, empty or non-finite choices), clamp bounds (NaN, clamp_lo > clamp_hi), duplicate
/// rule names, enums out of range; for kind pb2 also its settings, at least one rule, and
/// finite bounds on every rule.
void validate(const ExploreOptions& options);
/// Also checks the rules against @p layout's hyperparameters: every rule names a declared
/// one, and its distribution fits the type (uniform and log_uniform: float64; int_range:
/// int64; int64 choices and bounds integral).
void validate(const ExploreOptions& options, const Layout& layout);

/// The exploit step: @p own's values replaced per @p inherit from @p donors (best first,
/// with normalised @p weights, same length; empty donors: @p own unchanged).
[[nodiscard]] Hyperparameters inherit_hyperparameters(const ExploreOptions& options,
                                                      const Hyperparameters& own,
                                                      std::span<const Hyperparameters> donors,
                                                      std::span<const double> weights);

/// The built-in explore step on @p hyper, in place, drawing from @p rng: for each rule in
/// order, resample (probability resample_probability, rules with a distribution) or
/// perturb (a factor drawn from perturb_factors; int64 rounded; a choice moves one step
/// down for a factor < 1, up otherwise), then clamp to the rule's finite clamp bounds
/// (clamp_lo/clamp_hi, and lo/hi for a rule without a distribution).
void explore_hyperparameters(const ExploreOptions& options, Hyperparameters& hyper,
                             std::mt19937_64& rng);

}  // namespace paramwin
