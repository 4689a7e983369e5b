"""Python pull against C++ pull, side by side in one run (docs/benchmarks.md, "Python"):
alternates the C++ benchmark (paramwin_bench --benchmark_filter=layers8) and
benchmarks/python_pull_bench.py under the same MPI launcher, --rounds times each, and prints
a markdown table of medians (over every timed call of every round) and the ratio
Python / C++.

    python3 benchmarks/python_compare.py --build build-openmpi [--ranks 4] [--rounds 3]

Run with any Python; the benchmarks themselves run under mpiexec with the build's
interpreter (/usr/bin/python3, whose mpi4py is the build's MPI).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def launcher(build):
    cache = open(os.path.join(build, "CMakeCache.txt")).read().splitlines()
    values = dict(line.split("=", 1)[0].split(":")[0:1] + [line.split("=", 1)[1]]
                  for line in cache if "=" in line and not line.startswith(("#", "//")))
    return values["MPIEXEC_EXECUTABLE"], values.get("Python3_EXECUTABLE", "/usr/bin/python3")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=30, help="timed Python calls per round")
    o = p.parse_args()
    mpiexec, python = launcher(o.build)
    env = dict(os.environ, PYTHONPATH=os.path.join(o.build, "python"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_hwloc_base_binding_policy="none")
    base = [mpiexec, "-n", str(o.ranks)]
    cpp, py, core = {}, {}, {}
    for _ in range(o.rounds):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run(base + [os.path.join(o.build, "benchmarks", "paramwin_bench"),
                                   "--benchmark_filter=layers8", "--benchmark_repetitions=5",
                                   f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
                           env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for b in json.load(open(out.name))["benchmarks"]:
                if b.get("run_type") == "iteration":
                    k = b["name"].split("/")[2]
                    cpp.setdefault(k, []).append(b["real_time"])  # ms, one per repetition
        run = subprocess.run(base + [python, os.path.join(HERE, "python_pull_bench.py"),
                                     "--reps", str(o.reps)],
                             env=env, check=True, capture_output=True, text=True)
        for line in run.stdout.splitlines():
            r = json.loads(line)
            py.setdefault(r["name"], []).append(r["median_ms"])
            if "core_median_ms" in r:
                core.setdefault(r["name"], []).append(r["core_median_ms"])
    print("| case | C++ pull (ms) | Python pull (ms) | Python / C++ | inside the Python call: C++ pull's own time (ms) | Python call / its own pull | seed method in Python, flat / per layer (ms) | seed / Python |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k in sorted(cpp):
        c = statistics.median(cpp[k])
        p_ = statistics.median(py[f"python/pull/{k}/n:10M"])
        own = statistics.median(core[f"python/pull/{k}/n:10M"])
        sf = statistics.median(py[f"seed/flat/{k}/n:10M"])
        sl = statistics.median(py[f"seed/per_layer/{k}/n:10M"])
        print(f"| 10M float32, 8 layers, {k.replace(':', '=')} | {c:.2f} | {p_:.2f} | "
              f"{p_ / c:.3f} | {own:.2f} | {p_ / own:.3f} | {sf:.2f} / {sl:.2f} | {sf / p_:.1f}x |")
    print(f"\n{o.rounds} rounds; C++: medians of 5 repetitions per round; Python: medians of "
          f"{o.reps} calls per round; table: median over rounds. {o.ranks} ranks, {mpiexec}.",
          file=sys.stderr)


if __name__ == "__main__":
    main()
