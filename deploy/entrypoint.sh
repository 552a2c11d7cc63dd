#!/usr/bin/env bash
# The image's entry point: run the command given (flegel, mpirun or sshd).
#
# In the launcher pod of an MPIJob (the operator sets K_MPI_JOB_ROLE=launcher), wait first
# until every worker host in the operator's hostfile resolves: worker pods get their DNS
# names a moment after they start, and mpirun fails at once on a name it cannot resolve.
set -euo pipefail

hostfile="${FLEGEL_HOSTFILE:-/etc/mpi/hostfile}"

wait_for_host() {
  local host="$1" tries=0 delay=0.1
  until getent hosts "$host" > /dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -ge 20 ]; then
      echo "entrypoint: host $host does not resolve; starting anyway" >&2
      return 0
    fi
    sleep "$delay"
    delay=$(awk "BEGIN { d = $delay * 2; print (d > 5 ? 5 : d) }")
  done
}

if [ "${K_MPI_JOB_ROLE:-}" = "launcher" ] && [ -f "$hostfile" ]; then
  while IFS= read -r line; do
    host="${line%%[: ]*}"
    [ -n "$host" ] && [ "${host:0:1}" != "#" ] && wait_for_host "$host"
  done < "$hostfile"
fi

exec "$@"
