#!/usr/bin/env python3
"""Tables and plots the Fashion-MNIST runs of scripts/pbt_fashion.sh.

    /usr/bin/python3 benchmarks/pbt_fashion/report.py --runs out/pbt_fashion[,DIR...] \
        [--png docs/img/pbt_fashion.png] [--markdown FILE] [--check]

For every method and seed, the population's held-out accuracy at a time t is the test accuracy
of the agent (or trial) with the best validation accuracy among the latest evaluations made
by t (model selection on validation, never on test). The table gives, per method, the mean and
the spread over seeds at the end of the equal step budget and at the equal wall-clock time T
(the earliest time by which every method's every seed has finished), the median agent's
accuracy at the end, the rebirths and the exploit cost per rebirth, and the time each method
takes to reach checkpoint-file PBT's final accuracy (same seed) as a fraction of that
baseline's run time (the slow-agents target of issue 36). A second table gives each method's
final best held-out accuracy per seed, a third holds paramwin_pbt (--versus: another method)
against every other method (means, their difference against the seeds' spread, per-seed paired
differences with their median, t statistic and sign count: issue 36's schedule-task target).
--runs takes several directories (comma-separated: seeds added to an earlier run with
scripts/pbt_fashion.sh --first-seed); a method's seed found in two of them is an error.
--check exits non-zero when a run is missing, when a method's best agent stays below 60 %
held-out accuracy, when an exploiting method never exploited, or when paramwin_pbt_sync_twin's
runs differ from checkpoint_pbt's (twin(): the same decisions must give the same
evaluations; the suite's short version uses it).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from typing import Dict, List

BASELINE = "checkpoint_pbt"
ORDER = ["random_search", "random_cosine", "optuna_tpe", "checkpoint_pbt", "paramwin_pbt",
         "paramwin_pbt_sync", "paramwin_pb2", "paramwin_pbt_sync_twin", "checkpoint_pbt_cosine",
         "paramwin_pbt_cosine", "paramwin_pbt_same"]
# paramwin's synchronous PBT deciding with the baseline's explore stream (paramwin_pbt.py):
# twin() checks that its runs are the baseline's, evaluation for evaluation.
TWIN = "paramwin_pbt_sync_twin"
SEARCHES = ("random_search", "random_cosine", "optuna_tpe")  # methods that never exploit
PBT = "paramwin_pbt"  # the method the comparison table holds against every other


def load(runs: str) -> Dict[str, Dict[int, List[dict]]]:
    """The records of one run directory, or of several (comma-separated), by method and seed.
    ValueError when a directory has no records, is given twice, or two directories hold the
    same method's seed (which of the two a table shows would be an accident)."""
    by = defaultdict(lambda: defaultdict(list))
    source: Dict[tuple, str] = {}
    dirs = [d for d in runs.split(",") if d]
    real = [os.path.realpath(d) for d in dirs]
    for i, r in enumerate(real):
        if r in real[:i]:
            raise ValueError(f"{dirs[i]} is given twice")
    for d in dirs:
        paths = sorted(glob.glob(os.path.join(d, "*-seed*-rank*.jsonl")))
        if not paths:
            raise ValueError(f"no run records (*-seed*-rank*.jsonl) in {d}")
        for path in paths:
            with open(path) as f:
                for line in f:
                    row = json.loads(line)
                    key = (row["method"], row["seed"])
                    if source.setdefault(key, d) != d:
                        raise ValueError(f"{key[0]} seed {key[1]} is in both {source[key]} "
                                         f"and {d}")
                    by[key[0]][key[1]].append(row)
    return by


def best_at(rows: List[dict], t: float) -> float:
    """Test accuracy of the best-by-validation latest evaluation of each agent/trial by t.
    On the drift task (records with a "phase") only the evaluations of the stream's latest
    phase by t count: an Optuna trial that ended in an earlier phase was measured on images
    the stream no longer shows."""
    latest = {}
    for r in rows:
        if r["clock"] <= t:
            key = (r["rank"], r.get("trial"))
            if key not in latest or latest[key]["step"] <= r["step"]:
                latest[key] = r
    if not latest:
        return float("nan")
    if any("phase" in r for r in latest.values()):
        now = max(r.get("phase", 0) for r in latest.values())
        latest = {k: r for k, r in latest.items() if r.get("phase", 0) == now}
    return max(latest.values(), key=lambda r: (r["val"], -r["rank"]))["test"]


def time_to(rows: List[dict], target: float) -> float:
    """The first training-clock time at which the best-by-validation agent's held-out accuracy
    is >= target (inf if never)."""
    for t in sorted({r["clock"] for r in rows}):
        if best_at(rows, t) >= target:
            return t
    return float("inf")


def final_agents(rows: List[dict]) -> List[float]:
    """Each agent's (rank's) test accuracy at its last evaluation."""
    last = {}
    for r in rows:
        if r["rank"] not in last or (last[r["rank"]]["clock"], last[r["rank"]]["step"]) <= (
                r["clock"], r["step"]):
            last[r["rank"]] = r
    return [r["test"] for r in last.values()]


def summary(by) -> List[dict]:
    end_times = [max(r["clock"] for r in rows) for m in by for rows in by[m].values()]
    t_equal = min(end_times)
    out = []
    for m in [m for m in ORDER if m in by] + sorted(set(by) - set(ORDER)):
        seeds = sorted(by[m])
        finals = [best_at(by[m][s], float("inf")) for s in seeds]
        at_t = [best_at(by[m][s], t_equal) for s in seeds]
        medians = [statistics.median(final_agents(by[m][s])) for s in seeds]
        rows = [r for s in seeds for r in by[m][s]]
        rebirths = [r for r in rows if r.get("died")]
        cost = [r["exploit_seconds"] for r in rebirths if "exploit_seconds" in r]
        step = [r["rebirth_seconds"] for r in rebirths if "rebirth_seconds" in r]
        loads = [r["load_seconds"] for r in rebirths if "load_seconds" in r]
        saves = [r["save_seconds"] for r in rows if "save_seconds" in r]
        if loads:  # the checkpoint path: a rebirth costs the donor's save and the load
            cost = [l + statistics.median(saves) for l in loads]
        # Time to checkpoint-file PBT's final accuracy of the same seed, per seed, as a fraction
        # of that baseline's run time.
        to_base = []
        base = by.get(BASELINE, {})
        for s in seeds:
            if s in base:
                target = best_at(base[s], float("inf"))
                to_base.append(time_to(by[m][s], target) / max(r["clock"] for r in base[s]))
        out.append({
            "method": m, "seeds": seeds, "final": finals, "at_t": at_t, "median_agent": medians,
            "end_clock": statistics.median(max(r["clock"] for r in by[m][s]) for s in seeds),
            "rebirths": len(rebirths) / max(1, len(seeds)),
            "cost_ms": 1e3 * statistics.median(cost) if cost else None,
            "step_ms": 1e3 * statistics.median(step) if step else None,
            "t_equal": t_equal, "to_base": to_base,
        })
    return out


def twin(by) -> List[str]:
    """paramwin_pbt_sync_twin against checkpoint_pbt, per seed both ran: every agent's
    evaluations (step, the validation accuracy it ranked on, held-out accuracy, hyperparameters,
    whether it was reborn and from whom) must be the same, up to the first interval whose
    ranking had a tie at the edge of a tail (the two methods may break ties differently), and
    before the last boundary (the baseline stops there; paramwin's step still exploits).
    Returns one line per seed; a line starting "DIFFERS" is a failure of --check."""
    lines = []
    for s in sorted(set(by.get(TWIN, {})) & set(by.get(BASELINE, {}))):
        def evaluations(rows):
            return {(r["rank"], r["step"]): r for r in rows}
        a, b = evaluations(by[BASELINE][s]), evaluations(by[TWIN][s])
        ranked = lambda r: r.get("val_before", r["val"])  # noqa: E731 - the metric it ranked on
        steps = sorted({k[1] for k in a} | {k[1] for k in b})
        last = max(steps)
        compared, stop, bad = 0, "", ""
        for step in steps:
            keys = sorted({k for k in a if k[1] == step} | {k for k in b if k[1] == step})
            for k in keys:
                x, y = a.get(k), b.get(k)
                if x is None or y is None:
                    bad = f"rank {k[0]} step {k[1]}: evaluated by one method only"
                    break
                same = ranked(x) == ranked(y)
                if step < last:
                    same = same and (x["test"] == y["test"] and x["hyper"] == y["hyper"]
                                     and bool(x.get("died")) == bool(y.get("died"))
                                     and ([x["donor"]] if x.get("died") else None)
                                     == (y["donors"] if y.get("died") else None))
                if not same:
                    bad = (f"rank {k[0]} step {k[1]}: baseline val {ranked(x)} test {x['test']} "
                           f"hyper {x['hyper']} died {bool(x.get('died'))}; twin val "
                           f"{ranked(y)} test {y['test']} hyper {y['hyper']} died "
                           f"{bool(y.get('died'))}")
                    break
                compared += 1
            if bad:
                break
            # A tie across a tail's edge: the methods may choose different agents from here on.
            vals = sorted((ranked(a[k]) for k in keys), reverse=True)
            tail = min(math.ceil(0.25 * len(vals)), len(vals) // 2)
            if step < last and tail and (vals[tail - 1] == vals[tail]
                                         or vals[-tail - 1] == vals[-tail]):
                stop = f"; stopped after step {step}: a tie at the edge of a tail of its ranking"
                break
        if bad:
            lines.append(f"DIFFERS seed {s}: {bad} (after {compared} identical evaluations)")
        else:
            lines.append(f"seed {s}: {compared} evaluations identical{stop}")
    return lines


def fmt(values: List[float]) -> str:
    pct = [100 * v for v in values]
    mean = statistics.fmean(pct)
    sd = statistics.stdev(pct) if len(pct) > 1 else 0.0
    return f"{mean:.2f} ± {sd:.2f} ({min(pct):.2f}–{max(pct):.2f})"


def ratios(values: List[float]) -> str:
    if not values:
        return "—"
    def one(v: float) -> str:
        return "never" if v == float("inf") else f"{v:.2f}"
    return f"{one(statistics.median(values))} ({', '.join(one(v) for v in values)})"


def markdown(rows: List[dict]) -> str:
    t = rows[0]["t_equal"]
    lines = [
        f"| method | best held-out accuracy, end (%) | at equal wall-clock T = {t:.0f} s (%) | "
        "median agent, end (%) | run time (s, median) | rebirths per run | exploit cost per "
        "rebirth (ms, median) | rebirth step (ms, median) | time to checkpoint_pbt's final "
        "accuracy (x its run time; median, per seed) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        cost = "—" if r["cost_ms"] is None else f"{r['cost_ms']:.3f}"
        step = "—" if r["step_ms"] is None else f"{r['step_ms']:.2f}"
        lines.append(f"| {r['method']} | {fmt(r['final'])} | {fmt(r['at_t'])} | "
                     f"{fmt(r['median_agent'])} | {r['end_clock']:.0f} | {r['rebirths']:.1f} | "
                     f"{cost} | {step} | {ratios(r['to_base'])} |")
    lines.append("")
    lines.append("Accuracy cells: mean ± standard deviation over seeds (min–max). Exploit cost: "
                 "checkpoint_pbt, the donor's torch.save (median) + the loader's torch.load and "
                 "load_state_dict; paramwin, the rebirth step's pull phase (the one-sided read "
                 "of the donor into the model). Rebirth step: the whole step() call that did "
                 "the rebirth (ranking, selection, pull, explore, republish; synchronous mode: "
                 "also the wait for the others). Time to checkpoint_pbt's final accuracy: the "
                 "first time the method's best-by-validation agent is at least as accurate on "
                 "the held-out set as checkpoint_pbt's at its end, same seed, divided by "
                 "checkpoint_pbt's run time (\"never\": not reached).")
    return "\n".join(lines)


def per_seed(rows: List[dict]) -> str:
    """Each method's final best held-out accuracy per seed (blank: the seed was not run)."""
    seeds = sorted({s for r in rows for s in r["seeds"]})
    lines = ["| seed | " + " | ".join(str(s) for s in seeds) + " |",
             "| --- |" + " ---: |" * len(seeds)]
    for r in rows:
        final = dict(zip(r["seeds"], r["final"]))
        lines.append(f"| {r['method']} | " + " | ".join(
            f"{100 * final[s]:.2f}" if s in final else "" for s in seeds) + " |")
    return "\n".join(lines)


def paired(a: List[float], b: List[float]) -> dict:
    """The per-seed differences a - b: mean, standard deviation, median, extremes, the paired
    t statistic (mean over its standard error; infinite when every difference is equal and
    non-zero, 0 when all are 0) and the number of seeds where a is higher."""
    d = [x - y for x, y in zip(a, b)]
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    if sd > 0:
        t = mean / (sd / math.sqrt(len(d)))
    else:
        t = math.copysign(math.inf, mean) if mean else 0.0
    return {"mean": mean, "sd": sd, "median": statistics.median(d), "min": min(d),
            "max": max(d), "t": t, "higher": sum(1 for x in d if x > 0), "n": len(d)}


def versus(rows: List[dict], pbt: str = PBT) -> str:
    """@p pbt's (paramwin_pbt's) final best held-out accuracy against every other method's: the
    means and standard deviations over seeds, the difference of the means, and the per-seed (paired:
    the same seed gives every method the same initial draws) differences. "Above by more than
    the spread": the difference of the means exceeds the larger of the two standard
    deviations."""
    mine = next((r for r in rows if r["method"] == pbt), None)
    if mine is None or len(mine["seeds"]) < 2:
        return ""
    lines = [f"| {pbt} against | its mean ± sd (%) | the other's mean ± sd (%) | difference "
             "of the means (points) | above by more than the spread | paired per seed: mean ± "
             "sd (median; min–max) | paired t | higher in |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    own = dict(zip(mine["seeds"], mine["final"]))
    for r in rows:
        if r is mine:
            continue
        other = dict(zip(r["seeds"], r["final"]))
        common = sorted(set(own) & set(other))
        if len(common) < 2:
            continue
        a = [100 * own[s] for s in common]
        b = [100 * other[s] for s in common]
        diff = statistics.fmean(a) - statistics.fmean(b)
        spread = max(statistics.stdev(a), statistics.stdev(b))
        p = paired(a, b)
        lines.append(
            f"| {r['method']} | {statistics.fmean(a):.2f} ± {statistics.stdev(a):.2f} | "
            f"{statistics.fmean(b):.2f} ± {statistics.stdev(b):.2f} | {diff:+.2f} | "
            f"{'yes' if diff > spread else 'no'} ({diff:+.2f} vs {spread:.2f}) | "
            f"{p['mean']:+.2f} ± {p['sd']:.2f} ({p['median']:+.2f}; {p['min']:+.2f}–"
            f"{p['max']:+.2f}) | {p['t']:+.2f} | {p['higher']} of {p['n']} |")
    lines.append("")
    lines.append("Final best held-out accuracy (the first table's first column), over the seeds "
                 "both methods ran. Above by more than the spread: the difference of the means "
                 "exceeds the larger of the two standard deviations over seeds. Paired t: the "
                 "mean of the per-seed differences over its standard error (n - 1 degrees of "
                 "freedom). Higher in: the seeds where it is strictly higher.")
    return "\n".join(lines)


def plot(by, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    horizon = max(r["clock"] for m in by for rows in by[m].values() for r in rows)
    grid = [horizon * i / 60 for i in range(1, 61)]
    fig, ax = plt.subplots(figsize=(8, 5))
    for m in [m for m in ORDER if m in by]:
        curves = [[best_at(by[m][s], t) for t in grid] for s in sorted(by[m])]
        mid = [statistics.median(c[i] for c in curves) * 100 for i in range(len(grid))]
        lo = [min(c[i] for c in curves) * 100 for i in range(len(grid))]
        hi = [max(c[i] for c in curves) * 100 for i in range(len(grid))]
        ax.plot(grid, mid, label=m)
        ax.fill_between(grid, lo, hi, alpha=0.15)
    ax.set_xlabel("wall-clock seconds (training; held-out evaluations excluded)")
    ax.set_ylabel("held-out accuracy of the best-by-validation agent (%)")
    conditions = sorted({r.get("condition", "none") for m in by for rows in by[m].values()
                         for r in rows})
    stragglers = "" if conditions == ["none"] else f" ({', '.join(conditions)})"
    tasks = sorted({r.get("task", "default") for m in by for rows in by[m].values() for r in rows})
    task = "" if tasks == ["default"] else f", task {', '.join(tasks)}"
    agents = len({r["rank"] for m in by for rows in by[m].values() for r in rows})
    ax.set_title(f"Fashion-MNIST, {agents} agents{stragglers}{task}: median over seeds, "
                 "band min–max")
    ax.set_ylim(bottom=70)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="out/pbt_fashion",
                   help="a run directory, or several, comma-separated")
    p.add_argument("--png", default="")
    p.add_argument("--markdown", default="")
    p.add_argument("--check", action="store_true")
    p.add_argument("--methods", default=",".join(ORDER))
    p.add_argument("--seeds", type=int, default=0, help="seeds every method must have (--check)")
    p.add_argument("--versus", default=PBT, help="the method the second table holds against "
                   f"every other ({PBT})")
    o = p.parse_args()
    try:
        by = load(o.runs)
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    if o.check:
        bad = [m for m in o.methods.split(",") if m not in by or len(by[m]) < max(1, o.seeds)]
        if bad:
            print(f"report: missing runs for {bad}", file=sys.stderr)
            return 1
    rows = summary(by)
    if o.check:
        # Training worked (the best agent learned), and every exploiting method exploited.
        bad = [f"{r['method']}: best held-out accuracy {min(r['final']):.3f} < 0.6"
               for r in rows if min(r["final"]) < 0.6]
        bad += [f"{r['method']}: no rebirth" for r in rows
                if r["method"] not in SEARCHES and r["rebirths"] == 0]
        if bad:
            print("report: " + "; ".join(bad), file=sys.stderr)
            return 1
    twins = twin(by)
    if twins:
        print("twin (paramwin_pbt_sync_twin against checkpoint_pbt, same decisions):\n  "
              + "\n  ".join(twins))
        if o.check and any(line.startswith("DIFFERS") for line in twins):
            print("report: paramwin_pbt_sync_twin differs from checkpoint_pbt", file=sys.stderr)
            return 1
    text = markdown(rows) + "\n\nPer seed (final best held-out accuracy, %):\n\n" + per_seed(rows)
    table = versus(rows, o.versus)
    if table:
        text += "\n\n" + table
    print(text)
    if o.markdown:
        with open(o.markdown, "w") as f:
            f.write(text + "\n")
    if o.png:
        plot(by, o.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
