#!/bin/sh
# tests/timed.sh PROGRAM [ARGS...]: automake's log compiler for every test. Runs the test and
# ends its log with the wall time it took ("mt-test-time: SECONDS NAME"), which
# tests/times.sh sorts into the table of docs/testing.md. The test's exit status is kept.
t0=$(date +%s%N)
"$@"
rc=$?
t1=$(date +%s%N)
for name in "$@"; do :; done # the test itself is the last argument
echo "mt-test-time: $(awk "BEGIN { printf \"%.1f\", ($t1 - $t0) / 1e9 }") ${name#"${top_srcdir:-.}"/} tier=${MT_TEST_TIER:-check} rc=$rc"
exit $rc
