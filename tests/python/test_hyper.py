"""Hyperparameters (population-based training) from Python: published in the snapshot with
the layers, read back with the version pulled; TorchAgent applies an inherited "lr" to the
optimizer's param groups on a rebirth."""

import numpy as np
import pytest
import torch

import paramwin
from conftest import need_ranks
from paramwin.torch import TorchAgent


def test_window_publishes_hyperparameters_with_the_snapshot(comm):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", 4).add_hyperparameter("lr").add_hyperparameter("batch", "int64")
    assert layout.hyperparameters == {"lr": "float64", "batch": "int64"}
    with paramwin.ParameterWindow(layout, comm) as win:
        win.publish([np.full(4, rank, np.float32)], hyper={"lr": 0.5 * rank, "batch": 8 * rank})
        comm.Barrier()
        donor = (rank + 1) % n
        r = win.pull([donor], [np.zeros(4, np.float32)])
        assert r.donors[0].hyper == {"lr": 0.5 * donor, "batch": 8 * donor}
        assert win.roster(donor).hyper["batch"] == 8 * donor
        with pytest.raises(paramwin.InvalidArgument, match="momentum"):
            win.publish([np.zeros(4, np.float32)], hyper={"momentum": 0.9})
        with pytest.raises(paramwin.InvalidArgument, match="batch"):
            win.publish([np.zeros(4, np.float32)], hyper={"batch": 2.5})
        comm.Barrier()


def test_torch_agent_applies_the_inherited_lr(comm):
    rank, n = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(rank)
    net = torch.nn.Linear(3, 1)
    sgd = torch.optim.SGD(net.parameters(), lr=1.0)
    lrs = {0.001 * (r + 1) for r in range(n)}
    with TorchAgent(net, sgd, comm, hyperparameters={"lr": 0.001 * (rank + 1)}, age=(3, 5),
                    k=1, selection="fittest", shortfall="clamp") as agent:
        assert sgd.param_groups[0]["lr"] == 0.001 * (rank + 1)
        agent.publish()
        comm.Barrier()
        deaths = 0
        for step in range(1, 30):
            event = agent.step(step, float(rank))  # rank 0 is the fittest
            assert event.hyper == agent.hyperparameters
            if event.died:
                deaths += 1
                assert event.hyper["lr"] in lrs  # inherited from the best donor, unexplored
                assert sgd.param_groups[0]["lr"] == event.hyper["lr"]
        assert (deaths > 0) == (n > 1)
        comm.Barrier()  # every rank done with the rates above before new ones are published
        agent.set_hyperparameters({"lr": 0.25})
        assert sgd.param_groups[0]["lr"] == 0.25 and agent.hyperparameters == {"lr": 0.25}
        # A scheduler's rate is what the next step starts from (and publishes).
        sgd.param_groups[0]["lr"] = 0.125
        event = agent.step(30, float(rank))
        assert (event.hyper_before if event.died else event.hyper)["lr"] == 0.125
        sgd.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.5})
        with pytest.raises(paramwin.InvalidArgument, match="one learning rate"):
            agent.step(31, float(rank))
        comm.Barrier()
