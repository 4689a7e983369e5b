"""TorchAgent: layout from named_parameters (0-dim included), rebirths written into the
module's parameters (the same tensors, the mean of the recorded donors), optimizer state of
the replaced parameters reset, or the optimizer rebuilt by the builder, or, with
inherit_optimizer_state, Adam's state the donors' mix (checked against every rank's
published values)."""

import numpy as np
import pytest
import torch

import paramwin
from paramwin.torch import TorchAgent, TorchElasticAgent, layout_of


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


def snapshot(net, opt):
    """The parameters, each parameter's Adam moments (zeros without state) and its step."""
    parts = [p.detach().reshape(-1) for p in net.parameters()]
    steps = []
    for p in net.parameters():
        state = opt.state.get(p, {})
        for field in ("exp_avg", "exp_avg_sq"):
            parts.append(state[field].detach().reshape(-1) if field in state
                         else torch.zeros(p.numel(), dtype=p.dtype, device=p.device))
        steps.append(float(state["step"]) if "step" in state else 0.0)
    return torch.cat([t.cpu() for t in parts] +
                     [torch.tensor(steps, dtype=torch.float64)]).numpy().copy()


def resolve_rebirths(records, check):
    """Fills the table of every rank's published (rank, version) -> values: a plain publish is
    the snapshot it recorded; a rebirth's is the donors' mix (as published: the step unrounded),
    known once its donors' entries are. ``check(record, mix)`` is called for every rebirth."""
    table = {}
    pending = []
    for rank, entries in enumerate(records):
        for entry in entries:
            if entry[0] == "published":
                table[(rank, entry[1])] = entry[2]
            else:
                pending.append((rank,) + entry[1:])
    while pending:
        ready = [r for r in pending if all((d[0], d[1]) in table for d in r[2])]
        assert ready, f"rebirths whose donors' versions were never published: {pending}"
        for record in ready:
            rank, version, donors, _ = record
            mix = sum(w * table[(d, v)] for d, v, w in donors)
            check(record, mix)
            if version is not None:
                table[(rank, version)] = mix
            pending.remove(record)


@pytest.mark.parametrize("builder", [False, True])
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_reborn_adam_state_is_the_donors_mix(comm, builder, where):
    """CPU modules in place; CUDA ones on a device window (the state layers on the GPU too)
    where the library has CUDA, staged through host buffers otherwise."""
    rank, n = comm.Get_rank(), comm.Get_size()
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False")
    device = torch.device("cpu") if where == "cpu" else \
        torch.device("cuda", rank % torch.cuda.device_count())
    torch.manual_seed(rank)
    net = Net().double().to(device)
    make = (lambda module: torch.optim.Adam(module.parameters(), lr=1e-2))
    x = torch.randn(4, 3, dtype=torch.float64).to(device)
    records = []  # ("published", version, snapshot) or ("reborn", version, donors, snapshot)
    with TorchAgent(net, make(net), comm, optimizer_builder=make if builder else None,
                    inherit_optimizer_state=True, seed=5, age=(4, 4), k=2 if n > 2 else 1,
                    shortfall="clamp") as agent:
        assert agent.layout.names[3:7] == ["optimizer/scale/exp_avg", "optimizer/scale/exp_avg_sq",
                                           "optimizer/scale/step", "optimizer/lin.weight/exp_avg"]
        records.append(("published", agent.publish().version, snapshot(net, agent.optimizer)))
        comm.Barrier()
        for step in range(1, 25):
            loss = net(x * (rank + 1)).pow(2).mean()
            event = agent.step(step, loss.item())
            now = snapshot(net, agent.optimizer)
            if event.died:
                donors = [(d.rank, d.version, d.weight) for d in event.donors if not d.skipped]
                records.append(("reborn", event.version if event.published else None, donors,
                                now))
                continue
            if event.published:
                records.append(("published", event.version, now))
            agent.optimizer.zero_grad()
            loss.backward()
            agent.optimizer.step()
        inherited = agent.optimizer_states_inherited
        comm.Barrier()
    rebirths = []
    params = sum(p.numel() for p in net.parameters())
    moments = 2 * params

    def check(record, mix):
        got = record[3]
        np.testing.assert_allclose(got[:params], mix[:params], rtol=0, atol=1e-12)
        at = params
        for j, p in enumerate(net.parameters()):
            step = round(mix[params + moments + j])
            assert got[params + moments + j] == max(step, 0)
            span = slice(at, at + 2 * p.numel())
            at += 2 * p.numel()
            if step > 0:  # the donors' mix of the moments
                np.testing.assert_allclose(got[span], mix[span], rtol=0, atol=1e-12)
            else:  # no state: Adam starts the parameter afresh
                assert not got[span].any()
        rebirths.append(record)

    resolve_rebirths(comm.allgather(records), check)
    assert (len(rebirths) > 0) == (n > 1)
    # An entry is written where the donors' mixed step rounds above 0 (checked above); a
    # rebirth from donors without state (reborn themselves just before) writes none.
    count = len(list(net.parameters()))
    assert inherited == sum(int(r[3][params + moments + j] > 0) for r in records
                            if r[0] == "reborn" for j in range(count))


def _adam_with_state(comm):
    """A float64 Net and its Adam after one step (its moments exist; every rank's differ);
    skips on one rank (the tests need a donor)."""
    rank = comm.Get_rank()
    if comm.Get_size() < 2:
        pytest.skip("needs a donor")
    torch.manual_seed(rank)
    net = Net().double()
    adam = torch.optim.Adam(net.parameters(), lr=1e-2)
    net(torch.randn(4, 3, dtype=torch.float64) * (rank + 1)).pow(2).mean().backward()
    adam.step()
    return net, adam


def test_rebirth_writes_adam_state_into_its_own_tensors(comm):
    """Without a builder a reborn agent's Adam keeps its moment tensors: the layers are those
    tensors (in place), so the pull writes the donor's values into them (no new tensor of the
    model's size per rebirth)."""
    rank = comm.Get_rank()
    net, adam = _adam_with_state(comm)
    age = (1, 1) if rank == 0 else (1000, 1000)
    with TorchAgent(net, adam, comm, inherit_optimizer_state=True, seed=5, age=age, k=1,
                    shortfall="clamp") as agent:
        agent.publish()
        # The moment layers are Adam's own tensors (in place; the step counts are not).
        assert agent._state.in_place == 2 * len(list(net.parameters()))
        mine = {name: adam.state[p]["exp_avg"] for name, p in net.named_parameters()}
        at = {name: t.data_ptr() for name, t in mine.items()}
        published = {name: adam.state[p]["exp_avg"].clone() for name, p in net.named_parameters()}
        comm.Barrier()
        event = agent.step(0, 1.0)
        everyone = comm.allgather(published)
        if rank == 0:
            assert event.died
            donor = event.donors[0].rank
            for name, p in net.named_parameters():
                now = adam.state[p]["exp_avg"]
                assert now is mine[name] and now.data_ptr() == at[name], name
                torch.testing.assert_close(now, everyone[donor][name], rtol=0, atol=0)
        comm.Barrier()


def test_deferred_rebirth_publishes_in_the_next_step(comm):
    """publish_defer_rebirth: the rebirth's step only pulls (no publish) and the roster says
    mid-rebirth, so no one takes the dead parameters still in its slot; the next step
    publishes the reborn weights and Adam's state, and the agent is a donor again."""
    rank = comm.Get_rank()
    net, adam = _adam_with_state(comm)
    age = (2, 2) if rank == 0 else (1000, 1000)  # rank 0 dies in its second step only
    with TorchAgent(net, adam, comm, inherit_optimizer_state=True, seed=5, age=age, k=1,
                    shortfall="clamp", publish_defer_rebirth=True) as agent:
        assert agent.step(0, 1.0).published
        comm.Barrier()
        event = agent.step(1, 1.0)
        comm.Barrier()
        state = agent.roster_all()[0].state
        assert state == "rebirth", state
        if rank == 0:
            assert event.died and not event.published and not event.publish_skipped
            assert "defer_rebirth" in event.note
            assert event.version == 1
        comm.Barrier()
        event = agent.step(2, 1.0)
        assert event.published and not event.died
        comm.Barrier()
        assert agent.roster_all()[0].state == "active"
        if rank == 0:
            assert event.version == 2
        comm.Barrier()


def test_optimizer_state_inheritance_refuses_bad_input_on_every_rank(comm):
    rank = comm.Get_rank()
    net = Net()
    with pytest.raises(paramwin.InvalidArgument, match="keeps no state"):
        TorchAgent(net, torch.optim.SGD(net.parameters(), lr=0.1), comm,
                   inherit_optimizer_state=True)
    opt = (torch.optim.RMSprop(net.parameters()) if rank == 0
           else torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(paramwin.InvalidArgument, match="RMSprop" if rank == 0 else "rank 0"):
        TorchAgent(net, opt, comm, inherit_optimizer_state=True)
    with paramwin.AgentGroups(comm, ranks_per_agent=1) as groups:
        with pytest.raises(paramwin.InvalidArgument, match="grouped"):
            TorchAgent(net, torch.optim.Adam(net.parameters()), groups=groups,
                       inherit_optimizer_state=True)


def test_elastic_torch_agent_refuses_bad_input_on_every_rank(comm):
    """TorchElasticAgent's checks are agreed before its collective creation: the rank with the
    bad argument says what, the others which rank (none waits in the creation)."""
    rank = comm.Get_rank()
    net = Net()
    bad = rank == comm.Get_size() - 1
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.0 if bad else 0.9)
    with pytest.raises(paramwin.InvalidArgument, match="keeps no state" if bad else "rank"):
        TorchElasticAgent(net, sgd, comm, members=comm.Get_size(),
                          inherit_optimizer_state=True)
    groups = [{"params": [net.scale], "lr": 0.01},
              {"params": net.lin.parameters(), "lr": 0.02 if bad else 0.01}]
    with pytest.raises(paramwin.InvalidArgument, match=r"\[0.01, 0.02\]" if bad else "rank"):
        TorchElasticAgent(net, torch.optim.SGD(groups), comm, members=comm.Get_size(),
                          hyperparameters={"lr": 1e-3})
    with pytest.raises(paramwin.InvalidArgument, match="no parameters" if bad else "rank"):
        TorchElasticAgent(torch.nn.ReLU() if bad else net, None, comm,
                          members=comm.Get_size())
    # The spare pool's refills: the standing window cannot take spawned spares; a negative
    # pool, a low-water mark above the pool, or spawning ahead without a pool, on one rank
    # fails every rank's Membership.
    with pytest.raises(paramwin.InvalidArgument, match="needs Replacement::new_window"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), spawn_pool=1,
                          replacement="standing_window")
    with pytest.raises(paramwin.InvalidArgument,
                       match="pool is -1, not >= 0" if bad else "another rank's options"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), spawn_pool=-1 if bad else 0)
    with pytest.raises(paramwin.InvalidArgument,
                       match=r"low is 3, not in 0\.\.2" if bad else "another rank's options"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), spawn_pool=2 if bad else 0,
                          spawn_low=3 if bad else 0)
    with pytest.raises(paramwin.InvalidArgument,
                       match="ahead needs a pool" if bad else "another rank's options"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), spawn_ahead=bad)
    # Joins from outside: the same refusal with the standing window, and a joiner needs the
    # population's name.
    with pytest.raises(paramwin.InvalidArgument, match="JoinOptions::service needs "
                       "Replacement::new_window"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), join_service="pw-test",
                          replacement="standing_window")
    with pytest.raises(paramwin.InvalidArgument,
                       match="joining needs JoinOptions::service" if bad
                       else "another rank's options"):
        TorchElasticAgent(net, None, comm, members=comm.Get_size(), joining=bad)
