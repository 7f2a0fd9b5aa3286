#!/bin/sh
# scripts/test.sh: set up this machine, then build and run every test twice: a plain
# build with --enable-werror, and one with AddressSanitizer and UndefinedBehaviorSanitizer.
# MT_TEST_TIMEOUT_SCALE=N stretches every test's timeout on slow machines.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
"$top/scripts/setup.sh" --example --slurm || exit 1
start=$(date +%s)
status=0
run_build() { # NAME DIR CONFIGURE-OPTIONS...
    name=$1; dir=$2; shift 2
    echo "=== $name build ($*)"
    if ! "$top/scripts/build.sh" "$dir" "$@"; then
        echo "=== $name build FAILED"; status=1; return
    fi
    echo "=== $name tests"
    if ! make -C "$dir" -j"$(nproc)" check >"$dir/check.out" 2>&1; then
        status=1
        # automake's test-suite.log holds the log of every failed test
        cat "$dir/test-suite.log" 2>/dev/null || cat "$dir/check.out"
    fi
    grep -E "^(# |PASS|FAIL|ERROR)" "$dir/check.out"
}
run_build plain "$top/build-plain" --enable-werror
run_build sanitizers "$top/build-asan" --enable-werror --enable-sanitizers=address,undefined
echo "=== make distcheck"
# the end-to-end scripts and the MPI suites at 2-4 ranks already ran in both builds;
# distcheck checks that the tarball builds (in parallel, as the builds above), installs
# (README's commands after the install run in its make installcheck), exports only mt_
# names, replays the fuzz inputs and passes the unit suites and the MPI suites at 1 rank
if MT_QUICK_CHECK=1 make -C "$top/build-plain" -j"$(nproc)" distcheck >"$top/build-plain/distcheck.out" 2>&1; then
    echo "make distcheck: 1 passed, 0 failed"
    echo "1 passed, 0 failed" >"$top/build-plain/tests/distcheck.log"
else
    tail -n 60 "$top/build-plain/distcheck.out"; status=1
    echo "0 passed, 1 failed" >"$top/build-plain/tests/distcheck.log"
fi
echo "=== suite took $(( $(date +%s) - start ))s"
[ $status -eq 0 ] && echo "=== all tests passed" || echo "=== TESTS FAILED"
# last: the CUnit-style summary, ending with "N passed, N failed"
"$top/tests/summary.sh" "$top/build-plain" "$top/build-asan"
exit $status
