#!/bin/sh
# The single-process CUnit suite.
exec "${top_builddir:-.}/tests/test_unit"
