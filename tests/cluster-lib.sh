# Sourced by the cluster tests (after tests/lib.sh): the skips, a cluster of this test's own
# (name and subnet apart from the other cluster tests and from the other build, so they
# can run at the same time), a tear-down that always runs, and mpirun across its nodes.
#   cluster_up LETTER NET NODES   e.g. cluster_up l 1 3: nodes mtl1..mtl3 on 10.77.1.0/24
#   crun SLOTS... -- MPIRUN-ARGS...   mpirun on the nodes (SLOTS ranks on node 1, 2, ...)
#   cluster_plain_only WHAT   skip (77) in the sanitizer build, saying WHAT runs in the plain one
#
# Names and subnets: a cluster is $MT_CLUSTER_PREFIX (default mt) + the test's letter, with
# an 'a' appended in the sanitizer build, on subnet $MT_CLUSTER_SUBNET.NET (default 10.77;
# NET + 100 in the sanitizer build); cluster_slurm.sh's slurmctld listens on a port made
# from the subnet too. A second checkout that runs these tests while another suite runs
# with the defaults sets both to its own, e.g.
#   MT_CLUSTER_PREFIX=ar MT_CLUSTER_SUBNET=10.79 make check
# (prefix: 1 to 4 lower-case letters or digits, so that node and link names stay within
# cluster.sh's 8 characters; subnet: A.B, numbers up to 255, routed nowhere on this
# machine). Sourcing this file skips below the full tier (tests/lib.sh), as every cluster test does.
need_tier full
cl="${top_srcdir:-.}/tests/cluster.sh"
cprefix=${MT_CLUSTER_PREFIX:-mt}
csubnet=${MT_CLUSTER_SUBNET:-10.77}
case "$cprefix" in
?|??|???|????) ;;
*) bad "MT_CLUSTER_PREFIX '$cprefix': 1 to 4 lower-case letters or digits"; finish ;;
esac
case "$cprefix" in *[!a-z0-9]*) bad "MT_CLUSTER_PREFIX '$cprefix': lower-case letters and digits only"; finish ;; esac
if ! echo "$csubnet" | grep -qE '^[0-9]{1,3}\.[0-9]{1,3}$' || [ "${csubnet%.*}" -gt 255 ] \
    || [ "${csubnet#*.}" -gt 255 ]; then
    bad "MT_CLUSTER_SUBNET '$csubnet': expected A.B (e.g. 10.79)"; finish
fi
# cluster_name LETTER: the name cluster_up LETTER gives this test's cluster in this build
cluster_name() {
    if [ -n "${MT_SANITIZED:-}" ]; then echo "$cprefix${1}a"; else echo "$cprefix$1"; fi
}
cluster_plain_only() {
    if [ -n "${MT_SANITIZED:-}" ]; then echo "skipped: $1 in the plain build"; exit 77; fi
}
cluster_up() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "skipped: the emulated cluster needs root (network namespaces, links, tc)"; exit 77
    fi
    for p in ip nsenter unshare tc perl; do
        command -v $p >/dev/null 2>&1 || { bad "$p is not installed (scripts/setup.sh)"; finish; }
    done
    if ! unshare --net --uts true 2>/dev/null; then
        # CI runs as root and must run these tests: there a skip would hide them
        [ -n "${CI:-}" ] && { bad "cannot create network namespaces on this CI machine"; finish; }
        echo "skipped: this machine does not let root create network namespaces"; exit 77
    fi
    cname=$(cluster_name "$1"); cnet=$2
    [ -n "${MT_SANITIZED:-}" ] && cnet=$((cnet + 100))
    cnet=$csubnet.$cnet
    trap 'cluster_down' EXIT
    trap 'exit 1' INT TERM HUP PIPE
    "$cl" -n "$cname" -s "$cnet" up "$3" >"$out" 2>"$err" || { bad "cluster up $3"; finish; }
    cat "$out"
}
cluster_down() {
    "$cl" -n "$cname" down
    [ -n "${store:-}" ] && rm -rf "$store"
}
climit=$((180 * ${MT_TEST_TIMEOUT_SCALE:-1}))
crun() {
    hf=""
    slots=""
    while [ "$1" != -- ]; do slots="$slots $1"; shift; done
    shift
    # shellcheck disable=SC2086
    hf=$("$cl" -n "$cname" hostfile $slots)
    timeout -k 10 $climit "$cl" -n "$cname" run mpirun --hostfile "$hf" "$@"
}
now() { date +%s.%N; }
since() { awk "BEGIN { printf \"%.1f\", $(now) - $1 }"; }
# cluster_train NAME TRAINER-ARGS...: the example trainer (Fashion-MNIST at $data, 4 epochs
# of 30 steps, a checkpoint each, all kept) as run NAME under mpitrain-run on 2 nodes x 2
# ranks, the hosts asked from the cluster before each attempt, in the background ($sup).
# The job waits for the test, not the test for the job: rank 0 pauses inside the commit of
# checkpoint 2 (runtime/checkpoint_commit.c's test hook, handed to the ranks on the nodes
# with mpirun -x), with checkpoints 0 and 1 committed, until cluster_resume creates $go;
# an attempt that reaches the pause after that goes straight on. Returns once rank 0 has
# paused (or the job has ended): $d the run, $latest its newest checkpoint, $t0 the time
cluster_train() {
    name=$1; shift
    d="$store/runs/$name"
    go="$store/go.$name"
    rm -f "$go"
    "$cl" -n "$cname" hostfile 2 2 >/dev/null
    : >"$err" # emptied before the job starts: the pause seen is this job's
    MT_TEST_COMMIT_PAUSE=$climit MT_TEST_COMMIT_PAUSE_AT=2 MT_TEST_COMMIT_RESUME_FILE="$go" \
        timeout -k 10 $climit "$cl" -n "$cname" run "$b/tools/mpitrain-run" --max-failures 2 \
        --host-discovery "$cl -n $cname hosts" -- mpirun -x MT_TEST_COMMIT_PAUSE \
        -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE "$b/tools/trainer" --data "$data" \
        --storage-path "$store/runs" --steps-per-epoch 30 --epochs 4 --checkpoint-frequency 1 \
        --num-to-keep 0 --name "$name" "$@" >"$out" 2>"$err" &
    sup=$!
    while kill -0 $sup 2>/dev/null && ! grep -q "test hook: pid [0-9]* pausing" "$err"; do
        sleep 0.05
    done
    latest=$(cd "$d" && ls -d checkpoint_0* 2>/dev/null | tail -n 1)
    t0=$(now)
}
# cluster_resume: rank 0's pause ends (and no later attempt pauses)
cluster_resume() {
    : >"$go"
}
# cluster_watch: while $sup runs, the seconds from $t0 until mpitrain-run reran the first
# attempt ($detect, and then cluster_resume, for the attempts to come) and until the first
# report at world size 2 ($resume); $kept the checkpoints there when the first attempt had
# ended; with a LIMIT, a first attempt still running LIMIT s after $t0 is a hang: the job and
# the cluster's processes are ended
cluster_watch() {
    detect=""; resume=""; kept=""
    while kill -0 $sup 2>/dev/null; do
        if [ -z "$detect" ] && grep -q "attempt 1 .*rerunning" "$err"; then
            detect=$(since "$t0")
            kept=$(cd "$d" && ls -d checkpoint_0* 2>/dev/null | tr '\n' ' ')
            cluster_resume
        fi
        [ -z "$resume" ] && grep -q "world_size\":2" "$d/result.json" 2>/dev/null && resume=$(since "$t0")
        if [ -n "${1:-}" ] && [ -z "$detect" ] && [ "$(since "$t0" | cut -d. -f1)" -ge "$1" ]; then
            kill $sup 2>/dev/null
            "$cl" -n "$cname" down # every process of the job, on both nodes
            break
        fi
        sleep 0.05
    done
    wait $sup
    rc=$?
}
# column FIELD FILE: the numbers of FIELD in every JSON line of FILE, on one line ("1 2 3 ")
column() {
    grep -o "\"$1\": *[0-9][0-9]*" "$2" 2>/dev/null | sed 's/.*: *//' | tr '\n' ' '
}
# sizes_upto N TOTAL: the world sizes of TOTAL reports when the first N ran at 4 ranks and
# the rest at 2 ("4 4 2 2 ")
sizes_upto() {
    seq 1 "$2" | awk -v n="$1" '{ printf "%d ", $1 <= n ? 4 : 2 }'
}
