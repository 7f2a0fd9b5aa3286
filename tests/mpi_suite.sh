#!/bin/sh
# tests/mpi_suite.sh tests/PROG[-TEST]-npN.mpi: an MPI CUnit program (tests/PROG: a suite, or
# tests/chaos) at N ranks, all of its tests or only TEST, its run folders on /dev/shm
# (MT_TEST_SHM, see tests/mpirun.sh). Each (program, test, ranks) is its own automake test
# (Makefile.am's MPI_SUITE_TESTS and CHAOS_TESTS; the .mpi file is an empty stamp that names
# it), so `make -j` balances them and each has its own log and time. Tiers (tests/lib.sh):
# the core and fusion suites at 2 ranks are in the fast one; 4 ranks and the allocation
# failures of tests/chaos (at 2 ranks in the plain build, at 1 and 2 with the sanitizers,
# which see there every crash the plain build would, and the leaks it would not) in the
# full one; the rest in make check's.
. "${top_srcdir:-.}/tests/lib.sh"
base=$(basename "$1" .mpi)
np=${base##*-np}
prog=${base%-np*}
only=""
case "$prog" in *-*) only=${prog#*-}; prog=${prog%%-*} ;; esac
case "$np" in '' | *[!0-9]*) echo "tests/mpi_suite.sh: '$1' is not PROG[-TEST]-npN.mpi" >&2; exit 99 ;; esac
case "$prog-np$np" in
test_mpi_core-np2 | test_mpi_fusion-np2) need_tier fast ;;
chaos-np1)
    need_tier full
    [ -n "${MT_SANITIZED:-}" ] || { echo "skipped: tests/chaos at 1 rank runs in the sanitizer build"; exit 77; }
    ;;
*-np4 | chaos-*) need_tier full ;;
*) need_tier check ;;
esac
# each failure injected in turn, hundreds of short fits: the sanitizer build's runs take
# minutes beside the rest of the suite; a hang is still a failure, after 300 s
[ "$prog" = chaos ] && export MT_TEST_TIMEOUT=${MT_TEST_TIMEOUT:-300}
echo "== tests/$prog${only:+ ($only)} at $np ranks"
# shellcheck disable=SC2086
MT_TEST_SHM=1 exec "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/tests/$prog" $only
