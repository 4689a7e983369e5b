#!/bin/sh
# The spawn command of elastic_refill's ahead_dies_elsewhere: runs PROGRAM ARGS in place of
# itself (the same pid, which Open MPI watches); while MARK does not exist yet, in a UTS
# namespace of its own under another hostname, where paramwin's liveness takes it for a
# process on another host (detail::host_id: the hostname and the pid namespace), one that
# cannot watch its spawner's pid. Needs root (unshare).
#   other_host.sh MARK PROGRAM [ARGS...]
mark=$1
shift
if [ ! -e "$mark" ]; then
  exec unshare --uts -- /bin/sh -c 'hostname paramwin-other-host && exec "$0" "$@"' "$@"
fi
exec "$@"
