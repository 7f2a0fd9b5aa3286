#!/bin/sh
# tests/summary.sh BUILD_DIR...: add up the CUnit run summaries and the shell tests'
# "N passed, N failed" lines of every test log, and print them as one CUnit summary.
# a test script that failed without printing its counts (a timeout, a crash) still counts
bad=$(for d in "$@"; do cat "$d"/tests/*.trs "$d"/fuzz/*.trs 2>/dev/null; done |
      grep -cE '^:test-result: (FAIL|ERROR|XPASS)')
for d in "$@"; do ls "$d"/tests/*.log 2>/dev/null; done | xargs cat 2>/dev/null | awk -v bad="$bad" '
/^ +suites +[0-9]/  { s[1]+=$2; s[2]+=$3; s[4]+=$5; s[5]+=$6 }
/^ +tests +[0-9]/   { t[1]+=$2; t[2]+=$3; t[3]+=$4; t[4]+=$5; t[5]+=$6 }
/^ +asserts +[0-9]/ { a[1]+=$2; a[2]+=$3; a[3]+=$4; a[4]+=$5 }
/^[0-9]+ passed, [0-9]+ failed$/ { sp+=$1; sf+=$3 }
END {
    printf "\nAll CUnit suites, every rank count and build:\n"
    printf "Run Summary:    Type  Total    Ran Passed Failed Inactive\n"
    printf "              suites %6d %6d    n/a %6d %8d\n", s[1], s[2], s[4], s[5]
    printf "               tests %6d %6d %6d %6d %8d\n", t[1], t[2], t[3], t[4], t[5]
    printf "             asserts %6d %6d %6d %6d      n/a\n", a[1], a[2], a[3], a[4]
    printf "\nShell checks: %d passed, %d failed\n", sp, sf
    if (bad > 0)
        printf "Test scripts that failed (automake FAIL/ERROR, timeouts included): %d\n", bad
    printf "%d passed, %d failed\n", t[3] + sp, t[4] + sf + bad
}'
