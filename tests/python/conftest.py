"""Shared fixtures of the Python tests. Every rank runs the same tests in the same order
(CTest: mpiexec -n {1,2,4} python3 -m pytest tests/python), so collective calls pair up; a
test that needs more ranks skips on every rank alike."""

import pytest
from mpi4py import MPI

import paramwin  # noqa: F401 - the package under test (PYTHONPATH=<build>/python)


@pytest.fixture
def comm():
    """A private duplicate of COMM_WORLD per test, freed afterwards."""
    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


def need_ranks(comm, n):
    """Skips (on every rank) when the communicator has fewer than n ranks."""
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks, has {comm.Get_size()}")
