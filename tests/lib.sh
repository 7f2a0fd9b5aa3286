# Sourced by the end-to-end test scripts: pass/fail counters, and the closing line that the
# suite summary adds up. Each script sets $out and $err (files shown when a check fails).
fails=0; checks=0
# $run NP PROGRAM [ARGS...]: mpirun under a timeout (tests/mpirun.sh); $b: the build folder
run="${top_srcdir:-.}/tests/mpirun.sh"
b=$(cd "${top_builddir:-.}" && pwd)
# A check that expects an error exit must not pass when the program crashed: every ok looks
# for a sanitizer report or a fatal signal in $out and $err and turns into a failure.
crash_re='ERROR: (Address|Leak|Thread|Memory)Sanitizer|LeakSanitizer has encountered|Tracer caught signal'
crash_re="$crash_re"'|runtime error:|Sanitizer:DEADLYSIGNAL|Segmentation fault|SIGSEGV|SIGFPE|SIGBUS|SIGILL'
crash_re="$crash_re"'|Floating point exception|signal (4|6|7|8|11) \(|core dumped|stack smashing'
crashed() { # crashed FILE...: the first crash line found, if any
    for f in "$@"; do
        [ -n "$f" ] && [ -f "$f" ] && grep -Em1 "$crash_re" "$f" && return 0
    done
    return 1
}
ok() {
    if line=$(crashed "${out:-}" "${err:-}"); then bad "$1: but the program crashed: $line"; return; fi
    checks=$((checks + 1)); echo "ok: $1"
}
bad() {
    checks=$((checks + 1)); fails=$((fails + 1)); echo "FAILED: $1"
    for f in "${out:-}" "${err:-}"; do [ -f "$f" ] && tail -n 30 "$f"; done
}
# exits CODE CMD...: runs CMD (stdout to $out, stderr to $err), its status in $rc; true when
# that is CODE
exits() {
    want=$1; shift
    "$@" >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq "$want" ]
}
finish() { echo "$((checks - fails)) passed, $fails failed"; [ "$fails" -eq 0 ]; exit $?; }
# fake_nodes LIMIT PROGRAM KEY...: PROGRAM at one rank per KEY under mpirun, the ranks of
# equal keys on one fake node (one app context each, with the test-only MT_NODE_KEY), its
# output in $out and $err, a hang ended after LIMIT s; sets $rc
fake_nodes() {
    limit=$1 prog=$2; shift 2
    args=""
    for k in "$@"; do
        [ -n "$args" ] && args="$args :"
        args="$args -np 1 -x MT_NODE_KEY=$k $prog"
    done
    # shellcheck disable=SC2086
    timeout -k 10 "$limit" mpirun --oversubscribe $args >"$out" 2>"$err"
    rc=$?
}
# The test tiers (docs/testing.md), one switch: MT_TEST_TIER=fast (make check-fast: a
# developer's loop after each change), check (make check, the default: one case of each
# behaviour) or full (scripts/test.sh and CI: every matrix, the cluster, Slurm, distcheck).
#   tier NAME        true when this run's tier includes NAME (a script's longer cases)
#   need_tier NAME   skip the whole script (exit 77, automake's SKIP) unless it does
tier_rank() {
    case "$1" in
    fast) echo 1 ;; check) echo 2 ;; full) echo 3 ;;
    *) echo "tests/lib.sh: MT_TEST_TIER='$1': expected fast, check or full" >&2; echo 0 ;;
    esac
}
tier() {
    have=$(tier_rank "${MT_TEST_TIER:-check}")
    [ "$have" -gt 0 ] || exit 99 # automake's hard error: a mistyped tier runs nothing
    [ "$have" -ge "$(tier_rank "$1")" ]
}
need_tier() {
    tier "$1" && return 0
    echo "skipped: tier $1 and above (MT_TEST_TIER=${MT_TEST_TIER:-check})"; exit 77
}
# scratch NAME: a temporary folder $store (removed on exit) holding $out and $err
scratch() {
    store=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-$1-test.XXXXXX")
    out="$store/out"; err="$store/err"
    trap 'rm -rf "$store"' EXIT
}
# fmnist_h5 [all]: Fashion-MNIST in the dataset layout at $data (inside $store), or a failed
# check. Its first 4096 training and 1000 test images (30 batches of 128 an epoch at any
# rank count up to 4; a short run still learns: test accuracy well above 0.5), so that an
# epoch (which reads every row of the shard, however few steps it trains) and the
# evaluation stay short; with "all", the whole set (60000 and 10000).
fmnist_h5() {
    data="$store/fmnist.h5"
    fmnist=/usr/share/datasets/fashion-mnist # Debian's dataset-fashion-mnist
    if [ "${1:-}" = all ]; then
        "$b/tools/mpitrain-import" fashion-mnist --output "$data" >"$out" 2>"$err" && return 0
    elif idx_head "$fmnist/train-images-idx3-ubyte.gz" 4096 784 >"$store/x" \
        && idx_head "$fmnist/train-labels-idx1-ubyte.gz" 4096 1 >"$store/y" \
        && "$b/tools/mpitrain-import" idx --images "$store/x" --labels "$store/y" --output "$data" \
            --group /train >"$out" 2>"$err" \
        && idx_head "$fmnist/t10k-images-idx3-ubyte.gz" 1000 784 >"$store/x" \
        && idx_head "$fmnist/t10k-labels-idx1-ubyte.gz" 1000 1 >"$store/y" \
        && "$b/tools/mpitrain-import" idx --images "$store/x" --labels "$store/y" --output "$data" \
            --group /test >>"$out" 2>>"$err"; then
        rm -f "$store/x" "$store/y"
        return 0
    fi
    bad "Fashion-MNIST import (install dataset-fashion-mnist: scripts/setup.sh --example)"
    finish
}
# idx_head FILE.gz N ROW_BYTES: the gzip-compressed IDX file's first N items as a plain IDX
# file on stdout (its header says N; images have 3 dimensions, labels 1)
idx_head() {
    [ -r "$1" ] || return 1
    nd=$(zcat "$1" | head -c 4 | od -An -tu1 | awk '{ print $4 }')
    { zcat "$1" | head -c 4
      printf "\\$(printf %03o $(($2 >> 24 & 255)))\\$(printf %03o $(($2 >> 16 & 255)))"
      printf "\\$(printf %03o $(($2 >> 8 & 255)))\\$(printf %03o $(($2 & 255)))"
      zcat "$1" | tail -c +9 | head -c $((4 * (nd - 1) + $2 * $3)); }
}
# slurm_conf DIR CLUSTER HOST PORT: DIR/slurm.conf with what the Slurm tests share:
# slurmctld on HOST (Slurm's "name(address)" allowed) at PORT, slurmd at PORT + 1, both as
# root, munge, and state, spool, pid and log files in DIR (a node's with its name, %n);
# processes tracked through /proc, no task plugin, cores as the unit, requeue allowed.
# The caller appends its own settings, nodes and partition.
slurm_conf() {
    mkdir -p "$1/state"
    cat >"$1/slurm.conf" <<CONF
ClusterName=$2
SlurmctldHost=$3
SlurmctldPort=$4
SlurmdPort=$(($4 + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$1/state
SlurmdSpoolDir=$1/spool.%n
SlurmctldPidFile=$1/slurmctld.pid
SlurmdPidFile=$1/slurmd.%n.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmdLogFile=$1/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobRequeue=1
SchedulerType=sched/backfill
CONF
}
