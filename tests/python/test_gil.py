"""The GIL is released while a pull reads and reduces: a Python thread keeps running inside
the pull (with the GIL held it could not run until the pull returned)."""

import threading
import time

import numpy as np

import paramwin
from conftest import need_ranks

N = 8_000_000  # 32 MB per donor: a pull of tens of milliseconds


def test_thread_runs_during_pull(comm):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", N)
    with paramwin.ParameterWindow(layout, comm) as win:
        params = np.full(N, float(rank), np.float32)
        win.publish([params])
        comm.Barrier()
        if rank == 0:
            stamps = []
            stop = threading.Event()

            def tick():
                while not stop.is_set():
                    stamps.append(time.perf_counter())
                    time.sleep(0.0002)  # gives the GIL back between ticks

            thread = threading.Thread(target=tick)
            thread.start()
            inside = 0
            spans = []
            for _ in range(5):
                t0 = time.perf_counter()
                win.pull(list(range(1, n)), [params])
                t1 = time.perf_counter()
                spans.append(t1 - t0)
                # Ticks well inside the call: past the 5 ms switch interval after t0, which
                # is the most a GIL-holding pull would let the thread run.
                inside += sum(1 for s in list(stamps) if t0 + 0.006 < s < t1)
            stop.set()
            thread.join()
            assert np.all(params == np.float32(sum(range(1, n)) / (n - 1)))
            assert max(spans) > 0.01, f"pulls too short to tell: {spans}"
            assert inside > 0, f"no thread tick inside any pull ({spans} s)"
        comm.Barrier()
