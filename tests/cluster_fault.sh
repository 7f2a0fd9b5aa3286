#!/bin/sh
# Losing a node (tests/cluster.sh, 2 nodes x 2 ranks): in the middle of training every
# process of node 2 is killed (its Open MPI daemon included) and the node stays dead.
# The node goes while rank 0 is paused inside the commit of checkpoint 2 (cluster_train),
# so checkpoints 0 and 1 are the committed ones, whatever the machine's load. The job must
# end by itself naming the lost host, and mpitrain-run, which asks `cluster.sh hosts` for
# the hosts that answer before each attempt, must restart it on node 1 alone: the run
# resumes from the latest checkpoint (1) at world size 2, every iteration appears once
# (1 and 2 at 4 ranks, 3 and 4 at 2), run.json counts 2 attempts and the failure, no
# committed checkpoint is lost and the half-written one is gone. Prints the time to detect
# the loss and the time to resume.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
scratch cluster-fault

# mpitrain-run's host list, without a cluster: read again before every attempt, in every
# accepted form, handed over as a hostfile
run="$b/tools/mpitrain-run"
hosts="$store/hosts"
printf '# hosts\nh1\n\nh2 slots=3\nh3:2\nh4 slots=0\n' >"$hosts"
"$run" --max-failures 1 --hostfile "$hosts" -- sh -c 'cat "$MT_HOSTFILE"
    [ "$OMPI_MCA_orte_default_hostfile" = "$MT_HOSTFILE" ] || exit 3
    [ -e "$0.again" ] && exit 0
    touch "$0.again"; echo "h9:4" >"$0"; exit 1' "$hosts" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(tr '\n' ' ' <"$out")" = "h1 slots=1 h2 slots=3 h3 slots=2 h9 slots=4 " ] \
    && grep -q "attempt 1 on h1 (1 slot), h2 (3 slots), h3 (2 slots)$" "$err" \
    && grep -q "host h4: slots must be >= 1; line ignored" "$err" && grep -q "attempt 2 on h9 (4 slots)$" "$err"; then
    ok "mpitrain-run --hostfile: read before every attempt (HOST, slots=N, HOST:N), passed as a hostfile"
else bad "mpitrain-run --hostfile (exit $rc)"; cat "$out"; fi
"$run" --host-discovery "exit 4" -- true >"$out" 2>"$err"
rc1=$?
"$run" --host-discovery "echo '# none'" -- true >>"$out" 2>>"$err"
rc2=$?
"$run" --hostfile "$hosts" --host-discovery true -- true >>"$out" 2>>"$err"
rc3=$?
if [ $rc1 -eq 1 ] && [ $rc2 -eq 1 ] && [ $rc3 -eq 2 ] && grep -q "host discovery 'exit 4' failed (status 4)" "$err" \
    && grep -q "echo '# none' names no host" "$err" && grep -q "attempt 1: no usable host; not starting" "$err"; then
    ok "mpitrain-run: a failed or empty host discovery starts nothing"
else bad "mpitrain-run host discovery errors (exits $rc1 $rc2 $rc3)"; fi

cluster_up f 2 2
fmnist_h5
cluster_train lose-node
"$cl" -n "$cname" kill "${cname}2"
cluster_watch
echo "node ${cname}2 killed while rank 0 committed checkpoint 2 (latest: ${latest:-none}); job ended" \
    "and was rerun after ${detect:-?} s; first report at world size 2 after ${resume:-?} s"
its=$(column training_iteration "$d/result.json")
sizes=$(column world_size "$d/result.json")
attempts=$(sed -n 's/.*"attempts": *\([0-9]*\).*/\1/p' "$d/run.json" 2>/dev/null)
failures=$(sed -n 's/.*"failures": *\([0-9]*\).*/\1/p' "$d/run.json" 2>/dev/null)
if grep -q "attempt 1 on ${cname}1 (2 slots), ${cname}2 (2 slots)" "$err" \
    && grep -q "node ${cname}2" "$err" && grep -q "attempt 2 on ${cname}1 (2 slots)$" "$err"; then
    ok "the job ended naming the lost host ${cname}2; attempt 2 ran on ${cname}1 alone"
else bad "the node's loss and the hosts of each attempt"; fi
if [ $rc -eq 0 ] && [ "$latest" = checkpoint_000001 ] && [ "$kept" = "checkpoint_000000 checkpoint_000001 " ] \
    && [ "$its" = "1 2 3 4 " ] && [ "$sizes" = "$(sizes_upto 2 4)" ] && [ "${attempts:-0}" -eq 2 ] \
    && [ "${failures:-0}" -eq 1 ] && grep -q '"status": "finished"' "$d/run.json" \
    && [ "$(grep -c "resumed from .*/checkpoint_000001 " "$out")" -eq 1 ]; then
    ok "resumed at world size 2 from the latest checkpoint (1): iterations $its(world sizes $sizes), 2 attempts, 1 failure"
else bad "restart on the nodes left (exit $rc, latest '$latest', kept then '$kept', iterations '$its', world sizes '$sizes', attempts '$attempts', failures '$failures')"; fi
missing=""
for i in 0 1 2 3; do [ -f "$d/checkpoint_00000$i/checkpoint.h5" ] || missing="$missing $i"; done
if [ -z "$missing" ] && ! ls -d "$d"/.checkpoint_* >/dev/null 2>&1 \
    && "$b/tools/mpitrain-show" "$d" >/dev/null 2>>"$err"; then
    ok "every checkpoint committed before and after the loss is there (0 to 3), no half-written one"
else bad "checkpoints after the loss (missing:$missing)"; ls -la "$d"; fi

finish
