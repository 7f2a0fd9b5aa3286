#!/bin/sh
# tests/mpirun.sh NP PROGRAM [ARGS...]: run PROGRAM on NP ranks under a timeout, so a hang
# is a failure. Extra mpirun options come from MT_MPIRUN_ARGS; the timeout (seconds,
# default 120) from MT_TEST_TIMEOUT, multiplied by MT_TEST_TIMEOUT_SCALE.
np=$1; shift
t=${MT_TEST_TIMEOUT:-120}
scale=${MT_TEST_TIMEOUT_SCALE:-1}
limit=$(awk "BEGIN { printf \"%d\", $t * $scale }")
# shellcheck disable=SC2086
timeout -k 10 "$limit" mpirun --oversubscribe -np "$np" $MT_MPIRUN_ARGS "$@"
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "TIMEOUT: $* at $np ranks did not finish in ${limit}s" >&2
fi
exit $rc
