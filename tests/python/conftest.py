"""Shared fixtures of the Python tests. Every rank runs the same tests in the same order
(CTest: mpiexec -n {1,2,4} python3 -m pytest tests/python), so collective calls pair up; a
test that needs more ranks skips on every rank alike."""

import faulthandler
import sys

import pytest
from mpi4py import MPI

import paramwin  # noqa: F401 - the package under test (PYTHONPATH=<build>/python)


@pytest.fixture
def comm():
    """A private duplicate of COMM_WORLD per test, freed afterwards."""
    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


# A test that fails on one rank inside a `with` block leaves the others waiting for it in a
# collective (paramwin prints the exception before its close() waits). No test here takes more
# than a few seconds: after this long, every thread's stack is dumped and the rank exits, so
# mpiexec ends the run instead of CTest's timeout (300 s) doing it silently.
WATCHDOG_SECONDS = 120


@pytest.fixture(autouse=True)
def watchdog():
    """Dumps the stacks and exits the rank if one test runs longer than WATCHDOG_SECONDS."""
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def need_ranks(comm, n):
    """Skips (on every rank) when the communicator has fewer than n ranks."""
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks, has {comm.Get_size()}")


def pytest_runtest_logreport(report):
    """Prints a failure at once, to stderr, with the rank that saw it. A rank that fails while
    the others wait for it in a collective would otherwise lose its report: pytest prints
    failures at the end of the session, which the watchdog's exit never reaches."""
    if report.failed:
        rank = MPI.COMM_WORLD.Get_rank()
        print(f"\n[rank {rank}] {report.nodeid} ({report.when}) failed:\n{report.longreprtext}",
              file=sys.stderr, flush=True)
