#!/bin/sh
# tests/chaos.sh: allocation-failure injection (tests/chaos.c) at 1 and 2 ranks; at 2
# ranks each rank takes its turn as the one whose allocation fails.
fail=0
# many short fits: a memory-backed folder keeps their fsyncs cheap
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
for np in 1 2; do
    echo "== tests/chaos at $np ranks"
    "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/tests/chaos" || fail=1
done
exit $fail
