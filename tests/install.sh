#!/bin/sh
# Install and build README's demo against the installed library, as users do:
#  1. (make check) this build's `make install` into a DESTDIR, then
#       mpicc demo.c $(pkg-config --cflags --libs mpitrain)
#     and a run at 2 ranks (with this build's sanitizer flags, if any); and the Python
#     package, installed in the directory its interpreter reads, imported from there and
#     run at 2 ranks.
#     Also (make check, in a git checkout): README's build line up to its configure, in a
#     copy of the repository's files as a fresh clone has them (no configure script).
#  2. (tests/install.sh --installed, from make installcheck, so in make distcheck: after
#     its configure --prefix, make and make install) README's commands after "autoreconf
#     -fi && ./configure --prefix=$HOME/mpitrain && make -j && make install" literally, HOME a temporary folder
#     whose mpitrain is that prefix, to "mpirun -np 2 ./demo", with no LD_LIBRARY_PATH and
#     no oversubscription setting: PKG_CONFIG_PATH and the rpath in mpitrain.pc are enough.
#     Run there, it shares distcheck's build instead of building everything once more.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-install.XXXXXX")
store=$tmp; out="$tmp/out"; err="$tmp/err"
trap 'rm -rf "$tmp"' EXIT
src=$(cd "${top_srcdir:-.}" && pwd)
awk '/^## A training function/ { f = 1; next } f && /^```c/ { g = 1; next } g && /^```/ { exit } g' \
    "$src/README.md" >"$tmp/demo.c"
[ -s "$tmp/demo.c" ] || { bad "no C example in README.md"; finish; }
demo_ran() { # demo_ran RESULTS: the demo's 3 epochs, finished
    grep -q "iter 3 .*epoch=2 loss=0.2917  \[checkpoint_000002\]" "$out" \
        && grep -q '"status": "finished"' "$1/demo/run.json"
}

install_line() { # README's build line, the first line of its install block
    awk '/^Build it against an installed mpitrain/ { f = 1; next } f && /^```sh/ { g = 1; next }
         g { print; exit }' "$src/README.md" | sed -e 's/ *#.*$//'
}

if [ "${1:-}" != --installed ]; then
    need_tier full # make distcheck's install and installcheck cover it in the other tiers
    # 0. README's build line in a fresh clone: the tracked files only, so no configure yet;
    #    its commands up to configure (make is what the rest of this suite tests)
    line=$(install_line)
    if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        mkdir "$tmp/clone"
        (cd "$src" && git ls-files -z | xargs -0 cp --parents -t "$tmp/clone" 2>/dev/null)
        upto=$(printf '%s\n' "$line" | sed 's/ && make .*//')
        if [ ! -e "$tmp/clone/configure" ] && (cd "$tmp/clone" && HOME="$tmp/home0" sh -eu -c "$upto") \
            >"$out" 2>"$err" && [ -f "$tmp/clone/Makefile" ]; then
            ok "README's build line ($upto) works in a fresh clone, which has no configure"
        else bad "README's build line in a fresh clone: $upto"; tail -n 5 "$err"; fi
    else echo "not a git checkout: README's build line in a fresh clone not tried"; fi
    # 1. DESTDIR install of this build
    if ${MAKE:-make} -C "${top_builddir:-.}" install DESTDIR="$tmp/root" >"$out" 2>"$err"; then
        pc=$(find "$tmp/root" -name mpitrain.pc | head -n 1)
        pcdir=$(dirname "${pc:-.}")
        root_prefix="$tmp/root$(sed -n 's/^prefix=//p' "${pc:-/dev/null}")"
        flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-prefix --cflags --libs mpitrain)
        echo "mpicc demo.c $flags"
        # a sanitizer build's client gets the sanitizer defaults every program of the build has
        sanopts=""
        [ -n "${MT_SAN_FLAGS:-}" ] && sanopts="$src/common/sanopts.c"
        # shellcheck disable=SC2086
        if [ -n "$pc" ] && mpicc ${MT_SAN_FLAGS:-} -o "$tmp/client" "$tmp/demo.c" $sanopts $flags >"$out" 2>"$err" \
            && LD_LIBRARY_PATH="$root_prefix/lib" MT_STORAGE_PATH="$tmp/results" \
                "$src/tests/mpirun.sh" 2 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$tmp/client" >"$out" 2>"$err" \
            && demo_ran "$tmp/results"; then
            ok "make install DESTDIR=...: README's demo builds with pkg-config and runs at 2 ranks"
        else bad "README's demo against the DESTDIR install"; fi
        # the Python package: installed where the interpreter configure chose reads it
        # (dist-packages for Debian's), imported from there, not from the build tree
        if [ -n "${MT_PYTHON:-}" ] && [ -z "${MT_SAN_FLAGS:-}" ]; then
            pkg=$(find "$tmp/root" -path '*-packages/mpitrain/__init__.py' | head -n 1)
            site=$(dirname "$(dirname "${pkg:-/nonexistent/x/y}")")
            cat >"$tmp/snippet.py" <<'PY'
import os, mpitrain
from mpitrain import train
from mpitrain.train import RunConfig, ScalingConfig
def train_func():
    train.report({"world": train.get_context().get_world_size()})
r = train.torch.TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                             run_config=RunConfig(name="py", storage_path=os.environ["MT_STORAGE_PATH"])).fit()
# a file a rank: two ranks' prints to one pipe can interleave on a line
with open("ok." + os.environ["OMPI_COMM_WORLD_RANK"], "w") as f:
    print("PY-OK", r.metrics["world"], mpitrain.__file__, file=f)
PY
            if [ -n "$pkg" ] && [ -f "$site/mpitrain/_core.so" ] \
                && "$MT_PYTHON" -c "import sys; sys.exit(0 if '$(echo "$site" | sed "s|^$tmp/root||")' in sys.path else 1)" \
                && (cd "$tmp" && PYTHONPATH="$site" LD_LIBRARY_PATH="$root_prefix/lib" MT_STORAGE_PATH="$tmp/results" \
                    "$src/tests/mpirun.sh" 2 -x PYTHONPATH -x LD_LIBRARY_PATH -x MT_STORAGE_PATH \
                    "$MT_PYTHON" "$tmp/snippet.py") >"$out" 2>"$err" \
                && [ "$(cat "$tmp"/ok.* 2>/dev/null | grep -c "^PY-OK 2 $site/mpitrain/__init__.py$")" -eq 2 ]; then
                ok "make install DESTDIR=...: the Python package is in $(echo "$site" | sed "s|^$tmp/root||") (on $MT_PYTHON's sys.path) and the installed copy trains at 2 ranks"
            else bad "the installed Python package (${pkg:-none found under $tmp/root})"; fi
        fi
    else bad "make install DESTDIR=$tmp/root"; fi
    finish
fi

# 2. README's commands, literally, after its install (make installcheck: prefix and libdir)
if [ -n "${MT_SAN_FLAGS:-}" ]; then
    echo "README's install commands: run against a plain build's install"
    finish
fi
if [ -z "${prefix:-}" ] || [ "${libdir:-}" != "$prefix/lib" ]; then
    bad "--installed needs prefix and libdir = \$prefix/lib (got '${prefix:-}', '${libdir:-}')"; finish
fi
awk '/^Build it against an installed mpitrain/ { f = 1; next } f && /^```sh/ { g = 1; next }
     g && /^```/ { exit } g { print } g && /^mpirun -np 2 \.\/demo *(#|$)/ { exit }' "$src/README.md" \
    | sed -e 's/ *#.*$//' >"$tmp/readme.sh"
mkdir "$tmp/home" "$tmp/build"
ln -s "$prefix" "$tmp/home/mpitrain" # where README's first line installs
cp "$tmp/demo.c" "$tmp/build/demo.c"
sed 1d "$tmp/readme.sh" >"$tmp/after-install.sh"
echo "README's commands after its install (HOME=$tmp/home, $tmp/home/mpitrain -> $prefix, in $tmp/build):"
cat "$tmp/after-install.sh"
(cd "$tmp/build" || exit 1
 unset LD_LIBRARY_PATH PKG_CONFIG_PATH OMPI_MCA_rmaps_base_oversubscribe MT_STORAGE_PATH
 HOME="$tmp/home"; export HOME
 timeout -k 5 $((300 * ${MT_TEST_TIMEOUT_SCALE:-1})) sh -eu "$tmp/after-install.sh") >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(head -n 1 "$tmp/readme.sh")" = 'autoreconf -fi && ./configure --prefix=$HOME/mpitrain && make -j && make install' ] \
    && [ "$(grep -c . "$tmp/readme.sh")" -eq 4 ] && demo_ran "$tmp/home/mpitrain_results" \
    && readelf -d "$tmp/build/demo" | grep -q "R.*PATH.*$libdir"; then
    ok "README's commands as written after configure --prefix and make install: PKG_CONFIG_PATH, mpicc with pkg-config, mpirun -np 2 (rpath, no LD_LIBRARY_PATH)"
else bad "README's commands after its install (exit $rc)"; fi
finish
