#!/usr/bin/env bash
# "ssh" replacement for the emulated hosts of scripts/multihost.sh: MPICH's Hydra
# (-launcher-exec) and Open MPI's mpirun (--mca plm_rsh_agent) start their remote daemons
# through it.
# They run:  launch.sh [-x] HOST "cmd" args...   (as they would run ssh)
# We run the command line inside HOST's network, IPC, UTS and mount namespaces, entered
# through the long-lived holder process that owns them (its pid is in $PARAMWIN_MH_DIR/HOST.pid).
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do shift; done  # ssh options the launcher adds (-x)
host=${1:?launch.sh: no host given}
shift
dir=${PARAMWIN_MH_DIR:?launch.sh: PARAMWIN_MH_DIR is not set (run through scripts/multihost.sh)}
pidfile=$dir/$host.pid
if [[ ! -r $pidfile ]]; then
  echo "launch.sh: unknown emulated host '$host' (no $pidfile)" >&2
  exit 255
fi
# Like ssh: the remaining words form one command line for a shell.
exec nsenter --target "$(<"$pidfile")" --net --ipc --uts --mount -- /bin/sh -c "$*"
