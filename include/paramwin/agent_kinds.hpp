#pragma once
/// @file agent_kinds.hpp
/// The choices an agent's options make (metric direction, death reasons, selection, mixing,
/// fitness weighting, shortfall, paused deaths), with their name tables.

#include <cstdint>
#include <string_view>

#include "paramwin/enum_names.hpp"

namespace paramwin {

/// Which way the fitness metric improves.
enum class MetricDirection : std::uint8_t {
  lower_is_better = 0,   ///< losses
  higher_is_better = 1,  ///< rewards, accuracies
};

/// Why an agent died (none: it did not).
enum class DeathReason : std::uint8_t {
  none = 0,            ///< no death
  age = 1,             ///< reached its drawn maximum age
  threshold = 2,       ///< metric worse than the threshold
  worst_fraction = 3,  ///< among the worst fraction of the population
  custom = 4,          ///< the user's predicate said so
  /// took a dead member's slot (ElasticAgent): its first step is a rebirth from live donors
  joined = 5,
};

/// How donors are chosen among the eligible agents.
enum class SelectionKind : std::uint8_t {
  uniform = 0,     ///< k distinct donors uniformly at random
  fittest = 1,     ///< the k best by roster metric
  tournament = 2,  ///< k tournaments of size t, each won by its best entrant
  /// k distinct donors uniformly at random from the top quantile of the ranked population
  /// (PBT's truncation selection, Ray Tune's random.choice(upper_quantile));
  /// SelectionOptions::quantile, else the worst-fraction trigger's fraction
  truncation = 3,
  custom = 4,  ///< the user's SelectionOptions::custom function chooses
};

/// How the donors' parameters become the reborn agent's parameters.
enum class MixingKind : std::uint8_t {
  mean = 0,      ///< arithmetic mean of the donors
  weighted = 1,  ///< weighted mean, better donors weigh more (explicit or fitness weights)
  best = 2,      ///< copy of the best selected donor
  reset = 3,     ///< no donors: the user's reset callback re-initialises the parameters
};

/// How MixingKind::weighted derives weights from donor metrics (when none are given).
enum class FitnessWeighting : std::uint8_t {
  rank = 0,     ///< best of n donors weighs n, next n-1, ..., worst 1 (ties share the mean)
  softmax = 1,  ///< exp(score / temperature), score = -metric (lower) or metric (higher)
};

/// What to do when fewer eligible donors than k exist at the moment of a death.
enum class Shortfall : std::uint8_t {
  defer = 0,  ///< keep the death pending and retry on the next step (no rebirth now)
  clamp = 1,  ///< use the eligible donors there are (at least one; none: defer)
  error = 2,  ///< throw DonorError naming the candidates and why the others were skipped
};

/// What a paused agent (AgentInterface::pause) does with a death its triggers decide.
enum class PausedDeaths : std::uint8_t {
  defer = 0,   ///< the death stays pending (StepEvent::deferred, note "paused") until resumed
  honour = 1,  ///< reborn as usual (the pull happens); the republish waits for the resume
};

namespace detail {
inline constexpr EnumName<MetricDirection> kDirectionNames[] = {{MetricDirection::lower_is_better,
                                                                 "lower_is_better"},
                                                                {MetricDirection::higher_is_better,
                                                                 "higher_is_better"}};
inline constexpr EnumName<MetricDirection> kDirectionAliases[] =
    {{MetricDirection::lower_is_better, "lower"}, {MetricDirection::lower_is_better, "min"},
     {MetricDirection::lower_is_better, "loss"},  {MetricDirection::higher_is_better, "higher"},
     {MetricDirection::higher_is_better, "max"},  {MetricDirection::higher_is_better, "reward"}};
inline constexpr EnumName<DeathReason> kReasonNames[] =
    {{DeathReason::none, "none"},           {DeathReason::age, "age"},
     {DeathReason::threshold, "threshold"}, {DeathReason::worst_fraction, "worst_fraction"},
     {DeathReason::custom, "custom"},       {DeathReason::joined, "joined"}};
inline constexpr EnumName<SelectionKind> kSelectionNames[] = {{SelectionKind::uniform, "uniform"},
                                                              {SelectionKind::fittest, "fittest"},
                                                              {SelectionKind::tournament,
                                                               "tournament"},
                                                              {SelectionKind::truncation,
                                                               "truncation"},
                                                              {SelectionKind::custom, "custom"}};
inline constexpr EnumName<SelectionKind> kSelectionAliases[] = {
    {SelectionKind::truncation, "top_quantile"}};
inline constexpr EnumName<MixingKind> kMixingNames[] = {{MixingKind::mean, "mean"},
                                                        {MixingKind::weighted, "weighted"},
                                                        {MixingKind::best, "best"},
                                                        {MixingKind::reset, "reset"}};
inline constexpr EnumName<FitnessWeighting> kWeightingNames[] = {{FitnessWeighting::rank, "rank"},
                                                                 {FitnessWeighting::softmax,
                                                                  "softmax"}};
inline constexpr EnumName<Shortfall> kShortfallNames[] = {{Shortfall::defer, "defer"},
                                                          {Shortfall::clamp, "clamp"},
                                                          {Shortfall::error, "error"}};
inline constexpr EnumName<PausedDeaths> kPausedDeathsNames[] = {{PausedDeaths::defer, "defer"},
                                                                {PausedDeaths::honour, "honour"}};
inline constexpr EnumName<PausedDeaths> kPausedDeathsAliases[] = {{PausedDeaths::honour, "honor"}};
}  // namespace detail

/// Names of MetricDirection.
template <>
inline constexpr EnumTable<MetricDirection> enum_table<MetricDirection>{"metric direction",
                                                                        detail::kDirectionNames,
                                                                        detail::kDirectionAliases};
/// Names of DeathReason ("none" is not a trigger, but is a reason).
template <>
inline constexpr EnumTable<DeathReason> enum_table<DeathReason>{"trigger", detail::kReasonNames};
/// Names of SelectionKind.
template <>
inline constexpr EnumTable<SelectionKind> enum_table<SelectionKind>{"selection",
                                                                    detail::kSelectionNames,
                                                                    detail::kSelectionAliases};
/// Names of MixingKind.
template <>
inline constexpr EnumTable<MixingKind> enum_table<MixingKind>{"mixing", detail::kMixingNames};
/// Names of FitnessWeighting.
template <>
inline constexpr EnumTable<FitnessWeighting> enum_table<FitnessWeighting>{"fitness weighting",
                                                                          detail::kWeightingNames};
/// Names of Shortfall.
template <>
inline constexpr EnumTable<Shortfall> enum_table<Shortfall>{"shortfall policy",
                                                            detail::kShortfallNames};
/// Names of PausedDeaths.
template <>
inline constexpr EnumTable<PausedDeaths> enum_table<PausedDeaths>{"paused-deaths policy",
                                                                  detail::kPausedDeathsNames,
                                                                  detail::kPausedDeathsAliases};

/// Lower-case name of @p direction ("lower_is_better", "higher_is_better").
[[nodiscard]] constexpr std::string_view direction_name(MetricDirection direction) noexcept {
  return enum_name(direction);
}
/// Lower-case name of @p reason ("none", "age", "threshold", "worst_fraction", "custom", "joined").
[[nodiscard]] constexpr std::string_view reason_name(DeathReason reason) noexcept {
  return enum_name(reason);
}
/// Lower-case name of @p kind ("uniform", "fittest", "tournament", "truncation", "custom").
[[nodiscard]] constexpr std::string_view selection_name(SelectionKind kind) noexcept {
  return enum_name(kind);
}
/// Lower-case name of @p kind ("mean", "weighted", "best", "reset").
[[nodiscard]] constexpr std::string_view mixing_name(MixingKind kind) noexcept {
  return enum_name(kind);
}
/// Lower-case name of @p weighting ("rank", "softmax").
[[nodiscard]] constexpr std::string_view weighting_name(FitnessWeighting weighting) noexcept {
  return enum_name(weighting);
}
/// Lower-case name of @p shortfall ("defer", "clamp", "error").
[[nodiscard]] constexpr std::string_view shortfall_name(Shortfall shortfall) noexcept {
  return enum_name(shortfall);
}
/// Lower-case name of @p paused_deaths ("defer", "honour").
[[nodiscard]] constexpr std::string_view paused_deaths_name(PausedDeaths paused_deaths) noexcept {
  return enum_name(paused_deaths);
}

/// Parses "lower_is_better" (also "lower", "min", "loss") or "higher_is_better" (also
/// "higher", "max", "reward"); throws InvalidArgument listing the valid names.
[[nodiscard]] inline MetricDirection parse_direction(std::string_view name) {
  return parse_enum<MetricDirection>(name);
}
/// Parses a trigger name ("age", "threshold", "worst_fraction", "custom"); throws
/// InvalidArgument listing the valid names ("none" is not a trigger).
[[nodiscard]] DeathReason parse_trigger(std::string_view name);
/// Parses "uniform", "fittest", "tournament", "truncation" (also "top_quantile") or "custom";
/// throws InvalidArgument otherwise.
[[nodiscard]] inline SelectionKind parse_selection(std::string_view name) {
  return parse_enum<SelectionKind>(name);
}
/// Parses "mean", "weighted", "best" or "reset"; throws InvalidArgument otherwise.
[[nodiscard]] inline MixingKind parse_mixing(std::string_view name) {
  return parse_enum<MixingKind>(name);
}
/// Parses "rank" or "softmax"; throws InvalidArgument otherwise.
[[nodiscard]] inline FitnessWeighting parse_weighting(std::string_view name) {
  return parse_enum<FitnessWeighting>(name);
}
/// Parses "defer", "clamp" or "error"; throws InvalidArgument otherwise.
[[nodiscard]] inline Shortfall parse_shortfall(std::string_view name) {
  return parse_enum<Shortfall>(name);
}
/// Parses "defer" or "honour" (also "honor"); throws InvalidArgument otherwise.
[[nodiscard]] inline PausedDeaths parse_paused_deaths(std::string_view name) {
  return parse_enum<PausedDeaths>(name);
}

/// True when metric @p a is strictly better than @p b. NaN is worse than every number.
[[nodiscard]] bool is_better(MetricDirection direction, double a, double b) noexcept;

}  // namespace paramwin
