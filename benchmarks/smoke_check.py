#!/usr/bin/env python3
"""Smoke run of paramwin_bench for CTest: runs a filtered, tiny benchmark set under the given
launcher command and checks that the JSON output is well formed (correctness only, no timing
assertions). Optionally runs scripts/bench_report.py on it.

    smoke_check.py --out FILE [--report-script PATH] -- mpiexec -n 2 paramwin_bench
"""
import argparse
import json
import re
import subprocess
import sys

FILTER = (r"^(one_donor/[a-z_]+/bytes:(4096|65536)|roster/.*|stream/add/n:1M"
          r"|k_donors/[a-z_]+/k:1/n:1M|publish/[a-z]+(/wire:native)?/n:1M)(/iterations:[0-9]+)?/manual_time$")
EXPECTED = ["one_donor/memcpy/bytes:4096", "one_donor/get_flush/bytes:4096",
            "one_donor/lock_get_unlock/bytes:4096", "one_donor/pull_shm/bytes:65536",
            "one_donor/pull_rma/bytes:65536", "k_donors/pull_shm/k:1/n:1M",
            "k_donors/seed/k:1/n:1M", "k_donors/allreduce/k:1/n:1M", "stream/add/n:1M",
            "publish/paramwin/wire:native/n:1M"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--report-script")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [c for c in args.cmd if c != "--"]
    cmd += [f"--benchmark_filter={FILTER}", "--benchmark_min_time=0.01",
            "--benchmark_repetitions=2", f"--benchmark_out={args.out}",
            "--benchmark_out_format=json"]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(args.out) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    assert ctx.get("mpi_ranks") == "2", f"context.mpi_ranks is {ctx.get('mpi_ranks')!r}"
    runs = data["benchmarks"]
    for r in runs:  # UseManualTime() appends "/manual_time" to every name
        r["run_name"] = re.sub(r"/(iterations|repeats):\d+|/manual_time$", "", r["run_name"])
    names = {r["run_name"] for r in runs}
    missing = [e for e in EXPECTED if e not in names]
    assert not missing, f"missing benchmarks: {missing}"
    for r in runs:
        assert r["real_time"] >= 0, r
        if r.get("run_type") == "iteration":
            assert r["iterations"] >= 1, r
            if not r["run_name"].startswith("roster/"):
                assert r.get("bytes_per_second", 0) > 0, r
    aggs = {(r["run_name"], r.get("aggregate_name")) for r in runs if r.get("run_type") == "aggregate"}
    for e in EXPECTED:
        for a in ("median", "min", "max"):
            assert (e, a) in aggs, f"no {a} aggregate for {e}"
    print(f"smoke: {len(runs)} entries, {len(names)} benchmarks, JSON ok")
    if args.report_script:
        out_md = args.out + ".md"
        subprocess.run([sys.executable, args.report_script, "--json-dir", "",
                        "--json", args.out, "--out", out_md, "--no-plots"], check=True)
        with open(out_md) as f:
            text = f.read()
        assert "one_donor" in text or "One donor" in text, "report lacks the one-donor table"
        print("smoke: report generated", out_md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
