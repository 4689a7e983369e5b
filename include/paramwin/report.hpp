#pragma once
/// @file report.hpp
/// PopulationReport: per-phase timers of every rank of a population gathered into min /
/// median / max and an imbalance figure per phase, with the population's counters; printed
/// as a table or written as JSON.

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "paramwin/event.hpp"

namespace paramwin {

/// One phase over the ranks: statistics of each rank's total seconds in that phase.
struct PhaseReport {
  std::string name;     ///< decide, pull, mix, publish, assemble, or rebirth (whole rebirths)
  double min = 0.0;     ///< smallest per-rank total, seconds
  double median = 0.0;  ///< median per-rank total
  double max = 0.0;     ///< largest per-rank total
  double mean = 0.0;    ///< mean per-rank total
  /// max / mean - 1: 0 when every rank spent the same time, 1 when the slowest spent twice
  /// the mean (0 when the mean is 0).
  double imbalance = 0.0;
  int slowest_rank = -1;     ///< rank (in the report's communicator) with the max
  std::int64_t samples = 0;  ///< timed occurrences over all ranks
};

/// What gather_report() returns on every rank.
struct PopulationReport {
  int ranks = 0;                      ///< ranks that contributed timers
  int agents = 0;                     ///< ranks that contributed counters (one per agent)
  std::vector<PhaseReport> phases{};  ///< decide, pull, mix, publish, assemble, rebirth
  std::int64_t steps = 0;             ///< steps, summed over agents
  /// Deaths by reason (index: DeathReason), summed over agents.
  std::array<std::int64_t, 5> deaths{};
  std::int64_t deferred = 0;           ///< deferred deaths
  std::int64_t pulls = 0;              ///< rebirth pulls
  std::size_t bytes_pulled = 0;        ///< bytes moved from donors
  std::int64_t publishes = 0;          ///< publishes done
  std::int64_t publishes_skipped = 0;  ///< publishes skipped for a pinned slot

  [[nodiscard]] std::int64_t total_deaths() const noexcept;  ///< all reasons
  /// A fixed-width table: counters, then one row per phase (milliseconds).
  void write_table(std::ostream& out) const;
  /// One JSON object with the same content.
  [[nodiscard]] std::string to_json() const;
  /// Writes to_json() and a newline to @p path; throws InvalidArgument if it cannot.
  void write_json(const std::string& path) const;
};

/// Gathers @p stats of every rank of @p comm. Each rank's phase totals enter the timer
/// statistics; its counters enter the population counters only when @p count_counters (an
/// agent made of several ranks counts its deaths once: pass true on its leader only).
/// Returns the same report on every rank.
/// @note Collective over @p comm.
[[nodiscard]] PopulationReport gather_report(MPI_Comm comm, const AgentStats& stats,
                                             bool count_counters = true);

}  // namespace paramwin
