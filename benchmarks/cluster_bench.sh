#!/bin/sh
# benchmarks/cluster_bench.sh [--quick] [OPTIONS]: issue 14's figures across emulated nodes
# (sections 1, 2, 3 and 5). Brings up a 2-node cluster of its own (tests/cluster.sh; root),
# and for each link profile and layout runs mpitrain-bench's train suite (per-rank samples/s
# of the example MLP averaged serially, per layer and in row blocks, each next to a lone
# rank and its ideal bound; the averaging of the model's gradients next to one raw
# MPI_Allreduce of the same bytes) without and with compression on the wire, at 2 nodes x
# 2 ranks also with the flat and the hierarchical algorithm, and PyTorch DDP (gloo) on the
# same nodes; then prints one markdown table per section with each figure, its baseline
# and the ratio (section 5: the default configuration against DDP, and overlap with
# compression against its ideal bound). Tears the cluster down on any exit.
#   --quick                the train suite's --quick, one bandwidth run, fewer DDP steps
#   --profiles "none 10gbit 1gbit"   link profiles (tests/cluster.sh shape), default all
#   --layouts "2x1 2x2"    nodes x ranks per node, default both
#   --compress "fp16"      compressions besides none (MT_FUSION_COMPRESS), "" for none
#   --name NAME --net A.B.C   the cluster's name and subnet (default mtbench, 10.77.240)
#   --build DIR            the build to run (default: build-plain in the source tree)
#   --json FILE            JSON lines: each train line tagged with "profile", "layout" and
#                          "run", a "link" line per profile, a "ddp" line per layout
#   --timeout S            per mpirun (default 600)
#   --env VAR=VALUE        passed to every mpitrain run (mpirun -x), e.g. MT_FUSION_SLEEP=0;
#                          repeatable
#
# The cluster's settings, so that its figures mean something on a machine whose cores the
# nodes share: each node owns one CPU (tests/cluster.sh cpus all spread: node 1 CPU 0,
# node 2 CPU 1, and Open MPI does not bind; without it both nodes' first ranks were bound
# to CPU 0), Open MPI yields when idle (mpi_yield_when_idle 1: spinning ranks otherwise
# starve the kernel's packet processing and every message waits for a scheduler tick), and
# one OpenBLAS and one torch thread per rank. At 2 ranks a node, the two share their
# node's CPU, as do the fusion's thread and the computing thread of a rank: what overlaps
# is the wait for the link, not two computations.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
quick=""
profiles="none 10gbit 1gbit"
layouts="2x1 2x2"
compress="fp16"
cname=mtbench
cnet=10.77.240
build=$top/build-plain
json=""
limit=600
envs=""
die() { echo "cluster_bench.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=--quick; shift ;;
    --profiles) profiles=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --compress) compress=$2; shift 2 ;;
    --name) cname=$2; shift 2 ;;
    --net) cnet=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --env) case "$2" in MT_[A-Z_]*=*) envs="$envs -x $2" ;; *) die "--env '$2': MT_NAME=VALUE" ;; esac; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done
for p in $profiles; do case "$p" in none | 10gbit | 1gbit) ;; *) die "profile '$p': none, 10gbit or 1gbit" ;; esac; done
for l in $layouts; do case "$l" in 2x1 | 2x2) ;; *) die "layout '$l': 2x1 or 2x2" ;; esac; done
for c in $compress; do case "$c" in fp16 | bf16) ;; *) die "compression '$c': fp16 or bf16" ;; esac; done
[ "$(id -u)" -eq 0 ] || die "needs root (the emulated cluster: network namespaces)"
bench=$build/benchmarks/mpitrain-bench
[ -x "$bench" ] || die "no $bench (build first: sh scripts/build.sh $build)"
# the fusion's knobs, where this build has them (an older one ignores the variables)
lib=$(ls "$build"/.libs/libmpitrain.so* 2>/dev/null | head -n 1)
knob() { [ -n "$lib" ] && grep -qa "$1" "$lib"; }
knob MT_FUSION_COMPRESS || { [ -n "$compress" ] && echo "cluster_bench: this build has no MT_FUSION_COMPRESS: compression skipped"; compress=""; }
algos=""
knob MT_FUSION_ALGO && algos="flat hier" || echo "cluster_bench: this build has no MT_FUSION_ALGO: flat vs hier skipped"
# Debian's python3-torch is for Debian's python (another python3 may come first on PATH)
py=/usr/bin/python3
if "$py" -c 'import torch' 2>/dev/null; then ddp=yes; else
    ddp=""; echo "cluster_bench: no PyTorch (python3-torch; scripts/setup.sh --bench): DDP skipped"; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-cluster-bench.XXXXXX") || exit 1
cl="$top/tests/cluster.sh -n $cname -s $cnet"
trap '$cl down >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
. "$top/tests/env.sh"
$cl up 2 || exit 1
$cl cpus all spread >/dev/null || exit 1
: >"$work/all.jsonl"
echo "cluster_bench: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); settings: $($cl env | sed 's/^export //' | tr '\n' ' ')${envs:+; every run:$envs}"

start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }
# tag FILE PROFILE LAYOUT RUN: FILE's lines with the three fields added, to all.jsonl
tag() {
    sed "s/^{/{\"profile\": \"$2\", \"layout\": \"$3\", \"run\": \"$4\", /" "$1" >>"$work/all.jsonl"
}
# meta: the common fields of the last benchmark line, for the lines written here
meta() {
    tail -n 1 "$work/all.jsonl" | grep -o '"date": "[^"]*", "host": "[^"]*", "version": "[^"]*"'
}
# train PROFILE LAYOUT RUN [-x VAR=VALUE]: the train suite on the layout's hostfile
train() {
    p=$1; l=$2; r=$3; shift 3
    # shellcheck disable=SC2086
    timeout -k 10 "$limit" $cl run mpirun --hostfile "$hf" $envs "$@" "$bench" --suite train $quick \
        --tmpdir "$work" --json "$work/t.jsonl" >"$work/t.out" 2>"$work/t.err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q '"suite": "train"' "$work/t.jsonl"; then
        tag "$work/t.jsonl" "$p" "$l" "$r"
        echo "  $p $l $r: $(grep -o '"per_rank_samples_per_s": [0-9.]*' "$work/t.jsonl") (at $(elapsed))"
    else
        echo "  $p $l $r: FAILED (exit $rc)"; tail -n 5 "$work/t.err" | sed 's/^/    /'
    fi
}

mode=full; [ -n "$quick" ] && mode=quick
for p in $profiles; do
    $cl shape all "$p" >/dev/null || exit 1
    # the link as a TCP stream between the nodes: the median of 3 (1 with --quick)
    mib=256 runs=3; [ -n "$quick" ] && mib=64 runs=1
    bw=""; i=0
    while [ $i -lt $runs ]; do
        bw="$bw $($cl bandwidth "${cname}1" "${cname}2" $mib | sed -n 's/.*= \([0-9.]*\) Gbit\/s.*/\1/p')"
        i=$((i + 1))
    done
    # shellcheck disable=SC2086
    gbps=$(echo $bw | tr ' ' '\n' | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
    echo "$p: TCP $gbps Gbit/s (runs:$bw; at $(elapsed))"
    for l in $layouts; do
        per=${l#2x}
        hf=$($cl hostfile "$per" "$per")
        np=$((2 * per))
        train "$p" "$l" fp32
        for c in $compress; do train "$p" "$l" "$c" -x "MT_FUSION_COMPRESS=$c"; done
        if [ "$per" -gt 1 ]; then
            for a in $algos; do train "$p" "$l" "$a" -x "MT_FUSION_ALGO=$a"; done
        fi
        m=$(meta)
        [ -n "$m" ] && echo "{\"suite\": \"link\", $m, \"ranks\": 2, \"mode\": \"$mode\", \"profile\": \"$p\", \"layout\": \"$l\", \"tcp_gbps\": ${gbps:-0}}" >>"$work/all.jsonl"
        [ -n "$ddp" ] || continue
        steps=400; [ -n "$quick" ] && steps=100
        timeout -k 10 "$limit" $cl run mpirun --hostfile "$hf" -x GLOO_SOCKET_IFNAME=eth0 \
            "$py" "$top/benchmarks/ddp_mlp.py" --master "$cnet.1" --steps $steps >"$work/d.out" 2>"$work/d.err"
        rate=$(sed -n 's/.*: \([0-9]*\) samples\/s per rank.*/\1/p' "$work/d.out")
        if [ -n "$rate" ] && [ -n "$m" ]; then
            echo "  $p $l ddp: $rate samples/s per rank (at $(elapsed))"
            echo "{\"suite\": \"ddp\", $m, \"ranks\": $np, \"mode\": \"$mode\", \"profile\": \"$p\", \"layout\": \"$l\", \"samples_per_s\": $rate}" >>"$work/all.jsonl"
        else echo "  $p $l ddp: FAILED"; tail -n 5 "$work/d.err" | sed 's/^/    /'; fi
    done
done
[ -z "$json" ] || cp "$work/all.jsonl" "$json" || die "cannot write $json"

# The tables, from the tagged lines.
awk -v profiles="$profiles" -v layouts="$layouts" -v compress="$compress" -v algos="$algos" '
function num(line, key,   m) {
    if (!match(line, "\"" key "\": [-0-9.eE+]+")) return ""
    m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m + 0
}
function str(line, key,   m) {
    if (!match(line, "\"" key "\": \"[^\"]*\"")) return ""
    m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: "/, "", m); sub(/"$/, "", m); return m
}
function cell(x, base) { # a figure with its baseline and the ratio
    if (x == "" || base == "" || base == 0) return x == "" ? "—" : sprintf("%.0f", x)
    return sprintf("%.0f (%.0f, %.2fx)", x, base, x / base)
}
function ms(x) { return x == "" ? "—" : sprintf("%.3f", x) }
function ratio(a, b) { return a == "" || b == "" || b == 0 ? "—" : sprintf("%.2fx", a / b) }
{
    s = str($0, "suite"); p = str($0, "profile"); l = str($0, "layout"); r = str($0, "run")
    if (s == "train") line[p, l, r] = $0
    if (s == "link") link[p] = num($0, "tcp_gbps")
    if (s == "ddp") ddp[p, l] = num($0, "samples_per_s")
}
END {
    np = split(profiles, P, " "); nl = split(layouts, L, " ")
    nc = split(compress, C, " "); na = split(algos, A, " ")
    print "\n### 2. Overlap with the backward pass: per-rank samples/s, fp32 (in brackets: the ideal bound, and the ratio to it)\n"
    print "| profile | layout | link Gbit/s | lone rank | serial | per layer | row blocks | row blocks / serial | row blocks / lone rank |"
    print "|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= np; i++) for (j = 1; j <= nl; j++) {
        t = line[P[i], L[j], "fp32"]; if (t == "") continue
        printf "| %s | %s | %s | %.0f | %s | %s | %s | %s | %s |\n", P[i], L[j], link[P[i]],
            num(t, "alone_samples_per_s"),
            cell(num(t, "serial_samples_per_s"), num(t, "serial_ideal_samples_per_s")),
            cell(num(t, "layers_samples_per_s"), num(t, "layers_ideal_samples_per_s")),
            cell(num(t, "blocks_samples_per_s"), num(t, "blocks_ideal_samples_per_s")),
            ratio(num(t, "blocks_samples_per_s"), num(t, "serial_samples_per_s")),
            ratio(num(t, "blocks_samples_per_s"), num(t, "alone_samples_per_s"))
    }
    print "\nThe ideal bound: serial K + C_all; overlapped max(K + C_tail, batch and forward + C_all + SGD), with K the compute of a step (every rank at once, no communication), C_all the averaging of all the gradients and C_tail that of the last bucket (per layer: the first layer, 803,840 B; row blocks: the last block and the biases, 101,376 B), all measured in the same run."
    if (na) {
        print "\n### 1. Hierarchical averaging: the model'"'"'s 940,584 B of gradients, 2 nodes x 2 ranks, ms per averaging\n"
        print "| profile | link Gbit/s | flat | hier | hier / flat | raw `MPI_Allreduce` of the same bytes | auto (default) | auto / faster |"
        print "|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= np; i++) {
            f = line[P[i], "2x2", "flat"]; h = line[P[i], "2x2", "hier"]; d = line[P[i], "2x2", "fp32"]
            if (f == "" || h == "") continue
            fa = num(f, "avg_ms"); ha = num(h, "avg_ms"); best = fa < ha ? fa : ha
            printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", P[i], link[P[i]], ms(fa), ms(ha), ratio(ha, fa),
                ms(num(f, "raw_allreduce_ms")), ms(num(d, "avg_ms")), ratio(num(d, "avg_ms"), best)
        }
    }
    if (nc) {
        print "\n### 3. Compression on the wire: averaging the model'"'"'s gradients (ms) and per-rank samples/s\n"
        printf "| profile | layout | link Gbit/s | fp32 ms | raw `MPI_Allreduce` ms |"
        for (k = 1; k <= nc; k++) printf " %s ms | %s / fp32 |", C[k], C[k]
        printf " fp32 samples/s |"; for (k = 1; k <= nc; k++) printf " %s samples/s |", C[k]
        printf "\n|---|---|---|---|---|"; for (k = 1; k <= 3 * nc + 1; k++) printf "---|"; printf "\n"
        for (i = 1; i <= np; i++) for (j = 1; j <= nl; j++) {
            t = line[P[i], L[j], "fp32"]; if (t == "") continue
            printf "| %s | %s | %s | %s | %s |", P[i], L[j], link[P[i]], ms(num(t, "avg_ms")), ms(num(t, "raw_allreduce_ms"))
            for (k = 1; k <= nc; k++) { c = line[P[i], L[j], C[k]]; printf " %s | %s |", ms(num(c, "avg_ms")), ratio(num(c, "avg_ms"), num(t, "avg_ms")) }
            printf " %.0f |", num(t, "per_rank_samples_per_s")
            for (k = 1; k <= nc; k++) { c = line[P[i], L[j], C[k]]; printf " %s |", c == "" ? "—" : sprintf("%.0f", num(c, "per_rank_samples_per_s")) }
            printf "\n"
        }
        print "\nBudget: fp16 averaging <= 0.6x of fp32 on the 1gbit profile."
    }
    last = nc ? C[1] : "fp32"
    print "\n### 5. Budgets\n"
    print "The default configuration (what the trainer runs: " str(line[P[1], L[1], "fp32"], "trainer_way") ", auto algorithm, no compression; and with " last ") against PyTorch DDP (gloo), per-rank samples/s:\n"
    print "| profile | layout | link Gbit/s | mpitrain default | DDP (gloo) | default / DDP (>= 1) | default with " last " | " last " / DDP |"
    print "|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= np; i++) for (j = 1; j <= nl; j++) {
        f = line[P[i], L[j], "fp32"]; t = line[P[i], L[j], last]; if (f == "") continue
        x = num(f, "per_rank_samples_per_s"); y = num(t, "per_rank_samples_per_s"); d = ddp[P[i], L[j]]
        printf "| %s | %s | %s | %.0f | %s | %s | %s | %s |\n", P[i], L[j], link[P[i]], x,
            d == "" ? "—" : d, ratio(x, d), t == "" ? "—" : sprintf("%.0f", y), ratio(y, d)
    }
    print "\nOverlap (row blocks, the buckets handed over as backward produces them) with " last " against the ideal bound (>= 0.8 at 2x1, >= 0.9 at 2x2), per-rank samples/s:\n"
    print "| profile | layout | link Gbit/s | row blocks + " last " | ideal bound | / ideal | one bucket after backward + " last " | row blocks / one bucket |"
    print "|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= np; i++) for (j = 1; j <= nl; j++) {
        t = line[P[i], L[j], last]; if (t == "") continue
        x = num(t, "blocks_samples_per_s"); id = num(t, "blocks_ideal_samples_per_s")
        printf "| %s | %s | %s | %.0f | %.0f | %s | %.0f | %s |\n", P[i], L[j], link[P[i]], x, id,
            ratio(x, id), num(t, "serial_samples_per_s"), ratio(x, num(t, "serial_samples_per_s"))
    }
}' "$work/all.jsonl"
