#!/bin/sh
# tests/mpi_suites.sh NP: run each MPI CUnit suite (MT_MPI_SUITES) at NP ranks, their run
# folders on /dev/shm (MT_TEST_SHM, see tests/mpirun.sh).
np=$1
if [ -n "${MT_QUICK_CHECK:-}" ] && [ "$np" -gt 1 ]; then # make distcheck: covered by the full runs
    echo "skipped (MT_QUICK_CHECK is set)"; exit 77
fi
fail=0
for suite in $MT_MPI_SUITES; do
    echo "== $suite at $np ranks"
    MT_TEST_SHM=1 "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/$suite" || fail=1
done
exit $fail
