#!/bin/sh
# The fusion suite (tests/test_mpi_fusion) under node layouts faked on this host with the
# test-only MT_NODE_KEY (one mpirun app context per fake node): 2+2, 2+2 interleaved
# (nodes are not rank ranges), 1+2+1 (nodes of one rank beside a node of two) and 1+1
# (every node alone: auto is flat), and each path with the other wait than its default
# (2+2 with MT_FUSION_SLEEP=1, 1+1 with MT_FUSION_SLEEP=0). There the hierarchical
# backend runs (a node's ranks share memory, one leader per node on MPI), auto times
# flat against hier and every rank takes the same choice, shm is refused across nodes,
# and every average is checked for the same bits on every rank. The suite itself derives what to expect from the keys.
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
# each path with the wait it does not make by default (flat sleeps between polls, hier
# waits in MPI_Wait): 2+2 sleeping, 1+1 (flat) in MPI_Wait
export MT_FUSION_SLEEP=1
layout "2+2, MT_FUSION_SLEEP=1" a a b b
export MT_FUSION_SLEEP=0
layout "1+1, MT_FUSION_SLEEP=0" a b
unset MT_FUSION_SLEEP
finish
