#!/usr/bin/env python3
"""Tables and plots the runs of scripts/averaging_fashion.sh (benchmarks/averaging_fashion).

    /usr/bin/python3 benchmarks/averaging_fashion/report.py --runs out/averaging_fashion \\
        [--png docs/img/averaging_fashion.png] [--markdown FILE] [--check --floor 0.6]

Per condition and method, medians over seeds of: the population's steps per second (each
rank's steps / its own training seconds, summed) and its ratio to the no-communication
ceiling's in the same condition and seed; the wall time (the slowest rank's, its method's closing
collective, if any, included); the final
held-out accuracy of rank 0's model and of the rank-average model at equal total samples; the
time to the target, the synchronous method's (ddp's) median final accuracy in that condition
minus 0.5 points, for both models (with how many seeds reached it). --check exits non-zero
when a method, condition or seed is missing or a final accuracy is below --floor (rank 0's for
every method, the average model's too except for no_comm, whose average is of independently
trained models). A second table holds issue 34's targets for paramwin's methods, each marked
met or not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from typing import Dict, List, Optional

ORDER = ["ddp", "periodic", "average_all", "paramwin_inline", "paramwin_background",
         "paramwin_symmetric", "paramwin_hierarchical", "no_comm"]
CONDITIONS = ["none", "slow_rank", "random"]
SYNC = "ddp"
CEILING = "no_comm"


def load(runs: str) -> Dict:
    by = defaultdict(lambda: defaultdict(dict))  # condition -> method -> seed -> row
    with open(os.path.join(runs, "runs.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            by[row["condition"]][row["method"]][row["seed"]] = row
    return by


def ordered(names) -> List[str]:
    return [m for m in ORDER if m in names] + sorted(set(names) - set(ORDER))


def time_to(curve: List[dict], key: str, target: float) -> Optional[float]:
    for point in curve:
        if point[key] >= target:
            return point["time"]
    return None


def steps_to(curves, key: str, target: Optional[float]) -> str:
    """Rank 0's training steps at the first point at or above ``target``: the median over the
    seeds that reached it (how far rank 0's own training had gone, whatever the clock)."""
    if target is None:
        return "—"
    steps = [next((p["rank0_step"] for p in c if p[key] >= target), None) for c in curves]
    hit = [s for s in steps if s is not None]
    return f"{statistics.median(hit):.0f}" if hit else "—"


def target_of(cond: Dict) -> Optional[float]:
    if SYNC not in cond:
        return None
    return statistics.median(r["final_acc_rank0"] for r in cond[SYNC].values()) - 0.005


def med(values: List[float]) -> float:
    return statistics.median(values) if values else float("nan")


def reach(curves, key, target) -> str:
    if target is None:
        return "—"
    times = [time_to(c, key, target) for c in curves]
    hit = [t for t in times if t is not None]
    if not hit:
        return f"not reached (0/{len(times)})"
    # median over seeds, a seed that never reached it counts as infinitely late
    ranked = sorted(times, key=lambda t: float("inf") if t is None else t)
    mid = ranked[(len(ranked) - 1) // 2] if len(ranked) % 2 else None
    if len(ranked) % 2 == 0:
        a, b = ranked[len(ranked) // 2 - 1], ranked[len(ranked) // 2]
        mid = None if a is None or b is None else (a + b) / 2
    cell = "not reached" if mid is None else f"{mid:.1f}"
    return f"{cell} ({len(hit)}/{len(times)})"


def summary(by) -> List[dict]:
    out = []
    for c in [c for c in CONDITIONS if c in by] + sorted(set(by) - set(CONDITIONS)):
        target = target_of(by[c])
        for m in ordered(by[c]):
            seeds = sorted(by[c][m])
            rows = [by[c][m][s] for s in seeds]
            ratios = [by[c][m][s]["population_steps_per_s"] /
                      by[c][CEILING][s]["population_steps_per_s"]
                      for s in seeds if CEILING in by[c] and s in by[c][CEILING]]
            out.append({
                "condition": c, "method": m, "seeds": seeds, "target": target,
                "ranks": rows[0]["ranks"], "samples": rows[0]["samples"],
                "steps_per_s": med([r["population_steps_per_s"] for r in rows]),
                "ratio": med(ratios),
                "slowest_rank": med([min(x["steps_per_s"] for x in r["per_rank"]) for r in rows]),
                "wall": med([r["wall_seconds"] for r in rows]),
                "acc0": med([r["final_acc_rank0"] for r in rows]),
                "acc_avg": med([r["final_acc_avg"] for r in rows]),
                "reach0": reach([r["curve"] for r in rows], "acc_rank0", target),
                "steps0": steps_to([r["curve"] for r in rows], "acc_rank0", target),
                "reach_avg": reach([r["curve"] for r in rows], "acc_avg", target),
                "load": med([r["loadavg"] for r in rows]),
            })
    return out


def markdown(rows: List[dict]) -> str:
    lines = []
    for c in ordered_conditions(rows):
        sub = [r for r in rows if r["condition"] == c]
        t = sub[0]["target"]
        tt = "—" if t is None else f"{100 * t:.2f} %"
        lines += [
            f"**Condition `{c}`** ({sub[0]['ranks']} ranks, {sub[0]['samples']:,} samples per "
            f"run, target {tt}; seeds {', '.join(map(str, sub[0]['seeds']))}; 1-minute load "
            f"average at the runs' ends, median {med([r['load'] for r in sub]):.1f}):",
            "",
            "| method | population steps/s | x ceiling | slowest rank steps/s | wall s | "
            "final acc rank 0 (%) | final acc average (%) | s to target, rank 0 (seeds) | "
            "s to target, average (seeds) | rank 0's steps at target |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in sub:
            lines.append(
                f"| {r['method']} | {r['steps_per_s']:.0f} | {r['ratio']:.2f} | "
                f"{r['slowest_rank']:.1f} | {r['wall']:.1f} | {100 * r['acc0']:.2f} | "
                f"{100 * r['acc_avg']:.2f} | {r['reach0']} | {r['reach_avg']} | "
                f"{r['steps0']} |")
        lines.append("")
    lines.append("Medians over seeds. x ceiling: population steps/s over no_comm's in the same "
                 "condition and seed (median of the ratios). Target: ddp's median final "
                 "accuracy in the condition minus 0.5 points; a seed that never reached it "
                 "counts as infinitely late. Rank 0's steps at target: its training steps at "
                 "the first curve point at or above the target (median over the seeds that "
                 "reached it; a closing mean's point counts with the rank's final step).")
    return "\n".join(lines)


def median_time(curves, key: str, target: Optional[float]) -> float:
    """Median over seeds of the time to ``target`` (inf where a seed never reached it)."""
    if target is None:
        return float("nan")
    times = [time_to(c, key, target) for c in curves]
    return statistics.median(float("inf") if t is None else t for t in times)


def targets(by) -> List[dict]:
    """Issue 34's targets for each paramwin method (rank 0's model: what one rank holds)."""
    out = []
    for c in [c for c in CONDITIONS if c in by]:
        target = target_of(by[c])
        if target is None:
            continue
        cond = by[c]
        t_of = {m: median_time([r["curve"] for r in cond[m].values()], "acc_rank0", target)
                for m in cond}
        acc = {m: med([r["final_acc_rank0"] for r in cond[m].values()]) for m in cond}
        baselines = [m for m in cond if m not in (CEILING,) and not m.startswith("paramwin")]
        best = min((t_of[m] for m in baselines), default=float("nan"))
        for m in [m for m in ordered(cond) if m.startswith("paramwin")]:
            seeds = [s for s in cond[m] if s in cond.get(CEILING, {})]
            ratio = med([cond[m][s]["population_steps_per_s"] /
                         cond[CEILING][s]["population_steps_per_s"] for s in seeds])
            row = {"condition": c, "method": m,
                   "acc_gap": 100 * (acc[m] - acc[SYNC]),
                   "ratio": ratio,
                   "time_vs_sync": t_of[m] / t_of[SYNC] if t_of[SYNC] else float("nan"),
                   "time_vs_best": t_of[m] / best if best else float("nan")}
            checks = [("final accuracy within 0.5 points of ddp", row["acc_gap"] >= -0.5,
                       f"{row['acc_gap']:+.2f} points")]
            if c == "slow_rank":
                checks.append(("population steps/s >= 0.9x ceiling", ratio >= 0.9,
                               f"{ratio:.2f}x"))
                checks.append(("time to target <= 0.6x ddp's", row["time_vs_sync"] <= 0.6,
                               f"{row['time_vs_sync']:.2f}x"))
            if c == "none":
                checks.append(("time to target <= 1.1x the best baseline's",
                               row["time_vs_best"] <= 1.1, f"{row['time_vs_best']:.2f}x"))
            row["checks"] = checks
            out.append(row)
    return out


def targets_markdown(rows: List[dict]) -> str:
    if not rows:
        return ""
    lines = ["**Issue 34's targets** (paramwin's methods; rank 0's model; medians over seeds):",
             "", "| condition | method | target | measured | met |",
             "| --- | --- | --- | ---: | --- |"]
    for r in rows:
        for what, ok, value in r["checks"]:
            lines.append(f"| {r['condition']} | {r['method']} | {what} | {value} | "
                         f"{'yes' if ok else 'no'} |")
    lines.append("")
    lines.append("Time to target: median seconds until rank 0's held-out accuracy reached ddp's "
                 "median final accuracy minus 0.5 points (a seed that never reached it counts "
                 "as infinitely late), over the same for ddp (or the fastest baseline that is "
                 "not no_comm).")
    return "\n".join(lines)


def ordered_conditions(rows) -> List[str]:
    seen = []
    for r in rows:
        if r["condition"] not in seen:
            seen.append(r["condition"])
    return seen


def at(curve: List[dict], key: str, t: float) -> float:
    value = curve[0][key]
    for point in curve:
        if point["time"] <= t + 1e-9:
            value = point[key]
    return value


def plot(by, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    conds = [c for c in CONDITIONS if c in by] + sorted(set(by) - set(CONDITIONS))
    fig, axes = plt.subplots(1, len(conds), figsize=(5 * len(conds), 4.5), sharey=True,
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, c in zip(axes[0], conds):
        horizon = max(r["wall_seconds"] for m in by[c] for r in by[c][m].values())
        grid = [horizon * i / 100 for i in range(101)]
        for i, m in enumerate(ordered(by[c])):
            runs = list(by[c][m].values())
            for key, style in (("acc_avg", "-"), ("acc_rank0", ":")):
                mid = [100 * statistics.median(at(r["curve"], key, t) for r in runs)
                       for t in grid]
                ends = max(r["wall_seconds"] for r in runs)
                g = [t for t in grid if t <= ends]
                ax.plot(g, mid[:len(g)], style, color=colors[i % len(colors)],
                        drawstyle="steps-post",
                        label=f"{m} ({'average' if key == 'acc_avg' else 'rank 0'})")
        target = target_of(by[c])
        if target is not None:
            ax.axhline(100 * target, color="grey", lw=0.8, ls="--")
        ax.set_title(f"condition: {c}")
        ax.set_xlabel("wall-clock seconds of training")
        ax.set_ylim(60, 90)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out accuracy (%), median over seeds")
    axes[0][-1].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    fig.savefig(png, dpi=100)


def check(by, methods: List[str], conditions: List[str], seeds: int, floor: float) -> List[str]:
    bad = []
    for c in conditions:
        for m in methods:
            have = sorted(by.get(c, {}).get(m, {}))
            if len(have) < seeds:
                bad.append(f"{m} {c}: {len(have)} of {seeds} seeds")
                continue
            for s, r in by[c][m].items():
                if r["final_acc_rank0"] < floor:
                    bad.append(f"{m} {c} seed {s}: rank 0 accuracy {r['final_acc_rank0']:.3f}"
                               f" < {floor}")
                if m != CEILING and r["final_acc_avg"] < floor:
                    bad.append(f"{m} {c} seed {s}: average accuracy {r['final_acc_avg']:.3f}"
                               f" < {floor}")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="out/averaging_fashion")
    p.add_argument("--png", default="")
    p.add_argument("--markdown", default="")
    p.add_argument("--check", action="store_true")
    p.add_argument("--methods", default=",".join(ORDER))
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--seeds", type=int, default=1, help="seeds every run must have (--check)")
    p.add_argument("--floor", type=float, default=0.6, help="final accuracy floor (--check)")
    o = p.parse_args()
    by = load(o.runs)
    if o.check:
        bad = check(by, [m for m in o.methods.split(",") if m],
                    [c for c in o.conditions.split(",") if c], o.seeds, o.floor)
        if bad:
            print("report: " + "; ".join(bad), file=sys.stderr)
            return 1
    text = markdown(summary(by))
    goals = targets_markdown(targets(by))
    if goals:
        text += "\n\n" + goals
    print(text)
    if o.markdown:
        with open(o.markdown, "w") as f:
            f.write(text + "\n")
    if o.png:
        plot(by, o.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
