#!/bin/sh
# The Python package's tests in an address-sanitizer build (tests/python.sh runs this when
# MT_SANITIZED is set): python/tests/test_api.py, less its torch tests, under mpirun at 2
# ranks and as one process with no launcher, with the sanitizer runtime the extension was
# linked against preloaded into the (uninstrumented) interpreter.
#
# Leak detection stays on, with tests/lsan.supp (Open MPI's libraries only). CPython and
# numpy do not free everything at exit (measured on Debian 12's python3.11: `python3 -c
# "import json"` alone reports 13,628 bytes in 6 leaks, `import numpy` 206,016 bytes in 218),
# and the suppression file may not name them, so a leak does not end the process
# (exitcode=0) and every report is read here instead: each leak whose allocation was made
# by the package (the first frame past the allocator and the interpreter is in _core or
# libmpitrain) fails the test, with its stack; the others are counted and named. Any
# AddressSanitizer or UndefinedBehaviorSanitizer error fails it too.
# MT_PYTEST_SELECT: a pytest -k expression to run fewer tests (default: all but torch's and
# the flat-memory test's). Objects made while the module is imported (its types and
# exceptions, core_exec) live as long as the interpreter, which never frees an extension
# module at exit: they are counted apart, not as the package's leaks.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
py=${MT_PYTHON:-}
if [ -z "$py" ]; then echo "skipped: built without the Python package"; exit 77; fi
case "${MT_SANITIZED:-}" in
*address*) ;;
*) echo "skipped: a sanitizer build without the address sanitizer"; exit 77 ;;
esac
need_tier check
scratch python-asan
core="$b/python/mpitrain/_core.so"
[ -f "$core" ] || core=$(ls "$b"/python/mpitrain/_core*.so 2>/dev/null | head -n 1)
# the runtimes the extension links against, in preload order
preload=""
for lib in libasan libubsan; do
    p=$(ldd "$core" 2>/dev/null | sed -n "s/.*\($lib\.so[^ ]*\) => \([^ ]*\).*/\2/p" | head -n 1)
    [ -n "$p" ] && preload="$preload${preload:+:}$p"
done
case "$preload" in *libasan*) ;; *) bad "no libasan in ldd $core"; finish ;; esac
src=$(cd "${top_srcdir:-.}/python/tests" && pwd)
PYTHONPATH="$b/python"; export PYTHONPATH
OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1; export OPENBLAS_NUM_THREADS PYTHONDONTWRITEBYTECODE
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:detect_leaks=1:log_path=$store/san"
LSAN_OPTIONS="${LSAN_OPTIONS:-}:exitcode=0"
UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:log_path=$store/san"
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
limit=$((3600 * ${MT_TEST_TIMEOUT_SCALE:-1}))
MT_PYTEST_DATA="$store/data.h5"; MT_PYTEST_STORE="$store/runs"; export MT_PYTEST_DATA MT_PYTEST_STORE
mkdir -p "$MT_PYTEST_STORE"
out="$store/data.out" err="$store/data.err"
if ! "$py" "$src/make_data.py" "$MT_PYTEST_DATA" >"$out" 2>"$err"; then bad "the test data file (h5py)"; finish; fi
# not the flat-memory test: the address sanitizer keeps freed memory in its quarantine, so
# a process's size says nothing there (leaks are the reports' job here)
sel=${MT_PYTEST_SELECT:-not torch and not flat_memory}
opts="-p no:cacheprovider -o console_output_style=classic -rfE"
summary() { grep -E '^=+ .* in [0-9.]+s' "$1" | tail -n 1; }
timeout -k 10 "$limit" mpirun --oversubscribe -np 2 -x PYTHONPATH -x OPENBLAS_NUM_THREADS \
    -x PYTHONDONTWRITEBYTECODE -x MT_PYTEST_DATA -x MT_PYTEST_STORE -x MT_PYTEST_MODE=asan2 \
    -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS \
    sh -c "cd '$store' && LD_PRELOAD='$preload' exec '$py' -m pytest $opts -k '$sel' \
        --basetemp='$store/tmp-np2-'\$OMPI_COMM_WORLD_RANK '$src/test_api.py' \
        >'$store/np2.'\$OMPI_COMM_WORLD_RANK 2>&1"
rc=$?
for r in 0 1; do
    out="$store/np2.$r" err=""
    if [ $rc -eq 0 ] && summary "$out" | grep -q passed && ! summary "$out" | grep -qE 'failed|error'; then
        ok "test_api.py under ASan, mpirun -np 2, rank $r: $(summary "$out")"
    else
        bad "test_api.py under ASan, mpirun -np 2, rank $r (exit $rc): $(summary "$out")"
    fi
done
(cd "$store" && MT_PYTEST_MODE=asan1 LD_PRELOAD="$preload" timeout -k 10 "$limit" "$py" -m pytest \
    $opts -k "$sel" --basetemp="$store/tmp-plain" "$src/test_api.py") >"$store/plain" 2>&1
rc=$?
out="$store/plain" err=""
if [ $rc -eq 0 ] && summary "$out" | grep -q passed && ! summary "$out" | grep -qE 'failed|error'; then
    ok "test_api.py under ASan, no launcher: $(summary "$out")"
else
    bad "test_api.py under ASan, no launcher (exit $rc): $(summary "$out")"
fi
# every sanitizer report of every process
out="$store/reports" err=""
if "$py" - "$store"/san.* >"$out" 2>&1 <<'PY'
import re, sys
ours = re.compile(r"(_core[.a-z0-9_-]*\.so|libmpitrain|/(runtime|collectives|io|common|python)/[a-z_]+\.c:)")
skip = re.compile(r"(libasan|libubsan|libsanitizer|/python3\.[0-9]+|libpython3|/libc\.so)")
errors, mine, others, module, where = [], [], 0, 0, {}
for path in sys.argv[1:]:
    text = open(path, errors="replace").read()
    for m in re.finditer(r"ERROR: AddressSanitizer.*|runtime error:.*", text):
        errors.append(f"{path}: {m.group(0)}")
    for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text):
        if not block.startswith(("Direct leak", "Indirect leak")):
            continue
        if re.search(r" in (core_exec|PyInit__core) ", block):
            module += 1  # the module's own state (its types, exceptions): the interpreter's
            continue     # lifetime; CPython does not free extension modules at exit
        frames = re.findall(r"^\s+#\d+ 0x[0-9a-f]+.*?(\S+)\s*$", block, re.M)  # where
        first = next((f for f in frames if not skip.search(f)), "")
        if ours.search(first):
            mine.append(block.strip())
        else:
            others += 1
            lib = re.sub(r"(\+0x[0-9a-f]+\)|:[0-9]+)$", "", first).strip("()").rsplit("/", 1)[-1] or "?"
            where[lib] = where.get(lib, 0) + 1
top = ", ".join(f"{k} {v}" for k, v in sorted(where.items(), key=lambda kv: -kv[1])[:6])
print(f"{len(sys.argv) - 1} reports; {len(errors)} sanitizer errors; {len(mine)} leaks "
      f"allocated by the package; {module} of the module's own state made at import; "
      f"{others} by others (first allocating frame: {top})")
for e in errors[:20]:
    print(e)
for b in mine[:10]:
    print(b[:3000])
sys.exit(1 if errors or mine else 0)
PY
then ok "sanitizer reports: $(head -n 1 "$out")"
else bad "sanitizer reports: $(head -n 1 "$out")"
fi
finish
