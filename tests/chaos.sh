#!/bin/sh
# tests/chaos.sh: allocation-failure injection (tests/chaos.c) at 1 and 2 ranks; at 2
# ranks each rank takes its turn as the one whose allocation fails.
fail=0
# many short fits: a memory-backed folder keeps their fsyncs cheap. Only the test's own
# files go there (TMPDIR of the ranks); mpirun keeps its session folder where it is.
args=${MT_MPIRUN_ARGS:-}
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    args="$args -x TMPDIR=/dev/shm"
fi
for np in 1 2; do
    echo "== tests/chaos at $np ranks"
    MT_MPIRUN_ARGS=$args "${top_srcdir:-.}/tests/mpirun.sh" "$np" "${top_builddir:-.}/tests/chaos" || fail=1
done
exit $fail
