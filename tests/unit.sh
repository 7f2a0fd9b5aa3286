#!/bin/sh
# The single-process CUnit suites.
"${top_builddir:-.}/tests/test_unit" || exit 1
exec "${top_builddir:-.}/tests/test_io"
