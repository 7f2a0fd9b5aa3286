#!/bin/sh
# benchmarks/scaling.sh [OPTIONS]: the scaling model (issue 14, section 8). Runs
# mpitrain-bench --quick --suite allreduce,report,checkpoint --sizes 4,1M,64M at each rank
# count and takes from it mt_report (8 metrics, median) next to a raw MPI_Gather of the same bytes, the
# commit of a 64 MiB sharded checkpoint next to one process writing and fsyncing 64 MiB,
# rank 0's peak memory growth during that commit, and mt_allreduce of 4 B and of 1 MiB next
# to MPI_Allreduce; fits each figure against a + b*log2(N) and a + b*N (least squares),
# says which fits better (the larger R^2, the same data for both) and extrapolates to
# 1,024 ranks. Prints markdown tables; --json writes one line per figure and rank count
# and one per fit.
#   --ranks "1 2 4 8 16"   rank counts (default); more ranks than cores are oversubscribed
#   --build DIR            the build to run (default: build-plain in the source tree)
#   --json FILE            JSON lines
#   --cluster NODES        across NODES emulated nodes (root; tests/cluster.sh, each node
#                          given one CPU of the machine in turn): N ranks go to min(N,
#                          NODES) nodes, as evenly as they divide
#   --name NAME --net A.B.C   the emulated cluster's name and subnet (default mtbsc,
#                          10.77.241); it is brought up and torn down by this script
#   --timeout S            per mpirun (default 900)
# A rank count that fails is reported and left out of the fits.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
ranks="1 2 4 8 16"
build=$top/build-plain
json=""
nodes=0
cname=mtbsc
cnet=10.77.241
limit=900
die() { echo "scaling.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --cluster) nodes=$2; shift 2 ;;
    --name) cname=$2; shift 2 ;;
    --net) cnet=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done
for n in $ranks; do
    case "$n" in '' | *[!0-9]* | 0) die "--ranks: '$n' is not a rank count" ;; esac
done
case "$nodes" in *[!0-9]* | "") die "--cluster: '$nodes' is not a number of nodes" ;; esac
bench=$build/benchmarks/mpitrain-bench
[ -x "$bench" ] || die "no $bench (build first: sh scripts/build.sh $build)"
[ -z "$json" ] || : >"$json" || die "cannot write $json"
work=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-scaling.XXXXXX") || exit 1
cl="$top/tests/cluster.sh -n $cname -s $cnet"
cleanup() {
    [ "$nodes" -gt 0 ] && $cl down
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
. "$top/tests/env.sh"
if [ "$nodes" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "--cluster needs root (network namespaces)"
    $cl up "$nodes" >/dev/null || exit 1
    $cl cpus all spread >/dev/null || exit 1
fi

what="--suite allreduce,report,checkpoint --sizes 4,1M,64M"
# run N: the suites at N ranks into $work/N.jsonl
run() {
    n=$1
    if [ "$nodes" -eq 0 ]; then
        timeout -k 10 "$limit" mpirun --oversubscribe -np "$n" "$bench" --quick \
            $what --tmpdir "$work" --json "$work/$n.jsonl"
        return
    fi
    k=$((n < nodes ? n : nodes)); slots=""; i=0
    while [ $i -lt "$k" ]; do slots="$slots $(( (n + k - 1 - i) / k ))"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    hf=$($cl hostfile $slots) || return 1
    timeout -k 10 "$limit" $cl run mpirun --oversubscribe --hostfile "$hf" "$bench" --quick \
        $what --tmpdir "$work" --json "$work/$n.jsonl"
}

where=$([ "$nodes" -gt 0 ] && echo "across $nodes emulated nodes" || echo "on this host")
echo "scaling: $where, ranks $ranks, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
done_ranks=""
for n in $ranks; do
    if run "$n" >"$work/$n.out" 2>"$work/$n.err"; then
        done_ranks="$done_ranks $n"
        echo "  $n ranks: done"
    else
        echo "  $n ranks: FAILED (exit $?); left out:"; tail -n 5 "$work/$n.err" | sed 's/^/    /'
    fi
done
[ -n "$done_ranks" ] || { echo "scaling: no rank count ran" >&2; exit 1; }

# The figures of each rank count as "FIGURE N VALUE" lines, then the tables and the fits.
for n in $done_ranks; do
    awk -v n="$n" '
    function num(key,   m) {
        if (!match($0, "\"" key "\": [-0-9.eE+]+")) return ""
        m = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m
    }
    /"suite": "report"/ { print "report_us", n, num("mt_report_median_us");
                          print "gather_us", n, num("raw_gather_median_us") }
    /"suite": "checkpoint"/ && num("bytes") > 66060288 && num("bytes") <= 67108864 {
        b = num("bytes")
        print "commit_ms", n, b / num("mt_MBps") / 1e3
        print "write_ms", n, b / num("raw_MBps") / 1e3
        print "peak_MiB", n, num("rank0_peak_growth_MiB") }
    /"suite": "allreduce"/ && num("bytes") == 4 { print "mt4_us", n, num("mt_us"); print "raw4_us", n, num("raw_us") }
    /"suite": "allreduce"/ && num("bytes") == 1048576 { print "mt1m_us", n, num("mt_us"); print "raw1m_us", n, num("raw_us") }
    ' "$work/$n.jsonl"
done >"$work/figures"
head=$(head -n 1 "$work/$(echo $done_ranks | cut -d' ' -f1).jsonl")
awk -v ranks="$done_ranks" -v head="$head" -v json="$json" -v where="$where" '
function field(key,   m) { # a string field of the benchmark line, for the JSON lines
    if (!match(head, "\"" key "\": \"[^\"]*\"")) return "?"
    m = substr(head, RSTART, RLENGTH); sub(/^[^:]*: "/, "", m); sub(/"$/, "", m); return m
}
function fit(name, xs,   i, n, sx, sy, sxx, sxy, b, a, ss, st, my, y) {
    # least squares y = a + b*x over the rank counts; sets A, B, R2
    n = 0; sx = sy = sxx = sxy = 0
    for (i = 1; i <= nr; i++) {
        if (!((name, r[i]) in v)) continue
        n++; x = xs == "log" ? log(r[i]) / log(2) : r[i]; y = v[name, r[i]]
        sx += x; sy += y; sxx += x * x; sxy += x * y
    }
    NFIT = n
    if (n < 2 || n * sxx - sx * sx == 0) { A = n ? sy / n : 0; B = 0; R2 = -1; return }
    B = (n * sxy - sx * sy) / (n * sxx - sx * sx); A = (sy - B * sx) / n; my = sy / n
    ss = st = 0
    for (i = 1; i <= nr; i++) {
        if (!((name, r[i]) in v)) continue
        x = xs == "log" ? log(r[i]) / log(2) : r[i]; y = v[name, r[i]]
        ss += (y - A - B * x) ^ 2; st += (y - my) ^ 2
    }
    R2 = st > 0 ? 1 - ss / st : (ss == 0 ? 1 : 0)
}
function g(x,   m) { m = x < 0 ? -x : x; return m >= 100 ? sprintf("%.0f", x) : m >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
function jline(s) {
    if (json == "") return
    printf "{\"suite\": \"scaling\", \"date\": \"%s\", \"host\": \"%s\", \"version\": \"%s\", \"mode\": \"quick\", %s}\n",
        field("date"), field("host"), field("version"), s >>json
}
{ v[$1, $2] = $3 }
END {
    nr = split(ranks, r, " ")
    nf = split("report_us gather_us commit_ms write_ms peak_MiB mt4_us raw4_us mt1m_us raw1m_us", f, " ")
    what["report_us"] = "`mt_report`, 8 metrics, median (us)"
    what["gather_us"] = "  baseline: raw `MPI_Gather` of the same bytes (us)"
    what["commit_ms"] = "checkpoint commit, 64 MiB sharded (ms)"
    what["write_ms"] = "  baseline: one process write + fsync, 64 MiB (ms)"
    what["peak_MiB"] = "rank 0 peak memory growth in that commit (MiB)"
    what["mt4_us"] = "`mt_allreduce`, 4 B (us)"
    what["raw4_us"] = "  baseline: `MPI_Allreduce`, 4 B (us)"
    what["mt1m_us"] = "`mt_allreduce`, 1 MiB (us)"
    what["raw1m_us"] = "  baseline: `MPI_Allreduce`, 1 MiB (us)"
    printf "\n### Figures by rank count (%s)\n\n| figure |", where
    for (i = 1; i <= nr; i++) printf " %d |", r[i]
    printf "\n|---|"; for (i = 1; i <= nr; i++) printf "---|"; printf "\n"
    for (k = 1; k <= nf; k++) {
        printf "| %s |", what[f[k]]
        for (i = 1; i <= nr; i++) {
            if ((f[k], r[i]) in v) {
                printf " %s |", g(v[f[k], r[i]])
                jline(sprintf("\"ranks\": %d, \"figure\": \"%s\", \"value\": %s", r[i], f[k], v[f[k], r[i]]))
            } else printf " — |"
        }
        printf "\n"
    }
    printf "| ratio `mt_report` / gather |"
    for (i = 1; i <= nr; i++) printf " %s |", ((("report_us", r[i]) in v) && v["gather_us", r[i]] > 0) ? sprintf("%.2fx", v["report_us", r[i]] / v["gather_us", r[i]]) : "—"
    printf "\n| ratio raw write / commit (throughput) |"
    for (i = 1; i <= nr; i++) printf " %s |", ((("commit_ms", r[i]) in v) && v["commit_ms", r[i]] > 0) ? sprintf("%.2fx", v["write_ms", r[i]] / v["commit_ms", r[i]]) : "—"
    printf "\n| ratio `mt_allreduce` / raw, 4 B |"
    for (i = 1; i <= nr; i++) printf " %s |", ((("mt4_us", r[i]) in v) && v["raw4_us", r[i]] > 0) ? sprintf("%.2fx", v["mt4_us", r[i]] / v["raw4_us", r[i]]) : "—"
    printf "\n| ratio `mt_allreduce` / raw, 1 MiB |"
    for (i = 1; i <= nr; i++) printf " %s |", ((("mt1m_us", r[i]) in v) && v["raw1m_us", r[i]] > 0) ? sprintf("%.2fx", v["mt1m_us", r[i]] / v["raw1m_us", r[i]]) : "—"
    printf "\n\n### Fits (least squares over N = %s)\n\n", ranks
    printf "| figure | a + b*log2(N) | R^2 | a + b*N | R^2 | fits better | at 1,024 ranks |\n|---|---|---|---|---|---|---|\n"
    for (k = 1; k <= nf; k++) {
        fit(f[k], "log"); la = A; lb = B; lr = R2; n = NFIT
        fit(f[k], "lin"); na = A; nb = B; nrr = R2
        if (n < 3) {
            printf "| %s | %s + %s*log2(N) | — | %s + %s*N | — | %d point%s: any line fits | — |\n", what[f[k]],
                g(la), g(lb), g(na), g(nb), n, n == 1 ? "" : "s"
            continue
        }
        best = lr >= nrr ? "log2" : "linear"
        at = best == "log2" ? la + lb * 10 : na + nb * 1024
        # a trend no larger than the noise, or a bounded figure, is not extrapolated
        shown = (lr > nrr ? lr : nrr) < 0.5 ? "neither (R^2 < 0.5)" : best == "log2" ? "a + b*log2(N)" : "a + b*N"
        atx = (lr > nrr ? lr : nrr) < 0.5 ? "— (no trend)" : g(at)
        if (f[k] == "peak_MiB") atx = "bounded: <= `MT_CHECKPOINT_BUFFER` (64 MiB) + small"
        printf "| %s | %s + %s*log2(N) | %.3f | %s + %s*N | %.3f | %s | %s |\n", what[f[k]], g(la), g(lb), lr,
            g(na), g(nb), nrr, shown, atx
        jline(sprintf("\"ranks\": %d, \"figure\": \"%s\", \"fit_points\": %d, \"log_a\": %g, \"log_b\": %g, \"log_r2\": %.4f, \"lin_a\": %g, \"lin_b\": %g, \"lin_r2\": %.4f, \"better\": \"%s\", \"at_1024\": %g",
            r[nr], f[k], n, la, lb, lr, na, nb, nrr, best, at))
    }
}' "$work/figures"
