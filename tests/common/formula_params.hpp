// Parameters of exact small numbers for the Agent tests (agent_mpi_test, pause_mpi_test): a
// float layer "w" and a double layer "b" whose values say who holds them at which version, so
// a test can tell exactly whose snapshot (or which mix of snapshots) an agent ended with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace paramwin::test {

/// What agent @p who holds (publishes) at @p version, element @p i: an exact small integer.
inline double formula(int who, std::uint64_t version, std::size_t i) {
  return static_cast<double>(who * 1000 + static_cast<int>(version) * 10 + static_cast<int>(i));
}

/// The layout of FormulaParams<w, b>: "w" (float32, @p w elements), "b" (float64, @p b).
inline Layout formula_layout(std::size_t w, std::size_t b) {
  Layout l;
  l.add("w", w);
  l.add("b", b, DType::float64);
  return l;
}

/// The two layers; fill() writes formula(who, version, i) (+ 0.5 in "b"), is() checks it.
template <std::size_t W, std::size_t B>
struct FormulaParams {
  std::vector<float> w = std::vector<float>(W);
  std::vector<double> b = std::vector<double>(B);
  void fill(int who, std::uint64_t version) {
    for (std::size_t i = 0; i < W; ++i) w[i] = static_cast<float>(formula(who, version, i));
    for (std::size_t i = 0; i < B; ++i) b[i] = formula(who, version, i) + 0.5;
  }
  /// True when these are exactly fill(who, version).
  [[nodiscard]] bool is(int who, std::uint64_t version) const {
    for (std::size_t i = 0; i < W; ++i)
      if (w[i] != static_cast<float>(formula(who, version, i))) return false;
    for (std::size_t i = 0; i < B; ++i)
      if (b[i] != formula(who, version, i) + 0.5) return false;
    return true;
  }
  std::vector<LayerRef> refs() { return {w, b}; }
  [[nodiscard]] std::vector<ConstLayerRef> crefs() const { return {w, b}; }
};

/// No age trigger, one donor, a shortfall clamped: deaths only where a test asks for them.
inline AgentOptions quiet_options() {
  AgentOptions o;
  o.triggers.age.enabled = false;
  o.selection.k = 1;
  o.selection.shortfall = Shortfall::clamp;
  return o;
}

}  // namespace paramwin::test
