#!/bin/sh
# Run an MPI program on this machine with Open MPI's TCP BTL over loopback (so the
# traffic takes the same path as on the emulated fabric), niced, at most 4 ranks.
#
#   scripts/apps/loopback.sh N PROGRAM [ARGS...]
#
# Environment:
#   TRACE=DIR     profile with libsdnmpi.so (SDNMPI_MODE=profile, SDNMPI_TRACE_DIR=DIR)
#   SDNMPI_LIB    the library (default: build/openmpi/libsdnmpi.so of this checkout)
#   MPIRUN_ARGS   extra mpirun arguments
set -eu
n=$1; shift
if [ "$n" -gt 4 ]; then echo "loopback.sh: at most 4 ranks on this 2-core machine" >&2; exit 2; fi
here=$(cd "$(dirname "$0")/../.." && pwd)
lib=${SDNMPI_LIB:-$here/build/openmpi/libsdnmpi.so}
set -- --allow-run-as-root --oversubscribe -n "$n" \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x OMP_NUM_THREADS=1 ${MPIRUN_ARGS:-} "$@"
if [ -n "${TRACE:-}" ]; then
    [ -f "$lib" ] || { echo "loopback.sh: $lib missing (make pmpi)" >&2; exit 2; }
    set -- -x LD_PRELOAD="$lib" -x SDNMPI_MODE=profile -x SDNMPI_TRACE_DIR="$TRACE" "$@"
fi
exec nice -n 19 mpirun.openmpi "$@"
