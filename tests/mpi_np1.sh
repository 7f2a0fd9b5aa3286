#!/bin/sh
# Every MPI suite at 1 rank(s).
exec "${top_srcdir:-.}/tests/mpi_suites.sh" 1
