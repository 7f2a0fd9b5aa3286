#!/bin/sh
# Many ranks, emulated (tests/cluster.sh): 8 nodes x 8 ranks, 64 ranks on one machine's
# cores (mpi_yield_when_idle, tiny data: a test of correctness, never of speed).
#  - the context: every rank's node rank, local rank and size and host (mpitrain-info);
#  - every collective (test_mpi_core: allreduce of every dtype and op, broadcast,
#    allgather, small allreduces in the agreement's message, the agreement with one rank
#    failing) and mismatches detected on every rank, naming both calls (only rank 1
#    differing; different collectives);
#  - reports with per-rank statistics over 64 ranks (test_mpi_report per_rank_statistics:
#    keys changing on rank 0 and on rank 1 alone, nonfinite values);
#  - a sharded checkpoint committed by 64 ranks and restored at 21 (3 nodes x 7), every
#    rank's rows re-split and checked.
# CLUSTER64_NODES and CLUSTER64_RANKS (default 8 and 8) make it smaller by hand.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
cluster_plain_only "64 ranks on 8 emulated nodes"
# 64 ranks that poll (yielding) starve whatever runs beside them (a load of 39 on 2
# cores; beside it pytest took 503 s, not 158): scripts/test.sh runs this test alone
# (make check-many-ranks); beside a developer's other work it runs at the lowest priority
renice -n 19 -p $$ >/dev/null 2>&1 || true
scratch cluster-64
nodes=${CLUSTER64_NODES:-8}
per=${CLUSTER64_RANKS:-8}
np=$((nodes * per))
cluster_up x 8 "$nodes"
export MT_STORAGE_PATH="$store/runs"
climit=$((600 * ${MT_TEST_TIMEOUT_SCALE:-1}))
slots=""
k=0
while [ $k -lt "$nodes" ]; do slots="$slots $per"; k=$((k + 1)); done
t0=$(now)

# shellcheck disable=SC2086
crun $slots -- env -u MT_STORAGE_PATH "$b/tools/mpitrain-info" >"$out" 2>"$err"
rc=$?
wrong=0
r=0; node=0
while [ $node -lt "$nodes" ]; do
    l=0
    while [ $l -lt "$per" ]; do
        grep -qx "rank $r/$np: local $l/$per node $node cpus [0-9]* host $cname$((node + 1)) cpu-list [0-9,-]*" "$out" \
            || wrong=$((wrong + 1))
        r=$((r + 1)); l=$((l + 1))
    done
    node=$((node + 1))
done
if [ $rc -eq 0 ] && [ $wrong -eq 0 ] && [ "$(grep -c '^rank ' "$out")" -eq $np ]; then
    ok "context at $nodes nodes x $per ranks: node, local rank and size, host of all $np ranks ($(since "$t0") s)"
else bad "context at $nodes x $per (exit $rc, $wrong ranks wrong)"; head -n 5 "$out"; fi

t1=$(now)
# shellcheck disable=SC2086
crun $slots -- "$b/tests/test_mpi_core" \
    agree_all_ok,agree_only_rank1_fails,agree_different_collectives,small_allreduce_in_the_agreement,allreduce_every_dtype_and_op,broadcast_and_allgather \
    >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "MPI suite mpi_core: 6 tests at $np ranks, 0 failed assertions" "$out"; then
    ok "every collective and mismatches (only rank 1 differing, different calls) at $np ranks ($(since "$t1") s)"
else bad "collectives at $np ranks (exit $rc)"; grep "FAIL\|MPI suite\|TIMEOUT" "$out" "$err" | head -20; fi

t1=$(now)
# shellcheck disable=SC2086
crun $slots -- "$b/tests/test_mpi_report" per_rank_statistics >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "MPI suite mpi_report: 1 tests at $np ranks, 0 failed assertions" "$out"; then
    ok "reports with per-rank statistics over $np ranks, keys changing between them ($(since "$t1") s)"
else bad "per-rank statistics at $np ranks (exit $rc)"; grep "FAIL\|MPI suite\|TIMEOUT" "$out" "$err" | head -20; fi

t1=$(now)
rows=$((np * 37 + 5))
# shellcheck disable=SC2086
crun $slots -- "$b/tests/ckpt_probe" save many "$rows" >"$out" 2>"$err"
small=3; [ "$nodes" -lt 3 ] && small=$nodes
less=$((per > 1 ? per - 1 : 1)) # another world size: fewer ranks on fewer nodes
slots2=""
k=0
while [ $k -lt $small ]; do slots2="$slots2 $less"; k=$((k + 1)); done
# shellcheck disable=SC2086
crun $slots2 -- "$b/tests/ckpt_probe" load many "$rows" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c ": ok$" "$out")" -eq $((small * less)) ]; then
    ok "a checkpoint committed by $np ranks, restored at $((small * less)) with its $rows rows re-split ($(since "$t1") s)"
else bad "checkpoint $np -> $((small * less)) ranks (exit $rc)"; grep -v ": ok$" "$out" | head; tail -n 5 "$err"; fi

echo "cluster_64: $np ranks on $nodes emulated nodes, $(since "$t0") s in all"
finish
