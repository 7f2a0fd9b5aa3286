#!/bin/sh
# Context under real launch lines: binding (--bind-to core, --map-by slot:PE=2,
# --bind-to none), the cpus_per_worker check, and uneven node layouts faked with
# MT_NODE_KEY (3+1, 2+2 interleaved, 1+1+2). Each line of mpitrain-info is checked.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
info="${top_builddir:-.}/tools/mpitrain-info"
out=$(mktemp); err=$(mktemp)
# no storage path and no name: each mpitrain-info runs in a temporary folder of its own,
# removed at exit (with one, the first run would be kept and every later one refused)
unset MT_STORAGE_PATH MT_NAME
trap 'rm -f "$out" "$err"' EXIT
ncpu=$(nproc)

# expect NAME LINE...: every given "rank R/N: ... cpus C" line is in the output, followed by
# this machine's host name and a CPU list of C CPUs
host=$(hostname)
expect() {
    name=$1; shift
    for line in "$@"; do
        got=$(grep -F "$line host $host cpu-list " "$out")
        n=$(echo "${got##* cpu-list }" | tr ',' '\n' | awk -F- 'NF { n += (NF == 2 ? $2 - $1 + 1 : 1) } END { print n + 0 }')
        if [ -z "$got" ] || [ "$n" != "${line##* cpus }" ]; then bad "$name: missing '$line host $host cpu-list (${line##* cpus} CPUs)'"; return; fi
    done
    ok "$name"
}

MT_MPIRUN_ARGS="--bind-to core --map-by core" "$run" 2 "$info" >"$out" 2>"$err"
expect "bind-to core, 2 ranks" "rank 0/2: local 0/2 node 0 cpus 1" "rank 1/2: local 1/2 node 0 cpus 1"

MT_MPIRUN_ARGS="--bind-to none" "$run" 2 "$info" >"$out" 2>"$err"
expect "bind-to none, 2 ranks" "rank 0/2: local 0/2 node 0 cpus $ncpu" "rank 1/2: local 1/2 node 0 cpus $ncpu"

if [ "$ncpu" -ge 2 ]; then
    MT_MPIRUN_ARGS="--map-by slot:PE=2 --bind-to core" "$run" 1 "$info" --cpus-per-worker 2 >"$out" 2>"$err"
    expect "map-by slot:PE=2" "rank 0/1: local 0/1 node 0 cpus 2"
    # the same requirement under a one-core binding is refused on every rank, with advice
    MT_MPIRUN_ARGS="--bind-to core --map-by core" "$run" 2 "$info" --cpus-per-worker 2 >"$out" 2>"$err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "scaling.cpus_per_worker is 2 but rank 0 may use 1 CPU" "$err" \
        && grep -q -- "--map-by slot:PE=2 --bind-to core" "$err"; then
        ok "cpus-per-worker refused under bind-to core"
    else bad "cpus-per-worker refused under bind-to core (exit $rc)"; fi
fi

# MPMD: one app context per fake node, each with its own MT_NODE_KEY
limit=$((120 * ${MT_TEST_TIMEOUT_SCALE:-1}))
fake_nodes $limit "$info" a a a b
expect "nodes 3+1" "rank 0/4: local 0/3 node 0 cpus $ncpu" "rank 2/4: local 2/3 node 0 cpus $ncpu" \
    "rank 3/4: local 0/1 node 1 cpus $ncpu"
fake_nodes $limit "$info" a b a b
expect "nodes 2+2 interleaved" "rank 0/4: local 0/2 node 0 cpus $ncpu" "rank 1/4: local 0/2 node 1 cpus $ncpu" \
    "rank 2/4: local 1/2 node 0 cpus $ncpu" "rank 3/4: local 1/2 node 1 cpus $ncpu"
fake_nodes $limit "$info" x y z z
expect "nodes 1+1+2" "rank 0/4: local 0/1 node 0 cpus $ncpu" "rank 1/4: local 0/1 node 1 cpus $ncpu" \
    "rank 2/4: local 0/2 node 2 cpus $ncpu" "rank 3/4: local 1/2 node 2 cpus $ncpu"

# --help and a bad option
"$info" --help >"$out" 2>"$err"
if grep -q "usage: mpirun -np N mpitrain-info" "$out" && grep -q -- "--num-workers N" "$out"; then
    ok "--help"; else bad "--help"; fi
# the same without a launcher under 16 memory layouts (the environment's size moves the heap):
# the sanitizer build once died at exit in 18 layouts of 40 (common/sanopts.c says why); the
# plain build, which never did, runs the one above
n=0
layouts="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"
[ -z "${MT_SANITIZED:-}" ] && layouts=""
for i in $layouts; do
    MT_TEST_PAD=$(head -c "$((i * 7))" /dev/zero | tr '\0' x) "$info" --help >"$out" 2>"$err"
    rc=$?
    if [ $rc -ne 0 ] || crashed "$out" "$err" >/dev/null; then n=$((n + 1)); fi
done
if [ -z "$layouts" ]; then :
elif [ $n -eq 0 ]; then ok "--help exits cleanly under 16 memory layouts"
else bad "--help failed or crashed in $n of 16 memory layouts"; fi
"$info" --num-workers=abc >"$out" 2>"$err"
if [ $? -ne 0 ] && grep -q "option --num-workers: 'abc' is not an integer" "$err"; then
    ok "bad option value"; else bad "bad option value"; fi

finish
