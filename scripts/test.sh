#!/bin/sh
# scripts/test.sh: set up this machine, then build and run the whole test suite, the full
# tier (docs/testing.md): a plain build with --enable-werror and every test (make
# check-full: its tests but the 64-rank ones beside the sanitizer build's, then those
# alone), a build with AddressSanitizer and UndefinedBehaviorSanitizer over the tests
# where they find things (make check-sanitizers: the CUnit suites at 1-4 ranks, chaos, the
# hostile-input tests, fuzz replays), and make distcheck (the tarball builds, installs,
# passes its fast tier and the README's commands after its install), and the MPICH leg
# (scripts/test-mpich.sh: a build against MPICH, its unit tests and 2-rank suites).
# Most end-to-end tests wait (for a stall timeout, a signal, a stopped rank) more than
# they compute (the plain build's tests used 459 CPU seconds in 1,300 s of tests, the
# sanitizer build's 484 in 951), so the plain build's tests run beside the sanitizer
# build's, and distcheck and the MPICH leg beside the rest once either build's tests are
# done: the two cores stay busy. (One more plain test at a time than there are cores
# made the run longer: 818 s against 797, the sanitizer tests slowed by the contention.)
# MT_TEST_TIMEOUT_SCALE=N stretches every test's timeout on slow machines.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
start=$(date +%s)
"$top/scripts/setup.sh" --example --slurm --mpich || exit 1
echo "=== setup took $(( $(date +%s) - start ))s"
status=0
build() { # NAME DIR CONFIGURE-OPTIONS...
    name=$1; dir=$2; shift 2
    t0=$(date +%s)
    if "$top/scripts/build.sh" "$dir" "$@"; then
        echo "=== $name build ($*): $(( $(date +%s) - t0 ))s"
    else
        echo "=== $name build ($*) FAILED"; status=1
    fi
}
# tests NAME DIR TARGET: make TARGET in DIR (in the background: its exit status in
# DIR/check.status, its time in DIR/check.time)
tests() {
    name=$1; dir=$2; target=$3
    ( t0=$(date +%s)
      make -C "$dir" -j"$(nproc)" "$target" >"$dir/check.out" 2>&1
      echo $? >"$dir/check.status"
      echo "$(( $(date +%s) - t0 ))" >"$dir/check.time" ) &
}
report() { # NAME DIR TARGET: the results of tests NAME DIR TARGET, once it has ended
    name=$1; dir=$2; target=$3
    echo "=== $name tests (make $target): $(cat "$dir/check.time" 2>/dev/null || echo '?')s"
    if [ "$(cat "$dir/check.status" 2>/dev/null)" != 0 ]; then
        status=1
        # automake's test-suite.log holds the log of every failed test
        cat "$dir/test-suite.log" 2>/dev/null || tail -n 60 "$dir/check.out"
    fi
    grep -E "^(# |PASS|FAIL|ERROR)" "$dir/check.out"
}
plain="$top/build-plain" asan="$top/build-asan" mpich="$top/build-mpich"
rm -f "$plain/check.status" "$asan/check.status" "$top/test-mpich.status"
build plain "$plain" --enable-werror
build sanitizers "$asan" --enable-werror --enable-sanitizers=address,undefined
[ $status -eq 0 ] || { echo "=== TESTS FAILED (build)"; exit 1; }
tests plain "$plain" check-full-shared
plain_job=$!
tests sanitizers "$asan" check-sanitizers
asan_job=$!
# whichever build ends its tests first runs distcheck (the tarball, built and tested in a
# folder of its own), beside the MPICH leg
while [ ! -f "$plain/check.status" ] && [ ! -f "$asan/check.status" ]; do sleep 2; done
first=$plain
[ -f "$plain/check.status" ] || first=$asan
( sh "$top/scripts/test-mpich.sh" "$mpich" >"$top/test-mpich.out" 2>&1
  echo $? >"$top/test-mpich.status" ) &
mpich_job=$!
t0=$(date +%s)
if MT_TEST_TIER=fast make -C "$first" -j"$(nproc)" distcheck >"$plain/distcheck.out" 2>&1; then
    distcheck="make distcheck: 1 passed, 0 failed"
    echo "1 passed, 0 failed" >"$plain/tests/distcheck.log"
else
    distcheck="make distcheck FAILED: $(tail -n 60 "$plain/distcheck.out")"; status=1
    echo "0 passed, 1 failed" >"$plain/tests/distcheck.log"
fi
distcheck_time=$(( $(date +%s) - t0 ))
wait $plain_job
wait $asan_job
wait $mpich_job
# last, alone: the 64-rank tests (beside the others they slowed them several times over)
t0=$(date +%s)
make -C "$plain" check-many-ranks >"$plain/many-ranks.out" 2>&1
many_rc=$?
many_time=$(( $(date +%s) - t0 ))
report plain "$plain" check-full-shared
report sanitizers "$asan" check-sanitizers
echo "=== the many-rank tests, alone (make check-many-ranks): ${many_time}s"
if [ $many_rc -ne 0 ]; then
    status=1
    cat "$plain/many-ranks-suite.log" 2>/dev/null || tail -n 60 "$plain/many-ranks.out"
fi
grep -E "^(# |PASS|FAIL|ERROR)" "$plain/many-ranks.out"
echo "=== make distcheck (tests at the fast tier): ${distcheck_time}s"
echo "$distcheck"
echo "=== MPICH (scripts/test-mpich.sh)"
mpich_rc=$(cat "$top/test-mpich.status" 2>/dev/null || echo 1)
cat "$top/test-mpich.out"
# 77: MPICH is not installed (setup.sh --mpich installs it; a CI without it is a failure)
[ "$mpich_rc" = 0 ] || { echo "=== MPICH leg FAILED (exit $mpich_rc)"; status=1; }
echo "=== the 15 slowest tests (tests/times.sh)"
"$top/tests/times.sh" "$plain" "$asan" "$mpich" | head -n 15
echo "=== suite took $(( $(date +%s) - start ))s"
[ $status -eq 0 ] && echo "=== all tests passed" || echo "=== TESTS FAILED"
# last: the CUnit-style summary, ending with "N passed, N failed"
"$top/tests/summary.sh" "$plain" "$asan" "$mpich"
exit $status
