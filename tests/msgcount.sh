#!/bin/sh
# A report's cost in ranks, counted, not timed: tests/msgcount_probe makes reports of 8
# numeric metrics at 1 to 64 ranks (oversubscribed on one host: only counts matter), its
# PMPI wrappers count the MPI collectives rank 0 enters and the messages of the
# agreements (point-to-point, collectives/agree.c), and Open MPI's PML monitoring
# (pml_monitoring_enable=2: the messages MPI's collectives are made of, per peer, written
# at MPI_Finalize) counts the messages and bytes of the rest that rank 0 sends and receives.
# Two runs per rank count, 4 and 12 reports, differ only in the reports: their difference
# over 8 is one report's. Rank 0's messages and bytes per report must grow as log2 N: at
# most the 2-rank figures times 1.5 log2 N (a cost in N would be 16x the 2-rank one at
# 32 ranks, against 7.5x). With the statistics in the agreement's frame a report is that
# frame's recursive doubling, 2 messages of 256 bytes per log2 N, beside bytes outside
# the agreements that also differ between the two runs (243 a report at 2 ranks; not
# traced): 755 bytes a report at 2 ranks, 4,717-4,729 at 32, 1.25x-1.253x log2 N times
# that, with 10.25 messages (an extra pair every 8 reports at 32 ranks, Open MPI's, as
# when its reduce served the reports of more than 6 keys: 25.25 messages then). And no
# doubling of N may add more than three times the bytes the first doubling (2 to 4
# ranks) added: a cost in N, such as a gather of the ranks' metrics, doubles its step at
# each doubling, 8x the first by 32 ranks (measured: at most 2.19x, 16 to 32, with that
# reduce; 1.64x when every report also made a closing agreement).
# The MPI collectives rank 0 enters must not depend on N.
# MSGCOUNT_RANKS overrides "1 2 4 8 16 32 64".
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
# 64 ranks that poll (yielding) starve whatever runs beside them (a load of 39 on 2
# cores; beside it pytest took 503 s, not 158): scripts/test.sh runs this test alone
# (make check-many-ranks); beside a developer's other work it runs at the lowest priority
renice -n 19 -p $$ >/dev/null 2>&1 || true
scratch msgcount
ranks=${MSGCOUNT_RANKS:-1 2 4 8 16 32 64}
export OMPI_MCA_mpi_yield_when_idle=1
# the monitoring PML wraps the one selected: tests/env.sh's choice of ob1 would leave it out
unset OMPI_MCA_pml

# sum FILES: rank 0's messages and bytes sent plus received, from PML monitoring's files
# ("I<TAB>from<TAB>to<TAB>B bytes<TAB>M msgs sent": the collectives' messages)
sum() {
    awk -F'\t' '$1 == "I" && ($2 == 0 || $3 == 0) { split($4, b, " "); split($5, m, " ");
                bytes += b[1]; msgs += m[1] } END { printf "%d %d\n", msgs, bytes }' "$@"
}

table="$store/table"
: >"$table"
for n in $ranks; do
    line="$n"
    for k in 4 12; do
        rm -f "$store"/p.*.prof
        OMPI_MCA_pml_monitoring_enable=2 OMPI_MCA_pml_monitoring_enable_output=3 \
        OMPI_MCA_pml_monitoring_filename="$store/p" MT_TEST_TIMEOUT=300 \
            "$run" "$n" "$b/tests/msgcount_probe" "$k" 8 --storage-path "$store/runs" \
            --name "n${n}k$k" >"$out" 2>"$err"
        rc=$?
        calls=$(sed -n 's/^msgcount: ranks .* collectives \([0-9]*\) bytes .*/\1/p' "$out")
        p2p=$(sed -n 's/^msgcount: .* agreement_messages \([0-9]*\) agreement_bytes \([0-9]*\)$/\1 \2/p' "$out")
        files=$(ls "$store"/p.*.prof 2>/dev/null | wc -l)
        if [ $rc -ne 0 ] || [ -z "$calls" ] || [ -z "$p2p" ] || [ "$files" -ne "$n" ]; then
            bad "msgcount_probe at $n ranks, $k reports (exit $rc, $files monitoring files)"
            finish
        fi
        set -- $p2p $(sum "$store"/p.*.prof)
        line="$line $calls $(($1 + $3)) $(($2 + $4))"
    done
    echo "$line" >>"$table"
done
# per report: (12 reports - 4 reports) / 8
awk '{ printf "%d %.2f %.2f %.2f\n", $1, ($5 - $2) / 8, ($6 - $3) / 8, ($7 - $4) / 8 }' \
    "$table" >"$store/per"
echo "ranks  collectives  messages  bytes   (rank 0, per report of 8 numeric metrics)"; echo "raw: ranks calls4 msgs4 bytes4 calls12 msgs12 bytes12"; cat "$table"
cat "$store/per"
base=$(awk '$1 == 2 { print $3, $4 }' "$store/per")
verdict=$(awk -v base="$base" '
    BEGIN { split(base, b, " ") }
    $1 >= 2 { l = log($1) / log(2); if ($3 > b[1] * l * 1.5 || $4 > b[2] * l * 1.5) bad = bad " " $1
              if (calls == "") calls = $2; else if ($2 != calls) cbad = cbad " " $1
              if (prev != "" && $1 >= 4) { step = $4 - prev; if (first == "") first = step
                  else if (step > 3 * first) bad = bad " " $1 " (step " step " B)" }
              prev = $4 }
    END { print (bad == "" && cbad == "" ? "ok" : "over at" bad ", collectives differ at" cbad) }' \
    "$store/per")
if [ -n "$base" ] && [ "$verdict" = ok ]; then
    ok "rank 0's messages and bytes per report at most 1.5 log2 N times the 2-rank ones, and the same collectives at every N ($(echo $ranks))"
else bad "messages per report not O(log N): $verdict (2 ranks: '$base')"; cat "$store/per"; fi
# the layout is cached: a report whose keys did not change, every rank with every key,
# is its one agreement, the 8 keys' statistics in its frame, and enters no MPI collective
# (a report without a checkpoint has no closing one: rank 0's row writer's failures ride
# in a later report's): at 2 ranks, 2 messages (the agreement's one exchange)
calls=$(awk '$1 == 2 { print $2, $3 }' "$store/per")
if [ "$calls" = "0.00 2.00" ]; then
    ok "a report with unchanged keys at 2 ranks: no MPI collective and 2 messages at rank 0 (the agreement, the statistics in it)"
else bad "collectives and messages per report at 2 ranks: '$calls' (want 0.00 2.00)"; fi
finish
