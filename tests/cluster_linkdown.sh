#!/bin/sh
# A node cut off (tests/cluster.sh, 2 nodes x 2 ranks): in the middle of training node 2's
# link goes down; its processes live on but nothing reaches them. It goes down while rank 0
# is paused inside the commit of checkpoint 2 (cluster_train) and every other rank waits
# for it there, their parts sent; then rank 0 goes on, so checkpoint 2 is committed and the
# next step that needs node 2 stalls, whatever the machine's load. The surviving ranks must
# not hang: within failure.stall_timeout_s the job names the missing ranks with their host
# and ends (MT_EXIT_STALLED or the failure status), and mpitrain-run restarts it on the node
# that answers; the run resumes from the latest checkpoint (2) at world size 2, every
# iteration once, no committed checkpoint lost.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
cluster_plain_only "a lost link is tested"
scratch cluster-linkdown
cluster_up k 3 2
fmnist_h5
stall=5
cluster_train cut-off --stall-warn 1 --stall-timeout $stall
# the others' warning that they wait for rank 0 alone: ranks 2 and 3 have sent rank 0 all
# their part of checkpoint 2 and wait for it to be published
waiting="stall: rank 1 (host ${cname}1) has waited [0-9.]* s in the data movement of .* 3 of 4 ranks are in that call; not arrived: rank 0 (host ${cname}1,"
while kill -0 $sup 2>/dev/null && ! grep -q "$waiting" "$err"; do sleep 0.05; done
t0=$(now)
"$cl" -n "$cname" link "${cname}2" down
cluster_resume
# a hang is a failure: the first attempt gets the stall timeout and 20 s for the launcher
cluster_watch $((stall + 20))
echo "node ${cname}2 cut off while rank 0 committed checkpoint 2; job ended and was rerun after" \
    "${detect:-(never)} s; first report at world size 2 after ${resume:-(never)} s"
if [ -n "$detect" ]; then
    ok "the job ended by itself $detect s after the link went down (stall timeout $stall s)"
else bad "the job hung after node ${cname}2's link went down"; fi
# ranks 2 and 3 were on node 2; Open MPI's own message names the node but no rank
if grep -E "rank [23]\b" "$err" | grep -q "${cname}2"; then
    ok "the missing ranks are named with their host ${cname}2"
else bad "no message names the missing ranks (2, 3) with their host ${cname}2"; fi
its=$(column training_iteration "$d/result.json")
sizes=$(column world_size "$d/result.json")
if [ $rc -eq 0 ] && [ "$kept" = "checkpoint_000000 checkpoint_000001 checkpoint_000002 " ] \
    && [ "$its" = "1 2 3 4 " ] && [ "$sizes" = "$(sizes_upto 3 4)" ] \
    && grep -q "attempt 2 on ${cname}1 (2 slots)$" "$err" \
    && [ "$(grep -c "resumed from .*/checkpoint_000002 " "$out")" -eq 1 ]; then
    ok "restarted on ${cname}1 and resumed at world size 2 from checkpoint 2: iterations $its(world sizes $sizes)"
else bad "restart on the node left (exit $rc, kept then '$kept', iterations '$its', world sizes '$sizes')"; fi
missing=""
for i in 0 1 2 3; do [ -f "$d/checkpoint_00000$i/checkpoint.h5" ] || missing="$missing $i"; done
if [ -z "$missing" ] && ! ls -d "$d"/.checkpoint_* >/dev/null 2>&1; then
    ok "the checkpoints committed before the link went down and after are kept (0 to 3), none half-written"
else bad "checkpoints after the cut (missing:$missing)"; fi

finish
