#!/bin/sh
# scripts/example.sh [NP]: set up this machine, build, and run the example job on NP
# ranks (default 2).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-2}
"$top/scripts/setup.sh" --example
"$top/scripts/build.sh" "$top/build-plain" --enable-werror
. "$top/tests/env.sh"
mpirun --oversubscribe -np "$np" "$top/build-plain/tools/mpitrain-info"
