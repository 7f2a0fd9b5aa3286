"""The pytest files' data set (tests/python.sh, tests/python_sanitized.sh): make_data.py PATH
writes /train (1000 rows) and /test (100 rows) with x (4 float32, each the row's number),
y (int64, the row's number) and z (uint8, the row's number mod 256), so a test can tell
which rows it was given."""
import sys

import h5py
import numpy as np

with h5py.File(sys.argv[1], "w") as f:
    for g, n in (("train", 1000), ("test", 100)):
        rows = np.arange(n)
        f[f"{g}/x"] = np.repeat(rows[:, None], 4, axis=1).astype(np.float32)
        f[f"{g}/y"] = rows.astype(np.int64)
        f[f"{g}/z"] = (rows % 256).astype(np.uint8)
