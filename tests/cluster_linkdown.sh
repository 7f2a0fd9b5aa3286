#!/bin/sh
# A node cut off (tests/cluster.sh, 2 nodes x 2 ranks): in the middle of training node 2's
# link goes down; its processes live on but nothing reaches them. The surviving ranks must
# not hang: within failure.stall_timeout_s the job names the missing ranks with their host
# and ends (MT_EXIT_STALLED or the failure status), and mpitrain-run restarts it on the node
# that answers; the run resumes from the latest checkpoint at world size 2, every iteration
# once, no committed checkpoint lost.
# Listed in XFAIL_TESTS until the stall watchdog names ranks that cannot be reached (mpirun
# ends the job through the cluster's TCP keepalives, but names only the node).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
skip_in_quick_check
if [ -n "${MT_SANITIZED:-}" ]; then echo "skipped: a lost link is tested in the plain build"; exit 77; fi
b=$(cd "${top_builddir:-.}" && pwd)
scratch cluster-linkdown
cluster_up mtk 3 2
fmnist_h5
"$cl" -n "$cname" hostfile 2 2 >/dev/null
now() { date +%s.%N; }
since() { awk "BEGIN { printf \"%.1f\", $(now) - $1 }"; }
d="$store/runs/cut-off"
stall=5
common="--data $data --storage-path $store/runs --steps-per-epoch 30 --epochs 5 --checkpoint-frequency 1 \
    --num-to-keep 0 --stall-warn 1 --stall-timeout $stall"
# shellcheck disable=SC2086
timeout -k 10 $climit "$cl" -n "$cname" run "$b/tools/mpitrain-run" --max-failures 2 \
    --host-discovery "$cl -n $cname hosts" -- mpirun "$b/tools/trainer" $common --name cut-off \
    >"$out" 2>"$err" &
sup=$!
for _ in $(seq 1 1200); do [ -d "$d/checkpoint_000001" ] && break; sleep 0.05; done
latest=$(cd "$d" && ls -d checkpoint_0* 2>/dev/null | tail -n 1)
t0=$(now)
"$cl" -n "$cname" link "${cname}2" down
detect=""; resume=""
# a hang is a failure: the first attempt gets the stall timeout and 20 s for the launcher
while kill -0 $sup 2>/dev/null; do
    [ -z "$detect" ] && grep -q "attempt 1 .*rerunning" "$err" && detect=$(since "$t0")
    [ -z "$resume" ] && grep -q "world_size\":2" "$d/result.json" 2>/dev/null && resume=$(since "$t0")
    if [ -z "$detect" ] && [ "$(since "$t0" | cut -d. -f1)" -ge $((stall + 20)) ]; then
        kill $sup 2>/dev/null
        "$cl" -n "$cname" down # every process of the job, on both nodes
        break
    fi
    sleep 0.1
done
wait $sup
rc=$?
echo "node ${cname}2 cut off after $latest; job ended and was rerun after ${detect:-(never)} s;" \
    "first report at world size 2 after ${resume:-(never)} s"
if [ -n "$detect" ]; then
    ok "the job ended by itself $detect s after the link went down (stall timeout $stall s)"
else bad "the job hung after node ${cname}2's link went down"; fi
# ranks 2 and 3 were on node 2; Open MPI's own message names the node but no rank
if grep -E "rank [23]\b" "$err" | grep -q "${cname}2"; then
    ok "the missing ranks are named with their host ${cname}2"
else bad "no message names the missing ranks (2, 3) with their host ${cname}2"; fi
its=$(grep -o '"training_iteration": *[0-9][0-9]*' "$d/result.json" 2>/dev/null | sed 's/.*: *//' | tr '\n' ' ')
sizes=$(grep -o '"world_size": *[0-9][0-9]*' "$d/result.json" 2>/dev/null | sed 's/.*: *//' | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$its" = "1 2 3 4 5 " ] && grep -q "attempt 2 on ${cname}1 (2 slots)$" "$err" \
    && case "$sizes" in "4 4 "*"2 2 2 ") true ;; *) false ;; esac; then
    ok "restarted on ${cname}1 and resumed at world size 2: iterations $its"
else bad "restart on the node left (exit $rc, iterations '$its', world sizes '$sizes')"; fi
missing=""
for i in 0 1; do [ -f "$d/checkpoint_00000$i/checkpoint.h5" ] || missing="$missing $i"; done
if [ -z "$missing" ] && ! ls -d "$d"/.checkpoint_* >/dev/null 2>&1; then
    ok "the checkpoints committed before the link went down are kept, none half-written"
else bad "checkpoints after the cut (missing:$missing)"; fi

finish
