#!/bin/sh
# The fusion suite (tests/test_mpi_fusion) under node layouts faked on this host with the
# test-only MT_NODE_KEY (one mpirun app context per fake node): 2+2, 2+2 interleaved
# (nodes are not rank ranges), 1+2+1 (nodes of one rank beside a node of two) and 1+1
# (every node alone: auto is flat), and 2+2 with MT_FUSION_SLEEP=0 (the fusion thread's
# network waits in MPI_Wait, not the default sleeping polls). There the hierarchical backend runs (a node's ranks
# share memory, one leader per node on MPI), auto times flat against hier and every rank
# takes the same choice, shm is refused across nodes, and every average is checked
# for the same bits on every rank. The suite itself derives what to expect from the keys.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
scratch fusion-nodes
suite="${top_builddir:-.}/tests/test_mpi_fusion"
limit=$((240 * ${MT_TEST_TIMEOUT_SCALE:-1}))

# layout NAME KEY...: one rank per key, the ranks of equal keys on one fake node
layout() {
    name=$1; shift
    fake_nodes $limit "$suite" "$@"
    if [ $rc -eq 0 ] && grep -q "MPI suite mpi_fusion: [0-9]* tests at $# ranks, 0 failed assertions" "$out"; then
        ok "fusion suite on fake nodes $name ($# ranks)"
    else bad "fusion suite on fake nodes $name (exit $rc)"; grep "FAIL" "$out" "$err" | head -20; fi
}
layout "2+2" a a b b
layout "2+2 interleaved" a b a b
layout "1+2+1" a b b c
layout "1+1" a b
# the fusion thread's network waits sleep between polls by default; MPI_Wait instead
export MT_FUSION_SLEEP=0
layout "2+2, MT_FUSION_SLEEP=0" a a b b
unset MT_FUSION_SLEEP
finish
