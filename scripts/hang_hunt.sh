#!/usr/bin/env bash
# Runs a command again and again to catch an intermittent hang, and dumps the threads of the
# processes of a run that hangs (gdb, "thread apply all bt"), then kills them.
#   scripts/hang_hunt.sh [--runs N] [--seconds S] [--load K] [--out DIR] --match PATTERN -- COMMAND...
# --runs N (default 20) runs of COMMAND; a run still alive after --seconds S (default 20) is a
# hang; --load K busy loops beside it (CPU load, under which hangs show more often); PATTERN
# selects the processes to dump and kill (pgrep -f). Logs: DIR/run_I.log, DIR/run_I_PID.bt
# (default DIR: out/hang_hunt). Prints one line per run and the count of hangs.
# E.g. docs/elastic.md, "What the MPIs allow":
#   scripts/hang_hunt.sh --load 1 --match 'donor_death --rma' -- \
#     mpiexec.mpich -disable-auto-cleanup -n 3 build/tests/donor_death --rma
# (That command's launcher exits with the dead rank's status, 3: a run that ended is no hang.)
set -uo pipefail
runs=20 seconds=20 load=0 out=out/hang_hunt match=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --match) match=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "hang_hunt.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$match" ] && [ $# -gt 0 ] || { echo "hang_hunt.sh: --match PATTERN -- COMMAND... needed" >&2; exit 2; }
command -v gdb >/dev/null || { echo "hang_hunt.sh: gdb not found (apt-get install gdb)" >&2; exit 2; }
mkdir -p "$out"
loads=()
for _ in $(seq 1 "$load"); do (while :; do :; done) & loads+=($!); done
hangs=0
for i in $(seq 1 "$runs"); do
  "$@" >"$out/run_$i.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 $((seconds * 10))); do sleep 0.1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    hangs=$((hangs + 1))
    echo "run $i: hung after ${seconds} s"
    # The matching processes but this script and its load loops (whose command line is its).
    victims=()
    for p in $(pgrep -f -- "$match"); do
      grep -q hang_hunt "/proc/$p/cmdline" 2>/dev/null || victims+=("$p")
    done
    for p in "${victims[@]}"; do
      gdb -p "$p" -batch -ex "thread apply all bt" >"$out/run_${i}_$p.bt" 2>&1
    done
    [ ${#victims[@]} -gt 0 ] && kill -9 "${victims[@]}" 2>/dev/null
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
  else
    wait $pid
    echo "run $i: ended, status $?"
  fi
done
[ ${#loads[@]} -gt 0 ] && kill "${loads[@]}"
echo "hang_hunt: $hangs of $runs runs hung (logs in $out)"
