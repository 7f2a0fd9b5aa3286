# Sourced by the cluster tests (after tests/lib.sh): the skips, a cluster of this test's own
# (name and subnet apart from the other cluster tests and from the other build, so they
# can run at the same time), a tear-down that always runs, and mpirun across its nodes.
#   cluster_up NAME NET NODES   e.g. cluster_up mtl 1 3: nodes mtl1..mtl3 on 10.77.1.0/24
#   crun SLOTS... -- MPIRUN-ARGS...   mpirun on the nodes (SLOTS ranks on node 1, 2, ...)
cl="${top_srcdir:-.}/tests/cluster.sh"
cluster_up() {
    skip_in_quick_check
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
    cname=$1; cnet=$2
    if [ -n "${MT_SANITIZED:-}" ]; then cname=${cname}a; cnet=$((cnet + 100)); fi
    trap 'cluster_down' EXIT
    trap 'exit 1' INT TERM HUP PIPE
    "$cl" -n "$cname" -s "10.77.$cnet" up "$3" >"$out" 2>"$err" || { bad "cluster up $3"; finish; }
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
