"""The Python half of the cross-language checkpoint test (checkpoint_interop.cpp): loads the
C++ Agent's checkpoint CPP_FILE, checks what C++ wrote (w = rank + 0.5, b = 10 * rank + 0.25,
lr = 0.01 * (rank + 1), 3 steps), then sets w = rank + 0.75, b = 10 * rank + 0.5,
lr = 0.02 * (rank + 1), steps twice and saves PY_FILE for the C++ load.

    mpiexec -n 2 python3 checkpoint_interop.py CPP_FILE PY_FILE
"""

import sys

import numpy as np
from mpi4py import MPI

import paramwin


def main(cpp_file: str, py_file: str) -> int:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    layout = paramwin.Layout().add("w", (4, 3)).add("b", 3, "float64")
    layout.add_hyperparameter("lr")
    w = np.zeros((4, 3), np.float32)
    b = np.zeros(3)
    with paramwin.Agent(layout, comm, seed=7, triggers="none", k=1,
                        shortfall=paramwin.Shortfall.clamp, name="interop") as agent:
        loaded = agent.load_checkpoint(cpp_file, {"w": w, "b": b})
        assert loaded.agents == comm.Get_size() and loaded.source == rank, loaded
        assert agent.steps == 3 and loaded.steps == 3, (agent.steps, loaded)
        assert (w == np.float32(rank + 0.5)).all(), w
        assert (b == 10.0 * rank + 0.25).all(), b
        assert agent.hyperparameters["lr"] == 0.01 * (rank + 1), agent.hyperparameters
        w[...] = rank + 0.75
        b[...] = 10.0 * rank + 0.5
        agent.set_hyperparameters({"lr": 0.02 * (rank + 1)})
        for s in (4, 5):
            agent.step(s, 1.0 + rank, {"w": w, "b": b})
        agent.save_checkpoint(py_file, {"w": w, "b": b})
        comm.Barrier()
    if rank == 0:
        print(f"checkpoint_interop: Python load and save ok on {comm.Get_size()} ranks",
              flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1], sys.argv[2]))
    except Exception as e:  # noqa: BLE001 - reported as the test's failure line
        print(f"[rank {MPI.COMM_WORLD.Get_rank()}] checkpoint_interop: FAILED: "
              f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(1)
