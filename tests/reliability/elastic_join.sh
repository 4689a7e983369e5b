#!/usr/bin/env bash
# A process launched on its own joins a population through Open MPI's name server
# (docs/elastic.md, "Joining from outside"; the program: elastic_join.cpp). Starts ompi-server,
# the population (3 processes, mpirun --enable-recovery), and, once its last member has died,
# the joiner (mpirun -n 1 of its own); prints both logs (the population's last epoch prints
# the pass line). Every launch is given the server (--ompi-server) and the TCP BTL: processes
# of two MPI jobs reach each other over TCP (the shared-memory BTL connects one job's only).
#   elastic_join.sh <mpirun> <elastic_join program> <exit|kill>
set -uo pipefail
mpirun=$1 program=$2 mode=$3
dir=$(mktemp -d)
trap 'kill "$server" "$population" "$joiner" 2>/dev/null; rm -rf "$dir"' EXIT
server= population= joiner=
ompi-server --no-daemonize --report-uri "$dir/uri" &
server=$!
for _ in $(seq 100); do [ -s "$dir/uri" ] && break; sleep 0.1; done
[ -s "$dir/uri" ] || { echo "FAILED: ompi-server wrote no URI"; exit 1; }
launch=("$mpirun" --ompi-server "file:$dir/uri" --mca btl self,vader,tcp)
service="paramwin-join-test-$$"
"${launch[@]}" --enable-recovery -n 3 "$program" --population "$mode" "$service" \
  > "$dir/population.log" 2>&1 &
population=$!
for _ in $(seq 300); do grep -q "^fault at" "$dir/population.log" && break; sleep 0.1; done
"${launch[@]}" -n 1 "$program" --joiner "$mode" "$service" > "$dir/joiner.log" 2>&1 &
joiner=$!
for _ in $(seq 600); do kill -0 "$population" 2>/dev/null || break; sleep 0.1; done
for _ in $(seq 100); do kill -0 "$joiner" 2>/dev/null || break; sleep 0.1; done
echo "--- the population"
cat "$dir/population.log"
echo "--- the joiner"
cat "$dir/joiner.log"
