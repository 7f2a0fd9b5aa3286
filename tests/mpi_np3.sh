#!/bin/sh
# Every MPI suite at 3 rank(s).
exec "${top_srcdir:-.}/tests/mpi_suites.sh" 3
