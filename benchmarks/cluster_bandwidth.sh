#!/bin/sh
# benchmarks/cluster_bandwidth.sh [MIB]: what each link profile of the emulated cluster
# (tests/cluster.sh shape: unshaped, 10gbit, 1gbit) really delivers, measured as a TCP
# stream of MIB MiB (default 512) from node 1 to node 2, three times each; prints one line
# per run and the median. Needs root; brings up its own 2-node cluster and removes it.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cl="$top/tests/cluster.sh -n mtbw -s 10.77.250"
mib=${1:-512}
trap '$cl down' EXIT
trap 'exit 1' INT TERM HUP
$cl up 2 || exit 1
for profile in none 10gbit 1gbit; do
    $cl shape all $profile >/dev/null || exit 1
    runs=""
    for i in 1 2 3; do
        line=$($cl bandwidth mtbw1 mtbw2 "$mib")
        echo "  $profile run $i: $line"
        runs="$runs $(echo "$line" | sed -n 's/.*= \([0-9.]*\) Gbit\/s.*/\1/p')"
    done
    echo "$profile: median $(echo $runs | tr ' ' '\n' | sort -n | sed -n 2p) Gbit/s (runs:$runs)"
done
