#pragma once
// Everything the demo shows a person: the live progress table, the side-by-side comparison
// of the two runs, the CSV files and the gnuplot plot. Plain C++ (no MPI, no paramwin): it
// works on what rank 0 gathered.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace age_replacement {

/// One death as the dying agent recorded it.
struct DeathRecord {
  int agent = 0;
  std::int64_t step = 0;
  std::uint64_t generation = 0;  ///< generation after the rebirth
  std::string reason;
  std::string donors;          ///< donor ranks, ';'-separated
  std::string donor_versions;  ///< publish version read from each donor, ';'-separated
  double loss_before = 0.0;    ///< loss of the parameters that died
  double loss_after = std::numeric_limits<double>::quiet_NaN();  ///< loss one step later
};

/// What one run of the population produced (gathered on rank 0).
struct RunResult {
  std::string name;  ///< "replacement" or "control"
  int agents = 0;
  int steps = 0;
  std::vector<float> losses;        ///< agent-major: losses[agent * steps + step]
  std::vector<double> lrs;          ///< learning rate of each agent
  std::vector<double> test_losses;  ///< held-out loss of each agent after the last step
  std::vector<DeathRecord> deaths;
  double seconds = 0.0;  ///< wall time of the run (rank 0)

  [[nodiscard]] double loss(int agent, int step) const {
    return static_cast<double>(
        losses[static_cast<std::size_t>(agent) * static_cast<std::size_t>(steps) +
               static_cast<std::size_t>(step)]);
  }
};

/// Best (lowest), median and worst (highest) of a set of losses; NaN counts as worst.
struct Spread {
  double best = 0.0;
  double median = 0.0;
  double worst = 0.0;
};

[[nodiscard]] inline Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end(), [](double a, double b) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
    return a < b;
  });
  const std::size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {v.front(), median, v.back()};
}

/// Loss of every agent at @p step.
[[nodiscard]] inline std::vector<double> losses_at(const RunResult& r, int step) {
  std::vector<double> v;
  for (int a = 0; a < r.agents; ++a) v.push_back(r.loss(a, step));
  return v;
}

/// Mean of each agent's loss over the last @p last_n steps.
[[nodiscard]] inline std::vector<double> tail_means(const RunResult& r, int last_n) {
  const int from = std::max(0, r.steps - last_n);
  std::vector<double> v;
  for (int a = 0; a < r.agents; ++a) {
    double s = 0.0;
    for (int t = from; t < r.steps; ++t) s += r.loss(a, t);
    v.push_back(s / std::max(1, r.steps - from));
  }
  return v;
}

/// "[#######.............]  35%".
[[nodiscard]] inline std::string progress_bar(int done, int total, int width = 20) {
  const double frac = total > 0 ? static_cast<double>(done) / total : 1.0;
  const int fill = static_cast<int>(frac * width + 0.5);
  std::string bar = "[";
  for (int i = 0; i < width; ++i) bar += i < fill ? '#' : '.';
  char pct[16];
  std::snprintf(pct, sizeof pct, "] %3d%%", static_cast<int>(frac * 100.0 + 0.5));
  return bar + pct;
}

/// Header of the live progress table.
inline void print_progress_header(const std::string& run) {
  std::printf("\n== %s run ==\n", run.c_str());
  std::printf("%9s  %-27s %10s %10s %10s %7s\n", "step", "progress", "best", "median", "worst",
              "deaths");
  std::fflush(stdout);
}

/// One row of the live progress table.
inline void print_progress_row(int step, int steps, const Spread& s, long deaths) {
  char where[32];
  std::snprintf(where, sizeof where, "%d/%d", step, steps);
  std::printf("%9s  %-27s %10.5f %10.5f %10.5f %7ld\n", where, progress_bar(step, steps).c_str(),
              s.best, s.median, s.worst, deaths);
  std::fflush(stdout);
}

/// The two runs side by side: final losses, tail means, held-out losses, deaths.
inline void print_comparison(const RunResult& repl, const RunResult& ctrl, int last_n) {
  const Spread fr = spread(losses_at(repl, repl.steps - 1));
  const Spread fc = spread(losses_at(ctrl, ctrl.steps - 1));
  const Spread tr = spread(tail_means(repl, last_n));
  const Spread tc = spread(tail_means(ctrl, last_n));
  const Spread hr = spread(repl.test_losses);
  const Spread hc = spread(ctrl.test_losses);
  auto mean = [](const std::vector<double>& v) {
    double s = 0.0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  auto row = [](const char* label, double a, double b) {
    const char* verdict = std::isnan(a) || std::isnan(b) ? ""
                          : a < b                        ? "replacement"
                          : a > b                        ? "control"
                                                         : "tie";
    std::printf("  %-44s %13.5f %13.5f   %-12s %8.2fx\n", label, a, b, verdict,
                a > 0.0 ? b / a : std::numeric_limits<double>::quiet_NaN());
  };
  std::printf("\n== replacement vs control (same seeds, same data; lower is better) ==\n");
  std::printf("  %-44s %13s %13s   %-12s %9s\n", "", "replacement", "control", "better",
              "ctrl/repl");
  row("final training loss: best", fr.best, fc.best);
  row("final training loss: median", fr.median, fc.median);
  row("final training loss: worst", fr.worst, fc.worst);
  char label[64];
  std::snprintf(label, sizeof label, "mean training loss, last %d steps: best", last_n);
  row(label, tr.best, tc.best);
  std::snprintf(label, sizeof label, "mean training loss, last %d steps: median", last_n);
  row(label, tr.median, tc.median);
  std::snprintf(label, sizeof label, "mean training loss, last %d steps: all", last_n);
  row(label, mean(tail_means(repl, last_n)), mean(tail_means(ctrl, last_n)));
  row("held-out loss: best", hr.best, hc.best);
  row("held-out loss: median", hr.median, hc.median);
  row("held-out loss: worst", hr.worst, hc.worst);
  std::printf("  %-44s %13zu %13zu\n", "deaths", repl.deaths.size(), ctrl.deaths.size());
  std::printf("  %-44s %12.2fs %12.2fs\n", "wall time", repl.seconds, ctrl.seconds);

  std::printf("\n  per agent (held-out loss after the last step):\n");
  std::printf("  %5s %9s %7s %13s %13s\n", "agent", "lr", "deaths", "replacement", "control");
  for (int a = 0; a < repl.agents; ++a) {
    const auto d = std::count_if(repl.deaths.begin(), repl.deaths.end(),
                                 [a](const DeathRecord& r) { return r.agent == a; });
    std::printf("  %5d %9.4f %7ld %13.5f %13.5f\n", a, repl.lrs[static_cast<std::size_t>(a)],
                static_cast<long>(d), repl.test_losses[static_cast<std::size_t>(a)],
                ctrl.test_losses[static_cast<std::size_t>(a)]);
  }
  std::fflush(stdout);
}

inline std::ofstream open_for_writing(const std::filesystem::path& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path.string());
  f.precision(7);
  return f;
}

/// losses.csv: run,agent,lr,step,loss,generation — one row per agent and step, grouped by
/// run and agent (so each agent's curve is one contiguous block).
inline void write_losses_csv(const std::filesystem::path& path,
                             std::span<const RunResult* const> runs) {
  std::ofstream f = open_for_writing(path);
  f << "run,agent,lr,step,loss,generation\n";
  f.precision(17);  // every bit of the loss: resumed runs are compared with these
  for (const RunResult* r : runs) {
    for (int a = 0; a < r->agents; ++a) {
      std::uint64_t generation = 0;
      for (int t = 0; t < r->steps; ++t) {
        f << r->name << ',' << a << ',' << r->lrs[static_cast<std::size_t>(a)] << ',' << t << ','
          << r->loss(a, t) << ',' << generation << '\n';
        for (const DeathRecord& d : r->deaths) {
          if (d.agent == a && d.step == t) generation = d.generation;
        }
      }
    }
  }
}

/// deaths.csv: run,agent,step,generation,reason,donors,donor_versions,loss_before,loss_after.
inline void write_deaths_csv(const std::filesystem::path& path,
                             std::span<const RunResult* const> runs) {
  std::ofstream f = open_for_writing(path);
  f << "run,agent,step,generation,reason,donors,donor_versions,loss_before,loss_after\n";
  for (const RunResult* r : runs) {
    for (const DeathRecord& d : r->deaths) {
      f << r->name << ',' << d.agent << ',' << d.step << ',' << d.generation << ',' << d.reason
        << ',' << d.donors << ',' << d.donor_versions << ',' << d.loss_before << ',' << d.loss_after
        << '\n';
    }
  }
}

/// summary.csv: run,step,best,median,worst — the population's spread at every step.
inline void write_summary_csv(const std::filesystem::path& path,
                              std::span<const RunResult* const> runs) {
  std::ofstream f = open_for_writing(path);
  f << "run,step,best,median,worst\n";
  for (const RunResult* r : runs) {
    for (int t = 0; t < r->steps; ++t) {
      const Spread s = spread(losses_at(*r, t));
      f << r->name << ',' << t << ',' << s.best << ',' << s.median << ',' << s.worst << '\n';
    }
  }
}

/// Writes plot.gp into @p dir (three panels: replacement curves with deaths marked, control
/// curves, both populations' best and median) and runs gnuplot on it. Returns false, with a
/// message, when gnuplot is missing or fails; the CSVs are there either way.
inline bool render_plot(const std::filesystem::path& dir, const RunResult& repl,
                        const RunResult& ctrl) {
  const std::filesystem::path script = dir / "plot.gp";
  {
    // Both panels share one y range so that they can be compared by eye.
    double lo = std::numeric_limits<double>::infinity();
    double hi = 0.0;
    for (const RunResult* r : {&repl, &ctrl}) {
      for (float v : r->losses) {
        if (std::isfinite(v) && v > 0.0F) {
          lo = std::min(lo, static_cast<double>(v));
          hi = std::max(hi, static_cast<double>(v));
        }
      }
    }
    if (!(lo < hi)) {
      lo = 1e-4;
      hi = 1.0;
    }
    lo = std::pow(10.0, std::floor(std::log10(lo)));
    hi = std::pow(10.0, std::ceil(std::log10(hi)));
    std::ofstream f = open_for_writing(script);
    f << "# Rerun with: gnuplot plot.gp (from this directory)\n"
         "set terminal pngcairo size 1400,1000 font 'DejaVu Sans,10'\n"
         "set output 'losses.png'\n"
         "set datafile separator ','\n"
         "set logscale y\n"
         "set format y '10^{%L}'\n"
         "set yrange ["
      << lo << ':' << hi
      << "]\n"
         "set xrange [0:"
      << repl.steps
      << "]\n"
         "set grid ytics mytics xtics lc rgb '#dddddd'\n"
         "set key outside right top box opaque samplen 2\n"
         "set xlabel 'training step'\n"
         "set ylabel 'training loss (MSE, log scale)'\n"
         "n = "
      << repl.agents
      << "\n"
         "array lr[n]\n";
    for (int a = 0; a < repl.agents; ++a) {
      f << "lr[" << a + 1 << "] = " << repl.lrs[static_cast<std::size_t>(a)] << '\n';
    }
    f << "sel(run, a, col) = (strcol(1) eq run && $2 == a) ? column(col) : NaN\n"
         "set multiplot layout 3,1 title 'paramwin age-based replacement: "
      << repl.agents << " agents, " << repl.steps
      << " steps' font ',13'\n"
         "set title 'with age-based replacement (x = death: loss of the agent that died, "
         "o = its loss one step after rebirth)'\n"
         "plot for [a=0:n-1] 'losses.csv' every ::1 using 4:(sel('replacement', a, 5)) "
         "with lines lw 1.5 lc a+1 title sprintf('agent %d  lr=%.3g', a, lr[a+1]), \\\n"
         "     for [a=0:n-1] 'deaths.csv' every ::1 using 3:(sel('replacement', a, 8)) "
         "with points pt 2 ps 1.3 lw 2 lc a+1 notitle, \\\n"
         "     for [a=0:n-1] 'deaths.csv' every ::1 using ($3+1):(sel('replacement', a, 9)) "
         "with points pt 6 ps 1.0 lc a+1 notitle\n"
         "set title 'control: the same agents without replacement'\n"
         "plot for [a=0:n-1] 'losses.csv' every ::1 using 4:(sel('control', a, 5)) "
         "with lines lw 1.5 lc a+1 title sprintf('agent %d  lr=%.3g', a, lr[a+1])\n"
         "set title 'population: best and median loss per step'\n"
         "rsel(run, col) = strcol(1) eq run ? column(col) : NaN\n"
         "plot 'summary.csv' every ::1 using 2:(rsel('replacement', 3)) with lines lw 2 "
         "lc rgb '#1f77b4' title 'replacement: best', \\\n"
         "     'summary.csv' every ::1 using 2:(rsel('replacement', 4)) with lines lw 2 dt 2 "
         "lc rgb '#1f77b4' title 'replacement: median', \\\n"
         "     'summary.csv' every ::1 using 2:(rsel('control', 3)) with lines lw 2 "
         "lc rgb '#d62728' title 'control: best', \\\n"
         "     'summary.csv' every ::1 using 2:(rsel('control', 4)) with lines lw 2 dt 2 "
         "lc rgb '#d62728' title 'control: median'\n"
         "unset multiplot\n";
  }
  const std::string command = "cd '" + dir.string() + "' && gnuplot plot.gp > gnuplot.log 2>&1";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    std::fprintf(stderr,
                 "age_replacement: gnuplot failed or is missing (see %s); the CSVs are written, "
                 "rerun the plot with: cd %s && gnuplot plot.gp\n",
                 (dir / "gnuplot.log").c_str(), dir.c_str());
    return false;
  }
  return true;
}

}  // namespace age_replacement
