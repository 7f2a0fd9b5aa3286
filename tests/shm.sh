#!/bin/sh
# Shared memory that jobs killed outright leave in /dev/shm is removed by the next job's
# start (common/shm.c), and mpitrain-info --stale-shm lists it first:
#  - a spawn-mode job killed whole (SIGKILL to every process: parent rank, its daemon, the
#    spawned rank) while its parent waits for the spawned rank, stopped before it joins:
#    its lifeline board /dev/shm/mpitrain-spawn-PARENT-... stays; --stale-shm names it
#    (its creator has exited) and the next job (mpitrain-info at 2 ranks) removes it;
#  - segments planted with the library's names: a dead creator's, one whose pid now
#    belongs to a process started at another time, an older name (no start time) of a
#    dead pid: listed, then removed by the next job; a running creator's, an older name
#    whose pid runs, another pid namespace's: not listed, kept;
#  - a rank killed outright (test-only die sites) while it holds its stall watchdog slot,
#    or the fusion's node segment, under mpirun: the segment stays, and the next job's
#    start removes it;
#  - --stale-shm takes no other argument.
# It runs in a mount namespace of its own with a private /dev/shm (unshare -m, as root, or
# unshare -rm), so that no other job on this machine reaps what it planted or killed
# before it looks, and nothing it plants can touch another job's.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
if [ -z "${MT_SHM_PRIVATE:-}" ]; then
    for u in "unshare -m" "unshare -rm"; do
        # shellcheck disable=SC2086
        if $u sh -c 'mount -t tmpfs -o mode=1777 mt-shm /dev/shm' 2>/dev/null; then
            # shellcheck disable=SC2086
            MT_SHM_PRIVATE=1 exec $u --propagation private sh -c \
                'mount -t tmpfs -o mode=1777 mt-shm /dev/shm && exec sh "$0"' "$0"
        fi
    done
    [ -n "${CI:-}" ] && { echo "FAILED: cannot make a private /dev/shm (unshare -m) on this CI machine"; exit 1; }
    echo "skipped: this machine does not let the test make a private /dev/shm (unshare -m)"
    exit 77
fi
scratch shm
info="$b/tools/mpitrain-info"
limit=$((60 * ${MT_TEST_TIMEOUT_SCALE:-1}))
sleeper=""
trap 'rm -rf "$store"; [ -n "$sleeper" ] && kill $sleeper 2>/dev/null' EXIT
stopped() { grep -q '^State:.*T' "/proc/$1/status" 2>/dev/null; }
start_of() { sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f20; } # field 22, after the name
[ -z "$(ls -A /dev/shm)" ] || bad "the private /dev/shm is not empty: $(ls /dev/shm)"

# --- a spawn-mode job killed whole before its spawned rank joined
MT_TEST_FAIL_AT=stop-init:1 timeout -k 5 $((limit * 2)) "$info" --num-workers 2 \
    >"$out" 2>"$err" &
job=$!
parent=""; board=""; child=""
for _ in $(seq 1 $((limit * 10))); do
    parent=$(pgrep -P $job)
    [ -n "$parent" ] && board=$(shm_of "$parent")
    child=""
    for p in $(descendants $job); do
        [ "$p" != "$parent" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = mpitrain-info ] \
            && stopped "$p" && child=$p
    done
    [ -n "$board" ] && [ -n "$child" ] && break
    sleep 0.1
done
pids=$(descendants $job)
# shellcheck disable=SC2086
[ -n "$pids" ] && kill -9 $pids
wait $job 2>/dev/null
rc=$?
still=$pids # SIGKILL takes effect at once, the exit a little later (sooner without ASan)
for _ in $(seq 1 $((limit * 10))); do
    # shellcheck disable=SC2086
    still=$(for p in $pids; do alive "$p" && echo "$p"; done)
    [ -z "$still" ] && break
    sleep 0.1
done
if [ -n "$board" ] && [ -n "$child" ] && [ -z "$still" ] && [ "$(shm_of "$parent")" = "$board" ]; then
    ok "spawn mode, 2 workers, every process SIGKILLed while the spawned rank is stopped before it joins: the board $board stays"
else bad "spawn-mode job killed whole (parent '$parent', stopped child '$child', board '$board', exit $rc, alive: $still)"; fi
if exits 0 "$info" --stale-shm && grep -qx "$board: its creator, pid $parent, has exited" "$out" \
    && grep -qx "1 stale segment in /dev/shm: the next job to start on this machine removes it" "$out" \
    && [ -e "$board" ]; then
    ok "mpitrain-info --stale-shm names the killed job's board, and leaves it"
else bad "mpitrain-info --stale-shm after the kill (exit $rc; board '$board')"; fi
if exits 0 "$run" 2 "$info" && [ -n "$board" ] && [ ! -e "$board" ] \
    && exits 0 "$info" --stale-shm && grep -qx "no stale shared memory in /dev/shm" "$out"; then
    ok "the next job's start removes the killed job's board; nothing stale is left"
else bad "the next job after the kill (exit $rc; board '$board' $([ -e "$board" ] && echo still there))"; fi

# --- planted segments: stale ones listed and removed, the others kept
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 600 &
sleeper=$!
s=$(start_of $sleeper)
ns=$(stat -L -c %i /proc/self/ns/pid)
stale="mpitrain-spawn-$dead-$s-$ns-0 mpitrain-watch-$sleeper-$((s + 1))-$ns-0 mpitrain-fusion-$dead-3"
keep="mpitrain-fusion-$sleeper-$s-$ns-0 mpitrain-spawn-$sleeper-1 mpitrain-watch-$dead-$s-$((ns + 1))-0"
for f in $stale $keep; do : >"/dev/shm/$f"; done
listing=$(printf '%s\n' \
    "/dev/shm/mpitrain-fusion-$dead-3: its creator, pid $dead, has exited (no process has that pid)" \
    "/dev/shm/mpitrain-spawn-$dead-$s-$ns-0: its creator, pid $dead, has exited" \
    "/dev/shm/mpitrain-watch-$sleeper-$((s + 1))-$ns-0: its creator, pid $sleeper started at tick $((s + 1)), has exited (pid $sleeper is now a process started at tick $s)" \
    "3 stale segments in /dev/shm: the next job to start on this machine removes them")
there() { for f in "$@"; do [ -e "/dev/shm/$f" ] && echo "$f"; done; }
if exits 0 "$info" --stale-shm && [ "$(sort "$out")" = "$listing" ]; then
    ok "--stale-shm lists the dead creator's, the reused pid's and the older name's segments, and no other"
else bad "--stale-shm with planted segments (exit $rc)"; echo "want:"; echo "$listing"; fi
# shellcheck disable=SC2086
if [ "$(there $stale $keep)" = "$(echo $stale $keep | tr ' ' '\n')" ]; then
    ok "--stale-shm removes nothing"
else bad "--stale-shm removed some: left $(there $stale $keep | tr '\n' ' ')"; fi
# shellcheck disable=SC2086
if exits 0 "$run" 2 "$info" && [ -z "$(there $stale)" ] \
    && [ "$(there $keep)" = "$(echo $keep | tr ' ' '\n')" ]; then
    ok "the next job removes the 3 stale segments and keeps a running creator's, an older name of a live pid, another namespace's"
else bad "the next job with planted segments (exit $rc): left $(there $stale $keep | tr '\n' ' ')"; fi
# shellcheck disable=SC2086
for f in $keep; do rm -f "/dev/shm/$f"; done

# --- a rank killed outright while it holds a stall watchdog slot (rank 1, at the start of
# fit) or the fusion's node segment (rank 0, before the others have it open): the
# test-only sites die-watch-slot and die-fusion-seg (MT_TEST_FAIL_AT); under mpirun, which
# then ends the job. The next job's start removes what the job's processes left.
fmnist_h5
common="--data $data --storage-path $store/runs --steps-per-epoch 5 --epochs 1"
for site in die-watch-slot:1 die-fusion-seg:0; do
    kind=watch; [ "${site%%:*}" = die-fusion-seg ] && kind=fusion
    # shellcheck disable=SC2086
    run_seen $((limit * 2)) env MT_TEST_FAIL_AT=$site MT_FUSION_ALGO=shm \
        mpirun --oversubscribe -x MT_TEST_FAIL_AT -x MT_FUSION_ALGO -np 2 "$b/tools/trainer" \
        $common --name killed-$kind
    # the private /dev/shm holds this job's segments only: found by kind, not by the pids
    # run_seen saw (sampled every 0.1 s, it can miss a rank that dies sooner)
    leaked=$(ls -d /dev/shm/mpitrain-$kind-* 2>/dev/null | tr '\n' ' ')
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$leaked" ]; then
        ok "a rank killed holding a $kind segment (${site%%:*}, exit $rc): it stays ($leaked)"
    else bad "a rank killed at ${site%%:*} (exit $rc, want a failure, not the timeout): left '$leaked'"; fi
    if exits 0 "$run" 2 "$info" && [ -n "$leaked" ] && [ -z "$(ls -d /dev/shm/mpitrain-* 2>/dev/null)" ]; then
        ok "the next job's start removes the $kind segment the killed rank held"
    else bad "the next job after ${site%%:*} (exit $rc): left $(ls -d /dev/shm/mpitrain-* 2>/dev/null | tr '\n' ' ')"; fi
done

if exits 2 "$info" --stale-shm --name x \
    && grep -q "mpitrain-info: --stale-shm takes no other argument (see --help)" "$err"; then
    ok "--stale-shm with another argument is refused (exit 2)"
else bad "--stale-shm --name x (exit $rc, want 2)"; fi
finish
