#!/usr/bin/env python3
"""Runs two builds of paramwin_bench side by side on the same machine, interleaved, and prints
a Markdown table of medians and ratios (after / before): the way to show that a change kept
every benchmark within noise. Each round runs every suite once with the "before" binary and
once with the "after" binary (alternating which goes first), so both see the same load.

    scripts/bench_compare.py BEFORE_BIN AFTER_BIN [--rounds 3] [--reps 3] [--out FILE.md]
                             [--suite NP:FILTER ...]

The default suites are the 2-rank and 4-rank ones of scripts/bench.sh (one donor, wire,
publish, busy donor, roster, k donors).

Each binary's medians are taken per round; the table shows the median of those and their
range. A benchmark counts as slower (or faster) only when the ranges do not overlap: every
round of one binary beat every round of the other. These VMs are bimodal run to run (a raw
1 MiB MPI_Get + flush takes 55-90 us in one run and 250-480 us in the next, with the same
binary), so a ratio alone, from few rounds, can point either way.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_SUITES = [
    "2:^(one_donor|wire|publish|busy)/",
    "4:^k_donors/",
]
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def run(binary, np, flt, reps, path):
    cmd = ["/usr/bin/mpiexec.mpich", "-n", str(np), binary, f"--benchmark_filter={flt}",
           f"--benchmark_repetitions={reps}", "--benchmark_min_time=0.05",
           "--benchmark_display_aggregates_only=true", f"--benchmark_out={path}",
           "--benchmark_out_format=json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].replace("/manual_time", "")
        out[name] = b["real_time"] * UNIT[b["time_unit"]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--suite", action="append")
    ap.add_argument("--out")
    a = ap.parse_args()
    suites = a.suite or DEFAULT_SUITES
    samples = {"before": {}, "after": {}}
    load = [open("/proc/loadavg").read().split()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for suite in suites:
                np, flt = suite.split(":", 1)
                for which in order:
                    binary = a.before if which == "before" else a.after
                    res = run(binary, int(np), flt, a.reps, os.path.join(tmp, "r.json"))
                    for name, t in res.items():
                        samples[which].setdefault(name, []).append(t)
            print(f"bench_compare: round {r + 1}/{a.rounds} done", file=sys.stderr)
    load.append(open("/proc/loadavg").read().split()[0])
    lines = ["| benchmark | before (ms) | before range | after (ms) | after range "
             "| after / before | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    ratios = []
    verdicts = {"slower": 0, "faster": 0, "overlap": 0}
    for name in sorted(samples["after"]):
        if name not in samples["before"]:
            continue
        bs, ts = samples["before"][name], samples["after"][name]
        b, t = statistics.median(bs), statistics.median(ts)
        ratios.append(t / b)
        verdict = "slower" if min(ts) > max(bs) else "faster" if max(ts) < min(bs) else "overlap"
        verdicts[verdict] += 1
        lines.append(f"| `{name}` | {b * 1e3:.3f} | {min(bs) * 1e3:.3f}-{max(bs) * 1e3:.3f} | "
                     f"{t * 1e3:.3f} | {min(ts) * 1e3:.3f}-{max(ts) * 1e3:.3f} | {t / b:.2f} | "
                     f"{verdict} |")
    lines.append("")
    lines.append(f"{len(ratios)} benchmarks; median ratio {statistics.median(ratios):.3f}, "
                 f"min {min(ratios):.2f}, max {max(ratios):.2f}; {a.rounds} interleaved rounds "
                 f"x {a.reps} repetitions per binary; load average {load[0]} before, {load[1]} "
                 f"after; {time.strftime('%Y-%m-%d')}. Ranges that do not overlap: "
                 f"{verdicts['slower']} slower, {verdicts['faster']} faster; "
                 f"{verdicts['overlap']} overlap.")
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
