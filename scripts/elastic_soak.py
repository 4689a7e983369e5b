#!/usr/bin/python3
"""Reads the elastic soak's two logs (scripts/elastic_soak.sh: a run with faults and the same
run without) and prints issue 35's soak figures as a Markdown table (docs/elastic.md, "Soak").

    /usr/bin/python3 scripts/elastic_soak.py FAULTS.log BASELINE.log SLOTS
"""
import dataclasses
import re
import statistics
import sys


@dataclasses.dataclass
class SoakLog:
    """What one run's log says (its processes' lines, merged)."""
    faults: list          # (slot, time) per fault injected
    joins: list           # (slot, time, first loss, donors' mean loss) per join
    resumes: list         # (slot, time) per stopped process that stepped on in its slot
    procs: list           # per process: its step counts and times (the "steps" line)
    finished: tuple       # (last epoch, slots finished), or None
    kinds: dict           # fault kind -> count
    refills: tuple        # (refills, processes spawned, failed): the population's counts
    refill_seconds: list  # per refill, the longest any member spent in it, ascending
    final: list           # the finished slots' final losses


def parse(path):
    faults, joins, resumes, procs, finished, final = [], [], [], [], None, []
    kinds, refills, refill_seconds = {}, (0, 0, 0), {}
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"fault (\d+) slot (\d+) at ([\d.]+)(?: kind (\w+))?", line)
        if m:
            faults.append((int(m[2]), float(m[3])))
            kinds[m[4] or "?"] = kinds.get(m[4] or "?", 0) + 1
        m = re.match(r"refills (\d+) spawned (\d+) failed (\d+)", line)
        if m:  # every process of a refill counts it: the largest count is the population's
            refills = max(refills, (int(m[1]), int(m[2]), int(m[3])))
        m = re.match(r"refill (\d+) seconds ([\d.]+)", line)
        if m:  # per refill, the longest any member spent in it
            n = int(m[1])
            refill_seconds[n] = max(refill_seconds.get(n, 0.0), float(m[2]))
        m = re.match(r"resume slot (\d+) at ([\d.]+)", line)
        if m:  # a stopped process that stepped on in its slot: nothing to replace
            resumes.append((int(m[1]), float(m[2])))
        m = re.match(r"join slot (\d+) at ([\d.]+) loss (\S+) donors_mean (\S+)", line)
        if m:
            joins.append((int(m[1]), float(m[2]), float(m[3]), float(m[4])))
        m = re.match(r"steps (\d+) step_seconds ([\d.]+) .*epoch_steps (\d+) epoch_median_ms "
                     r"([\d.]+) epoch_extra_s ([-\d.]+) recovery_steps (\d+) recovery_ms "
                     r"([\d.]+) other_steps (\d+) other_ms ([\d.]+)", line)
        if m:
            procs.append((int(m[1]), float(m[2]), int(m[3]), float(m[4]), float(m[5]),
                          int(m[6]), float(m[7]), int(m[8]), float(m[9])))
        m = re.match(r"final slot (\d+) loss (\S+)", line)
        if m:
            final.append(float(m[2]))
        m = re.match(r"soak: epoch (\d+), (\d+) slots finished", line)
        if m:
            finished = (int(m[1]), int(m[2]))
    return SoakLog(faults, joins, resumes, procs, finished, kinds, refills,
                   sorted(refill_seconds.values()), final)


def main():
    faults_log, base_log, slots = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run, base = parse(faults_log), parse(base_log)
    faults, joins, procs, finished = run.faults, run.joins, run.procs, run.finished
    base_procs, base_finished, base_final = base.procs, base.finished, base.final
    # Each join, or resume of a stopped process in its slot, answers the earliest fault of its
    # slot not answered yet (when two are open, the longer delay: the pessimistic reading);
    # only joins are replacements (their delays are measured).
    open_faults = sorted(faults, key=lambda f: f[1])
    events = [(j[0], j[1], True) for j in joins] + [(r[0], r[1], False) for r in run.resumes]
    delays, resumed = [], 0
    for slot, at, joined in sorted(events, key=lambda e: e[1]):
        for i in range(len(open_faults)):
            fslot, fat = open_faults[i]
            if fslot == slot and fat <= at:
                if joined:
                    delays.append(at - fat)
                else:
                    resumed += 1
                del open_faults[i]
                break
    steps = sum(p[0] for p in procs)
    base_steps = sum(p[0] for p in base_procs)
    extra = sum(p[4] for p in procs)
    busy = sum(p[1] for p in procs)
    epoch_steps = [p[3] for p in procs if p[2] > 0]
    ratios = [j[2] / j[3] for j in joins if j[3] > 0]
    rec_n, rec_ms = sum(p[5] for p in procs), sum(p[6] for p in procs)
    oth_n, oth_ms = sum(p[7] for p in procs), sum(p[8] for p in procs)
    lost = (slots - finished[1]) if finished else slots
    q = statistics.quantiles(delays, n=20) if len(delays) >= 2 else [float("nan")] * 19
    rows = [
        ("faults injected", f"{len(faults)} ("
         + ", ".join(f"{run.kinds[k]} {k}" for k in sorted(run.kinds)) + ")"),
        ("refills of the spares by MPI_Comm_spawn (processes spawned, failed)",
         f"{run.refills[0]} ({run.refills[1]}, {run.refills[2]})"),
        ("the members' time in each refill, longest to shortest (s)",
         ", ".join(f"{t:.2f}" for t in reversed(run.refill_seconds)) or "-"),
        ("slots a spare took (joins)", f"{len(joins)}"),
        ("stops the process outlived in its slot (it stepped on: nothing to replace)",
         f"{resumed}"),
        ("faults never answered by a join (slot empty at the end)", f"{len(open_faults)}"),
        ("slots finished in the last epoch / slots", f"{finished[1] if finished else 0} / {slots}"
         f" (lost agents: {lost})"),
        ("last epoch", f"{finished[0] if finished else '-'}"),
        ("population agent-steps, with faults / without", f"{steps} / {base_steps} = "
         f"{steps / base_steps:.3f}" if base_steps else "-"),
        ("fault to the replacement's first step: median, p95, max (s)",
         f"{statistics.median(delays):.3f}, {q[18]:.3f}, {max(delays):.3f}" if delays else "-"),
        ("survivors' time added by epoch changes / all step time",
         f"{extra:.2f} s / {busy:.1f} s = {extra / busy:.1%}" if busy else "-"),
        ("mean step within 0.1 s after a fault / other steps (ms)",
         f"{rec_ms / rec_n:.3f} / {oth_ms / oth_n:.3f} = {rec_ms / rec_n / (oth_ms / oth_n):.3f}"
         if rec_n and oth_n else "-"),
        ("a step that moved to a new epoch: median over processes (ms)",
         f"{statistics.median(epoch_steps):.0f}" if epoch_steps else "-"),
        ("replacement's first loss / its donors' mean loss: min, median, max",
         f"{min(ratios):.3f}, {statistics.median(ratios):.3f}, {max(ratios):.3f}"
         if ratios else "-"),
        ("finished slots' final loss, mean: with faults / without",
         f"{statistics.mean(run.final):.4g} / {statistics.mean(base_final):.4g}"
         if run.final and base_final else "-"),
        ("baseline: slots finished", f"{base_finished[1] if base_finished else 0}"),
    ]
    print("| figure | measured |")
    print("| --- | --- |")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
