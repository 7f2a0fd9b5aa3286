#!/bin/sh
# A node cut off with Open MPI's own TCP keepalive settings (tests/cluster.sh run
# --ompi-defaults: no oob_tcp_keepalive_* in the environment, as on a cluster whose user
# never heard of them), 2 nodes x 2 ranks, node 2's link pulled in the middle of training:
#  - under mpitrain-run, which gives the mpirun it starts short keepalives unless the user
#    set them (a quiet connection declared lost after 10 s + 3 x 2 s), the job ends by
#    itself (bounded by this test's limit, far below Open MPI's 300 s + 9 x 20 s), and the
#    time it took is printed. Its stall timeout is 20 s: past the keepalives, as the
#    default 600 s is (an abort sent before mpirun knows the node is lost waits for TCP's
#    retransmissions to give up, minutes: keepalives only probe a quiet connection);
#  - under plain mpirun on the head, every surviving rank leaves by itself after the stall
#    timeout and a bounded grace, whether or not MPI_Abort reaches anyone; mpirun itself
#    then still waits for the unreachable daemon until TCP gives up (300 s + 9 x 20 s): it
#    has no rank of its own, so nothing of the job's can end it (printed, not asserted),
#    and the test ends it;
#  - under plain mpirun on node 1 (as a batch script runs it on its job's first node),
#    node 1's ranks are mpirun's children: a rank that aborts leaves a process behind
#    that sends mpirun SIGTERM if it still runs after the grace and 5 s (Open MPI's "end
#    now" once an abort is in progress), and the job ends within the stall timeout, the
#    grace, those 5 s and a little.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
cluster_plain_only "a lost link with Open MPI's defaults is tested"
scratch cluster-linkdefaults
cluster_up o 5 2
fmnist_h5 all
# job LAUNCHER NAME STALL: the trainer on 2 x 2 ranks under LAUNCHER (mpirun or mpitrain-run),
# in the background ($job); returns once its second checkpoint is there
job() {
    d="$store/runs/$2"
    hf=$("$cl" -n "$cname" hostfile 2 2)
    pre=""
    [ "$1" = mpitrain-run ] && pre="$b/tools/mpitrain-run --max-failures 0 --"
    where="run --ompi-defaults"
    # on node 1, as a batch script runs it on its job's first node: that node's ranks are
    # mpirun's own children (from the head, they are its daemon's)
    if [ "$1" = node1 ]; then
        printf '#!/bin/sh\neval "$("%s" -n %s env --ompi-defaults)" && exec "$@"\n' "$cl" "$cname" \
            >"$store/on-node.sh"
        where="exec ${cname}1 sh $store/on-node.sh"
    fi
    # shellcheck disable=SC2086
    timeout -k 10 $climit "$cl" -n "$cname" $where $pre mpirun --hostfile "$hf" \
        "$b/tools/trainer" --data "$data" --storage-path "$store/runs" --steps-per-epoch 120 \
        --epochs 5 --checkpoint-frequency 1 --num-to-keep 0 --name "$2" --stall-warn 1 \
        --stall-timeout "$3" >"$out" 2>"$err" &
    job=$!
    for _ in $(seq 1 1200); do [ -d "$d/checkpoint_000001" ] && break; sleep 0.05; done
}
# ranks_on NODE: pids of the trainer's processes in NODE's network namespace
ranks_on() {
    for p in $(ip netns pids "$1" 2>/dev/null); do
        grep -qa "trainer" "/proc/$p/cmdline" 2>/dev/null && echo "$p"
    done
}

# cut_and_wait: pull node 2's cable ($t0), then wait up to $limit s for the job to end
# ($ended: seconds after the cut, empty if it still runs)
cut_and_wait() {
    "$cl" -n "$cname" link "${cname}2" down
    t0=$(now)
    ended=""
    for _ in $(seq 1 $((limit * 10))); do
        kill -0 $job 2>/dev/null || { ended=$(since "$t0"); break; }
        sleep 0.1
    done
}

# under mpitrain-run: the job ends
stall=20
limit=$((stall + 40)) # the stall timeout, the grace and the keepalives, with room for load
job mpitrain-run sup $stall
cut_and_wait
if [ -n "$ended" ]; then
    wait $job
    rc=$?
    echo "mpitrain-run, Open MPI's keepalive defaults: the job ended $ended s after node ${cname}2's link went down (exit $rc)"
    if [ $rc -ne 0 ] && grep -q "mpitrain-run: attempt 1 .*failures exhausted" "$err"; then
        ok "mpitrain-run: the job ended by itself $ended s after the link went down (stall timeout $stall s), exit $rc"
    else bad "mpitrain-run: the job ended with exit $rc, not as a failed attempt"; fi
else
    bad "mpitrain-run: the job still ran $limit s after node ${cname}2's link went down"
fi
"$cl" -n "$cname" down
cluster_up o 5 2

# plain mpirun: every rank of node 1 leaves by itself
stall=5
limit=$((stall + 40))
job mpirun plain $stall
before=$(ranks_on "${cname}1" | wc -l)
[ "$before" -eq 2 ] || bad "plain mpirun: $before ranks found on ${cname}1 before the cut, want 2"
"$cl" -n "$cname" link "${cname}2" down
t0=$(now)
gone=""
for _ in $(seq 1 $((limit * 10))); do
    [ -z "$(ranks_on "${cname}1")" ] && { gone=$(since "$t0"); break; }
    sleep 0.1
done
ended=""
for _ in $(seq 1 $((limit * 10))); do
    kill -0 $job 2>/dev/null || { ended=$(since "$t0"); break; }
    sleep 0.1
done
echo "plain mpirun, Open MPI's keepalive defaults: node ${cname}1's ranks left ${gone:-(never)} s after the link went down; mpirun ended ${ended:-(not within $limit s)} s after it"
if [ -n "$gone" ] && grep -q "stalled [0-9]* s in .*aborting the job with status 76" "$err"; then
    ok "plain mpirun: every rank of ${cname}1 left by itself $gone s after the link went down"
else bad "plain mpirun: ranks of ${cname}1 still running $limit s after the link went down:$(ranks_on "${cname}1" | tr '\n' ' ')"; fi
# mpirun on the head has no rank of its own (node 1's ranks are its daemon's children):
# nothing of the job's can end it, and it waits for the unreachable daemon until TCP gives
# up (printed, not asserted).
kill $job 2>/dev/null
"$cl" -n "$cname" down
cluster_up o 5 2

# plain mpirun on node 1, whose ranks are its children: the job ends
job node1 node1 $stall
cut_and_wait
wait $job
rc=$?
echo "plain mpirun on node ${cname}1, Open MPI's keepalive defaults: the job ended ${ended:-(not within $limit s)} s after node ${cname}2's link went down (exit $rc)"
# Open MPI 4.1.4's mpirun, ended by SIGTERM with a node out of reach, crashes in
# PMIx_Finalize (its own backtrace, exit 139): those lines are mpirun's and are set
# aside; any other crash (a rank's) still fails the check
mp=$(sed -n 's/.*if mpirun (pid \([0-9]*\)) has not ended.*/\1/p' "$err" | head -n 1)
if [ -n "$mp" ]; then
    grep -E "\[${cname}1:0*$mp\]" "$err" | grep -Eq "$crash_re" && echo "(mpirun, pid $mp, crashed as it ended: Open MPI's)"
    sed -i -E "/\[${cname}1:0*$mp\]/d" "$err"
fi
# not before the grace (1 s at this stall timeout) and the 5 s after it have passed since
# the abort, itself at least the stall timeout after the cut: SIGTERM waits for a
# launcher to end by itself first (2 s of slack for the clocks)
early=$((stall + 1 + 5 - 2))
if [ -n "$ended" ] && [ $rc -ne 0 ] && awk -v e="$ended" -v m=$early 'BEGIN { exit !(e >= m) }' &&
    grep -q "if mpirun (pid [0-9]*) has not ended [0-9]* s from now, it is sent SIGTERM" "$err"; then
    ok "plain mpirun on node ${cname}1: the job ended $ended s after the link went down (stall timeout $stall s), exit $rc"
else bad "plain mpirun on node ${cname}1: the job ${ended:+ended $ended s after the link went down (exit $rc; not before $early s, and by the SIGTERM of its ranks)}${ended:-still ran $limit s after the link went down}"; grep "mpitrain:" "$err" | tail -5; fi
kill $job 2>/dev/null
finish
