#!/bin/sh
# tests/chaos.sh: allocation-failure injection (tests/chaos.c) at 1 and 2 ranks; at 2
# ranks each rank takes its turn as the one whose allocation fails. Many short fits: their
# run folders go to /dev/shm (MT_TEST_SHM, see tests/mpirun.sh).
fail=0
for np in 1 2; do
    echo "== tests/chaos at $np ranks"
    MT_TEST_SHM=1 "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/tests/chaos" || fail=1
done
exit $fail
