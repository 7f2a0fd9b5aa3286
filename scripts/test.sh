#!/bin/sh
# scripts/test.sh: set up this machine, then build and run the whole test suite, the full
# tier (docs/testing.md): a plain build with --enable-werror and every test (make
# check-full), a build with AddressSanitizer and UndefinedBehaviorSanitizer over the tests
# where they find things (make check-sanitizers: the CUnit suites at 1-4 ranks, chaos, the
# hostile-input tests, fuzz replays), then make distcheck (the tarball builds, installs,
# passes its fast tier and the README's commands after its install).
# MT_TEST_TIMEOUT_SCALE=N stretches every test's timeout on slow machines.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
start=$(date +%s)
"$top/scripts/setup.sh" --example --slurm || exit 1
echo "=== setup took $(( $(date +%s) - start ))s"
status=0
run_build() { # NAME DIR TARGET CONFIGURE-OPTIONS...
    name=$1; dir=$2; target=$3; shift 3
    t0=$(date +%s)
    echo "=== $name build ($*)"
    if ! "$top/scripts/build.sh" "$dir" "$@"; then
        echo "=== $name build FAILED"; status=1; return
    fi
    echo "=== $name tests (make $target)"
    if ! make -C "$dir" -j"$(nproc)" "$target" >"$dir/check.out" 2>&1; then
        status=1
        # automake's test-suite.log holds the log of every failed test
        cat "$dir/test-suite.log" 2>/dev/null || cat "$dir/check.out"
    fi
    grep -E "^(# |PASS|FAIL|ERROR)" "$dir/check.out"
    echo "=== $name: $(( $(date +%s) - t0 ))s"
}
run_build plain "$top/build-plain" check-full --enable-werror
run_build sanitizers "$top/build-asan" check-sanitizers --enable-werror --enable-sanitizers=address,undefined
echo "=== make distcheck"
t0=$(date +%s)
if MT_TEST_TIER=fast make -C "$top/build-plain" -j"$(nproc)" distcheck >"$top/build-plain/distcheck.out" 2>&1; then
    echo "make distcheck: 1 passed, 0 failed"
    echo "1 passed, 0 failed" >"$top/build-plain/tests/distcheck.log"
else
    tail -n 60 "$top/build-plain/distcheck.out"; status=1
    echo "0 passed, 1 failed" >"$top/build-plain/tests/distcheck.log"
fi
echo "=== distcheck: $(( $(date +%s) - t0 ))s"
echo "=== the 15 slowest tests (tests/times.sh)"
"$top/tests/times.sh" "$top/build-plain" "$top/build-asan" | head -n 15
echo "=== suite took $(( $(date +%s) - start ))s"
[ $status -eq 0 ] && echo "=== all tests passed" || echo "=== TESTS FAILED"
# last: the CUnit-style summary, ending with "N passed, N failed"
"$top/tests/summary.sh" "$top/build-plain" "$top/build-asan"
exit $status
