#!/bin/sh
# tests/mpirun.sh NP PROGRAM [ARGS...]: run PROGRAM on NP ranks under a timeout, so a hang
# is a failure. Extra mpirun options come from MT_MPIRUN_ARGS; the timeout (seconds,
# default 120) from MT_TEST_TIMEOUT, multiplied by MT_TEST_TIMEOUT_SCALE.
# MT_TEST_SHM=1: the ranks' TMPDIR (where the CUnit suites keep their run folders) is
# /dev/shm, unless TMPDIR is set: the suites run hundreds of short fits, and on a disk their
# checkpoints' fsyncs take about 40% of the time (test_mpi_report at 2 ranks: 10.1 s on
# /tmp, 6.4 s on /dev/shm). Only the ranks' TMPDIR moves (mpirun -x): mpirun keeps its own
# session folder where it is (with the whole environment on /dev/shm, one rank was lost in
# MPI_Init_thread under the sanitizers). The end-to-end scripts stay on the disk.
# The launcher is the build's family's (configure's MPIRUN, MT_MPI_FAMILY, given by make
# check): Open MPI's mpirun --oversubscribe -x VAR=VALUE, or MPICH's (Hydra) mpiexec, which
# oversubscribes anyway and takes -genv VAR VALUE.
np=$1; shift
launcher=${MPIRUN:-mpirun}
family=${MT_MPI_FAMILY:-openmpi}
t=${MT_TEST_TIMEOUT:-120}
scale=${MT_TEST_TIMEOUT_SCALE:-1}
limit=$(awk "BEGIN { printf \"%d\", $t * $scale }")
args=${MT_MPIRUN_ARGS:-}
if [ "${MT_TEST_SHM:-0}" = 1 ] && [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    if [ "$family" = openmpi ]; then args="$args -x TMPDIR=/dev/shm"; else args="$args -genv TMPDIR /dev/shm"; fi
fi
over=--oversubscribe
[ "$family" = openmpi ] || over=""
# shellcheck disable=SC2086
timeout -k 10 "$limit" "$launcher" $over -np "$np" $args "$@"
rc=$?
# beside the harness's "main left at" lines: a slow end after main is the launcher's
[ "${MT_TEST_SHM:-0}" = 1 ] && echo "mpirun.sh: the launcher ended at $(date +%s.%3N)" >&2
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "TIMEOUT: $* at $np ranks did not finish in ${limit}s" >&2
fi
exit $rc
