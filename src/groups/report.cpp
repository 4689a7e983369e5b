// PopulationReport: one allgather of fixed-size per-rank records, reduced the same way on
// every rank.
#include "paramwin/report.hpp"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace {

constexpr std::size_t kRows = kPhaseCount + 1;  // the phases, then whole rebirths
// Per rank: totals and sample counts of each row, then the counters.
constexpr std::size_t kCounters = 12;
constexpr std::size_t kWords = 2 * kRows + kCounters;

std::string row_name(std::size_t row) {
  return row < kPhaseCount ? std::string(phase_name(static_cast<Phase>(row))) : "rebirth";
}

}  // namespace

std::int64_t PopulationReport::total_deaths() const noexcept {
  std::int64_t n = 0;
  for (std::size_t r = 1; r < deaths.size(); ++r) n += deaths[r];
  return n;
}

PopulationReport gather_report(MPI_Comm comm, const AgentStats& stats, bool count_counters) {
  std::array<double, kWords> mine{};
  for (std::size_t row = 0; row < kRows; ++row) {
    const TimerSummary t =
        row < kPhaseCount ? stats.timer(static_cast<Phase>(row)) : stats.rebirth_timer();
    mine[2 * row] = t.total;
    mine[2 * row + 1] = static_cast<double>(t.count);
  }
  double* c = &mine[2 * kRows];
  if (count_counters) {
    c[0] = 1.0;
    c[1] = static_cast<double>(stats.steps());
    for (std::size_t r = 0; r < 5; ++r)
      c[2 + r] = static_cast<double>(stats.deaths(static_cast<DeathReason>(r)));
    c[7] = static_cast<double>(stats.deferred());
    c[8] = static_cast<double>(stats.pulls());
    c[9] = static_cast<double>(stats.bytes_pulled());
    c[10] = static_cast<double>(stats.publishes());
    c[11] = static_cast<double>(stats.publishes_skipped());
  }
  int size = 0;
  detail::check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::vector<double> all(kWords * static_cast<std::size_t>(size));
  detail::check_mpi(MPI_Allgather(mine.data(), static_cast<int>(kWords), MPI_DOUBLE, all.data(),
                                  static_cast<int>(kWords), MPI_DOUBLE, comm),
                    "MPI_Allgather(report)");

  PopulationReport rep;
  rep.ranks = size;
  for (std::size_t row = 0; row < kRows; ++row) {
    PhaseReport ph;
    ph.name = row_name(row);
    std::vector<double> totals;
    for (int r = 0; r < size; ++r) {
      const double* w = &all[kWords * static_cast<std::size_t>(r)];
      totals.push_back(w[2 * row]);
      ph.samples += static_cast<std::int64_t>(w[2 * row + 1]);
    }
    const auto max_it = std::max_element(totals.begin(), totals.end());
    ph.slowest_rank = static_cast<int>(max_it - totals.begin());
    ph.max = *max_it;
    for (double t : totals) ph.mean += t / static_cast<double>(size);
    std::sort(totals.begin(), totals.end());
    ph.min = totals.front();
    const std::size_t mid = totals.size() / 2;
    ph.median = totals.size() % 2 == 1 ? totals[mid] : (totals[mid - 1] + totals[mid]) / 2.0;
    ph.imbalance = ph.mean > 0.0 ? ph.max / ph.mean - 1.0 : 0.0;
    rep.phases.push_back(ph);
  }
  for (int r = 0; r < size; ++r) {
    const double* w = &all[kWords * static_cast<std::size_t>(r) + 2 * kRows];
    rep.agents += static_cast<int>(w[0]);
    rep.steps += static_cast<std::int64_t>(w[1]);
    for (std::size_t d = 0; d < 5; ++d) rep.deaths[d] += static_cast<std::int64_t>(w[2 + d]);
    rep.deferred += static_cast<std::int64_t>(w[7]);
    rep.pulls += static_cast<std::int64_t>(w[8]);
    rep.bytes_pulled += static_cast<std::size_t>(w[9]);
    rep.publishes += static_cast<std::int64_t>(w[10]);
    rep.publishes_skipped += static_cast<std::int64_t>(w[11]);
  }
  return rep;
}

void PopulationReport::write_table(std::ostream& out) const {
  std::ostringstream o;
  o << "population: " << agents << " agent(s) on " << ranks << " rank(s), " << steps << " steps, "
    << total_deaths() << " deaths (";
  for (std::size_t r = 1; r < deaths.size(); ++r) {
    o << (r == 1 ? "" : ", ") << reason_name(static_cast<DeathReason>(r)) << ' ' << deaths[r];
  }
  o << "), " << deferred << " deferred, " << pulls << " pulls, " << bytes_pulled
    << " bytes pulled, " << publishes << " publishes (" << publishes_skipped << " skipped)\n";
  o << std::left << std::setw(10) << "phase" << std::right << std::setw(10) << "samples"
    << std::setw(12) << "min ms" << std::setw(12) << "median ms" << std::setw(12) << "max ms"
    << std::setw(12) << "imbalance" << std::setw(9) << "slowest" << '\n';
  o << std::fixed;
  for (const PhaseReport& p : phases) {
    o << std::left << std::setw(10) << p.name << std::right << std::setw(10) << p.samples
      << std::setprecision(3) << std::setw(12) << p.min * 1e3 << std::setw(12) << p.median * 1e3
      << std::setw(12) << p.max * 1e3 << std::setprecision(1) << std::setw(11)
      << p.imbalance * 100.0 << '%' << std::setw(9) << p.slowest_rank << '\n';
  }
  out << o.str();
}

std::string PopulationReport::to_json() const {
  std::ostringstream o;
  o << std::setprecision(9);
  o << "{\"ranks\":" << ranks << ",\"agents\":" << agents << ",\"steps\":" << steps
    << ",\"deaths\":{";
  for (std::size_t r = 1; r < deaths.size(); ++r) {
    o << (r == 1 ? "" : ",") << '"' << reason_name(static_cast<DeathReason>(r))
      << "\":" << deaths[r];
  }
  o << "},\"deaths_total\":" << total_deaths() << ",\"deferred\":" << deferred
    << ",\"pulls\":" << pulls << ",\"bytes_pulled\":" << bytes_pulled
    << ",\"publishes\":" << publishes << ",\"publishes_skipped\":" << publishes_skipped
    << ",\"phases\":{";
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const PhaseReport& p = phases[i];
    o << (i == 0 ? "" : ",") << '"' << p.name << "\":{\"samples\":" << p.samples
      << ",\"min_s\":" << p.min << ",\"median_s\":" << p.median << ",\"max_s\":" << p.max
      << ",\"mean_s\":" << p.mean << ",\"imbalance\":" << p.imbalance
      << ",\"slowest_rank\":" << p.slowest_rank << '}';
  }
  o << "}}";
  return o.str();
}

void PopulationReport::write_json(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw InvalidArgument("paramwin: PopulationReport: cannot open " + path + " for writing");
  f << to_json() << '\n';
  if (!f) throw InvalidArgument("paramwin: PopulationReport: writing " + path + " failed");
}

}  // namespace paramwin
