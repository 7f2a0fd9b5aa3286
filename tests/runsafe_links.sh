#!/bin/sh
# Point 2 of tests/runsafe.sh (a link, hard link or FIFO in every position of a run file),
# its own automake test so that it runs beside the rest of that script.
MT_RUNSAFE_PART=links exec sh "${top_srcdir:-.}/tests/runsafe.sh"
