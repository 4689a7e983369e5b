#!/usr/bin/env bash
# Two emulated hosts on one machine, and MPI programs launched across them.
#
#   scripts/multihost.sh run [--ppn N] [--timeout S] [--survive] -- PROGRAM [ARGS...]
#       builds hosts hostA and hostB, runs `mpiexec -n 2N PROGRAM ARGS` with N ranks per
#       host (default 2; ranks 0..N-1 on hostA) from hostA, tears the hosts down, exits with
#       mpiexec's status. --timeout: the launcher ends the job after S s (MPIEXEC_TIMEOUT).
#       --survive: the launcher lets the other ranks run on when one dies (MPICH
#       -disable-auto-cleanup, Open MPI --enable-recovery; the death tests)
#   scripts/multihost.sh check
#       builds the hosts and checks them (hostnames, addresses, isolation, an MPI hello)
#   scripts/multihost.sh shell
#       builds the hosts and opens a shell on hostA (PARAMWIN_MH_MPIEXEC is set there)
#   scripts/multihost.sh exec -- CMD [ARGS...]
#       builds the hosts, runs CMD on hostA with PARAMWIN_MH_DIR (HOST.pid files: nsenter
#       --target $(<$PARAMWIN_MH_DIR/hostB.pid) enters hostB) and PARAMWIN_MH_FINALIZE_FIX_SO
#       (the shim below, empty when left out) set, and for Open MPI the MCA settings below as
#       OMPI_MCA_* variables, tears the hosts down, exits with CMD's status
#       (scripts/slurm.sh --two-hosts starts its Slurm daemons this way)
#
# PARAMWIN_MH_MPI (set by CTest from PARAMWIN_MPI) picks the MPI: MPICH (the default) or
# OpenMPI; PARAMWIN_MPIEXEC overrides its launcher (mpiexec.mpich, mpiexec.openmpi).
#
# Each host is a long-lived holder process with its own network, IPC, UTS and mount
# namespaces (own hostname, own System V IPC, own /dev/shm tmpfs: no shared memory can leak
# between hosts). A veth pair joins them: hostA = 10.77.0.1/24, hostB = 10.77.0.2/24 on an
# interface called mh0 in both; those two addresses and loopback are the only ones that
# exist inside the hosts. MPICH's hydra launches its proxies, and Open MPI's mpirun its orted
# (plm_rsh_agent), through scripts/multihost/launch.sh (in place of ssh), which enters the
# host's namespaces. Open MPI: --allow-run-as-root, --host hostA:N,hostB:N, oob and btl/tcp
# on mh0 only, pml/ucx and osc/ucx (osc/sm for shared windows), no binding, oversubscription.
#
# UCX is told to use TCP between the hosts (UCX_TLS=tcp,self, UCX_NET_DEVICES=mh0): UCX's
# shared-memory transports decide "same machine" from the boot id, which the two emulated
# hosts share, so they must be kept out (see docs/cluster.md). Override by exporting UCX_TLS
# / UCX_NET_DEVICES before calling.
#
# MPI_Finalize fix (MPICH only): MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize over UCX's
# TCP transport (a rank closing its endpoints waits on a peer that already sits in a PMI
# barrier; see scripts/multihost/mpich_finalize_fix.c and docs/cluster.md). The harness
# compiles that shim with cc and preloads it into the ranks (mpiexec -genv LD_PRELOAD).
# PARAMWIN_MH_FINALIZE_FIX=0 leaves it out (to reproduce the hang); without a C compiler it is
# left out with a warning.
#
# Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN). Without it: prints why and exits 77
# (CTest's SKIP_RETURN_CODE). The hosts are torn down on exit, on errors and on signals; the
# holders also die with this script (parent-death signal) if it is killed outright.
set -euo pipefail

readonly SKIP=77
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
launcher=$here/multihost/launch.sh
mpiexec=${PARAMWIN_MPIEXEC:-/usr/bin/mpiexec.mpich}

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mode=${1:-}
[[ -n $mode ]] || usage
shift
ppn=2
survive=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --ppn) ppn=$2; shift 2 ;;
    --timeout) export MPIEXEC_TIMEOUT=$2; shift 2 ;;  # hydra/mpirun end the job after this many s
    --survive) survive=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
case $mode in
  run|exec) [[ $# -gt 0 ]] || usage ;;
  check|shell) ;;
  *) usage ;;
esac

skip() { echo "multihost: SKIPPED: $*" >&2; exit "$SKIP"; }

# PARAMWIN_MH_MPI: the MPI the programs were built with (set by CTest from PARAMWIN_MPI).
mpi=${PARAMWIN_MH_MPI:-MPICH}
case $mpi in
  MPICH) ;;
  OpenMPI) mpiexec=${PARAMWIN_MPIEXEC:-/usr/bin/mpiexec.openmpi} ;;
  *) echo "multihost: PARAMWIN_MH_MPI is '$mpi': expected MPICH or OpenMPI" >&2; exit 2 ;;
esac

# ---- can we build hosts at all? -------------------------------------------------------
[[ $(id -u) -eq 0 ]] || skip "needs root to create network/IPC/UTS namespaces (running as uid $(id -u))"
for tool in ip unshare nsenter setpriv; do
  command -v "$tool" >/dev/null || skip "'$tool' not found (iproute2 / util-linux)"
done
[[ -x $mpiexec ]] || skip "$mpiexec not found"
if ! err=$(unshare --net --ipc --uts --mount true 2>&1); then
  skip "cannot create namespaces here (no CAP_SYS_ADMIN?): $err"
fi
if ! err=$(ip link add "mhp$$" type veth peer name "mhq$$" 2>&1); then
  skip "cannot create a veth pair here (no veth support or CAP_NET_ADMIN?): $err"
fi
ip link del "mhp$$" 2>/dev/null || true

# ---- build the hosts ----------------------------------------------------------------
state=$(mktemp -d /tmp/paramwin-mh.XXXXXX)
tag=$$                                  # keeps concurrent harnesses' veth names apart
holders=()
teardown() {
  local rc=$?
  trap - EXIT INT TERM HUP
  # Everything still running inside our hosts (ranks, proxies, shells) was started by us:
  # end it, then the holders (unshare ignores SIGTERM with --fork; SIGKILL it, and
  # --kill-child takes its sleeping child along).
  local ns pid
  for p in "${holders[@]}"; do
    ns=$(readlink "/proc/$p/ns/net" 2>/dev/null) || continue
    for pid in $(find /proc/[0-9]*/ns/net -lname "$ns" 2>/dev/null | cut -d/ -f3); do
      [[ $pid == "$p" ]] || kill -KILL "$pid" 2>/dev/null || true
    done
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in "${holders[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.02; done
  done
  # The veth pair dies with the network namespaces; remove it if setup stopped halfway.
  ip link del "mha$tag" 2>/dev/null || true
  ip link del "mhb$tag" 2>/dev/null || true
  # A failure to remove the state directory is reported; it does not change the exit status.
  rm -rf "$state" || echo "multihost: could not remove $state (left behind)" >&2
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

make_host() {  # name ip
  local name=$1 ip=$2
  # setpriv --pdeathsig: the holder dies with this script even on SIGKILL; --kill-child: the
  # sleeping child goes with it. The holder gets its own hostname and /dev/shm, and a sysfs
  # of its own network namespace (UCX finds its TCP devices in /sys/class/net).
  setpriv --pdeathsig KILL \
    unshare --net --ipc --uts --mount --propagation private --fork --kill-child -- \
    /bin/sh -c "hostname $name && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
                umount -l /sys && mount -t sysfs sysfs /sys &&
                touch $state/$name.ready && exec sleep infinity" &
  local pid=$!
  disown "$pid"  # no "Killed" job notice at teardown
  holders+=("$pid")
  for _ in $(seq 100); do
    [[ -e $state/$name.ready ]] && break
    kill -0 "$pid" 2>/dev/null || { echo "multihost: host $name failed to start" >&2; exit 1; }
    sleep 0.05
  done
  [[ -e $state/$name.ready ]] || { echo "multihost: host $name did not start" >&2; exit 1; }
  echo "$pid" >"$state/$name.pid"
  echo "$pid" >"$state/$ip.pid"
}

in_host() {  # name cmd...
  local name=$1; shift
  nsenter --target "$(<"$state/$name.pid")" --net --ipc --uts --mount -- "$@"
}

make_host hostA 10.77.0.1
make_host hostB 10.77.0.2
ip link add "mha$tag" type veth peer name "mhb$tag"
ip link set "mha$tag" netns "$(<"$state/hostA.pid")"
ip link set "mhb$tag" netns "$(<"$state/hostB.pid")"
for h in A:1:a B:2:b; do
  IFS=: read -r name octet side <<<"$h"
  in_host "host$name" ip link set "mh$side$tag" name mh0
  in_host "host$name" ip addr add "10.77.0.$octet/24" dev mh0
  in_host "host$name" ip link set mh0 up
  in_host "host$name" ip link set lo up
done
# Names resolvable inside the hosts without touching the machine's /etc/hosts: each host's
# mount namespace gets its own copy.
for name in hostA hostB; do
  cp /etc/hosts "$state/hosts.$name"
  printf '10.77.0.1 hostA\n10.77.0.2 hostB\n' >>"$state/hosts.$name"
  in_host "$name" mount --bind "$state/hosts.$name" /etc/hosts
done

export PARAMWIN_MH_DIR=$state
export UCX_TLS=${UCX_TLS:-tcp,self}
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-mh0}
fix_note=""
fix_so_used=""
exec_env=()
if [[ $mpi == MPICH ]]; then
  # Hydra: proxies connect back to mpiexec over mh0; the ssh launcher is our namespace hopper.
  mpiexec_cmd=("$mpiexec" -launcher ssh -launcher-exec "$launcher" -iface mh0
               -hosts hostA,hostB -ppn "$ppn" -n $((2 * ppn)))
  ((survive)) && mpiexec_cmd+=(-disable-auto-cleanup)
  # The MPI_Finalize fix (header): preloaded into the ranks only, after any preload already
  # set (a sanitizer runtime must stay first).
  fix_note=", finalize fix off (PARAMWIN_MH_FINALIZE_FIX=0)"
  if [[ ${PARAMWIN_MH_FINALIZE_FIX:-1} != 0 ]]; then
    cc=${CC:-cc}
    fix_so=$state/libmpich_finalize_fix.so
    if command -v "$cc" >/dev/null &&
       "$cc" -O2 -shared -fPIC -o "$fix_so" "$here/multihost/mpich_finalize_fix.c"; then
      mpiexec_cmd+=(-genv LD_PRELOAD "${LD_PRELOAD:+$LD_PRELOAD:}$fix_so")
      fix_so_used=$fix_so
      fix_note=", finalize fix preloaded"
    else
      fix_note=", finalize fix NOT preloaded (could not compile it with '$cc'): MPI_Finalize may hang"
      echo "multihost: WARNING: $fix_note (scripts/multihost/mpich_finalize_fix.c)" >&2
    fi
  fi
else
  # Open MPI's mpirun starts an orted on hostB through its rsh launcher, which is our namespace
  # hopper (it runs `launch.sh hostB orted ...`; the hopper keeps mpirun's environment, so
  # the orted and its ranks see the same OMPI_MCA_* and UCX_* settings). The orteds and
  # mpirun talk over mh0 (oob), ranks over UCX (pml/ucx, osc/ucx) on mh0; btl/tcp, were it
  # chosen, on mh0 too. Slots: N per host, ranks 0..N-1 on hostA. The MCA settings that the
  # tests' environment gives (cmake/ParamwinMpiTest.cmake) are set here as well, so that the
  # script runs by hand the same way; btl adds tcp (the environment's self,vader is for one
  # node).
  mpiexec_cmd=("$mpiexec" --allow-run-as-root --host "hostA:$ppn,hostB:$ppn" -n $((2 * ppn))
               --mca plm_rsh_agent "$launcher" --mca oob_tcp_if_include mh0
               --mca btl "self,vader,tcp" --mca btl_tcp_if_include mh0
               --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
               --mca osc "ucx,sm" --mca hwloc_base_binding_policy none
               --mca rmaps_base_oversubscribe 1)
  ((survive)) && mpiexec_cmd+=(--enable-recovery)
  # The same settings as environment, for what `exec` runs (a Slurm cluster whose srun
  # --mpi=pmix starts the ranks without mpirun): without pml=ucx there, Open MPI chose ob1
  # with the environment's btl self,vader and found no way between the hosts.
  exec_env=(OMPI_MCA_pml=ucx "OMPI_MCA_btl=self,vader,tcp" OMPI_MCA_btl_tcp_if_include=mh0
            OMPI_MCA_oob_tcp_if_include=mh0 "OMPI_MCA_osc=ucx,sm" OMPI_MCA_pml_ucx_tls=any
            OMPI_MCA_pml_ucx_devices=any)
fi

ranks_running() {  # the job's ranks (this harness's mark, a rank number) still running
  local f n=0
  for f in /proc/[0-9]*/environ; do
    grep -qzx "PARAMWIN_MH_JOB=$tag" "$f" 2>/dev/null &&
      grep -qz "^OMPI_COMM_WORLD_RANK=" "$f" 2>/dev/null && n=$((n + 1))
  done
  echo "$n"
}

end_when_ranks_gone() {  # launcher pid: see `run`
  local seen=0 gone_for=0
  while kill -0 "$1" 2>/dev/null; do
    if [[ $(ranks_running) -gt 0 ]]; then
      seen=1 gone_for=0
    elif ((seen)); then
      gone_for=$((gone_for + 1))
      if ((gone_for >= 6)); then
        echo "multihost: every rank has ended and mpirun --enable-recovery has not (Open MPI" \
             "across hosts): ending it" >&2
        kill -TERM "$1" 2>/dev/null || true
        return 0
      fi
    fi
    sleep 0.5
  done
}

case $mode in
  run)
    echo "multihost: hostA=10.77.0.1 hostB=10.77.0.2, $ppn ranks per host," \
         "UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES, $mpi ($mpiexec)$fix_note" >&2
    # In the background + wait, so that a signal reaches the trap (and the teardown) at once.
    # pdeathsig: mpiexec (and through it the job) goes if this script is killed outright.
    setpriv --pdeathsig KILL nsenter --target "$(<"$state/hostA.pid")" --net --ipc --uts --mount \
      -- env -C "$PWD" PARAMWIN_MH_JOB="$tag" "${mpiexec_cmd[@]}" "$@" &
    launcher_pid=$!
    if ((survive)) && [[ $mpi == OpenMPI ]]; then
      # Open MPI 4.1.4's mpirun --enable-recovery, with an orted on another host, does not end
      # once a rank has ended early: after the other ranks exit too it waits until its
      # timeout (seen with a plain shell job whose rank 3 exits 3 and the others 0, and with
      # _Exit(0); on one host it ends at once). So the harness watches the ranks (processes
      # carrying OMPI_COMM_WORLD_RANK and this job's mark) and, 3 s after the last one has
      # gone, ends mpirun itself; the job's verdict is then its output (the death tests pass
      # on a printed line).
      end_when_ranks_gone "$launcher_pid" &
    fi
    rc=0
    wait "$launcher_pid" || rc=$?
    exit "$rc"
    ;;
  exec)
    echo "multihost: hostA=10.77.0.1 hostB=10.77.0.2, running on hostA: $*" >&2
    setpriv --pdeathsig KILL nsenter --target "$(<"$state/hostA.pid")" --net --ipc --uts --mount \
      -- env -C "$PWD" PARAMWIN_MH_FINALIZE_FIX_SO="$fix_so_used" "${exec_env[@]}" "$@" &
    rc=0
    wait $! || rc=$?
    exit "$rc"
    ;;
  check)
    # The hosts are what they claim: own names, own addresses, reachable over mh0 only,
    # no shared memory across (/dev/shm, System V); hydra reaches both hosts over mh0.
    [[ $(in_host hostA hostname) == hostA && $(in_host hostB hostname) == hostB ]]
    in_host hostA touch /dev/shm/paramwin-mh-probe
    if in_host hostB test -e /dev/shm/paramwin-mh-probe; then
      echo "multihost: /dev/shm is shared between hosts" >&2; exit 1
    fi
    in_host hostA ipcmk -M 4096 >/dev/null
    if [[ -n $(in_host hostB ipcs -m | awk '$1 ~ /^0x/') ]]; then
      echo "multihost: System V shared memory leaks between hosts" >&2; exit 1
    fi
    in_host hostA ip -o -4 addr show | awk '{print "hostA", $2, $4}'
    in_host hostB ip -o -4 addr show | awk '{print "hostB", $2, $4}'
    "${mpiexec_cmd[0]}" --version >/dev/null
    in_host hostA env -C "$PWD" "${mpiexec_cmd[@]}" /bin/sh -c 'echo "rank ${PMI_RANK:-$OMPI_COMM_WORLD_RANK} on $(hostname)"' |
      sort
    echo "multihost: check passed"
    ;;
  shell)
    in_host hostA env -C "$PWD" PARAMWIN_MH_MPIEXEC="${mpiexec_cmd[*]}" PS1='hostA# ' \
      bash --norc -i || true
    ;;
esac
