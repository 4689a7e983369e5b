#!/usr/bin/env python3
"""Regenerates docs/benchmarks.md (and the PNG plots in docs/img/) from the Google Benchmark
JSON files that scripts/bench.sh writes (out/bench/np<N>.json, one per rank count).

    scripts/bench_report.py [--json-dir out/bench] [--json FILE ...] [--out docs/benchmarks.md]
                            [--img-dir docs/img] [--no-plots]

Every number in the report comes from the JSON; nothing is typed in by hand.
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
MIB = 1 << 20


def poll_text(ns: str) -> str:
    """How ranks with a poll interval of @p ns nanoseconds wait (benchmarks/main_mpi.cpp)."""
    n = int(ns)
    if n == 0:
        return "block in MPI_Wait (busy-poll)"
    return f"sleep-poll every {n // 1000} µs" if n < 1000000 else f"sleep-poll every {n // 1000000} ms"


# --- loading ------------------------------------------------------------------------------
class Result:
    """Median / min / max seconds of one benchmark in one run, plus its byte counters."""

    def __init__(self, median, lo, hi, reps, nbytes, wire_bytes):
        self.median, self.min, self.max = median, lo, hi
        self.reps, self.bytes, self.wire_bytes = reps, nbytes, wire_bytes

    def bw(self, which="median"):
        """Bytes per second for the median (or 'best' = min time, 'worst' = max time)."""
        t = {"median": self.median, "best": self.min, "worst": self.max}[which]
        return self.bytes / t if self.bytes and t else None


def clean_name(name):
    """Drops Google Benchmark's /iterations:N, /repeats:N and /manual_time suffixes."""
    return re.sub(r"/(iterations|repeats):\d+|/manual_time$", "", name)


def load(paths):
    results, contexts = {}, {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"bench_report: skipping {path}: {e} (an interrupted run?)")
            continue
        ctx = data.get("context", {})
        np_ = int(ctx.get("mpi_ranks", "0"))
        contexts[np_] = ctx
        iters, aggs, counters = {}, {}, {}
        for r in data.get("benchmarks", []):
            name = clean_name(r["run_name"])
            t = r["real_time"] * UNIT[r.get("time_unit", "ns")]
            if r.get("run_type") == "aggregate":
                aggs.setdefault(name, {})[r.get("aggregate_name")] = t
            else:
                iters.setdefault(name, []).append(t)
                counters[name] = (r.get("bytes"), r.get("wire_bytes"))
        for name in set(iters) | set(aggs):
            a, it = aggs.get(name, {}), iters.get(name, [])
            med = a.get("median", statistics.median(it) if it else None)
            if med is None:
                continue
            lo = a.get("min", min(it) if it else med)
            hi = a.get("max", max(it) if it else med)
            nb, wb = counters.get(name, (None, None))
            results[(np_, name)] = Result(med, lo, hi, len(it), nb, wb)
    return results, contexts


class Data:
    def __init__(self, results, contexts):
        self.r, self.ctx = results, contexts

    def get(self, name, np_=None, prefer=(2, 4, 8)):
        """Result of @name in the run with np_ ranks (or the first preferred run having it)."""
        if np_ is not None:
            return self.r.get((np_, name))
        for p in list(prefer) + sorted({k[0] for k in self.r}):
            if (p, name) in self.r:
                return self.r[(p, name)]
        return None

    def has_prefix(self, prefix):
        return any(n.startswith(prefix) for _, n in self.r)


# --- formatting ---------------------------------------------------------------------------
def ftime(s):
    if s is None:
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fbw(b):
    return "–" if b is None else f"{b / 1e9:.2f}"


def fsize(n):
    if n >= MIB:
        return f"{n // MIB} MiB"
    return f"{n // 1024} KiB"


def ftime_range(res):
    if res is None:
        return "–"
    return f"{ftime(res.median)} ({ftime(res.min)} – {ftime(res.max)})"


def fbw_range(res):
    if res is None or not res.bytes:
        return "–"
    return f"{fbw(res.bw())} ({fbw(res.bw('worst'))} – {fbw(res.bw('best'))})"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def verdict(value, threshold, higher_is_better=True):
    if value is None:
        return "NOT MEASURED"
    ok = value >= threshold if higher_is_better else value <= threshold
    return "**MET**" if ok else "**NOT MET**"


def ratio(a, b):
    return a / b if a and b else None


def fr(x):
    return "–" if x is None else f"{x:.2f}x"


# --- ceilings -----------------------------------------------------------------------------
def ceilings_section(data, big, knp, w):
    """What this machine allows for the targets that are not met, from the same run's
    baselines: the best ratio a pull built as documented could reach."""
    def med(name, np_):
        res = data.get(name, np_)
        return res.median if res else None

    w("## Ceilings: what the hardware and the guarantees allow\n")
    w("Each line bounds a target from baselines measured in the same run; a target above its "
      "ceiling cannot be met on this machine by any pull that keeps the guarantees (a failed "
      "pull leaves the caller's memory untouched).\n")
    rows = []
    for size in big:
        get = med(f"one_donor/get_flush/bytes:{size}", 2)
        mem = med(f"one_donor/memcpy/bytes:{size}", 2)
        pull = med(f"one_donor/pull_rma/bytes:{size}", 2)
        if get and mem:
            rows.append([fsize(size), ftime(get), ftime(mem), fr(get / (get + mem)),
                         fr(ratio(get, pull))])
    if rows:
        w("**rma pull vs raw `MPI_Get`+flush (target 0.95x).** A transactional RMA pull must "
          "read the donor into memory the caller does not see, validate it (a round trip after "
          "the data), and only then copy it into the caller's memory: at least one get plus one "
          "copy of the model. Ceiling = get / (get + memcpy):\n")
        w(table(["size", "get+flush", "memcpy", "ceiling", "measured"], rows) + "\n")
    n = "50M"
    bound = stream_bound(data, 3, n, knp)
    get_big = data.get(f"one_donor/get_flush/bytes:{max(big)}", 2) if big else None
    if bound and get_big and get_big.bw():
        t_get = 3 * 50e6 * 4 / get_big.bw()
        w(f"**k = 3 rma pull vs the streaming bound (target 0.7x).** The three raw gets alone "
          f"(3 × 200 MB at the {fsize(max(big))} get+flush bandwidth, {fbw(get_big.bw())} GB/s) "
          f"take {ftime(t_get)}; 0.7x the bound allows {ftime(bound / 0.7)}. Ceiling: "
          f"{fr(bound / t_get)}, before accumulating anything.\n")
    f32 = med(f"wire/pull_shm/wire:native/n:{n}", 2)
    bf = med(f"wire/pull_shm/wire:bfloat16/n:{n}", 2)
    if f32 and bf:
        w("**bfloat16 wire on shm, one donor (target 1.6x).** The pull reads the wire bytes and "
          "writes float32 parameters: 2 + 4 bytes per parameter against 4 + 4 for float32, so "
          f"at equal bandwidth the ceiling is 8 / 6 = 1.33x (measured {fr(f32 / bf)}). With k "
          "donors it is (4k + 4) / (2k + 4): 1.6x needs k = 3.\n")
    rf32 = med(f"wire/pull_rma/wire:native/n:{n}", 2)
    rbf = med(f"wire/pull_rma/wire:bfloat16/n:{n}", 2)
    mem_big = data.get(f"one_donor/memcpy/bytes:{max(big)}", 2) if big else None
    if rf32 and rbf and get_big and get_big.bw() and mem_big and mem_big.bw():
        t_copy = 50e6 * 4 / mem_big.bw()
        t_get32 = 50e6 * 4 / get_big.bw()
        w("**bfloat16 wire over RMA, one donor (target 1.6x).** The wire halves only the "
          "transfer; the copy of the float32 result into the caller's memory (after validation) "
          "stays. float32 lands straight in the scratch: get(200 MB) + copy(200 MB); bfloat16: "
          "get(100 MB) + widen(100 → 200 MB) + copy(200 MB). Even with a free widen the ceiling "
          f"is (get + copy) / (get / 2 + copy) = {fr((t_get32 + t_copy) / (t_get32 / 2 + t_copy))} "
          f"at this run's bandwidths (measured {fr(rf32 / rbf)}).\n")


# --- machine ------------------------------------------------------------------------------
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_header(json_dir):
    """The page's run header (scripts/check_docs.py, "Run headers"): command, commit, date and
    machine of every table below."""
    commit, date = "unknown", "unknown"
    commit_file = os.path.join(json_dir, "commit.txt") if json_dir else ""
    if commit_file and os.path.exists(commit_file):
        with open(commit_file) as f:
            text = f.read()
        found = re.search(r"\b[0-9a-f]{7,40}\b", text)
        commit = found.group(0) if found else commit
        found = re.search(r"(?<!\d)\d{4}-\d\d-\d\d(?!\d)", text)
        date = found.group(0) if found else date
    return (f"**Run:** `scripts/bench.sh`, commit {commit}, {date}, machine: "
            "[Machine](#machine) (every table of this page).\n")


def machine(data, json_dir):
    lscpu = sh("lscpu")
    model = re.search(r"Model name:\s*(.+)", lscpu)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)", lscpu, re.M)
    mem_kb = re.search(r"MemTotal:\s*(\d+)", sh("cat /proc/meminfo"))
    mpich = re.search(r"MPICH Version:\s*(\S+)", sh("mpichversion"))
    device = re.search(r"MPICH Device:\s*(\S+)", sh("mpichversion"))
    ucx = sh("dpkg-query -W -f='${Version}' libucx0") or "?"
    gbench = sh("dpkg-query -W -f='${Version}' libbenchmark-dev") or "?"
    lines = [
        f"- CPU: {model.group(1).strip() if model else '?'}, "
        f"{cpus.group(1) if cpus else '?'} cores (`lscpu`)",
        f"- Memory: {int(mem_kb.group(1)) / 1024 / 1024:.1f} GiB" if mem_kb else "- Memory: ?",
        f"- MPI: MPICH {mpich.group(1) if mpich else '?'} ({device.group(1) if device else '?'}), "
        f"UCX {ucx}",
        f"- OS: {sh('. /etc/os-release && echo $PRETTY_NAME') or platform.system()}, "
        f"kernel {platform.release()}",
        f"- Build: Release (`-O3`), C++20; Google Benchmark {gbench}",
    ]
    # The run's own record of its CPU and kernels (paramwin_bench's context), which this
    # report's machine may not share.
    run_ctx = next((data.ctx[n] for n in sorted(data.ctx) if "cpu_model" in data.ctx[n]), None)
    if run_ctx:
        lines[0] = (f"- CPU: {run_ctx['cpu_model']}, {run_ctx.get('num_cpus', '?')} cores "
                    f"(as the run saw it); flags: {run_ctx.get('cpu_flags', '?')}")
        lines.insert(1, f"- Kernels: {run_ctx.get('paramwin_kernels', '?')} "
                        "(`detail::kernel_summary()`)")
    commit_file = os.path.join(json_dir, "commit.txt") if json_dir else ""
    if commit_file and os.path.exists(commit_file):
        with open(commit_file) as f:
            lines.append(f"- Source: commit `{f.read().strip()}`")
    noisy = False
    for np_ in sorted(data.ctx):
        ctx = data.ctx[np_]
        load_file = os.path.join(json_dir, f"load_np{np_}.txt") if json_dir else ""
        load = ""
        if load_file and os.path.exists(load_file):
            with open(load_file) as f:
                parts = f.read().split("\n")
            before = parts[1].split()[0] if len(parts) > 1 and parts[1] else "?"
            after = parts[2].split()[0] if len(parts) > 2 and parts[2] else "?"
            load = f", 1-min load average {before} before / {after} after"
            try:
                noisy = noisy or float(before) > 0.7 or float(after) > float(np_) + 0.7
            except ValueError:
                pass
        lines.append(f"- Run with {np_} ranks: {ctx.get('date', '?')}{load}; waiting ranks "
                     f"{poll_text(ctx.get('poll_ns', '0'))}, ranks with no part in a case "
                     f"(k-donor pulls: ranks past the donors, and shm donors) "
                     f"{poll_text(ctx.get('idle_poll_ns', ctx.get('poll_ns', '0')))}")
    return "\n".join(lines), noisy


# --- plots --------------------------------------------------------------------------------
def gnuplot(script, tmp):
    path = os.path.join(tmp, "plot.gp")
    with open(path, "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", path], check=True)


def plot_one_donor(data, sizes, methods, img_dir, tmp):
    series = []
    for m, label in methods:
        path = os.path.join(tmp, f"od_{m}.dat")
        with open(path, "w") as f:
            for s in sizes:
                res = data.get(f"one_donor/{m}/bytes:{s}", 2)
                if res and res.bytes:
                    f.write(f"{s / 1024} {res.bw() / 1e9} {res.bw('worst') / 1e9} "
                            f"{res.bw('best') / 1e9}\n")
        series.append(f"'{path}' using 1:2:3:4 with yerrorlines title '{label}'")
    out = os.path.join(img_dir, "one_donor_bandwidth.png")
    gnuplot(f"""set terminal pngcairo size 900,560 font ',10'
set output '{out}'
set termoption noenhanced
set title 'One donor, 2 ranks: bandwidth vs size (median, bars min-max)'
set logscale x 4
set logscale y
set xlabel 'size [KiB]'
set ylabel 'GB/s'
set key top left
set grid
plot {', '.join(series)}
""", tmp)
    return out


def plot_k(data, counts, methods, img_dir, tmp, np_):
    plots = []
    for n in counts:
        series = []
        for m, label in methods:
            path = os.path.join(tmp, f"k_{m}_{n}.dat")
            with open(path, "w") as f:
                for k in (1, 2, 3):
                    if m == "bound":
                        t = stream_bound(data, k, n, np_)
                        if t:
                            f.write(f"{k} {t * 1e3} {t * 1e3} {t * 1e3}\n")
                        continue
                    res = data.get(f"k_donors/{m}/k:{k}/n:{n}", np_)
                    if res:
                        f.write(f"{k} {res.median * 1e3} {res.min * 1e3} {res.max * 1e3}\n")
            style = "lines dt 2" if m == "bound" else "yerrorlines"
            using = "1:2" if m == "bound" else "1:2:3:4"
            series.append(f"'{path}' using {using} with {style} title '{label}'")
        plots.append(f"set title '{n} float32'\nplot {', '.join(series)}\n")
    out = os.path.join(img_dir, "k_donors_time.png")
    gnuplot(f"""set terminal pngcairo size 1300,460 font ',10'
set output '{out}'
set termoption noenhanced
set multiplot layout 1,{len(counts)} title 'Pull time vs k donors ({np_} ranks; median, bars min-max)'
set xlabel 'k (donors)'
set ylabel 'ms'
set xtics 1
set xrange [0.8:3.2]
set logscale y
set grid
set key top left font ',8'
{''.join(plots)}unset multiplot
""", tmp)
    return out


def stream_bound(data, k, n, np_):
    """(k+1)*N*4 bytes at the `a += b` bandwidth of the same run (stream/add counts 2*N*4)."""
    add = data.get(f"stream/add/n:{n}", np_)
    if not add or not add.bytes:
        return None
    count = add.bytes // 8
    return (k + 1) * count * 4 / add.bw()


# --- report -------------------------------------------------------------------------------
def groups_section(json_dir, w):
    """Section 8 from out/bench/groups_*.json (scripts/bench.sh --groups)."""
    paths = sorted(glob.glob(os.path.join(json_dir, "groups_*.json"))) if json_dir else []
    if not paths:
        return
    results, _ = load(paths)
    extra = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f).get("benchmarks", []):
                if r.get("aggregate_name") == "median":
                    extra[clean_name(r["run_name"])] = r
    commit = ""
    cpath = os.path.join(json_dir, "groups_commit.txt")
    if os.path.exists(cpath):
        commit = open(cpath).read().strip()
    lpath = os.path.join(json_dir, "groups_load.txt")
    load_note = ""
    if os.path.exists(lpath):
        lines = open(lpath).read().split("\n")
        load_note = f" Load average before: {lines[1].split()[0]}, after: {lines[2].split()[0]}." \
            if len(lines) > 2 and lines[2].strip() else ""
    w("## 8. Agent groups: rebirth time, g = 1 vs g = 2 ranks per agent (issue 8)\n")
    w(f"Measured at {commit or 'an unrecorded commit'} with `scripts/bench.sh --groups`.{load_note} "
      "One agent (agent 0) is reborn at every timed step from k donor agents; the time is its "
      "whole `GroupAgent::step` (decide, shard pulls, stamp check, gather inside the agent, "
      "republish), the slowest of its ranks. Same model size (one float32 layer of n elements) "
      "for g = 1 and g = 2. Waiting ranks sleep 1 ms between polls (they leave the cores to the "
      "reborn agent, as on a machine with a core per rank; RMA donors then answer gets only when "
      "they poll). Phase columns: agent 0's leader, milliseconds per rebirth (medians).\n")
    rows = []
    for (np_, name) in sorted(results, key=lambda k: k[1]):
        if not name.startswith("group_rebirth/") or "/g:1/" not in name:
            continue
        n2 = name.replace("/g:1/", "/g:2/")
        r1, r2 = results.get((np_, name)), results.get((np_, n2))
        if r1 is None or r2 is None:
            continue
        _, tr, k, _, n = name.split("/")
        e2 = extra.get(n2, {})
        rows.append([tr, np_, k.split(":")[1], n.split(":")[1], ftime_range(r1), ftime_range(r2),
                     fr(ratio(r1.median, r2.median)),
                     " / ".join(f"{e2.get(p + '_ms', 0):.1f}" for p in ("pull", "assemble", "publish"))])
    w(table(["transport", "ranks", "k", "n", "g = 1", "g = 2", "g = 1 / g = 2 (target ≥ 1.5x)",
             "g = 2 pull / gather / publish ms"], rows) + "\n")
    w("Why shared memory on one node gains little: every rank must end with the whole model. "
      "Per rank, g = 1 writes N bytes in the pull and copies N into its window; g = 2 writes "
      "N/2 in the shard pull, N in the gather and N/2 in the republish — the same 2N. What g = 2 "
      "halves is the donor reads (k·N/2 instead of k·N) and whatever is slower than a local "
      "copy: the RMA pull (a network link per rank across hosts). See docs/cluster.md for the "
      "model on real links.\n")


SERVE_BEGIN = "<!-- serve:begin (scripts/bench.sh --serve rewrites this section) -->"
SERVE_END = "<!-- serve:end -->"


def run_record(json_dir, name):
    """(commit, load note) of a section's own run: bench.sh's <name>_commit.txt and
    <name>_load.txt (date, load average before, after)."""
    cpath = os.path.join(json_dir, f"{name}_commit.txt")
    commit = open(cpath).read().strip() if os.path.exists(cpath) else "an unrecorded commit"
    load_note = ""
    lpath = os.path.join(json_dir, f"{name}_load.txt")
    if os.path.exists(lpath):
        lines = open(lpath).read().split("\n")
        if len(lines) > 2 and lines[2].strip():
            load_note = (f" Run {lines[0].strip()}; load average before: {lines[1].split()[0]}, "
                         f"after: {lines[2].split()[0]}.")
    return commit, load_note


def serve_section(json_dir, w):
    """Section 9 from out/bench/serve_np2.json (scripts/bench.sh --serve, or the full run)."""
    path = os.path.join(json_dir, "serve_np2.json") if json_dir else ""
    if not path or not os.path.exists(path):
        return
    tpath = os.path.join(json_dir, "serve_thread_np2.json")
    results, _ = load([path] + ([tpath] if os.path.exists(tpath) else []))
    get = lambda name: results.get((2, name))  # noqa: E731
    commit, load_note = run_record(json_dir, "serve")
    w(SERVE_BEGIN + "\n")
    w("## 9. Serving RMA readers from an Agent loop (issue 14)\n")
    w(f"Measured at {commit} with `scripts/bench.sh --serve` (2 ranks, medians of the "
      f"repetitions, (min – max)).{load_note}\n")
    w("Rank 0 pulls 1M float32 over RMA from rank 1 (after a 2 ms head start). *Agent loop*: "
      "rank 1 runs 0.3 s of training steps, each 1 ms of compute without MPI calls then "
      "`Agent::step` (no death, no publish), so `step()` is the loop's only paramwin call. "
      "*no aid*: `serve.progress_in_step = false`; *with step()'s progress*: the default, one "
      "`MPI_Iprobe` per step when the window has RMA readers. The raw busy-donor rows of "
      "section 5 (0.3 s of compute, no step) are repeated from the same run.\n")
    rows = []
    for label, name in (("idle donor (waits inside MPI)", "busy/pull_rma/donor:idle/n:1M"),
                        ("busy donor, no aid", "busy/pull_rma/donor:busy/n:1M"),
                        ("busy donor, progress() every ~10 µs", "busy/pull_rma/donor:busy_progress/n:1M"),
                        ("Agent loop, no aid", "serve/agent_loop_rma/progress:none/n:1M"),
                        ("Agent loop with step()'s progress", "serve/agent_loop_rma/progress:step/n:1M")):
        r = get(name)
        rows.append([label, ftime_range(r)])
    w(table(["donor", "pull latency, rma, 1M float32"], rows) + "\n")
    off = get("serve/step_cost/progress:none")
    on = get("serve/step_cost/progress:step")
    call = get("serve/progress_call")
    cost = call.median if call else None
    w("The progress call's cost: *the call* is `ParameterWindow::progress()` on a window with RMA "
      "readers, as `step()` makes it (one `MPI_Iprobe`), timed over 10,000 calls; *steps* time "
      "1000 `Agent::step` calls of such an agent (no death, no publish) without and with the "
      "call — their difference is within the noise of this machine.\n")
    w(table(["the call", "share of a 1 ms step (target < 1 %)", "step() without the call",
             "step() with the call"],
            [[f"{call.median * 1e9:.0f} ns ({call.min * 1e9:.0f} – {call.max * 1e9:.0f} ns)"
              if call else "—", f"{100 * cost / 1e-3:.3f} %" if cost is not None else "—",
              ftime_range(off), ftime_range(on)]]) + "\n")
    t_off = get("serve/thread_cost/progress_thread:off")
    t_on = get("serve/thread_cost/progress_thread:on")
    w("The progress thread's cost to the trainer (`serve.progress_thread`, polling every 200 µs): "
      "rank 0 times a fixed computation of 2·10^7 multiply-adds without MPI calls, with and "
      "without its window's progress thread (MPI initialised with `MPI_THREAD_MULTIPLE` for "
      "both rows; a run of its own).\n")
    w(table(["without the thread", "with the thread", "with / without"],
            [[ftime_range(t_off), ftime_range(t_on),
              fr(ratio(t_on.median if t_on else None, t_off.median if t_off else None))]]) + "\n")
    w(SERVE_END + "\n")


MPI_BEGIN = "<!-- mpi:begin (scripts/bench.sh --mpi-compare rewrites this section) -->"
MPI_END = "<!-- mpi:end -->"
MPI_LABELS = (("mpich", "MPICH"), ("openmpi", "Open MPI"))


def run_note(json_dir, np_):
    """'date; load before → after' of one run (bench.sh's load_np<N>.txt), or ''."""
    path = os.path.join(json_dir, f"load_np{np_}.txt")
    if not os.path.exists(path):
        return ""
    lines = [line.strip() for line in open(path).read().split("\n")]
    if len(lines) < 3 or not lines[2]:
        return lines[0] if lines else ""
    return f"{lines[0]}, load average {lines[1].split()[0]} → {lines[2].split()[0]}"


def mpi_section(json_dir, w):
    """Section 11 from out/bench-mpi/<mpi>/np{2,4}.json (scripts/bench.sh --mpi-compare)."""
    runs = {}
    for key, _ in MPI_LABELS:
        d = os.path.join(json_dir, key)
        paths = sorted(glob.glob(os.path.join(d, "np*.json")))
        if paths:
            runs[key] = (d, Data(*load(paths)))
    if len(runs) < 2:
        return
    w(MPI_BEGIN + "\n")
    w("## 11. MPICH and Open MPI side by side (issue 16)\n")
    w("The one-donor (section 1) and k-donor (section 2) cases of the same `paramwin_bench`, "
      "built once per MPI (`build` with MPICH, `build-openmpi` with Open MPI) and run one after "
      "the other by `scripts/bench.sh --mpi-compare`; Open MPI with the launcher environment of "
      "the tests (RMA through osc/ucx, docs/rma-semantics.md). Medians of the repetitions "
      "(min – max).\n")
    cpath = os.path.join(runs["mpich"][0], "command.txt")
    if os.path.exists(cpath):
        w(f"Command: `{open(cpath).read().strip()}`.\n")
    rows = []
    for key, label in MPI_LABELS:
        d, _ = runs[key]
        commit = open(os.path.join(d, "commit.txt")).read().strip() \
            if os.path.exists(os.path.join(d, "commit.txt")) else "unrecorded"
        version = open(os.path.join(d, "mpi.txt")).read().strip() \
            if os.path.exists(os.path.join(d, "mpi.txt")) else ""
        rows.append([label, " ".join(version.replace("|", "/").split()), commit,
                     run_note(d, 2), run_note(d, 4)])
    w(table(["MPI", "launcher version", "commit", "2-rank run", "4-rank run"], rows) + "\n")
    before = []  # load average as each run began: other processes (and the previous run)
    for key, _ in MPI_LABELS:
        for np_ in (2, 4):
            path = os.path.join(runs[key][0], f"load_np{np_}.txt")
            if os.path.exists(path):
                lines = open(path).read().split("\n")
                if len(lines) > 1 and lines[1].strip():
                    before.append(float(lines[1].split()[0]))
    w("> **Load.** Both MPIs' waiting ranks busy-poll, so a run's own ranks raise the load "
      "average (about 2 after a 2-rank run, 3 to 4 after a 4-rank run on these 2 cores); "
      + (f"as runs began it was at most {max(before):.2f} (a 1-minute average: it still holds "
         "the previous run). " if before else "")
      + "Compare the two columns of one row (taken minutes apart), not these numbers with "
      "sections 1 and 2.\n")

    ref = runs["mpich"][1]
    sizes = sorted({int(n.split("bytes:")[1]) for _, n in ref.r if n.startswith("one_donor/")})
    methods = [("get_flush", "MPI_Get+flush"), ("pull_shm", "pull shm"),
               ("pull_rma", "pull rma")]
    if sizes:
        w("**One donor, 2 ranks**: rank 0 reads rank 1's float32 layer; bandwidth in GB/s.\n")
        header = ["size"] + [f"{m_label}, {label}" for m_label in (l for _, l in methods)
                             for _, label in MPI_LABELS]
        body = []
        for size in sizes:
            body.append([fsize(size)] + [fbw_range(runs[key][1].get(f"one_donor/{m}/bytes:{size}", 2))
                                         for m, _ in methods for key, _ in MPI_LABELS])
        w(table(header, body) + "\n")
    counts = [c for c in ("1M", "10M", "50M") if ref.get(f"k_donors/pull_shm/k:1/n:{c}", 4)]
    if counts:
        w("**k donors averaged, 4 ranks**: rank 0 averages ranks 1..k (*seed*: per donor "
          "lock, `MPI_Get` of the whole buffer, unlock, add; then divide). Median time "
          "(min – max).\n")
        kmeth = [("pull_shm", "pull shm"), ("pull_rma", "pull rma"), ("seed", "seed")]
        header = ["N", "k"] + [f"{m_label}, {label}" for m_label in (l for _, l in kmeth)
                               for _, label in MPI_LABELS]
        body = []
        for n in counts:
            for k in (1, 2, 3):
                body.append([n, str(k)] + [ftime_range(runs[key][1].get(f"k_donors/{m}/k:{k}/n:{n}", 4))
                                           for m, _ in kmeth for key, _ in MPI_LABELS])
        w(table(header, body) + "\n")
    w(MPI_END + "\n")


HYPER_BEGIN = "<!-- hyper:begin (scripts/bench.sh --hyper rewrites this section) -->"
HYPER_END = "<!-- hyper:end -->"


def hyper_section(json_dir, w):
    """Section 10 from out/bench/hyper_np2.json (scripts/bench.sh --hyper, or the full run):
    what hyperparameters in the snapshot cost a pull and a publish (issue 15)."""
    path = os.path.join(json_dir, "hyper_np2.json") if json_dir else ""
    if not path or not os.path.exists(path):
        return
    medians = {}
    for r in json.load(open(path))["benchmarks"]:
        if r.get("aggregate_name") == "median":
            name = re.sub(r"/(iterations|repeats):\d+|/manual_time$", "", r["run_name"])
            medians[name] = r
    commit, load_note = run_record(json_dir, "hyper")
    w(HYPER_BEGIN + "\n")
    w("## 10. Hyperparameters in the snapshot (issue 15)\n")
    w(f"Measured at {commit} with `scripts/bench.sh --hyper` (2 ranks, medians of the "
      f"repetitions).{load_note}\n")
    w("Rank 0 pulls rank 1's snapshot of one float32 layer from two windows, one declaring no "
      "hyperparameter and one declaring 4 float64 hyperparameters (published with the layer, "
      "inside the same seqlocked slot), alternately in one loop (`hyper/pull_ab_*`, 1000 "
      "iterations per repetition, the order swapped every iteration), so both see the same "
      "load. By design there is no extra round trip: on the same node the words are loads from "
      "the pinned slot, over RMA one more `MPI_Rget` in the batch (one flush) of the first "
      "chunk. *difference* is the median, over pairs of iterations (one in each order, which "
      "cancels the warmer caches of the second pull), of the pair's mean difference "
      "(target < 1 µs).\n")
    rows = []
    for t in ("shm", "rma"):
        for b, label in (("4096", "4 KiB"), ("1048576", "1 MiB")):
            r = medians.get(f"hyper/pull_ab_{t}/bytes:{b}")
            if not r:
                continue
            rows.append([t, label, f"{r['no_hyper_us']:.2f} µs", f"{r['hyper4_us']:.2f} µs",
                         f"{r['diff_us']:+.2f} µs"])
    w(table(["transport", "layer", "pull, no hyperparameters", "pull, 4 hyperparameters",
             "difference"], rows) + "\n")
    rows = []
    for b, label in (("4096", "4 KiB"), ("1048576", "1 MiB")):
        a = medians.get(f"hyper/publish/hyper:0/bytes:{b}")
        c = medians.get(f"hyper/publish/hyper:4/bytes:{b}")
        if a and c:
            unit = 1e-6 if a.get("time_unit") == "us" else 1e-9 if a.get("time_unit") == "ns" \
                else 1e-3
            rows.append([label, f"{a['real_time'] * unit * 1e6:.2f} µs",
                         f"{c['real_time'] * unit * 1e6:.2f} µs"])
    w("Publish (rank 0, its own window; with 4 hyperparameters one value changes every "
      "publish, so the roster copy is rewritten too), separate runs of 500 publishes:\n")
    w(table(["layer", "publish, no hyperparameters", "publish, 4 hyperparameters"], rows) + "\n")
    w(HYPER_END + "\n")

DIRECT_BEGIN = "<!-- direct:begin (scripts/bench.sh --direct rewrites this section) -->"
DIRECT_END = "<!-- direct:end -->"
DIRECT_TARGETS_BEGIN = "<!-- direct-targets:begin (scripts/bench.sh --direct) -->"
DIRECT_TARGETS_END = "<!-- direct-targets:end -->"
DIRECT_SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def direct_data(json_dir):
    """The --direct runs (out/bench/direct_np2.json, direct_np4.json) as Data, or None."""
    paths = [os.path.join(json_dir, f"direct_np{n}.json") for n in (2, 4)] if json_dir else []
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return None
    return Data(*load(paths))


def direct_ratios(d):
    """(per-size direct/get and transactional/get bandwidth ratios, wire, k=3) from Data."""
    sizes = []
    for b in DIRECT_SIZES:
        g = d.get(f"direct/one_donor/get_flush/bytes:{b}", 2)
        t = d.get(f"direct/one_donor/pull_rma_transactional/bytes:{b}", 2)
        x = d.get(f"direct/one_donor/pull_rma_direct/bytes:{b}", 2)
        if g and t and x:
            sizes.append((b, g, t, x, g.median / x.median, g.median / t.median))
    wire = {}
    for lnd in ("transactional", "direct", "direct_chunk16M"):
        for wf in ("native", "bfloat16"):
            r = d.get(f"direct/wire/pull_rma_{lnd}/wire:{wf}/n:50M", 2)
            if r:
                wire[(lnd, wf)] = r
    add = d.get("direct/stream/add/n:50M", 4)
    k3 = {lnd: d.get(f"direct/k_donors/pull_rma_{lnd}/k:3/n:50M", 4)
          for lnd in ("transactional", "direct")}
    bound = None
    if add and add.bytes:
        bound = 4 * 50000000 * 4 / (add.bytes / add.median)  # (k+1)*N*4 bytes at a += b
    return sizes, wire, bound, k3


def direct_targets(json_dir, w):
    """The issue 18 target rows (same node), from the --direct runs."""
    d = direct_data(json_dir)
    if d is None:
        return
    sizes, wire, bound, k3 = direct_ratios(d)
    commit, _ = run_record(json_dir, "direct")
    rows = []
    if sizes:
        worst = min(r for *_, r, _t in sizes)
        rows.append(("18", "rma pull, one donor, Landing::direct ≥ 0.9x raw MPI_Get+flush, sizes "
                     "≥ 1 MiB (worst size)", fr(worst), verdict(worst, 0.9),
                     ", ".join(f"{fsize(b)}: {r:.2f}" for b, _g, _t, _x, r, _rt in sizes)))
    f32 = wire.get(("direct", "native"))
    for lnd, label in (("direct", "default chunks"), ("direct_chunk16M", "16 MiB chunks")):
        bf = wire.get((lnd, "bfloat16"))
        if f32 and bf:
            r = f32.median / bf.median
            rows.append(("18", f"bfloat16 wire over RMA, 50M, one donor, direct ({label}): "
                         "≥ 1.25x float32 (direct)", fr(r), verdict(r, 1.25),
                         f"float32 {ftime(f32.median)}, bfloat16 {ftime(bf.median)}"))
    if bound and k3.get("direct"):
        r = bound / k3["direct"].median
        rows.append(("18", "k=3, 50M: rma pull (direct) ≥ 0.5x the streaming bound", fr(r),
                     verdict(r, 0.5), f"bound {ftime(bound)}, pull {ftime(k3['direct'].median)}"))
    w(DIRECT_TARGETS_BEGIN + "\n")
    w(f"Issue 18 (direct landing, section 12; `scripts/bench.sh --direct` at {commit}, its own "
      "run, ratios within it):\n")
    w(table(["issue", "target", "measured", "verdict", "details"], rows) + "\n")
    w(DIRECT_TARGETS_END + "\n")


def direct_section(json_dir, w):
    """Section 12 from the --direct runs: direct landing against transactional and raw get."""
    d = direct_data(json_dir)
    if d is None:
        return
    sizes, wire, bound, k3 = direct_ratios(d)
    commit, load_note = run_record(json_dir, "direct")
    w(DIRECT_BEGIN + "\n")
    w("## 12. Direct landing for pinned RMA reads (issue 18)\n")
    w(f"Measured at {commit} with `scripts/bench.sh --direct` (one binary, cases side by side: "
      "2 ranks for one donor and the wire formats, 4 ranks for k = 3; medians of the "
      f"repetitions, (min – max)).{load_note} Two cores, and the same case moves between runs "
      "(the raw get among them): compare within a table, not across runs.\n")
    w("`PullOptions::landing = Landing::direct` pins the donor with its header read (one round "
      "trip), then lands the bytes where they end up: one plain `MPI_Get` per layer and one "
      "`MPI_Win_flush` straight into the caller's memory (wire type = layer type, one donor, no momentum, no deadline), or "
      "chunk buffers mixed into it as they land (bfloat16/float16 wire, k > 1, momentum, a "
      "deadline). The speculative version is checked in the first data batch, and the pins are "
      "released with `MPI_Raccumulate` (no round trip after the data). *transactional* is the "
      "default pull (scratch, validation, copy).\n")
    if sizes:
        rows = [[fsize(b), ftime_range(g), ftime_range(t), ftime_range(x), f"{rt:.2f}x",
                 f"{r:.2f}x"] for b, g, t, x, r, rt in sizes]
        w("One donor, 2 ranks, float32, median time per pull:\n")
        w(table(["size", "MPI_Get+flush", "pull rma transactional", "pull rma direct",
                 "transactional / get (BW)", "direct / get (BW)"], rows) + "\n")
    if wire:
        rows = []
        for lnd, label in (("transactional", "transactional"), ("direct", "direct"),
                           ("direct_chunk16M", "direct, 16 MiB chunks")):
            a, b = wire.get((lnd, "native")), wire.get((lnd, "bfloat16"))
            if a or b:
                rows.append([label, ftime_range(a), ftime_range(b),
                             f"{a.median / b.median:.2f}x" if a and b else "–"])
        f32 = wire.get(("direct", "native"))
        if f32:
            for lnd in ("transactional", "direct", "direct_chunk16M"):
                b = wire.get((lnd, "bfloat16"))
                if b:
                    rows.append([f"bfloat16 {lnd} vs float32 direct", "", ftime(b.median),
                                 f"{f32.median / b.median:.2f}x"])
        w("Wire formats over RMA, 50M float32, one donor, 2 ranks:\n")
        w(table(["landing", "float32 wire", "bfloat16 wire", "speed-up"], rows) + "\n")
    if bound and any(k3.values()):
        rows = [[lnd, ftime_range(r), ftime(bound), f"{bound / r.median:.2f}x"]
                for lnd, r in k3.items() if r]
        w("k = 3 donors over RMA, 50M float32, 4 ranks (oversubscribed: 4 ranks on 2 cores); "
          "the bound is (k+1)·N·4 bytes at the `a += b` bandwidth of the same run:\n")
        w(table(["landing", "pull", "streaming bound", "bound / pull"], rows) + "\n")
    w(DIRECT_END + "\n")


CHECKPOINT_BEGIN = "<!-- checkpoint:begin (scripts/bench.sh --checkpoint rewrites this section) -->"
CHECKPOINT_END = "<!-- checkpoint:end -->"


def checkpoint_section(json_dir, w):
    """Section 13 from out/bench/checkpoint_np4.json (scripts/bench.sh --checkpoint, or the
    full run): population checkpoints against plain POSIX writes (issue 17)."""
    path = os.path.join(json_dir, "checkpoint_np4.json") if json_dir else ""
    if not path or not os.path.exists(path):
        return
    j = json.load(open(path))
    s = j["seconds"]
    med = {k: statistics.median(v) for k, v in s.items()}
    nbytes = j["agents"] * j["params"] * 4
    commit, load_note = run_record(json_dir, "checkpoint")
    w(CHECKPOINT_BEGIN + "\n")
    w("## 13. Population checkpoints (issue 17)\n")
    w(f"Measured at {commit} with `scripts/bench.sh --checkpoint` (`paramwin_checkpoint_bench`, "
      f"{j['agents']} ranks = {j['agents']} agents x {j['params'] / 1e6:g}M float32 parameters in "
      f"{j['layers']} layers, {nbytes / 1e6:.0f} MB in all; {len(s['posix'])} repetitions, "
      f"medians (min – max); {'fsync before close' if j.get('fsync') else 'no fsync: the page cache takes the bytes, as it does for HDF5'}; "
      f"the files are removed before each repetition).{load_note}\n")
    w("One loop per repetition, so that every case sees the same machine: *posix* is every rank "
      "writing its parameters to its own file (`open`, `write`, `close`); *sync* is "
      "`Agent::save_checkpoint` (one parallel-HDF5 file: objects created collectively, each "
      "owner's datasets written with independent MPI-IO; checksums, temporary name and rename); "
      "*shared* is every rank writing the same bytes with `pwrite` into one shared file at its "
      "own offset (what the file system gives concurrent writers of one file, without HDF5); *async* is the same with `CheckpointOptions::async`: the "
      "call returns after copying the parameters (the agent's pause), the write runs on the "
      "agent's writer thread until `wait_checkpoint()`. Times are the slowest rank's.\n")
    rows = []
    for key, label in (("posix", "posix: every rank its own file"),
                       ("posix_shared", "posix: one shared file, each rank at its offset"),
                       ("sync", "save_checkpoint (sync)"),
                       ("async_pause", "save_checkpoint (async): the pause"),
                       ("async_total", "save_checkpoint (async): until wait_checkpoint"),
                       ("memcpy", "memcpy of the parameters")):
        v = s.get(key)
        if not v:
            continue
        rows.append([label, f"{med[key] * 1e3:.1f} ms ({min(v) * 1e3:.1f} – {max(v) * 1e3:.1f})",
                     f"{nbytes / med[key] / 1e9:.2f}"])
    w(table(["case", "time", "GB/s"], rows) + "\n")
    r = med["sync"] / med["posix"]
    p = med["async_pause"] / med["memcpy"]
    w(table(["issue", "target", "measured", "verdict", "details"], [
        ("17", f"saving {j['agents']} agents x {j['params'] / 1e6:g}M float32 within 1.5x of "
         "plain POSIX writes (time ratio)", fr(r), verdict(r, 1.5, higher_is_better=False),
         f"sync {med['sync'] * 1e3:.1f} ms, posix {med['posix'] * 1e3:.1f} ms"),
        ("17", "async: training pauses only for the copy of the parameters (pause / memcpy)",
         fr(p), "info", f"pause {med['async_pause'] * 1e3:.1f} ms, memcpy "
         f"{med['memcpy'] * 1e3:.1f} ms, whole write {med['async_total'] * 1e3:.1f} ms"),
    ]) + "\n")
    w(CHECKPOINT_END + "\n")


def update_section(out_path, render, begin=SERVE_BEGIN, end=SERVE_END):
    """Replaces the marked section of @p out_path with what @p render writes (appends it when
    the file has none yet)."""
    md = []
    render(md.append)
    new = "\n".join(md)
    text = open(out_path).read()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + new.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + new
    with open(out_path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json-dir", default="out/bench")
    ap.add_argument("--json", nargs="*", default=[])
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--img-dir", default="docs/img")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--mpi-json-dir", default="out/bench-mpi",
                    help="section 11's runs (mpich/, openmpi/), when a full report is written")
    ap.add_argument("--section", choices=["serve", "hyper", "mpi", "direct", "checkpoint"],
                    help="rewrite only this section of the existing --out file (mpi: "
                         "--json-dir holds mpich/ and openmpi/, scripts/bench.sh --mpi-compare)")
    args = ap.parse_args()
    if args.section == "serve":
        update_section(args.out, lambda w: serve_section(args.json_dir, w))
        return
    if args.section == "mpi":
        update_section(args.out, lambda w: mpi_section(args.json_dir, w), MPI_BEGIN, MPI_END)
        return
    if args.section == "direct":
        update_section(args.out, lambda w: direct_targets(args.json_dir, w), DIRECT_TARGETS_BEGIN,
                       DIRECT_TARGETS_END)
        update_section(args.out, lambda w: direct_section(args.json_dir, w), DIRECT_BEGIN,
                       DIRECT_END)
        return
    if args.section == "hyper":
        update_section(args.out, lambda w: hyper_section(args.json_dir, w), HYPER_BEGIN,
                       HYPER_END)
        return
    if args.section == "checkpoint":
        update_section(args.out, lambda w: checkpoint_section(args.json_dir, w),
                       CHECKPOINT_BEGIN, CHECKPOINT_END)
        return

    paths = list(args.json)
    if args.json_dir:
        paths += sorted(glob.glob(os.path.join(args.json_dir, "np*.json")))
    if not paths:
        raise SystemExit("bench_report: no JSON input (run scripts/bench.sh first)")
    data = Data(*load(paths))
    md = []
    w = md.append

    w("# Benchmarks\n")
    w("<!-- Generated by scripts/bench_report.py from out/bench/*.json; do not edit by hand. -->\n")
    w(run_header(args.json_dir) + "\n")
    w("## How to run\n")
    w("```sh\nscripts/bench.sh            # set up, build, run every case, regenerate this file\n"
      "scripts/bench.sh --no-build # reuse the build in ./build\n"
      "scripts/bench.sh --report-only  # only regenerate this file from out/bench/*.json\n```\n")
    w("The suite is one binary, `paramwin_bench` (Google Benchmark with an MPI-aware main: every "
      "rank runs the same iterations, each iteration is timed on every rank and reduced with "
      "`MPI_MAX`, only rank 0 reports). `bench.sh` runs it with 2 ranks (one-donor sweep, chunk "
      "sizes, wire formats, publish, busy donor), 4 ranks (k = 1..3 donors) and 8 ranks (roster, "
      "scale), each with `--benchmark_repetitions` and `--benchmark_min_time` as set in the "
      "script. Tables give the **median** of the repetitions with (min – max). GB/s = 1e9 B/s. "
      "A short smoke run of the same binary is part of the CTest suite "
      "(`paramwin_bench.smoke.np2`).\n")
    w("Measured separately (their own programs and pages): the LibTorch adapter against the "
      "span path, [benchmarks-torch.md](benchmarks-torch.md); pulls and rebirths across two "
      "emulated hosts, [benchmarks-multihost.md](benchmarks-multihost.md); two builds side by "
      "side (before / after a change, `scripts/bench_compare.py`), "
      "[benchmarks-compare.md](benchmarks-compare.md); `import paramwin` (Python) against the "
      "C++ pull, [benchmarks-python.md](benchmarks-python.md); a PBT exploit against the "
      "checkpoint file's, by model size, [pbt-exploit-cost.md](pbt-exploit-cost.md). The kernel "
      "rows on an Intel Xeon "
      "(AVX-512), where the store loops first lost to memcpy, and the streaming stores that "
      "fixed it: [benchmarks-intel.md](benchmarks-intel.md).\n")

    w("## Machine\n")
    mach, noisy = machine(data, args.json_dir)
    w(mach + "\n")
    if noisy:
        w("> **Load.** The 1-minute load average exceeded the 2 cores during at least one run "
          "(see above): other processes, or the run's own oversubscribed 4- and 8-rank jobs. "
          "Treat the absolute numbers, and ratios near a threshold, with caution.\n")
    w("> 4- and 8-rank runs oversubscribe the 2 cores: ranks with nothing to do sleep between "
      "`MPI_Test` polls, which also delays the progress of RMA gets aimed at them.\n")

    sizes = sorted({int(n.split("bytes:")[1]) for _, n in data.r if n.startswith("one_donor/")})
    big = [s for s in sizes if s >= MIB]

    # ---- targets ----
    targets = []

    def per_size_ratio(num, den):
        vals = {}
        for s in big:
            a = data.get(f"one_donor/{num}/bytes:{s}", 2)
            b = data.get(f"one_donor/{den}/bytes:{s}", 2)
            if a and b:
                vals[s] = b.median / a.median  # bandwidth ratio num/den = time den/num
        return vals

    def worst(vals):
        return min(vals.values()) if vals else None

    shm_mem = per_size_ratio("pull_shm", "memcpy")
    shm_get = per_size_ratio("pull_shm", "get_flush")
    rma_get = per_size_ratio("pull_rma", "get_flush")

    def span_text(vals):
        if not vals:
            return "–"
        return ", ".join(f"{fsize(s)}: {v:.2f}" for s, v in vals.items())

    targets.append(("2", "shm pull ≥ 0.8x memcpy bandwidth, sizes ≥ 1 MiB (worst size)",
                    fr(worst(shm_mem)), verdict(worst(shm_mem), 0.8), span_text(shm_mem)))
    targets.append(("2", "shm pull ≥ 1.3x raw MPI_Get+flush, sizes ≥ 1 MiB (worst size)",
                    fr(worst(shm_get)), verdict(worst(shm_get), 1.3), span_text(shm_get)))
    targets.append(("2", "rma pull ≥ 0.95x raw MPI_Get+flush, sizes ≥ 1 MiB (worst size)",
                    fr(worst(rma_get)), verdict(worst(rma_get), 0.95), span_text(rma_get)))

    knp = 4
    n50 = "50M"
    for tr in ("shm", "rma"):
        p = data.get(f"k_donors/pull_{tr}/k:3/n:{n50}", knp)
        seed = data.get(f"k_donors/seed/k:3/n:{n50}", knp)
        r = ratio(seed.median if seed else None, p.median if p else None)
        targets.append(("5", f"k=3, 50M: {tr} pull ≥ 3x faster than the seed method",
                        fr(r), verdict(r, 3.0),
                        f"pull {ftime(p.median if p else None)}, seed "
                        f"{ftime(seed.median if seed else None)}"))
    for tr in ("shm", "rma"):
        p = data.get(f"k_donors/pull_{tr}/k:3/n:{n50}", knp)
        b = stream_bound(data, 3, n50, knp)
        r = ratio(b, p.median if p else None)
        targets.append(("5", f"k=3, 50M: {tr} pull ≥ 0.7x the streaming bound (bound time / "
                        "pull time)", fr(r), verdict(r, 0.7),
                        f"bound {ftime(b)}, pull {ftime(p.median if p else None)}"))
    for tr in ("shm", "rma"):
        f32 = data.get(f"wire/pull_{tr}/wire:native/n:{n50}", 2)
        bf = data.get(f"wire/pull_{tr}/wire:bfloat16/n:{n50}", 2)
        r = ratio(f32.median if f32 else None, bf.median if bf else None)
        targets.append(("5", f"bfloat16 wire, 50M, {tr}: ≥ 1.6x faster than float32", fr(r),
                        verdict(r, 1.6), f"float32 {ftime(f32.median if f32 else None)}, "
                        f"bfloat16 {ftime(bf.median if bf else None)}"))
    pub = data.get(f"publish/paramwin/wire:native/n:{n50}", 2)
    mem = data.get(f"publish/memcpy/n:{n50}", 2)
    r = ratio(pub.median if pub else None, mem.median if mem else None)
    targets.append(("5", "publish of 50M ≤ 1.2x memcpy time", fr(r), verdict(r, 1.2, False),
                    f"publish {ftime(pub.median if pub else None)}, memcpy "
                    f"{ftime(mem.median if mem else None)}"))
    live = data.get(f"publish/live/n:{n50}", 2)
    targets.append(("5", "publish, live mode (Exposure::live), 50M: costs nothing",
                    ftime(live.median if live else None), "info" if live else "NOT MEASURED",
                    f"{fr(ratio(live.median if live else None, mem.median if mem else None))} "
                    "of a memcpy"))
    busy = data.get("busy/pull_shm/donor:busy/n:1M", 2)
    idle = data.get("busy/pull_shm/donor:idle/n:1M", 2)
    r = ratio(busy.median if busy else None, idle.median if idle else None)
    targets.append(("5", "busy donor (computing, no MPI calls), shm, 1M: latency ≤ 1.5x idle",
                    fr(r), verdict(r, 1.5, False),
                    f"busy {ftime(busy.median if busy else None)}, idle "
                    f"{ftime(idle.median if idle else None)}"))
    rb = data.get("busy/pull_rma/donor:busy/n:1M", 2)
    ri = data.get("busy/pull_rma/donor:idle/n:1M", 2)
    rp = data.get("busy/pull_rma/donor:busy_progress/n:1M", 2)
    targets.append(("5", "busy donor, rma, no progress aid (no target)",
                    fr(ratio(rb.median if rb else None, ri.median if ri else None)), "info",
                    f"busy {ftime(rb.median if rb else None)}, idle "
                    f"{ftime(ri.median if ri else None)}"))
    targets.append(("5", "busy donor, rma, donor calls progress() in its loop (no target)",
                    fr(ratio(rp.median if rp else None, ri.median if ri else None)), "info",
                    f"busy+progress {ftime(rp.median if rp else None)}, idle "
                    f"{ftime(ri.median if ri else None)}"))
    for tr in ("shm", "rma"):
        a8 = data.get(f"k_donors/pull_{tr}/k:1/n:10M", 8)
        a2 = data.get(f"k_donors/pull_{tr}/k:1/n:10M", 2)
        r = ratio(a8.median if a8 else None, a2.median if a2 else None)
        targets.append(("5", f"rebirth (pull, k=1, 10M, {tr}) with 8 ranks ≤ 1.3x 2 ranks", fr(r),
                        verdict(r, 1.3, False), f"8 ranks {ftime(a8.median if a8 else None)}, "
                        f"2 ranks {ftime(a2.median if a2 else None)}"))

    w("## Targets\n")
    w("Ratios are measured in the same run (same binary, same rank count) and computed from "
      "medians.\n")
    w(table(["issue", "target", "measured", "verdict", "details"], targets) + "\n")
    direct_targets(args.json_dir, w)

    # ---- one donor ----
    methods = [("memcpy", "memcpy"), ("get_flush", "MPI_Get+flush (lock_all)"),
               ("lock_get_unlock", "lock/get/unlock"), ("pull_shm", "paramwin pull shm"),
               ("pull_rma", "paramwin pull rma")]
    if sizes:
        w("## 1. One donor, 2 ranks (issue 2)\n")
        w("Rank 0 reads all of rank 1's parameters (one float32 layer of the given size); rank 1 "
          "waits inside MPI (the per-iteration `MPI_MAX` reduction). Bandwidth in GB/s, median "
          "(min – max):\n")
        rows = []
        for s in sizes:
            rows.append([fsize(s)] + [fbw_range(data.get(f"one_donor/{m}/bytes:{s}", 2))
                                      for m, _ in methods])
        w(table(["size"] + [label for _, label in methods], rows) + "\n")
        w("Median time per read:\n")
        rows = [[fsize(s)] + [ftime(getattr(data.get(f"one_donor/{m}/bytes:{s}", 2), "median",
                                            None)) for m, _ in methods] for s in sizes]
        w(table(["size"] + [label for _, label in methods], rows) + "\n")
        rows = []
        for s in sizes:
            def q(num, den, s=s):
                a = data.get(f"one_donor/{num}/bytes:{s}", 2)
                b = data.get(f"one_donor/{den}/bytes:{s}", 2)
                return fr(ratio(b.median if b else None, a.median if a else None))
            rows.append([fsize(s), q("pull_shm", "memcpy"), q("pull_shm", "get_flush"),
                         q("pull_rma", "get_flush"), q("pull_rma", "lock_get_unlock")])
        w("Bandwidth ratios (targets apply at ≥ 1 MiB: shm/memcpy ≥ 0.8, shm/get ≥ 1.3, "
          "rma/get ≥ 0.95):\n")
        w(table(["size", "shm / memcpy", "shm / MPI_Get+flush", "rma / MPI_Get+flush",
                 "rma / lock-get-unlock"], rows) + "\n")
        w("![bandwidth vs size](img/one_donor_bandwidth.png)\n")

    # ---- chunk sweep ----
    chunk_names = sorted({n for _, n in data.r if n.startswith("chunk/")})
    if chunk_names:
        w("### Chunk size (`PullOptions::chunk_bytes`)\n")
        w("Over RMA (library default 4 MiB; same-node pulls from snapshots read each layer in "
          "one pass and ignore the option). Median time, 2 ranks:\n")
        chunks = sorted({int(re.search(r"chunk:(\d+)", n).group(1)) for n in chunk_names})
        csizes = sorted({int(re.search(r"bytes:(\d+)", n).group(1)) for n in chunk_names})
        rows = []
        for tr in ("rma",):
            for s in csizes:
                cells = [ftime(getattr(data.get(f"chunk/pull_{tr}/chunk:{c}/bytes:{s}", 2),
                                       "median", None)) for c in chunks]
                rows.append([tr, fsize(s)] + cells)
        w(table(["transport", "size"] + [fsize(c) for c in chunks], rows) + "\n")

    # ---- k donors ----
    counts = [c for c in ("1M", "10M", "50M") if data.get(f"stream/add/n:{c}", knp)]
    if data.has_prefix("k_donors/") and counts:
        w(f"## 2. k donors averaged, {knp} ranks (issue 5)\n")
        w("Rank 0 averages ranks 1..k. *seed*: per donor `MPI_Win_lock(SHARED)`, `MPI_Get` of "
          "the whole buffer, `MPI_Win_unlock`, then a separate add loop, then a divide. "
          "*allreduce*: `MPI_Allreduce` (sum) over the k+1 ranks involved, then a scale. "
          "*bound*: (k+1)·N·4 bytes at the `a += b` bandwidth measured in the same run. "
          "Median time (min – max):\n")
        kmeth = [("pull_shm", "paramwin shm"), ("pull_rma", "paramwin rma"), ("seed", "seed"),
                 ("allreduce", "MPI_Allreduce")]
        rows = []
        for n in counts:
            for k in (1, 2, 3):
                cells = [ftime_range(data.get(f"k_donors/{m}/k:{k}/n:{n}", knp))
                         for m, _ in kmeth]
                if all(c == "–" for c in cells):
                    continue
                b = stream_bound(data, k, n, knp)
                seed = data.get(f"k_donors/seed/k:{k}/n:{n}", knp)
                shm = data.get(f"k_donors/pull_shm/k:{k}/n:{n}", knp)
                rows.append([n, k] + cells + [ftime(b),
                             fr(ratio(seed.median if seed else None,
                                      shm.median if shm else None)),
                             fr(ratio(b, shm.median if shm else None))])
        w(table(["N", "k"] + [label for _, label in kmeth] +
                ["bound", "seed / shm", "bound / shm"], rows) + "\n")
        add_rows = []
        for n in counts:
            a = data.get(f"stream/add/n:{n}", knp)
            add_rows.append([n, ftime_range(a), fbw(a.bw() if a else None)])
        w("`a += b` (the bound's bandwidth, counted as 2·N·4 bytes):\n")
        w(table(["N", "time", "GB/s"], add_rows) + "\n")
        w("![pull time vs k](img/k_donors_time.png)\n")

    # ---- wire ----
    if data.has_prefix("wire/"):
        w("## 3. Wire formats, one donor, 2 ranks\n")
        w("A float32 layer published as float32 (native), bfloat16 or float16; the pull widens "
          "and accumulates in float32. Median time (min – max):\n")
        rows = []
        for n in ("10M", "50M"):
            for tr in ("shm", "rma"):
                cells = [ftime_range(data.get(f"wire/pull_{tr}/wire:{wf}/n:{n}", 2))
                         for wf in ("native", "bfloat16", "float16")]
                nat = data.get(f"wire/pull_{tr}/wire:native/n:{n}", 2)
                bf = data.get(f"wire/pull_{tr}/wire:bfloat16/n:{n}", 2)
                f16 = data.get(f"wire/pull_{tr}/wire:float16/n:{n}", 2)
                rows.append([n, tr] + cells +
                            [fr(ratio(nat.median if nat else None, bf.median if bf else None)),
                             fr(ratio(nat.median if nat else None, f16.median if f16 else None))])
        w(table(["N", "transport", "float32", "bfloat16", "float16", "speed-up bf16",
                 "speed-up f16"], rows) + "\n")

    # ---- publish ----
    if data.has_prefix("publish/"):
        w("## 4. Publish, 2 ranks\n")
        rows = []
        for n in ("1M", "10M", "50M"):
            mem = data.get(f"publish/memcpy/n:{n}", 2)
            nat = data.get(f"publish/paramwin/wire:native/n:{n}", 2)
            bf = data.get(f"publish/paramwin/wire:bfloat16/n:{n}", 2)
            if not mem:
                continue
            live = data.get(f"publish/live/n:{n}", 2)
            rows.append([n, ftime_range(mem), ftime_range(nat), ftime_range(bf),
                         ftime_range(live),
                         fr(ratio(nat.median if nat else None, mem.median)),
                         fr(ratio(bf.median if bf else None, mem.median))])
        w(table(["N", "memcpy", "publish (float32)", "publish (bfloat16)", "publish (live)",
                 "float32 / memcpy", "bfloat16 / memcpy"], rows) + "\n")

    # ---- busy ----
    if data.has_prefix("busy/"):
        w("## 5. Busy donor, 2 ranks, 1M float32\n")
        w("The donor computes for 0.3 s per iteration without any MPI call while rank 0 pulls "
          "(after a 2 ms head start); *idle*: the donor waits inside MPI. Median (min – max):\n")
        w("*busy + progress()*: the donor calls `ParameterWindow::progress()` between "
          "compute blocks of about 10 µs (the RMA progress aid).\n")
        rows = []
        for tr in ("shm", "rma"):
            i = data.get(f"busy/pull_{tr}/donor:idle/n:1M", 2)
            b = data.get(f"busy/pull_{tr}/donor:busy/n:1M", 2)
            p = data.get(f"busy/pull_{tr}/donor:busy_progress/n:1M", 2)
            rows.append([tr, ftime_range(i), ftime_range(b), ftime_range(p),
                         fr(ratio(b.median if b else None, i.median if i else None)),
                         fr(ratio(p.median if p else None, i.median if i else None))])
        w(table(["transport", "idle donor", "busy donor", "busy + progress()", "busy / idle",
                 "busy+progress / idle"], rows) + "\n")

    # ---- roster / scale ----
    if data.has_prefix("roster/"):
        w("## 6. Roster: rank 0 reads every agent's roster\n")
        rows = []
        for np_ in sorted(data.ctx):
            cells = [ftime_range(data.get(f"roster/roster_all_{tr}/np:{np_}", np_))
                     for tr in ("shm", "rma")]
            rows.append([np_] + cells)
        w(table(["ranks", "shm", "rma"], rows) + "\n")
    if any(n.startswith("k_donors/") and "k:1/n:10M" in n for _, n in data.r):
        w("## 7. Scale: one rebirth pull (k = 1, 10M float32) vs number of ranks\n")
        rows = []
        for np_ in sorted(data.ctx):
            cells = [ftime_range(data.get(f"k_donors/pull_{tr}/k:1/n:10M", np_))
                     for tr in ("shm", "rma")]
            rows.append([np_] + cells)
        w(table(["ranks", "shm", "rma"], rows) + "\n")
        w("k = 2 needs 3 ranks, so the fixed-k comparison against 2 ranks uses k = 1.\n")

    # ---- agent groups ----
    groups_section(args.json_dir, w)
    serve_section(args.json_dir, w)
    hyper_section(args.json_dir, w)
    mpi_section(args.mpi_json_dir, w)
    direct_section(args.json_dir, w)
    checkpoint_section(args.json_dir, w)

    # ---- ceilings of the unmet targets ----
    ceilings_section(data, big, knp, w)

    # ---- analysis ----
    if sizes:
        rows = []
        for s in big:
            def t(m, s=s):
                res = data.get(f"one_donor/{m}/bytes:{s}", 2)
                return res.median if res else None
            rows.append([fsize(s), fr(ratio(t("memcpy"), t("shm_memcpy"))),
                         fr(ratio(t("pull_shm"), t("pull_shm_nocheck"))),
                         fr(ratio(t("memcpy"), t("pull_shm_nocheck"))),
                         fr(ratio(t("pull_rma"), t("pull_rma_nocheck"))),
                         fr(ratio(t("get_flush"), t("pull_rma_nocheck")))])
        w("## What limits the one-donor pull\n")
        w("Decomposition at sizes ≥ 1 MiB (ratios of median times from the same run). "
          "*shm memcpy* copies straight out of the donor's `MPI_Win_allocate_shared` segment, "
          "so a shm memcpy / memcpy bandwidth ratio near 1 means reading another process's shared "
          "pages costs nothing extra. "
          "*nocheck* is the same pull with `NonFinitePolicy::allow` (no NaN/infinity scan).\n")
        w(table(["size", "shm memcpy / memcpy (BW)", "shm: check / nocheck (time)",
                 "shm nocheck / memcpy (BW)", "rma: check / nocheck (time)",
                 "rma nocheck / MPI_Get+flush (BW)"], rows) + "\n")
        w("How a pull works (the header comment of src/window/pull_engine.hpp at the measured commit): "
          "a pull whose donors are all on this node pins each donor's slot and streams the "
          "weighted sum straight into the caller's memory, one pass per layer reading all k "
          "donors at once ((k+1) memory streams: the streaming bound); a pull with RMA donors "
          "reads 4 MiB chunks with `MPI_Rget`, the next chunk in flight while this one is "
          "accumulated into a whole-model scratch, and copies the scratch into the caller's "
          "memory once every copy is validated. A single float32 (or float64) snapshot donor "
          "is read straight into the scratch, so its pull is one get plus one copy.\n")

    # ---- plots ----
    if not args.no_plots:
        if shutil.which("gnuplot") is None:
            w("_Plots skipped: gnuplot not found._\n")
        else:
            os.makedirs(args.img_dir, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                if sizes:
                    plot_one_donor(data, sizes, methods, args.img_dir, tmp)
                if data.has_prefix("k_donors/") and counts:
                    plot_k(data, counts, [("pull_shm", "paramwin shm"),
                                          ("pull_rma", "paramwin rma"), ("seed", "seed"),
                                          ("allreduce", "MPI_Allreduce"),
                                          ("bound", "streaming bound")],
                           args.img_dir, tmp, knp)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(md))
    print(f"bench_report: wrote {args.out}")


if __name__ == "__main__":
    main()
