"""What the Python population demo shows a person: the live progress table, the comparison of
the two runs, the CSV files and the gnuplot plot — the formats of the C++ demos
(examples/age_replacement/report.hpp), so both demos' outputs read the same. Plain Python on
what rank 0 gathered (no MPI, no paramwin)."""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass, field
from typing import List, Sequence


@dataclass
class DeathRecord:
    agent: int
    step: int
    generation: int
    reason: str
    donors: str  # ';'-separated ranks
    donor_versions: str  # ';'-separated publish versions read
    loss_before: float
    loss_after: float = math.nan


@dataclass
class RunResult:
    name: str
    agents: int
    steps: int
    losses: List[List[float]] = field(default_factory=list)  # [agent][step]
    lrs: List[float] = field(default_factory=list)
    test_losses: List[float] = field(default_factory=list)
    deaths: List[DeathRecord] = field(default_factory=list)
    seconds: float = 0.0


def spread(values: Sequence[float]):
    """(best, median, worst); NaN counts as worst."""
    v = sorted(values, key=lambda x: (math.isnan(x), x))
    if not v:
        return (0.0, 0.0, 0.0)
    n = len(v)
    median = v[n // 2] if n % 2 == 1 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return (v[0], median, v[-1])


def progress_bar(done: int, total: int, width: int = 20) -> str:
    frac = done / total if total > 0 else 1.0
    fill = int(frac * width + 0.5)
    return "[" + "".join("#" if i < fill else "." for i in range(width)) + f"] {int(frac * 100 + 0.5):3d}%"


def print_progress_header(run: str) -> None:
    print(f"\n== {run} run ==")
    print(f"{'step':>9}  {'progress':<27} {'best':>10} {'median':>10} {'worst':>10} {'deaths':>7}",
          flush=True)


def print_progress_row(step: int, steps: int, s, deaths: int) -> None:
    where = f"{step}/{steps}"
    print(f"{where:>9}  {progress_bar(step, steps):<27} {s[0]:10.5f} {s[1]:10.5f} {s[2]:10.5f} "
          f"{deaths:7d}", flush=True)


def tail_means(r: RunResult, last_n: int) -> List[float]:
    start = max(0, r.steps - last_n)
    return [sum(r.losses[a][start:]) / max(1, r.steps - start) for a in range(r.agents)]


def print_comparison(repl: RunResult, ctrl: RunResult, last_n: int) -> None:
    fr = spread([l[-1] for l in repl.losses])
    fc = spread([l[-1] for l in ctrl.losses])
    tr, tc = spread(tail_means(repl, last_n)), spread(tail_means(ctrl, last_n))
    hr, hc = spread(repl.test_losses), spread(ctrl.test_losses)

    def row(label, a, b):
        verdict = ("" if math.isnan(a) or math.isnan(b) else
                   "replacement" if a < b else "control" if a > b else "tie")
        ratio = b / a if a > 0 else math.nan
        print(f"  {label:<44} {a:13.5f} {b:13.5f}   {verdict:<12} {ratio:8.2f}x")

    print("\n== replacement vs control (same seeds, same data; lower is better) ==")
    print(f"  {'':<44} {'replacement':>13} {'control':>13}   {'better':<12} {'ctrl/repl':>9}")
    row("final training loss: best", fr[0], fc[0])
    row("final training loss: median", fr[1], fc[1])
    row("final training loss: worst", fr[2], fc[2])
    row(f"mean training loss, last {last_n} steps: best", tr[0], tc[0])
    row(f"mean training loss, last {last_n} steps: median", tr[1], tc[1])
    mean = lambda v: sum(v) / len(v) if v else 0.0  # noqa: E731
    row(f"mean training loss, last {last_n} steps: all", mean(tail_means(repl, last_n)),
        mean(tail_means(ctrl, last_n)))
    row("held-out loss: best", hr[0], hc[0])
    row("held-out loss: median", hr[1], hc[1])
    row("held-out loss: worst", hr[2], hc[2])
    print(f"  {'deaths':<44} {len(repl.deaths):13d} {len(ctrl.deaths):13d}")
    print(f"  {'wall time':<44} {repl.seconds:12.2f}s {ctrl.seconds:12.2f}s")
    print("\n  per agent (held-out loss after the last step):")
    print(f"  {'agent':>5} {'lr':>9} {'deaths':>7} {'replacement':>13} {'control':>13}")
    for a in range(repl.agents):
        d = sum(1 for r in repl.deaths if r.agent == a)
        print(f"  {a:5d} {repl.lrs[a]:9.4f} {d:7d} {repl.test_losses[a]:13.5f} "
              f"{ctrl.test_losses[a]:13.5f}")


def _g(x: float) -> str:
    return f"{x:.7g}"


def write_losses_csv(path: str, runs: Sequence[RunResult]) -> None:
    with open(path, "w") as f:
        f.write("run,agent,lr,step,loss,generation\n")
        for r in runs:
            for a in range(r.agents):
                generation = 0
                for t in range(r.steps):
                    f.write(f"{r.name},{a},{_g(r.lrs[a])},{t},{_g(r.losses[a][t])},{generation}\n")
                    for d in r.deaths:
                        if d.agent == a and d.step == t:
                            generation = d.generation


def write_deaths_csv(path: str, runs: Sequence[RunResult]) -> None:
    with open(path, "w") as f:
        f.write("run,agent,step,generation,reason,donors,donor_versions,loss_before,loss_after\n")
        for r in runs:
            for d in r.deaths:
                f.write(f"{r.name},{d.agent},{d.step},{d.generation},{d.reason},{d.donors},"
                        f"{d.donor_versions},{_g(d.loss_before)},{_g(d.loss_after)}\n")


def write_summary_csv(path: str, runs: Sequence[RunResult]) -> None:
    with open(path, "w") as f:
        f.write("run,step,best,median,worst\n")
        for r in runs:
            for t in range(r.steps):
                s = spread([r.losses[a][t] for a in range(r.agents)])
                f.write(f"{r.name},{t},{_g(s[0])},{_g(s[1])},{_g(s[2])}\n")


def render_plot(directory: str, repl: RunResult, ctrl: RunResult) -> bool:
    """Writes plot.gp (three panels, as the C++ demo) and runs gnuplot; False if it failed."""
    values = [v for r in (repl, ctrl) for l in r.losses for v in l if math.isfinite(v) and v > 0]
    lo, hi = (min(values), max(values)) if values and min(values) < max(values) else (1e-4, 1.0)
    lo, hi = 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))
    lrs = "".join(f"lr[{a + 1}] = {_g(repl.lrs[a])}\n" for a in range(repl.agents))
    script = (
        "# Rerun with: gnuplot plot.gp (from this directory)\n"
        "set terminal pngcairo size 1400,1000 font 'DejaVu Sans,10'\n"
        "set output 'losses.png'\n"
        "set datafile separator ','\n"
        "set logscale y\n"
        "set format y '10^{%L}'\n"
        f"set yrange [{_g(lo)}:{_g(hi)}]\n"
        f"set xrange [0:{repl.steps}]\n"
        "set grid ytics mytics xtics lc rgb '#dddddd'\n"
        "set key outside right top box opaque samplen 2\n"
        "set xlabel 'training step'\n"
        "set ylabel 'training loss (MSE, log scale)'\n"
        f"n = {repl.agents}\n"
        "array lr[n]\n" + lrs +
        "sel(run, a, col) = (strcol(1) eq run && $2 == a) ? column(col) : NaN\n"
        f"set multiplot layout 3,1 title 'paramwin age-based replacement (Python): {repl.agents} "
        f"agents, {repl.steps} steps' font ',13'\n"
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
        "unset multiplot\n")
    with open(os.path.join(directory, "plot.gp"), "w") as f:
        f.write(script)
    with open(os.path.join(directory, "gnuplot.log"), "w") as log:
        try:
            rc = subprocess.call(["gnuplot", "plot.gp"], cwd=directory, stdout=log, stderr=log)
        except FileNotFoundError:
            rc = 127
    if rc != 0:
        print(f"torch_population.py: gnuplot failed or is missing (see {directory}/gnuplot.log); "
              f"the CSVs are written, rerun the plot with: cd {directory} && gnuplot plot.gp")
        return False
    return True
