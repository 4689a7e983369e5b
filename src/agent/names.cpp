// Names of the policy enums, their parsers, and the metric ordering.
#include <cmath>
#include <string>

#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/policy.hpp"

namespace paramwin {

namespace {

[[noreturn]] void unknown(std::string_view what, std::string_view name, std::string_view valid) {
  throw InvalidArgument("paramwin: unknown " + std::string(what) + " '" + std::string(name) +
                        "' (valid: " + std::string(valid) + ")");
}

}  // namespace

std::string_view direction_name(MetricDirection direction) noexcept {
  return direction == MetricDirection::higher_is_better ? "higher_is_better" : "lower_is_better";
}

std::string_view reason_name(DeathReason reason) noexcept {
  switch (reason) {
    case DeathReason::none: return "none";
    case DeathReason::age: return "age";
    case DeathReason::threshold: return "threshold";
    case DeathReason::worst_fraction: return "worst_fraction";
    case DeathReason::custom: return "custom";
  }
  return "?";
}

std::string_view selection_name(SelectionKind kind) noexcept {
  switch (kind) {
    case SelectionKind::uniform: return "uniform";
    case SelectionKind::fittest: return "fittest";
    case SelectionKind::tournament: return "tournament";
  }
  return "?";
}

std::string_view mixing_name(MixingKind kind) noexcept {
  switch (kind) {
    case MixingKind::mean: return "mean";
    case MixingKind::weighted: return "weighted";
    case MixingKind::best: return "best";
    case MixingKind::reset: return "reset";
  }
  return "?";
}

std::string_view weighting_name(FitnessWeighting weighting) noexcept {
  return weighting == FitnessWeighting::softmax ? "softmax" : "rank";
}

std::string_view shortfall_name(Shortfall shortfall) noexcept {
  switch (shortfall) {
    case Shortfall::defer: return "defer";
    case Shortfall::clamp: return "clamp";
    case Shortfall::error: return "error";
  }
  return "?";
}

std::string_view paused_deaths_name(PausedDeaths paused_deaths) noexcept {
  switch (paused_deaths) {
    case PausedDeaths::defer: return "defer";
    case PausedDeaths::honour: return "honour";
  }
  return "?";
}

std::string_view phase_name(Phase phase) noexcept {
  switch (phase) {
    case Phase::decide: return "decide";
    case Phase::pull: return "pull";
    case Phase::mix: return "mix";
    case Phase::publish: return "publish";
    case Phase::assemble: return "assemble";
  }
  return "?";
}

MetricDirection parse_direction(std::string_view name) {
  if (name == "lower_is_better" || name == "lower" || name == "min" || name == "loss") {
    return MetricDirection::lower_is_better;
  }
  if (name == "higher_is_better" || name == "higher" || name == "max" || name == "reward") {
    return MetricDirection::higher_is_better;
  }
  unknown("metric direction", name,
          "lower_is_better, lower, min, loss, higher_is_better, higher, max, reward");
}

DeathReason parse_trigger(std::string_view name) {
  if (name == "age") return DeathReason::age;
  if (name == "threshold") return DeathReason::threshold;
  if (name == "worst_fraction") return DeathReason::worst_fraction;
  if (name == "custom") return DeathReason::custom;
  unknown("trigger", name, "age, threshold, worst_fraction, custom");
}

SelectionKind parse_selection(std::string_view name) {
  if (name == "uniform") return SelectionKind::uniform;
  if (name == "fittest") return SelectionKind::fittest;
  if (name == "tournament") return SelectionKind::tournament;
  unknown("selection", name, "uniform, fittest, tournament");
}

MixingKind parse_mixing(std::string_view name) {
  if (name == "mean") return MixingKind::mean;
  if (name == "weighted") return MixingKind::weighted;
  if (name == "best") return MixingKind::best;
  if (name == "reset") return MixingKind::reset;
  unknown("mixing", name, "mean, weighted, best, reset");
}

FitnessWeighting parse_weighting(std::string_view name) {
  if (name == "rank") return FitnessWeighting::rank;
  if (name == "softmax") return FitnessWeighting::softmax;
  unknown("fitness weighting", name, "rank, softmax");
}

Shortfall parse_shortfall(std::string_view name) {
  if (name == "defer") return Shortfall::defer;
  if (name == "clamp") return Shortfall::clamp;
  if (name == "error") return Shortfall::error;
  unknown("shortfall policy", name, "defer, clamp, error");
}

PausedDeaths parse_paused_deaths(std::string_view name) {
  if (name == "defer") return PausedDeaths::defer;
  if (name == "honour" || name == "honor") return PausedDeaths::honour;
  unknown("paused-deaths policy", name, "defer, honour");
}

bool is_better(MetricDirection direction, double a, double b) noexcept {
  if (std::isnan(a)) {
    return false;
  }
  if (std::isnan(b)) {
    return true;
  }
  return direction == MetricDirection::lower_is_better ? a < b : a > b;
}

}  // namespace paramwin
