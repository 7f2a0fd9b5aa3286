#!/bin/sh
# tests/times.sh BUILD_DIR...: every test of the last `make check` in each build, slowest
# first, from the "mt-test-time:" line tests/timed.sh ends each log with: seconds, CPU
# seconds (its processes' user and system time: what it costs the machine beside the
# others of make -j), result (from automake's .trs), the build, the test. A test still
# running or killed has no line.
for d in "$@"; do
    build=$(basename "$(cd "$d" && pwd)")
    find "$d/tests" "$d/fuzz" -name '*.log' ! -name test-suite.log 2>/dev/null | while read -r log; do
        line=$(grep -a '^mt-test-time: ' "$log" | tail -n 1)
        [ -n "$line" ] || continue
        res=$(sed -n 's/^:test-result: //p' "${log%.log}.trs" 2>/dev/null | head -n 1)
        echo "$line" | awk -v res="${res:-?}" -v build="$build" \
            '{ sub(/^\.\//, "", $3); cpu = "?"
               for (i = 4; i <= NF; i++) if ($i ~ /^cpu=/) cpu = substr($i, 5)
               printf "%8.1f %7s  %-5s %-12s %s\n", $2, cpu, res, build, $3 }'
    done
done | sort -rn
