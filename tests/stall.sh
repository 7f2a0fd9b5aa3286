#!/bin/sh
# Stalls: a rank that sleeps past --stall-warn is named and the job goes on; one that sleeps
# past --stall-timeout ends the job with the stall status (76). A rank stopped with SIGSTOP
# (rank 0 or rank 1, at 2 and 3 ranks, three runs each; one under the sanitizers) is named
# with its host by a rank that waits for it, first at the warning and again when the job
# ends with 76, whichever rank is stuck. With the launcher stopped too (MPI_Abort cannot
# reach anyone: what an unreachable node looks like), every waiting rank still ends itself,
# also when the stopped rank is on another (emulated) node.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
probe="$b/tests/stall_probe"
scratch stall
export MT_STORAGE_PATH="$store/runs"
limit=$((60 * ${MT_TEST_TIMEOUT_SCALE:-1}))

# make check: one case of each (2 ranks; rank 1 stopped once; rank 0 and the launcher
# stopped on one host); the full tier: the whole matrix below
nps="2 4" victims="0 1" layouts="host nodes" tries="1 2 3"
tier full || { nps=2 victims=1 layouts=host tries=1; }
for np in $nps; do
    last=$((np - 1))
    if exits 0 "$run" "$np" "$probe" "$last" 3 --stall-warn 0.3 --stall-timeout 30 \
        && grep -q "stall_probe: done" "$out" \
        && grep -q "mpitrain: stall: rank 0 (host [^)]*) has waited [0-9.]* s in allreduce(count=1, f64, sum) (call #[0-9]*); $last of $np ranks are in that call; not arrived: rank $last (host [^,]*, pid [0-9]*) last call: allreduce(count=1, f64, sum) #[0-9]*, left it" "$err"; then
        ok "warning names rank $last at $np ranks, job completes"
    else bad "warning at $np ranks (exit $rc)"; fi

    if exits 76 "$run" "$np" "$probe" 0 60 --stall-warn 0.3 --stall-timeout 2 \
        && grep -q "not arrived: rank 0 (host " "$err" \
        && grep -q "past failure.stall_timeout_s = 2 s; aborting the job with status 76" "$err"; then
        ok "timeout aborts with status 76 at $np ranks"
    else bad "timeout at $np ranks (exit $rc, want 76)"; fi
done

# pid of rank $1 as stall_probe printed it in $out
rank_pid() { sed -n "s/^stall_probe: rank $1 pid \([0-9]*\)$/\1/p" "$out"; }
# wait until $1 ranks of stall_probe printed their pids and have run (every watchdog has
# heard from the others: the ranks are inside the job's collectives)
await_pids() {
    for _ in $(seq 1 $((limit * 10))); do
        [ "$(grep -c '^stall_probe: rank [0-9]* running$' "$out")" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
# a stall warning (before the timeout) from a rank other than $1 that names rank $1. The
# stopped-rank cases give it 1.5-12 s (first report at 1.5 s, timeout 12 s): a suite run
# beside other work once saw no watchdog tick on the waiting rank from before 1.5 s until
# 8.3 s (its cause not found), which a 1.5-4 s window failed
warned_by_other() {
    grep "^mpitrain: stall: rank [0-9]* (host [^)]*) has waited [0-9.]* s in .*not arrived: rank $1 (host [^,]*, pid $2) silent for" "$err" \
        | grep -v "^mpitrain: stall: rank $1 " | grep -q "has waited \([0-9]\|1[01]\)\.[0-9] s"
}

# three runs each in the plain build (a race would show in some), one under the sanitizers
[ -n "${MT_SANITIZED:-}" ] && tries=1
stop_nps="2 3"
tier full || stop_nps=2
for np in $stop_nps; do
    for victim in $victims; do
        for try in $tries; do
            : >"$out" # emptied before the job starts: no pid of the last run is read
            timeout -k 5 $limit mpirun --oversubscribe -np "$np" "$probe" -1 40 \
                --stall-warn 1 --stall-timeout 12 >"$out" 2>"$err" &
            job=$!
            await_pids "$np"
            pid=$(rank_pid $victim)
            [ -n "$pid" ] && kill -STOP "$pid"
            wait $job
            rc=$?
            if [ -n "$pid" ] && [ $rc -eq 76 ] && warned_by_other $victim "$pid" \
                && grep -q "stalled [0-9]* s in .*past failure.stall_timeout_s = 12 s; aborting the job with status 76" "$err"; then
                ok "$np ranks, rank $victim stopped (run $try): named with its host by another rank, warned, ended with 76"
            else bad "$np ranks, rank $victim stopped (run $try): exit $rc, want 76 and a warning naming rank $victim"; fi
            [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
        done
    done
done

# Across (emulated) nodes, beats go through MPI. Rank 0's watchdog is late at every beat
# (the test-only slow-watch-tick site: a scheduling gap before each of its beats,
# longer than the stale limit), and rank 1, on the other node, is stopped: its
# last beat, from before rank 0's gaps, must never count as fresh (before, a late tick
# marked every peer of another host as just heard, so the stopped rank was shown as
# "last call ..., left it 0.0 s ago" in every warning).
for try in $tries; do
    : >"$out"
    probe_args="-1 40 --stall-warn 1 --stall-timeout 12"
    # shellcheck disable=SC2086
    timeout -k 5 $limit mpirun --oversubscribe -np 1 -x MT_NODE_KEY=a \
        -x MT_TEST_FAIL_AT=slow-watch-tick:0 -x MT_TEST_PAUSE_S=1.2 "$probe" $probe_args \
        : -np 1 -x MT_NODE_KEY=b "$probe" $probe_args >"$out" 2>"$err" &
    job=$!
    await_pids 2
    pid=$(rank_pid 1)
    [ -n "$pid" ] && kill -STOP "$pid"
    wait $job
    rc=$?
    if [ -n "$pid" ] && [ $rc -eq 76 ] \
        && grep -q "^mpitrain: stall: rank 0 (host [^)]*) has waited \([0-9]\|1[01]\)\.[0-9] s in .*not arrived: rank 1 (host [^,]*, pid $pid) silent for" "$err" \
        && grep -B1 "^mpitrain: rank 0 (host [^)]*): stalled [0-9]* s in .*aborting the job with status 76" "$err" \
            | grep -q "not arrived: rank 1 (host [^,]*, pid $pid) silent for"; then
        ok "rank 1 stopped on another node, rank 0's watchdog late at every beat (run $try): named silent at the warning and at the end, ended with 76"
    else bad "rank 1 stopped on another node, rank 0's watchdog late (run $try): exit $rc, want 76 and rank 0's warning and last report naming rank 1 silent"; fi
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
done

# the launcher stopped as well: MPI_Abort does not return, each waiting rank ends itself.
# "nodes": rank 0 alone on one emulated node (MT_NODE_KEY), ranks 1 and 2 on another, so
# their beats cross over MPI, as between hosts whose link went down.
probe_args="-1 40 --stall-warn 1 --stall-timeout 3"
for layout in $layouts; do
    for victim in $victims; do
        np=3
        : >"$out"
        if [ $layout = host ]; then
            # shellcheck disable=SC2086
            timeout -k 5 $limit mpirun --oversubscribe -np $np "$probe" $probe_args \
                >"$out" 2>"$err" &
        else
            # shellcheck disable=SC2086
            timeout -k 5 $limit mpirun --oversubscribe -np 1 -x MT_NODE_KEY=a "$probe" $probe_args \
                : -np 2 -x MT_NODE_KEY=b "$probe" $probe_args >"$out" 2>"$err" &
        fi
        job=$!
        await_pids $np
        pid=$(rank_pid $victim)
        launcher=$(pgrep -x mpirun -P $job || pgrep -P $job)
        others=""
        for r in $(seq 0 $((np - 1))); do [ $r -ne $victim ] && others="$others $(rank_pid $r)"; done
        kill -STOP "$pid" $launcher
        left=$others
        for _ in $(seq 1 $((limit * 10))); do
            left=""
            for p in $others; do alive "$p" && left="$left $p"; done
            [ -z "$left" ] && break
            sleep 0.1
        done
        kill -CONT $launcher
        wait $job
        rc=$?
        if [ -n "$pid" ] && [ -z "$left" ] \
            && grep -q "MPI_Abort did not end this process within [0-9]* s; exiting with status 76" "$err" \
            && grep -q "not arrived: rank $victim (host [^,]*, pid $pid) silent for" "$err"; then
            ok "rank $victim and the launcher stopped ($layout): every other rank named it and ended itself with 76 (job exit $rc)"
        else bad "rank $victim and the launcher stopped ($layout): ranks still running:$left (job exit $rc)"; fi
        kill -9 "$pid" 2>/dev/null
    done
done
finish
