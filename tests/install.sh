#!/bin/sh
# Install into a temporary prefix and build a client the way users do:
#   mpicc client.c $(pkg-config --cflags --libs mpitrain)
# then run it under mpirun at 2 ranks.
set -eu
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
${MAKE:-make} -C "${top_builddir:-.}" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"; echo "FAILED: make install"; exit 1; }
pc=$(find "$tmp/root" -name mpitrain.pc | head -n 1)
[ -n "$pc" ] || { echo "FAILED: mpitrain.pc not installed"; exit 1; }
pcdir=$(dirname "$pc")
prefix_in_pc=$(sed -n 's/^prefix=//p' "$pc")
root_prefix="$tmp/root$prefix_in_pc"
cat >"$tmp/client.c" <<'C'
#include <mpitrain.h>
#include <stdio.h>
static int train(mt_context *c, void *arg) {
    double x = mt_world_rank(c) + 1;
    int rc = mt_allreduce(c, &x, 1, MT_F64, MT_SUM);
    if (!rc && mt_world_rank(c) == 0)
        printf("client sum %g over %d ranks\n", x, mt_world_size(c));
    return rc;
}
int main(int argc, char **argv) {
    if (mt_init(&argc, &argv)) return 1;
    mt_trainer_config cfg = { .run = { .name = "install-test", .verbose = MT_VERBOSE_SILENT } };
    if (mt_config_from_args(&cfg, &argc, &argv)) return 1;
    mt_trainer *t; mt_result *r = NULL;
    int rc = mt_trainer_create(&t, train, NULL, &cfg);
    if (!rc) rc = mt_trainer_fit(t, &r);
    if (rc) fprintf(stderr, "client: %s\n", mt_last_error());
    mt_result_free(&r); mt_trainer_destroy(&t);
    mt_finalize();
    return rc ? 1 : 0;
}
C
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-prefix --cflags --libs mpitrain)
echo "mpicc client.c $flags"
# shellcheck disable=SC2086
mpicc ${MT_SAN_FLAGS:-} -o "$tmp/client" "$tmp/client.c" $flags
out=$(LD_LIBRARY_PATH="$root_prefix/lib" MT_STORAGE_PATH="$tmp/results" \
      "${top_srcdir:-.}/tests/mpirun.sh" 2 -x LD_LIBRARY_PATH "$tmp/client")
echo "$out"
if [ "$out" = "client sum 3 over 2 ranks" ]; then
    echo "1 passed, 0 failed"
else
    echo "FAILED: unexpected output"; echo "0 passed, 1 failed"; exit 1
fi
