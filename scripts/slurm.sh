#!/usr/bin/env bash
# A Slurm cluster on this machine, from Debian's packages (munge, slurmctld, slurmd), for the
# tests (label slurm) and for trying docs/cluster.md's job scripts.
#
#   scripts/slurm.sh run [--two-hosts] [--cpus N] [--mpich-only] -- CMD [ARGS...]
#       starts a cluster, runs CMD with SLURM_CONF and PARAMWIN_SLURM_DIR set (sbatch, srun,
#       squeue... then talk to it), stops the cluster, exits with CMD's status
#   scripts/slurm.sh start [--cpus N]    starts a cluster and leaves it running; prints its
#                                        directory DIR (export SLURM_CONF=DIR/slurm.conf)
#   scripts/slurm.sh status DIR          sinfo and squeue of that cluster
#   scripts/slurm.sh stop DIR            cancels its jobs, stops its daemons, removes DIR
#
# Everything lives in a temporary directory (/tmp/paramwin-slurm.XXXXXX): slurm.conf, a munge
# key made there, munged's socket, the controller's state, the spool and the logs (log/). No
# systemd, nothing under /etc: the daemons are started by this script as root and found again
# through their pid files. One node (this machine's hostname at 127.0.0.1) with N CPUs
# (--cpus, default 8: more than this VM's cores, so that 4-rank jobs fit; the node
# oversubscribes, SlurmdParameters=config_overrides). Process tracking proctrack/linuxproc,
# no cgroups, no accounting database. Ports: two free TCP ports picked at random.
#
# --two-hosts: the cluster spans the two emulated hosts of scripts/multihost.sh (hostA =
# 10.77.0.1, hostB = 10.77.0.2; own network, IPC, UTS and mount namespaces): slurmctld and a
# slurmd run in hostA, another slurmd in hostB, and CMD runs in hostA. A job with -N 2 then
# really spans two hosts (MPI between them over UCX's TCP transport). One munged serves both
# (its socket is a file both hosts see). The job scripts find multihost.sh's MPI_Finalize
# shim in PARAMWIN_SLURM_PRELOAD (scripts/slurm/common.sh preloads it into the ranks).
#
# --mpich-only: skip (77) when PARAMWIN_SLURM_MPI (set by CTest from PARAMWIN_MPI) is not
# MPICH, for a job verified with MPICH only (no test uses it: the demo, the two-host demo and
# the requeue test all run under Open MPI too, its ranks started by srun --mpi=pmix).
#
# With --two-hosts Slurm's pmix plugin gets PMIxCliTmpDirBase in a directory that is distinct
# on each emulated host (they share /tmp; see hosts-inner below).
#
# Exits 77 (CTest's SKIP_RETURN_CODE) with "slurm: SKIPPED: why" where a cluster cannot be
# started here: not root, a daemon or client missing, munged unable to run; --two-hosts also
# where scripts/multihost.sh cannot build its hosts. A cluster that starts but does not come
# up (node not idle within 60 s) is a failure (exit 1, the daemons' logs printed).
set -euo pipefail

readonly SKIP=77
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
skip() { echo "slurm: SKIPPED: $*" >&2; exit "$SKIP"; }
log() { echo "slurm: $*" >&2; }

# ---- pieces -----------------------------------------------------------------------------

check_prerequisites() {
  [[ $(id -u) -eq 0 ]] || skip "needs root to run slurmd and munged (running as uid $(id -u))"
  local tool
  for tool in munged munge unmunge slurmctld slurmd slurmstepd sbatch srun squeue sinfo scontrol \
              scancel; do
    command -v "$tool" >/dev/null || skip "'$tool' not found (Debian packages slurm-wlm, munge)"
  done
}

free_port() {  # a TCP port nothing listens on, in 20000..29999
  local used p
  used=$(ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' || true)
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 10000))
    grep -qx "$p" <<<"$used" || { echo "$p"; return; }
  done
  echo "slurm: no free port found" >&2
  return 1
}

# write_conf DIR CPUS CTLD_NAME CTLD_ADDR NODE_NAME:ADDR...
write_conf() {
  local dir=$1 cpus=$2 ctld_name=$3 ctld_addr=$4
  shift 4
  local ctld_port slurmd_port node names=()
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
  {
    echo "# written by scripts/slurm.sh"
    echo "ClusterName=paramwin"
    echo "SlurmctldHost=$ctld_name($ctld_addr)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmdPort=$slurmd_port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    # cred_expire also sets how long a requeued job waits before it may start again (default
    # 120 s); 10 s keeps the requeue tests short.
    echo "AuthInfo=socket=$dir/munge/munge.sock,cred_expire=10"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd.%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd.%n.log"
    echo "SlurmdDebug=info"
    echo "SlurmctldDebug=info"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SchedulerType=sched/builtin"
    # The main scheduling loop starts pending jobs whose begin time has passed (a requeued
    # job's) every sched_interval s (default 60).
    echo "SchedulerParameters=sched_interval=2"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "ReturnToService=2"
    echo "SlurmdParameters=config_overrides"
    echo "JobRequeue=1"
    echo "KillWait=5"
    echo "MinJobAge=600"
    echo "MessageTimeout=30"
    for node in "$@"; do
      echo "NodeName=${node%%:*} NodeAddr=${node#*:} CPUs=$cpus RealMemory=1000 State=UNKNOWN"
      names+=("${node%%:*}")
    done
    local IFS=,
    echo "PartitionName=debug Nodes=${names[*]} Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  for node in "$@"; do mkdir -p "$dir/spool/${node%%:*}"; done
}

start_munge() {  # DIR
  local dir=$1
  mkdir -p "$dir/munge"
  chmod 755 "$dir" "$dir/munge"  # munged wants every directory above its socket searchable
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  local err
  if ! err=$(munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
                    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
                    --seed-file="$dir/munge/munged.seed" 2>&1); then
    skip "munged cannot run here: $err"
  fi
  if ! munge -n -S "$dir/munge/munge.sock" | unmunge -S "$dir/munge/munge.sock" >/dev/null 2>&1; then
    skip "munged started but a credential does not round-trip (see $dir/munge/munged.log)"
  fi
}

dump_logs() {  # DIR
  local f
  for f in "$1"/log/*.log "$1"/munge/munged.log; do
    [[ -e $f ]] || continue
    echo "---- $f (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

wait_idle() {  # DIR NODES: every node idle within 60 s
  local dir=$1 nodes=$2 states
  for _ in $(seq 120); do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
    if [[ -n $states ]] && [[ $(grep -c ' idle$' <<<"$states") -eq $nodes ]]; then
      return 0
    fi
    sleep 0.5
  done
  echo "slurm: the cluster did not come up within 60 s (node states: ${states:-none})" >&2
  dump_logs "$dir"
  return 1
}

# Every process started for cluster DIR carries PARAMWIN_SLURM_DIR=DIR in its environment: the
# daemons (set when this script starts them), slurmstepd (forked by slurmd) and the job's
# tasks (sbatch exports the submitter's environment). stop_cluster ends them by that mark.
marked_pids() {  # DIR
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    grep -qzx "PARAMWIN_SLURM_DIR=$1" "$p/environ" 2>/dev/null && echo "${p#/proc/}"
  done
  return 0
}

stop_cluster() {  # DIR
  local dir=$1 pids
  [[ -e $dir/slurm.conf ]] || return 0
  export SLURM_CONF=$dir/slurm.conf
  unset PARAMWIN_SLURM_DIR  # or the commands below would carry the mark
  # Jobs first (their steps end cleanly), then the daemons.
  timeout 10 scancel --quiet --full --partition=debug 2>/dev/null || true
  for _ in $(seq 20); do
    [[ -z $(timeout 5 squeue -h -t running,completing 2>/dev/null) ]] && break
    sleep 0.5
  done
  timeout 10 scontrol shutdown >/dev/null 2>&1 || true
  for _ in $(seq 20); do
    pids=$(marked_pids "$dir")
    [[ -z $pids ]] && break
    sleep 0.5
  done
  pids=$(marked_pids "$dir")
  # shellcheck disable=SC2086
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
  stop_munged "$dir"
  # Nothing of the cluster runs any more; a failure to remove its directory is reported but
  # does not change the exit status of what ran on the cluster.
  rm -rf "$dir" 2>/dev/null || { sleep 1; rm -rf "$dir"; } ||
    echo "slurm: could not remove $dir (left behind)" >&2
}

# PID runs (a zombie, which a container's init may never reap, has ended)
alive() {  # PID
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# munged writes its seed file and removes its socket and pid file while it exits: removing the
# directory before it is gone races with those writes ("Directory not empty").
stop_munged() {  # DIR
  local dir=$1 pid
  [[ -s $dir/munge/munged.pid ]] || return 0
  pid=$(<"$dir/munge/munged.pid")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    alive "$pid" || return 0
    sleep 0.1
  done
  echo "slurm: munged ($pid) did not exit within 5 s of SIGTERM: killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 20); do
    alive "$pid" || return 0
    sleep 0.1
  done
}

# The emulated hosts mount a sysfs of their own (multihost.sh), without the cgroup mounts under
# /sys/fs/cgroup; slurmd initialises its cgroup plugin even with proctrack/linuxproc and
# task/none, and stops where none is mounted. This mounts the machine's cgroup hierarchies
# (those of PID 1) in the calling host's own mount namespace.
readonly mount_cgroups='
  [ "$(stat -fc %T /sys/fs/cgroup)" = sysfs ] || exit 0
  mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
  awk '"'"'$2 ~ "^/sys/fs/cgroup/" {print $1, $2, $3, $4}'"'"' /proc/1/mounts |
    while read -r src dst type opts; do
      mkdir -p "$dst" && mount -t "$type" -o "$opts" "$src" "$dst"
    done'

# start_daemons DIR NODES [HOST_B_PID]: slurmctld and a slurmd here (and one inside the emulated
# hostB, entered through its holder process, when given)
start_daemons() {
  local dir=$1 nodes=$2 host_b=${3:-}
  export SLURM_CONF=$dir/slurm.conf PARAMWIN_SLURM_DIR=$dir
  mkdir -p "$dir/state" "$dir/log"
  if ! slurmctld -i >"$dir/log/slurmctld.start" 2>&1; then
    echo "slurm: slurmctld did not start: $(<"$dir/log/slurmctld.start")" >&2
    dump_logs "$dir"
    return 1
  fi
  if ! slurmd >"$dir/log/slurmd.start" 2>&1; then
    echo "slurm: slurmd did not start: $(<"$dir/log/slurmd.start")" >&2
    dump_logs "$dir"
    return 1
  fi
  if [[ -n $host_b ]]; then
    nsenter --target "$host_b" --net --ipc --uts --mount -- sh -c "$mount_cgroups"
    if ! nsenter --target "$host_b" --net --ipc --uts --mount -- \
         env SLURM_CONF="$SLURM_CONF" PARAMWIN_SLURM_DIR="$dir" slurmd \
         >"$dir/log/slurmd-hostB.start" 2>&1; then
      echo "slurm: slurmd in hostB did not start: $(<"$dir/log/slurmd-hostB.start")" >&2
      dump_logs "$dir"
      return 1
    fi
  fi
  wait_idle "$dir" "$nodes"
}

# ---- command line -------------------------------------------------------------------------

mode=${1:-}
[[ -n $mode ]] || usage
shift
cpus=8
two_hosts=0
mpich_only=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --two-hosts) two_hosts=1; shift ;;
    --mpich-only) mpich_only=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ $cpus =~ ^[1-9][0-9]*$ ]] || { echo "slurm: --cpus takes a positive integer, not '$cpus'" >&2; exit 2; }

case $mode in
  run|hosts-inner) [[ $# -gt 0 ]] || usage ;;
  start) [[ $# -eq 0 ]] || usage ;;
  status|stop) [[ $# -eq 1 ]] || usage ;;
  *) usage ;;
esac

run_cmd() {  # CMD...: in the background + wait, so that a signal reaches the trap at once
  local rc=0
  "$@" &
  wait $! || rc=$?
  return "$rc"
}

case $mode in
  run)
    if [[ $mpich_only == 1 && ${PARAMWIN_SLURM_MPI:-MPICH} != MPICH ]]; then
      skip "this test's jobs are verified with MPICH only, not ${PARAMWIN_SLURM_MPI}" \
           "(docs/cluster.md, Slurm)"
    fi
    check_prerequisites
    if [[ $two_hosts == 1 ]]; then
      # multihost.sh builds the hosts (or exits 77 saying why not) and runs us again inside
      # hostA; its teardown ends whatever runs in the hosts.
      exec bash "$here/multihost.sh" exec -- bash "${BASH_SOURCE[0]}" hosts-inner --cpus "$cpus" \
        -- "$@"
    fi
    dir=$(mktemp -d /tmp/paramwin-slurm.XXXXXX)
    trap 'rc=$?; trap - EXIT INT TERM HUP; stop_cluster "$dir"; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    start_munge "$dir"
    node=$(hostname -s)
    write_conf "$dir" "$cpus" "$node" 127.0.0.1 "$node:127.0.0.1"
    start_daemons "$dir" 1
    log "cluster up: node $node ($cpus CPUs), SLURM_CONF=$SLURM_CONF"
    rc=0
    run_cmd "$@" || rc=$?
    exit "$rc"
    ;;
  hosts-inner)
    # Inside hostA, started by multihost.sh exec (PARAMWIN_MH_DIR names the hosts' state).
    : "${PARAMWIN_MH_DIR:?hosts-inner runs inside scripts/multihost.sh exec}"
    dir=$(mktemp -d /tmp/paramwin-slurm.XXXXXX)
    trap 'rc=$?; trap - EXIT INT TERM HUP; stop_cluster "$dir"; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    sh -c "$mount_cgroups"
    start_munge "$dir"
    write_conf "$dir" "$cpus" hostA 10.77.0.1 hostA:10.77.0.1 hostB:10.77.0.2
    # Slurm's pmix plugin (srun --mpi=pmix, Open MPI) makes a directory per step named after
    # the job and step only (spmix_appdir_UID_JOB.STEP) under PMIxCliTmpDirBase, default /tmp,
    # on every node; the emulated hosts share /tmp, so hostB's slurmstepd found hostA's there
    # ("File exists") and the step failed. mpi.conf (read next to slurm.conf) moves it to
    # $dir/pmix, which in hostB's mount namespace is another directory (a bind mount).
    mkdir -p "$dir/pmix" "$dir/pmix-hostB"
    echo "PMIxCliTmpDirBase=$dir/pmix" >"$dir/mpi.conf"
    nsenter --target "$(<"$PARAMWIN_MH_DIR/hostB.pid")" --mount -- \
      mount --bind "$dir/pmix-hostB" "$dir/pmix"
    start_daemons "$dir" 2 "$(<"$PARAMWIN_MH_DIR/hostB.pid")"
    export PARAMWIN_SLURM_PRELOAD=${PARAMWIN_MH_FINALIZE_FIX_SO:-}
    log "cluster up across the emulated hosts: hostA (slurmctld, slurmd) and hostB (slurmd)," \
        "$cpus CPUs each, SLURM_CONF=$SLURM_CONF"
    rc=0
    run_cmd "$@" || rc=$?
    exit "$rc"
    ;;
  start)
    check_prerequisites
    dir=$(mktemp -d /tmp/paramwin-slurm.XXXXXX)
    trap 'rc=$?; trap - EXIT; [[ $rc == 0 ]] || stop_cluster "$dir"; exit $rc' EXIT
    start_munge "$dir"
    node=$(hostname -s)
    write_conf "$dir" "$cpus" "$node" 127.0.0.1 "$node:127.0.0.1"
    start_daemons "$dir" 1
    log "cluster up: node $node ($cpus CPUs); use it with: export SLURM_CONF=$dir/slurm.conf;" \
        "stop it with: scripts/slurm.sh stop $dir"
    echo "$dir"
    ;;
  status)
    [[ -e $1/slurm.conf ]] || { echo "slurm: no cluster in '$1'" >&2; exit 1; }
    export SLURM_CONF=$1/slurm.conf
    sinfo
    squeue
    ;;
  stop)
    [[ -e $1/slurm.conf ]] || { echo "slurm: no cluster in '$1'" >&2; exit 1; }
    stop_cluster "$1"
    log "cluster in $1 stopped"
    ;;
esac
