#!/bin/sh
# benchmarks/torch_cluster_bench.sh [BUILD_DIR] [--profiles "none 10gbit 1gbit"] [--rounds N]:
# prepare_model against PyTorch DDP (gloo) across 2 emulated nodes x 1 rank (tests/cluster.sh;
# root), on each link profile: benchmarks/torch_bench.py's throughput rounds (the example's
# MLP and CNN, one torch thread a rank, batch 64 a rank, mpitrain, DDP and the
# no-communication ceiling taking turns), then one table with the budget (mpitrain >= 1.0x
# DDP on every profile). Each node owns one CPU (cluster.sh cpus all spread) and Open MPI
# yields when idle, as in benchmarks/cluster_bench.sh. Tears the cluster down on any exit.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-plain
profiles="none 10gbit 1gbit"
rounds=3
cname=mttorch
cnet=10.77.241
die() { echo "torch_cluster_bench.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --profiles) profiles=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) build=$1; shift ;;
    esac
done
case "$rounds" in '' | *[!0-9]* | 0) die "--rounds '$rounds': a count >= 1" ;; esac
for p in $profiles; do case "$p" in none | 10gbit | 1gbit) ;; *) die "profile '$p': none, 10gbit or 1gbit" ;; esac; done
[ "$(id -u)" -eq 0 ] || die "needs root (the emulated cluster: network namespaces)"
build=$(cd "$build" 2>/dev/null && pwd) || die "no build folder (sh scripts/build.sh build-plain)"
[ -f "$build/python/mpitrain/_core.so" ] || die "no Python extension in $build/python (build it first)"
py=${MT_PYTHON:-/usr/bin/python3}
"$py" -c 'import torch' 2>/dev/null || die "no PyTorch for $py (python3-torch: scripts/setup.sh --bench)"
work=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-torch-cluster.XXXXXX") || exit 1
cl="$top/tests/cluster.sh -n $cname -s $cnet"
trap '$cl down >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
. "$top/tests/env.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH="$build/python"
$cl up 2 >/dev/null || exit 1
$cl cpus all spread >/dev/null || exit 1
hf=$($cl hostfile 1 1)
echo "torch_cluster_bench: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); 2 nodes x 1 rank, $rounds rounds"
: >"$work/rows"
for p in $profiles; do
    $cl shape all "$p" >/dev/null || exit 1
    gbps=$($cl bandwidth "${cname}1" "${cname}2" 64 | sed -n 's/.*= \([0-9.]*\) Gbit\/s.*/\1/p')
    if timeout -k 10 900 $cl run mpirun --hostfile "$hf" -x GLOO_SOCKET_IFNAME=eth0 \
        -x PYTHONPATH -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS "$py" \
        "$top/benchmarks/torch_bench.py" --rounds "$rounds" --storage-path "$work" \
        --json "$work/$p.json" >"$work/$p.out" 2>"$work/$p.err"; then
        echo "$p: TCP ${gbps:-?} Gbit/s; $(grep '^torch_bench: mlp\|^torch_bench: cnn' "$work/$p.out" | tr '\n' ' ')"
        echo "$p ${gbps:-0} $work/$p.json" >>"$work/rows"
    else
        echo "$p: FAILED"; tail -n 5 "$work/$p.err" | sed 's/^/    /'
    fi
done
"$py" - "$work/rows" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
print("\nprepare_model vs DDP (gloo), 2 emulated nodes x 1 rank, samples/s a rank (medians; each ratio the median of the rounds' ratios):")
print(f"{'profile':8s} {'Gbit/s':>7s} {'model':6s} {'ceiling':>8s} {'mpitrain':>9s} {'DDP':>8s} "
      f"{'mt/DDP':>7s} {'mt/ceil':>8s}  budget mt/DDP >= 1.0")
bad = 0
for prof, gbps, path in rows:
    r = json.load(open(path))
    for kind in ("mlp", "cnn"):
        m = r[kind]
        ratio = m["mt_ddp"]
        bad += ratio < 1.0
        print(f"{prof:8s} {float(gbps):7.2f} {kind:6s} {m['ceiling']:8.0f} {m['mpitrain']:9.0f} "
              f"{m['ddp']:8.0f} {ratio:7.2f} {m['mt_ceiling']:8.2f}  "
              f"{'met' if ratio >= 1.0 else 'NOT met'} ({m['algo']})")
sys.exit(1 if bad or not rows else 0)
PY
