#!/bin/sh
# The benchmark scripts and their options work at all. Benchmarks print figures; this
# checks only that they ran and that their output is well formed, never a timing:
#  - mpitrain-bench --sizes: a list it cannot read is refused (exit 2, naming it); a list
#    limits the allreduce and checkpoint suites to those byte counts;
#  - benchmarks/torch_cluster_bench.sh: --help, and its option checks (exit 2, naming them);
#  - (plain build) benchmarks/scaling.sh at 1 and 2 ranks: every figure at both rank
#    counts in the table, the fits table, JSON lines that jsonl_check accepts;
#  - (plain build, root, python3-torch) benchmarks/cluster_bench.sh --quick on the
#    unshaped link at 2 nodes x 1 rank: the tables of sections 2 and 5 with a row each,
#    tagged train, link and ddp lines that jsonl_check accepts, and no cluster left.
#    Its cluster is $MT_CLUSTER on $MT_CLUSTER_NET when set, else ${MT_CLUSTER_PREFIX}b
#    (default mtb) on ${MT_CLUSTER_SUBNET}.5 (default 10.77.5).
# The full tier only (tests/lib.sh), as the cluster tests.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
b="${top_builddir:-.}"
top="${top_srcdir:-.}"
scratch bench-scripts
limit=$((300 * ${MT_TEST_TIMEOUT_SCALE:-1}))

# --sizes
wrong=""
for list in 4x "" ",," 0 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17; do
    "$b/benchmarks/mpitrain-bench" --quick --suite allreduce --sizes "$list" >"$out" 2>"$err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--sizes" "$err" || wrong="$wrong '$list' (exit $rc)"
done
if [ -z "$wrong" ]; then ok "mpitrain-bench --sizes refuses lists it cannot read (exit 2, naming the option)"
else bad "mpitrain-bench --sizes accepted or did not name:$wrong"; fi
"$b/benchmarks/mpitrain-bench" --quick --suite allreduce --sizes 16,1K --json "$store/s.jsonl" >"$out" 2>"$err"
rc=$?
got=$(grep -o '"bytes": [0-9]*' "$store/s.jsonl" | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$got" = '"bytes": 16 "bytes": 1024 ' ]; then
    ok "mpitrain-bench --sizes 16,1K: the allreduce suite measures 16 B and 1 KiB only"
else bad "mpitrain-bench --sizes 16,1K (exit $rc, measured: $got)"; fi

# the allreduce table at 2 ranks: units in its header, what a time is, a correctness
# column (every value checked against the exact sum), the same in the JSON
"$run" 2 "$b/benchmarks/mpitrain-bench" --quick --suite allreduce --sizes 64K --json "$store/w.jsonl" \
    >"$out" 2>"$err"
rc=$?
row=$(awk '$1 == 65536 { print $NF }' "$out")
if [ $rc -eq 0 ] && grep -q "bytes  *iters  *raw_us  *mt_us  *mt_max_us  *ratio  *ratio_spread  *extra_us  *algbw_GBps  *busbw_GBps  *wrong" "$out" \
    && grep -q "each time: the median of 3 repetitions of N calls" "$out" && [ "$row" = 0 ] \
    && grep -q '"reps": 3, "wrong": 0' "$store/w.jsonl" \
    && /usr/bin/python3 -c 'import json, sys
r = [j for j in map(json.loads, open(sys.argv[1])) if j.get("suite") == "allreduce"][0]
sys.exit(not r["ratio_min"] <= r["ratio"] <= r["ratio_max"])' "$store/w.jsonl"; then
    ok "mpitrain-bench's allreduce table: units in the header, what each time is, the ratio a median of the repetitions' within their spread, 0 wrong values at 2 ranks"
else bad "mpitrain-bench's allreduce table (exit $rc, wrong '$row')"; cat "$out"; fi
# a budget missed in a quick run is no verdict (one noisy sample): a report budget no
# machine meets, at 2 ranks
"$run" 2 "$b/benchmarks/mpitrain-bench" --quick --suite report --budget-report-us 0.001 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "budget: mt_report .*(over it in this quick run (no verdict: run without --quick))" "$out" \
    && ! grep -q "NOT met" "$out"; then
    ok "mpitrain-bench --quick gives no 'NOT met' verdict on a missed budget"
else bad "mpitrain-bench --quick on a missed budget (exit $rc)"; grep budget "$out"; fi

# torch_cluster_bench.sh's options (its figures need the cluster and torch: by hand)
sh "$top/benchmarks/torch_cluster_bench.sh" --help >"$out" 2>"$err"
rc1=$?
sh "$top/benchmarks/torch_cluster_bench.sh" --profiles "none 5gbit" >"$out.2" 2>"$err"
rc2=$?
sh "$top/benchmarks/torch_cluster_bench.sh" --rounds 0 >>"$out.2" 2>>"$err"
rc3=$?
if [ $rc1 -eq 0 ] && grep -q "^benchmarks/torch_cluster_bench.sh \[BUILD_DIR\]" "$out" \
    && [ $rc2 -eq 2 ] && grep -q "profile '5gbit': none, 10gbit or 1gbit" "$err" \
    && [ $rc3 -eq 2 ] && grep -q -- "--rounds '0': a count >= 1" "$err"; then
    ok "torch_cluster_bench.sh: --help prints its usage; an unknown profile and --rounds 0 are refused (exit 2, naming them)"
else bad "torch_cluster_bench.sh's options (exits $rc1 $rc2 $rc3)"; cat "$err"; fi

if [ -n "${MT_SANITIZED:-}" ]; then
    echo "skipped: the scripts run in the plain build"
    finish
fi

# scaling.sh at 1 and 2 ranks
timeout -k 10 $limit sh "$top/benchmarks/scaling.sh" --ranks "1 2" --build "$b" \
    --json "$store/scaling.jsonl" >"$out" 2>"$err"
rc=$?
rows=$(grep -v '^| figure' "$out" | grep -cE '^\|.*\| [-0-9.]+ \| [-0-9.]+ \|$')
if [ $rc -eq 0 ] && [ "$rows" -eq 9 ] && grep -q '^| figure | a + b\*log2(N)' "$out" \
    && [ "$(grep -c '"suite": "scaling"' "$store/scaling.jsonl")" -eq 18 ] \
    && "$b/tests/jsonl_check" "$store/scaling.jsonl" scaling >>"$out" 2>>"$err"; then
    ok "scaling.sh --ranks '1 2': 9 figures at both rank counts, the fits, 18 JSON lines"
else bad "scaling.sh (exit $rc, $rows full rows)"; fi

# cluster_bench.sh --quick, one profile and layout
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: cluster_bench.sh needs root (the emulated cluster)"
elif ! unshare --net --uts true 2>/dev/null; then
    echo "skipped: this machine does not let root create network namespaces"
elif ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "skipped: cluster_bench.sh: no python3-torch (scripts/setup.sh --bench)"
else
    cname=${MT_CLUSTER:-${MT_CLUSTER_PREFIX:-mt}b}
    cnet=${MT_CLUSTER_NET:-${MT_CLUSTER_SUBNET:-10.77}.5}
    timeout -k 10 $((2 * limit)) sh "$top/benchmarks/cluster_bench.sh" --quick --profiles none \
        --layouts 2x1 --name "$cname" --net "$cnet" --build "$b" --json "$store/cluster.jsonl" \
        >"$out" 2>"$err"
    rc=$?
    sec2=$(sed -n '/^### 2\./,/^The ideal/p' "$out" | grep -c '^| none | 2x1 |')
    sec5=$(sed -n '/^### 5\./,$p' "$out" | grep -c '^| none | 2x1 | [0-9.]* | [0-9]* | [0-9]* |')
    if [ $rc -eq 0 ] && [ "$sec2" -ge 1 ] && [ "$sec5" -eq 2 ] \
        && grep -q '"suite": "ddp"' "$store/cluster.jsonl" && grep -q '"suite": "link"' "$store/cluster.jsonl" \
        && grep -q '"profile": "none", "layout": "2x1", "run": "fp32", "suite": "train"' "$store/cluster.jsonl" \
        && "$b/tests/jsonl_check" "$store/cluster.jsonl" train link ddp >>"$out" 2>>"$err" \
        && ! ip netns list | grep -qE "^$cname[0-9]+( |\$)"; then
        ok "cluster_bench.sh --quick, unshaped, 2 nodes x 1 rank: tables of sections 2 and 5 (the default against DDP, overlap against its bound), train, link and ddp JSON lines, cluster removed"
    else bad "cluster_bench.sh --quick (exit $rc; rows: section 2 $sec2, section 5 $sec5)"; fi
fi
finish
