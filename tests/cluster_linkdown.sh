#!/bin/sh
# A node cut off (tests/cluster.sh, 2 nodes x 2 ranks): in the middle of training node 2's
# link goes down; its processes live on but nothing reaches them. The surviving ranks must
# not hang: within failure.stall_timeout_s the job names the missing ranks with their host
# and ends (MT_EXIT_STALLED or the failure status), and mpitrain-run restarts it on the node
# that answers; the run resumes from the latest checkpoint at world size 2, every iteration
# once, no committed checkpoint lost.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
cluster_plain_only "a lost link is tested"
scratch cluster-linkdown
cluster_up k 3 2
fmnist_h5 all # the whole set: the job is still training when a node goes
stall=5
cluster_train cut-off --stall-warn 1 --stall-timeout $stall
"$cl" -n "$cname" link "${cname}2" down
# a hang is a failure: the first attempt gets the stall timeout and 20 s for the launcher
cluster_watch $((stall + 20))
echo "node ${cname}2 cut off after $latest; job ended and was rerun after ${detect:-(never)} s;" \
    "first report at world size 2 after ${resume:-(never)} s"
if [ -n "$detect" ]; then
    ok "the job ended by itself $detect s after the link went down (stall timeout $stall s)"
else bad "the job hung after node ${cname}2's link went down"; fi
# ranks 2 and 3 were on node 2; Open MPI's own message names the node but no rank
if grep -E "rank [23]\b" "$err" | grep -q "${cname}2"; then
    ok "the missing ranks are named with their host ${cname}2"
else bad "no message names the missing ranks (2, 3) with their host ${cname}2"; fi
its=$(column training_iteration "$d/result.json")
sizes=$(column world_size "$d/result.json")
if [ $rc -eq 0 ] && [ "$its" = "1 2 3 4 5 " ] && grep -q "attempt 2 on ${cname}1 (2 slots)$" "$err" \
    && four_then_two "$sizes"; then
    ok "restarted on ${cname}1 and resumed at world size 2: iterations $its"
else bad "restart on the node left (exit $rc, iterations '$its', world sizes '$sizes')"; fi
missing=""
for i in 0 1; do [ -f "$d/checkpoint_00000$i/checkpoint.h5" ] || missing="$missing $i"; done
if [ -z "$missing" ] && ! ls -d "$d"/.checkpoint_* >/dev/null 2>&1; then
    ok "the checkpoints committed before the link went down are kept, none half-written"
else bad "checkpoints after the cut (missing:$missing)"; fi

finish
