#!/bin/sh
# Every MPI suite at 2 rank(s).
exec "${top_srcdir:-.}/tests/mpi_suites.sh" 2
