"""Why grouped agents' deaths are deferred: two agents of two ranks each (4 ranks), ages 3..5,
k = 1, 15 steps, repeated --runs times; rank 0 prints the rebirths and the deferrals by the
reason the leader's note gives (docs/groups.md, "Deferred deaths").

    mpiexec -n 4 /usr/bin/python3 benchmarks/group_deferrals.py --runs 25
(PYTHONPATH=<build>/python; Open MPI needs --allow-run-as-root --oversubscribe here.)
"""

import argparse

import numpy as np
from mpi4py import MPI

import paramwin

LAYOUT = paramwin.Layout().add("w", (6, 2)).add("b", 3, "float64")


def one_population(comm):
    """Rebirths, deferrals for shards of different publishes, deferrals for a busy donor, and
    whether the agent was never reborn: this agent's, on its leader; zeros elsewhere."""
    with paramwin.AgentGroups(comm, ranks_per_agent=2) as groups:
        me = groups.agent
        w, b = np.full((6, 2), me, np.float32), np.full(3, float(me))
        with paramwin.GroupAgent(groups, LAYOUT, seed=4, age=(3, 5), k=1, shortfall="clamp",
                                 name="deferrals") as agent:
            agent.publish([w, b])
            comm.Barrier()
            died = shards = busy = 0
            for step in range(1, 16):
                event = agent.step(step, float(me), [w, b])
                died += event.died
                if event.deferred:
                    shards += "different publishes" in event.note
                    busy += "mid-rebirth" in event.note
            comm.Barrier()
            leader = groups.rank_in_agent == 0
            return np.array([died, shards, busy, died == 0, 1]) * leader


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    runs = parser.parse_args().runs
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 4:
        raise SystemExit("group_deferrals.py: run it on 4 ranks")
    total = np.zeros(5, np.int64)
    for _ in range(runs):
        total += comm.allreduce(one_population(comm))
    if comm.Get_rank() == 0:
        died, shards, busy, never, agents = total.tolist()
        print(f"group_deferrals: {agents} agents x 15 steps: {died} rebirths; deferred for "
              f"shards of different publishes {shards}, for a donor mid-rebirth {busy}; "
              f"{never} agents never reborn")


if __name__ == "__main__":
    main()
