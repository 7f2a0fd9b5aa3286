#!/bin/sh
# Stalls: a rank that sleeps past --stall-warn is named by rank 0 and the job goes on; one
# that sleeps past --stall-timeout aborts the job with the stall status (76).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
probe="${top_builddir:-.}/tests/stall_probe"
run="${top_srcdir:-.}/tests/mpirun.sh"
out=$(mktemp); err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
export MT_STORAGE_PATH="${TMPDIR:-/tmp}/mpitrain-stall-test"

for np in 2 4; do
    last=$((np - 1))
    "$run" "$np" "$probe" "$last" 1.5 --stall-warn 0.3 --stall-timeout 30 >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "stall_probe: done" "$out" \
        && grep -q "mpitrain: stall: $last of $np ranks have waited" "$err" \
        && grep -q "in allreduce(count=1, f64, sum) (call #[0-9]*); not arrived: rank $last (last call: allreduce(count=1, f64, sum) #[0-9]*, left it" "$err"; then
        ok "warning names rank $last at $np ranks, job completes"
    else bad "warning at $np ranks (exit $rc)"; fi

    "$run" "$np" "$probe" 0 60 --stall-warn 0.3 --stall-timeout 2 >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 76 ] && grep -q "not arrived: rank 0" "$err" \
        && grep -q "past failure.stall_timeout_s = 2 s; aborting the job with status 76" "$err"; then
        ok "timeout aborts with status 76 at $np ranks"
    else bad "timeout at $np ranks (exit $rc, want 76)"; fi
done
finish
