#!/bin/sh
# Runs its arguments on this Open MPI rank's CPU: the local rank's entry of $IRIS_RANK_CPUS (a
# comma-separated list, from plan_pinning in pinning.sh), so that Open MPI's ranks sit on the CPUs
# irisd's ranks had.
cpu=$(echo "$IRIS_RANK_CPUS" | cut -d, -f$((OMPI_COMM_WORLD_LOCAL_RANK + 1)))
exec taskset -c "$cpu" "$@"
