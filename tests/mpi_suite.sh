#!/bin/sh
# tests/mpi_suite.sh tests/SUITE-npN.mpi: one MPI CUnit suite (tests/SUITE) at N ranks, its run
# folders on /dev/shm (MT_TEST_SHM, see tests/mpirun.sh). Each (suite, ranks) is its own
# automake test (Makefile.am's MPI_SUITE_TESTS; the .mpi file is an empty stamp that names
# it), so `make -j` balances them and each has its own log and time. Tiers (tests/lib.sh):
# the core and fusion suites at 2 ranks are in the fast one, 4 ranks in the full one, the
# rest in make check's.
. "${top_srcdir:-.}/tests/lib.sh"
base=$(basename "$1" .mpi)
suite=${base%-np*}
np=${base##*-np}
case "$np" in '' | *[!0-9]*) echo "tests/mpi_suite.sh: '$1' is not SUITE-npN.mpi" >&2; exit 99 ;; esac
case "$suite-np$np" in
test_mpi_core-np2 | test_mpi_fusion-np2) need_tier fast ;;
*-np4) need_tier full ;;
*) need_tier check ;;
esac
echo "== tests/$suite at $np ranks"
MT_TEST_SHM=1 exec "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/tests/$suite"
