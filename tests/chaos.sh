#!/bin/sh
# tests/chaos.sh: allocation-failure injection (tests/chaos.c) at 1 and 2 ranks; at 2
# ranks each rank takes its turn as the one whose allocation fails. Many short fits: their
# run folders go to /dev/shm (MT_TEST_SHM, see tests/mpirun.sh). The full tier: the plain
# build runs the 2 ranks only; the sanitizer build runs both, and sees there every crash the
# plain build would, and the leaks it would not.
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
fail=0
nps="1 2"
[ -z "${MT_SANITIZED:-}" ] && nps=2
# the sanitizer build's 2-rank run takes about 100 s on a quiet machine (hundreds of short
# fits, each failure injected in turn), past mpirun.sh's default 120 s once the suite runs
# beside it: a hang is still a failure, after 300 s
for np in $nps; do
    echo "== tests/chaos at $np ranks"
    MT_TEST_SHM=1 MT_TEST_TIMEOUT=${MT_TEST_TIMEOUT:-300} "${top_srcdir:-.}/tests/mpirun.sh" "$np" \
        "${top_builddir:-.}/tests/chaos" || fail=1
done
exit $fail
