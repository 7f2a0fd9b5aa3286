#!/bin/sh
# Checkpoints across world sizes, with a bounded rank 0, across a crash of rank 0 in the
# middle of a commit, and with damaged metadata (layout, offsets, shape, dtype, names,
# metadata, damaged HDF5 bytes, no checksum header): the damaged one is skipped with a
# warning saying what, the previous one used.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
skip_in_quick_check
probe="${top_builddir:-.}/tests/ckpt_probe"
run="${top_srcdir:-.}/tests/mpirun.sh"
scratch ckpt
export MT_STORAGE_PATH="$store"

# sharded restore at another world size: saved at 2, restored at 3; saved at 4, restored at 2
for pair in "2 3" "4 2"; do
    set -- $pair
    name="resplit-$1-$2"
    "$run" "$1" "$probe" save "$name" 1001 >"$out" 2>"$err"
    "$run" "$2" "$probe" load "$name" 1001 >"$out" 2>"$err"
    rc=$?
    n=$(grep -c ": ok$" "$out")
    if [ $rc -eq 0 ] && [ "$n" -eq "$2" ]; then ok "sharded checkpoint saved at $1 ranks, restored at $2"
    else bad "sharded restore $1 -> $2 (exit $rc, $n ranks ok)"; fi
done

# rank 0 holds at most one buffer (64 MiB) of the others' data, plus a small constant
# (1 GiB; 256 MiB under the sanitizers, whose shadow memory makes the figure moot anyway)
mib=1024
[ -n "${MT_SANITIZED:-}" ] && mib=256
for np in 2 4; do
    "$run" "$np" "$probe" big "big-$np" $mib >"$out" 2>"$err"
    rc=$?
    grew=$(sed -n 's/.*memory grew by \([0-9-]*\) MiB.*/\1/p' "$out")
    echo "  $(cat "$out")"
    if [ $rc -eq 0 ] && [ -n "$grew" ] && [ "$grew" -le 96 ]; then
        ok "$mib MiB from $np ranks: rank 0 grew by $grew MiB (bound: 64 MiB buffer + 32 MiB)"
    else bad "$mib MiB from $np ranks (exit $rc, grew '${grew:-?}' MiB)"; fi
    rm -rf "$store/big-$np"
done

# SIGKILL of rank 0 while it writes the second checkpoint: the first still loads
name=crash
MT_TEST_COMMIT_PAUSE=60 MT_TEST_COMMIT_PAUSE_AT=1 \
    "$run" 2 -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT "$probe" twice "$name" 100 >"$out" 2>"$err" &
job=$!
pid=""
for _ in $(seq 1 300); do
    pid=$(sed -n 's/.*test hook: pid \([0-9]*\) pausing.*/\1/p' "$err" | tail -n 1)
    [ -n "$pid" ] && break
    sleep 0.1
done
[ -n "$pid" ] && kill -9 "$pid"
wait $job
if [ -d "$store/$name/checkpoint_000000" ] && [ ! -d "$store/$name/checkpoint_000001" ]; then
    ok "after SIGKILL in a commit: checkpoint_000000 kept, no checkpoint_000001"
else bad "state after SIGKILL in a commit"; ls -la "$store/$name"; fi
# and a checkpoint retention dropped that a crash left half removed
mkdir -p "$store/$name/.checkpoint_000007.drop" && echo x >"$store/$name/.checkpoint_000007.drop/checkpoint.h5"
"$run" 2 "$probe" load "$name" 100 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "checkpoint_000000: ok" "$out" && [ "$(grep -c ': ok$' "$out")" -eq 2 ] \
    && ! ls -d "$store/$name"/.checkpoint_*.tmp >/dev/null 2>&1 \
    && [ ! -e "$store/$name/.checkpoint_000007.drop" ]; then
    ok "rerun resumes from checkpoint_000000; the half-written one and a dropped one are removed"
else bad "resume after the crash (exit $rc)"; fi

# skipped NAME NP WHAT WHY LABEL: two checkpoints saved at NP ranks, the second damaged by
# ckpt_probe damage WHAT; loading skips it with a warning naming the file and then WHY (a
# grep pattern), and every rank resumes from checkpoint_000000
skipped() {
    "$run" "$2" "$probe" twice "$1" 600 >"$out" 2>"$err"
    h5="$store/$1/checkpoint_000001/checkpoint.h5"
    "$probe" damage "$h5" "$3" >"$out" 2>"$err" || { bad "$2 ranks: damaging $3"; return; }
    "$run" "$2" "$probe" load "$1" 600 >"$out" 2>"$err"
    rc=$?
    n=$(grep -c "checkpoint_000000: ok$" "$out")
    if [ $rc -eq 0 ] && [ "$n" -eq "$2" ] \
        && grep -q "warning: skipping $store/$1/checkpoint_000001: $h5: $4" "$err"; then
        ok "$2 ranks: $5, resumed from checkpoint_000000"
    else bad "$2 ranks: $3 (exit $rc, $n ranks ok from checkpoint_000000)"; cat "$err"; fi
}

# damaged metadata in the latest checkpoint (tests/ckpt_probe damage, HDF5 API): skipped
# with a warning naming the file and what does not match; the run resumes from the
# previous one and every rank gets its right rows
for np in 1 2 3; do
    for what in layout offsets shape dtype name meta drop add unformat; do
        [ "$np" -eq 3 ] && [ "$what" != offsets ] && [ "$what" != layout ] && continue
        case $what in
        layout) why="array rows: the checksum of its layout does not match" ;;
        offsets) why="array rows: the checksum of its row offsets does not match" ;;
        shape) why="array rows: the checksum of its shape does not match" ;;
        dtype) why="array rows: the checksum of its dtype does not match" ;;
        name) why="array rows: the checksum of its name does not match" ;;
        meta) why="the checksum of its metadata does not match" ;;
        drop) why="the checksum of its list of arrays does not match" ;;
        add) why="array extra: the checksum of its name does not match" ;;
        unformat) why="its arrays carry checks but the file has no format attribute" ;;
        esac
        skipped "damaged-$what-$np" "$np" "$what" "corrupt checkpoint index: .*$why" \
            "damaged $what: skipped with a warning ($why)"
    done
done

# damaged bytes in the HDF5 metadata (16 bytes of the root object header flipped: such
# damage crashed libhdf5 1.10 in H5Aopen/H5Aiterate2), and an HDF5 file without the
# checksum header (every checkpoint written before it existed): refused before HDF5 parses
# them, skipped with a warning naming the file and why; the previous one is restored
for np in 1 2; do
    for what in bytes bare; do
        case $what in
        bytes) why="damaged: the checksum of its HDF5 metadata does not match its header" ;;
        bare) why="an HDF5 file without a checkpoint checksum header" ;;
        esac
        skipped "unreadable-$what-$np" "$np" "$what" "$why" "$what: skipped with a warning ($why)"
    done
done

# a checkpoint without the index checks (the format before them) still loads
name=legacy
"$run" 2 "$probe" twice "$name" 600 >"$out" 2>"$err"
"$probe" damage "$store/$name/checkpoint_000001/checkpoint.h5" legacy >"$out" 2>"$err"
"$run" 2 "$probe" load "$name" 600 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "checkpoint_000001: ok$" "$out")" -eq 2 ] && ! grep -q skipping "$err"; then
    ok "a checkpoint without the index checks (the earlier format) still loads"
else bad "loading the earlier format (exit $rc)"; fi

finish
