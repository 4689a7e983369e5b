"""The GIL is released while a pull reads and reduces: a Python thread keeps running inside
the pull. The switch interval is raised to 1 s meanwhile, so a pull that held the GIL would
keep the thread out for its whole length, however short the pull: any tick strictly inside a
pull proves the release, on a fast machine as on a loaded one."""

import sys
import threading
import time

import numpy as np

import paramwin
from conftest import need_ranks

N = 8_000_000  # 32 MB per donor


def test_thread_runs_during_pull(comm):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", N)
    inside, spans, mean_ok = 0, [], True
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

            switch = sys.getswitchinterval()
            sys.setswitchinterval(1.0)
            thread = threading.Thread(target=tick)
            thread.start()
            try:
                for _ in range(20):
                    t0 = time.perf_counter()
                    win.pull(list(range(1, n)), [params])
                    t1 = time.perf_counter()
                    spans.append(t1 - t0)
                    inside += sum(1 for s in list(stamps) if t0 < s < t1)
            finally:
                stop.set()
                thread.join()
                sys.setswitchinterval(switch)
            mean_ok = bool(np.all(params == np.float32(sum(range(1, n)) / (n - 1))))
        comm.Barrier()
    # Checked after the collective close: a failure on rank 0 cannot strand the other ranks.
    assert mean_ok
    assert rank != 0 or inside > 0, f"no thread tick inside any pull (pulls took {spans} s)"
