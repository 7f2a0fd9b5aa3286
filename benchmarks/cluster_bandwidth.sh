#!/bin/sh
# benchmarks/cluster_bandwidth.sh [MIB [BUILD_DIR]]: what each link profile of the emulated
# cluster (tests/cluster.sh shape: unshaped, 10gbit, 1gbit) really delivers, measured as a
# TCP stream of MIB MiB (default 512) from node 1 to node 2, three times each; prints one
# line per run and the median. With BUILD_DIR, also what MPI gets there: mpitrain-bench's
# raw MPI_Allreduce between one rank on each node (--suite allreduce --quick), 4 B and
# 4 MiB. Needs root; brings up its own 2-node cluster and removes it. Figures move with
# the machine's load: run it on an idle machine.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cl="$top/tests/cluster.sh -n mtbw -s 10.77.250"
mib=${1:-512}
build=${2:-}
trap '$cl down' EXIT
trap 'exit 1' INT TERM HUP
$cl up 2 || exit 1
[ -n "$build" ] && hf=$($cl hostfile 1 1) && . "$top/tests/env.sh"
for profile in none 10gbit 1gbit; do
    $cl shape all $profile >/dev/null || exit 1
    runs=""
    for i in 1 2 3; do
        line=$($cl bandwidth mtbw1 mtbw2 "$mib")
        echo "  $profile run $i: $line"
        runs="$runs $(echo "$line" | sed -n 's/.*= \([0-9.]*\) Gbit\/s.*/\1/p')"
    done
    # shellcheck disable=SC2086
    echo "$profile: TCP median $(echo $runs | tr ' ' '\n' | sort -n | sed -n 2p) Gbit/s (runs:$runs)"
    [ -z "$build" ] && continue
    timeout 300 $cl run mpirun --hostfile "$hf" "$build/benchmarks/mpitrain-bench" --suite allreduce \
        --quick 2>/dev/null | awk -v p="$profile" '
        $1 == 4 { small = $2 } $1 == 4194304 { big = $2 }
        END { if (big) printf "%s: MPI_Allreduce across the nodes: 4 B %.0f us, 4 MiB %.0f us = %.2f Gbit/s\n",
                              p, small, big, 4194304 * 8 / big / 1e3 }'
done
