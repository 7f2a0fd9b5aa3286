"""Shared by the pytest files of the Python package (tests/python.sh runs them).

test_api.py runs on every rank at once (mpirun -np N python3 -m pytest): each test is
SPMD, every rank runs the same fits in the same order and checks what it sees. The data
file (MT_PYTEST_DATA) and the storage folder (MT_PYTEST_STORE) come from tests/python.sh.
"""
import itertools
import os

import pytest

_names = itertools.count()


def _from_env(name):
    """The path tests/python.sh gives in the environment variable name, or skip."""
    path = os.environ.get(name)
    if not path:
        pytest.skip(f"{name} is not set (run through tests/python.sh)")
    return path


@pytest.fixture
def store():
    return _from_env("MT_PYTEST_STORE")


@pytest.fixture
def run_name(request):
    """A run name unique to this test (the same on every rank: tests run in one order)."""
    return f"{request.node.name}-{os.environ.get('MT_PYTEST_MODE', 'x')}-{next(_names)}"


@pytest.fixture
def data():
    return _from_env("MT_PYTEST_DATA")
