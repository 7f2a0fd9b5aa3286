#!/bin/sh
# scripts/example.sh [NP]: set up this machine (packages, Fashion-MNIST), build, and train
# the example MLP on NP ranks (default 2) with mpirun; then show the run.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-2}
"$top/scripts/setup.sh" --example
"$top/scripts/build.sh" "$top/build-plain" --enable-werror
. "$top/tests/env.sh"
store=${MT_STORAGE_PATH:-$HOME/mpitrain_results}
mpirun --oversubscribe -np "$np" "$top/build-plain/tools/trainer" --storage-path "$store" \
    --name "fashion-mnist-np$np" --overwrite
"$top/build-plain/tools/mpitrain-show" "$store/fashion-mnist-np$np"
