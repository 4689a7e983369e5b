"""The Optuna journal of benchmarks/pbt_fashion/optuna_tpe.py under concurrent writers.

Writer processes append long journal lines (each log is larger than one write to the page
cache, so a reader without the lock can meet half of one) while this process reads the
journal again and again. Every read must parse (LockedJournalFile); CI's 4-rank run once
failed with a JSONDecodeError from a half-written line (optuna#5138).
Run: /usr/bin/python3 -m pytest tests/pbt_fashion
"""

import multiprocessing as mp
import os
import sys

import pytest

optuna = pytest.importorskip("optuna")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "pbt_fashion"))
from optuna_tpe import LockedJournalFile  # noqa: E402

LOGS_PER_WRITER = 150
LOG_BYTES = 200_000  # a log this long reaches the file in several pieces


def _write(path: str, writer: int, go) -> None:
    storage = LockedJournalFile(path)
    go.wait()
    for i in range(LOGS_PER_WRITER):
        storage.append_logs([{"writer": writer, "i": i, "pad": "x" * LOG_BYTES}])


def _read_until_done(storage, writers, expected: int) -> int:
    """Reads the new logs, as Optuna's JournalStorage does, until every log is there; returns
    the number of reads."""
    logs, reads = [], 0
    while True:
        new = storage.read_logs(len(logs))  # raises on a half-written line
        reads += 1
        assert all(len(log["pad"]) == LOG_BYTES for log in new)
        logs += new
        if len(logs) == expected and not any(w.is_alive() for w in writers):
            return reads


def test_reads_under_concurrent_appends_see_whole_lines(tmp_path):
    path = str(tmp_path / "study.journal")
    ctx = mp.get_context("fork")
    go = ctx.Event()
    writers = [ctx.Process(target=_write, args=(path, w, go)) for w in range(2)]
    for w in writers:
        w.start()
    storage = LockedJournalFile(path)
    go.set()
    try:
        reads = _read_until_done(storage, writers, 2 * LOGS_PER_WRITER)
    finally:
        for w in writers:
            w.join()
    assert all(w.exitcode == 0 for w in writers)
    assert reads > 1  # the reader really raced the writers
    # Every writer's logs arrived whole and in its order.
    logs = storage.read_logs(0)
    for w in range(2):
        assert [log["i"] for log in logs if log["writer"] == w] == list(range(LOGS_PER_WRITER))
