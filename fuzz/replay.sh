#!/bin/sh
# fuzz/replay.sh: run every fuzz harness once over its seed corpus (fuzz/seeds/<harness>/)
# and its regression inputs (fuzz/regressions/<harness>/, inputs that once crashed or
# leaked). Part of `make check`: cheap, and under the sanitizer build it is where a
# regression input shows its defect again.
. "$top_srcdir/tests/lib.sh"

for h in fuzz_import fuzz_ckpt fuzz_result; do
    inputs="$top_srcdir/fuzz/seeds/$h"
    [ -d "$top_srcdir/fuzz/regressions/$h" ] && inputs="$inputs $top_srcdir/fuzz/regressions/$h"
    # shellcheck disable=SC2086
    if got=$(timeout 300 "$top_builddir/fuzz/$h" $inputs 2>&1); then
        ok "$h replays its seeds and regression inputs (${got##*: })"
    else
        bad "$h on its seeds and regression inputs: $(printf '%s' "$got" | tail -n 20)"
    fi
done
finish
