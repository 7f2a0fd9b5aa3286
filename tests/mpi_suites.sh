#!/bin/sh
# tests/mpi_suites.sh NP: run each MPI CUnit suite (MT_MPI_SUITES) at NP ranks.
np=$1
fail=0
for suite in $MT_MPI_SUITES; do
    echo "== $suite at $np ranks"
    "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/$suite" || fail=1
done
exit $fail
