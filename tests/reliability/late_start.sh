#!/bin/sh
# The spawn command of elastic_refill's ahead_late: the first process it starts (the one that
# creates the folder MARK) waits SECONDS before it runs PROGRAM ARGS in place of itself (the
# same pid, which Open MPI watches); the others run it at once. MPI_Comm_spawn returns only
# when every new process has passed MPI_Init, so the first spawn takes SECONDS longer.
#   late_start.sh MARK SECONDS PROGRAM [ARGS...]
mark=$1
seconds=$2
shift 2
if mkdir "$mark" 2>/dev/null; then
  sleep "$seconds"
fi
exec "$@"
