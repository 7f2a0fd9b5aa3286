#!/bin/sh
# Every MPI suite at 4 rank(s).
exec "${top_srcdir:-.}/tests/mpi_suites.sh" 4
