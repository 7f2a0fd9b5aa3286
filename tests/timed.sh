#!/bin/sh
# tests/timed.sh PROGRAM [ARGS...]: automake's log compiler for every test. Runs the test and
# ends its log with the wall time it took and the CPU time of the processes it waited for
# ("mt-test-time: SECONDS NAME tier=T rc=N cpu=SECONDS": user and system, from the shell's
# times), which tests/times.sh sorts into the table of docs/testing.md. The test's exit
# status is kept.
t0=$(date +%s%N)
"$@"
rc=$?
t1=$(date +%s%N)
for name in "$@"; do :; done # the test itself is the last argument
# times' second line: the children's user and system time, "0m1.230000s 0m0.450000s"
# (times in this shell: in a command substitution it would report that subshell's)
tf=$(mktemp "${TMPDIR:-/tmp}/mt-times.XXXXXX") && times >"$tf"
cpu=$(tail -n 1 "$tf" 2>/dev/null | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, p, "m");
      sub(/s$/, "", p[2]); s += p[1] * 60 + p[2] } printf "%.1f", s }')
rm -f "$tf"
echo "mt-test-time: $(awk "BEGIN { printf \"%.1f\", ($t1 - $t0) / 1e9 }") ${name#"${top_srcdir:-.}"/} tier=${MT_TEST_TIER:-check} rc=$rc cpu=$cpu"
exit $rc
