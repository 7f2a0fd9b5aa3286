# Sourced by the end-to-end test scripts: pass/fail counters, and the closing line that the
# suite summary adds up. Each script sets $out and $err (files shown when a check fails).
fails=0; checks=0
# $run NP PROGRAM [ARGS...]: mpirun under a timeout (tests/mpirun.sh); $b: the build folder
run="${top_srcdir:-.}/tests/mpirun.sh"
b=$(cd "${top_builddir:-.}" && pwd)
# Built against MPICH (configure --with-mpi=mpich; MT_MPI_FAMILY from make check): the
# scripts that need Open MPI skip, saying why (docs/clusters.md lists them). The CUnit
# suites (tests/mpi_suite.sh, through tests/mpirun.sh's launcher of the build's family),
# unit.sh, symbols.sh and the scripts not named here run with both families.
openmpi_only_why() {
    case "$1" in
    checkpoint.sh | async_checkpoint.sh | rundir.sh | fulldisk.sh | stall.sh | demo.sh)
        echo "passes variables to the ranks with Open MPI's mpirun -x" ;;
    trainer.sh | fault.sh | trainable.sh | badinput.sh | tools.sh)
        echo "mpitrain-run's reruns and signal forwarding are tested with Open MPI's mpirun (it forwards SIGUSR1; OMPI_MCA_orte_default_hostfile)" ;;
    spawn.sh | shm.sh)
        echo "spawn mode (MPI_Comm_spawn from a process started without a launcher) is tested with Open MPI's singleton start" ;;
    context.sh | fusion_nodes.sh)
        echo "Open MPI's app contexts with -x, --map-by and --bind-to" ;;
    cluster_*.sh | bench_scripts.sh)
        echo "the emulated cluster starts ranks through Open MPI's rsh agent and MCA settings (tests/cluster.sh)" ;;
    slurm.sh)
        echo "srun --mpi=pmix with Debian's Open MPI" ;;
    python.sh | torch_example.sh)
        echo "Debian's h5py and mpi4py are built against Open MPI" ;;
    msgcount.sh)
        echo "counts messages with Open MPI's pml monitoring (OMPI_MCA_pml_monitoring_enable)" ;;
    install.sh)
        echo "README's install commands are Open MPI's (mpirun, libhdf5-openmpi-dev)" ;;
    esac
}
if [ "${MT_MPI_FAMILY:-openmpi}" != openmpi ]; then
    why=$(openmpi_only_why "$(basename "$0")")
    if [ -n "$why" ]; then echo "skipped: Open MPI only ($MT_MPI_FAMILY build): $why"; exit 77; fi
fi
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
# A test acts on and judges only what it made: its own processes, segments, files and
# ports, never a machine-wide list (other checkouts run the same suite on this machine at
# the same time, and earlier jobs leave things behind).
# descendants PID: every descendant of process PID, each before its own (a job started
# in the background: its launcher, ranks, daemons)
descendants() {
    for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done
}
# alive PID: the process runs (a zombie does not count)
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# run_seen LIMIT CMD...: CMD in the background under a timeout of LIMIT s, its output in
# $out and $err; sets rc, $job (the timeout's pid) and $seen (every process of the job
# seen while it ran: launcher, ranks, daemons), the pids the test then judges
run_seen() {
    lim=$1; shift
    timeout -k 5 "$lim" "$@" >"$out" 2>"$err" &
    job=$!
    seen=""
    while alive $job; do seen="$seen $(descendants $job)"; sleep 0.1; done
    wait $job 2>/dev/null
    rc=$?
    seen=$(echo $job $seen | tr ' ' '\n' | sort -u)
}
# shm_of PID...: the library's shared-memory segments in /dev/shm that processes PID...
# made (each name carries its creator's pid: /dev/shm/mpitrain-KIND-PID-...)
shm_of() {
    for p in "$@"; do
        for k in spawn watch fusion; do ls -d /dev/shm/mpitrain-$k-"$p"-* 2>/dev/null; done
    done
}
# free_ports N: the first of N consecutive TCP ports that no socket on this machine uses
# (/proc/net/tcp, tcp6), searched from one derived from this test's pid, so two checkouts
# that run the same test at once get different ones; fails when none is found
port_used() {
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$(printf ':%04X ' "$1")"
}
free_ports() {
    fp=$((20000 + ($$ % 1000) * 8))
    for _ in $(seq 1 200); do
        k=0
        while [ $k -lt "$1" ] && ! port_used $((fp + k)); do k=$((k + 1)); done
        [ $k -eq "$1" ] && { echo $fp; return 0; }
        fp=$((fp + $1))
        [ $fp -gt 30000 ] && fp=20000
    done
    return 1
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
# slurm_log JOB FILE LINE [WRAPPER...]: waits until Slurm job JOB's output FILE has LINE (a
# grep pattern); false once the job has ended without it, or after $limit s. WRAPPER runs
# scontrol (the cluster tests' `cluster.sh run`)
slurm_log() {
    j=$1 f=$2 l=$3; shift 3
    for _ in $(seq 1 $((limit * 10))); do
        grep -q "$l" "$f" 2>/dev/null && return 0
        case "$("$@" scontrol show job "$j" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')" in
        PENDING|CONFIGURING|RUNNING) ;; *) return 1 ;;
        esac
        sleep 0.1
    done
    return 1
}
# slurm_conf DIR CLUSTER HOST PORT and slurm_munge_start: scripts/slurm/conf.sh
. "${top_srcdir:-.}/scripts/slurm/conf.sh"
