"""TorchAgent: layout from named_parameters (0-dim included), rebirths written into the
module's parameters (the same tensors, the mean of the recorded donors), optimizer state of
the replaced parameters reset, or the optimizer rebuilt by the builder."""

import torch

import paramwin
from paramwin.torch import TorchAgent, layout_of


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.scale = torch.nn.Parameter(torch.tensor(1.0))  # 0-dim

    def forward(self, x):
        return self.scale * self.lin(x)


def fill(module, value):
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(value)


def test_layout_of_module():
    layout = layout_of(Net())
    assert layout.names == ["scale", "lin.weight", "lin.bias"]
    assert [s.shape for s in layout] == [(), (2, 3), (2,)]


def test_rebirth_writes_the_donors_mean_and_resets_adam(comm):
    rank, n = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(rank)
    net = Net()
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    pointers = [p.data_ptr() for p in net.parameters()]
    x = torch.ones(4, 3)
    published = {}
    rebirths = []
    with TorchAgent(net, adam, comm, seed=5, age=(4, 4), k=1, shortfall="clamp") as agent:
        fill(net, float(rank * 100))
        published[agent.publish().version] = float(rank * 100)
        comm.Barrier()
        for step in range(1, 25):
            fill(net, float(rank * 100 + step))
            loss = net(x).pow(2).mean()
            event = agent.step(step, loss.item())
            values = {float(v) for p in net.parameters() for v in p.detach().flatten()}
            assert len(values) == 1
            if event.published:
                published[event.version] = values.pop() if not event.died else float(net.scale)
            if event.died:
                d = event.donors[0]
                rebirths.append((d.rank, d.version, float(net.scale)))
                assert all(p not in adam.state for p in net.parameters())
                continue
            adam.zero_grad()
            loss.backward()
            adam.step()
            assert all(p in adam.state for p in net.parameters())
        assert [p.data_ptr() for p in net.parameters()] == pointers  # written in place
        comm.Barrier()
    everyone = comm.allgather(published)
    for donor, version, got in rebirths:
        assert got == everyone[donor][version]
    assert (len(rebirths) > 0) == (n > 1)


def test_optimizer_builder(comm):
    n = comm.Get_size()
    net = Net()
    built = []

    def builder(module):
        built.append(torch.optim.SGD(module.parameters(), lr=0.1))
        return built[-1]

    with TorchAgent(net, builder(net), comm, optimizer_builder=builder, age=(2, 2), k=1,
                    shortfall="clamp") as agent:
        agent.publish()
        comm.Barrier()
        deaths = sum(agent.step(step, 0.0).died for step in range(1, 7))
        assert agent.optimizer is built[-1] and len(built) == 1 + deaths
        assert (deaths > 0) == (n > 1)
        comm.Barrier()


def test_param_groups_with_different_learning_rates_are_refused_with_an_lr_hyperparameter(comm):
    net = Net()
    sgd = torch.optim.SGD([{"params": [net.scale], "lr": 0.01},
                           {"params": net.lin.parameters(), "lr": 0.02}])
    try:
        TorchAgent(net, sgd, comm, hyperparameters={"lr": 1e-3})
    except paramwin.InvalidArgument as e:
        assert "[0.01, 0.02]" in str(e)
    else:
        raise AssertionError("different learning rates with an 'lr' hyperparameter: refused")
    # Untouched: the groups keep their own learning rates.
    assert [g["lr"] for g in sgd.param_groups] == [0.01, 0.02]
    # Without an "lr" hyperparameter the learning rates are the optimizer's business.
    with TorchAgent(net, sgd, comm, k=1, shortfall="clamp") as agent:
        agent.step(1, 0.0)
        assert [g["lr"] for g in sgd.param_groups] == [0.01, 0.02]
        comm.Barrier()
