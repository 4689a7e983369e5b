"""AveragingAgent from Python: every gossip mix equals the weighted mix of the peer versions it
reports (checked against a gathered table of everything every rank published), topologies as
the library names them, consensus, finish(), background rounds, bad input refused on every
rank with the parameters unchanged, and TorchAveragingAgent over a torch module, with the
optimizer's state mixed with the parameters' weights (mix_optimizer_state)."""

import numpy as np
import pytest
import torch

import paramwin
from paramwin.torch import TorchAveragingAgent
from conftest import need_ranks

SHAPE = (4, 3)


def layout():
    return paramwin.Layout().add("w", SHAPE, "float64").add("b", (3,), "float64")


def initial(rank):
    rng = np.random.default_rng(100 + rank)
    return {"w": rng.standard_normal(SHAPE), "b": rng.standard_normal(3)}


def flat(params):
    return np.concatenate([params["w"].ravel(), params["b"].ravel()])


def gathered_table(comm, published):
    """{(rank, version): values} of every rank's publishes."""
    table = {}
    for rank, entries in enumerate(comm.allgather(published)):
        for version, values in entries:
            table[(rank, version)] = values
    return table


@pytest.mark.parametrize("topology", ["all", "ring", "exponential", "random"])
def test_every_mix_is_the_weighted_mix_of_the_versions_it_reports(comm, topology):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    rng = np.random.default_rng(7 + rank)
    params = initial(rank)
    published = []  # (version, values) of each publish of this rank
    rounds = []  # (values before, the round, values after)
    with paramwin.AveragingAgent(layout(), comm, topology=topology, k=1, seed=3) as agent:
        assert agent.publish(params).published
        published.append((agent.version, flat(params).copy()))
        comm.Barrier()
        for _ in range(6):
            params["w"] += 0.1 * rng.standard_normal(SHAPE)  # the "training" of this step
            params["b"] -= 0.05
            before = flat(params).copy()
            r = agent.step(params)
            assert r.kind == "gossip" and r.published
            published.append((r.version, flat(params).copy()))
            rounds.append((before, r, flat(params).copy()))
        assert agent.rounds == 6 and agent.steps == 6
        table = gathered_table(comm, published)
        mixed = 0
        for before, r, after in rounds:
            assert r.applied, r.note
            want = r.self_weight * before
            for p in r.peers:
                if p.skipped == "none":
                    want = want + p.weight * table[(p.rank, p.version)]
                    mixed += 1
            assert abs(r.self_weight + sum(p.weight for p in r.peers) - 1.0) < 1e-12
            np.testing.assert_allclose(after, want, rtol=0, atol=1e-12)
        assert mixed > 0
        comm.Barrier()


def test_topologies_name_the_library_peers():
    assert paramwin.topology_peers("ring", 0, 0, 4) == [3, 1]
    assert paramwin.topology_peers("exponential", 0, 1, 8) == [2]
    assert paramwin.topology_peers("exponential", 2, 1, 8) == [5]
    assert paramwin.topology_peers([[1], [0, 2], [1]], 0, 1, 3) == [0, 2]
    assert paramwin.topology_peers(lambda r, rank, size: [(rank + r + 1) % size], 1, 0, 4) == [2]
    peers = paramwin.topology_peers("random", 5, 2, 6, k=3, seed=11)
    assert len(set(peers)) == 3 and 2 not in peers
    assert peers == paramwin.topology_peers("random", 5, 2, 6, k=3, seed=11)
    assert paramwin.TopologyKind.exponential == "exponential"
    with pytest.raises(paramwin.InvalidArgument, match="itself|own rank|rank 1"):
        paramwin.topology_peers(lambda r, rank, size: [rank], 0, 1, 4)
    with pytest.raises(paramwin.InvalidArgument, match="topology"):
        paramwin.topology_peers("star", 0, 0, 4)


def test_a_custom_topology_callable_chooses_the_peers(comm):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    calls = []

    def previous(round_, r, size):
        calls.append(round_)
        return [(r - 1) % size]

    params = initial(rank)
    with paramwin.AveragingAgent(layout(), comm, topology=previous) as agent:
        assert calls, "the options check probes the callable at creation"
        calls.clear()
        agent.publish(params)
        comm.Barrier()
        r = agent.step(params)
        assert [p.rank for p in r.peers] == [(rank - 1) % n]
        assert calls == [0]  # round 0, called once
        comm.Barrier()


@pytest.mark.parametrize("topology", ["all", "ring"])
def test_rounds_without_training_reach_consensus_and_finish_is_the_mean(comm, topology):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    params = initial(rank)
    mean = sum(flat(initial(r)) for r in range(comm.Get_size())) / comm.Get_size()
    with paramwin.AveragingAgent(layout(), comm, topology=topology) as agent:
        agent.publish(params)
        comm.Barrier()
        spread = np.inf
        for _ in range(200):
            agent.step(params)
            comm.Barrier()  # rounds in lock step: each reads the others' latest mix
            values = comm.allgather(flat(params))
            spread = max(np.max(np.abs(v - values[0])) for v in values)
            if spread < 1e-6:
                break
        assert spread < 1e-6
        # Pull-only gossip need not keep the mean (a rank may read a peer's value already
        # mixed in this round); finish() is a collective mean of what the ranks hold.
        held = np.mean(comm.allgather(flat(params)), axis=0)
        r = agent.finish(params)
        assert r.kind == "synchronous" and r.applied
        values = comm.allgather(flat(params))
        for v in values:
            np.testing.assert_array_equal(v, values[0])
        np.testing.assert_allclose(values[0], held, rtol=0, atol=1e-12)
        assert np.max(np.abs(values[0] - mean)) < 1.0  # near the start's mean, not equal


@pytest.mark.parametrize("topology", ["all", "random"])
def test_symmetric_rounds_reach_consensus_at_the_starting_mean(comm, topology):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    params = initial(rank)
    mean = sum(flat(initial(r)) for r in range(comm.Get_size())) / comm.Get_size()
    with paramwin.AveragingAgent(layout(), comm, topology=topology, seed=5,
                                 symmetric=True) as agent:
        agent.publish(params)
        comm.Barrier()
        received = 0
        agreeing = 0  # consecutive steps in agreement: exchanges still pending undo one
        for _ in range(400):
            received += agent.step(params).received
            comm.Barrier()
            values = comm.allgather(flat(params))
            agreeing = agreeing + 1 if max(np.max(np.abs(v - values[0]))
                                           for v in values) < 1e-6 else 0
            if agreeing == 3:
                break
        agent.pause()
        comm.Barrier()  # every round's exchanges are in the inboxes
        r = agent.step(params)  # paused: drains only
        received += r.received
        assert r.round == -1
        assert comm.allreduce(received) > 0
        held = np.mean(comm.allgather(flat(params)), axis=0)
        np.testing.assert_allclose(held, mean, rtol=0, atol=1e-12)  # the mean never moved
        assert np.max(np.abs(flat(params) - mean)) < 2e-6


def test_background_rounds_are_applied_and_finish_agrees(comm):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    params = initial(rank)
    applied = 0
    with paramwin.AveragingAgent(layout(), comm, background=True) as agent:
        agent.publish(params)
        comm.Barrier()
        for _ in range(20):
            params["b"] += 0.01
            r = agent.step(params)
            applied += r.background_applied
        assert applied > 0
        agent.finish(params)
        values = comm.allgather(flat(params))
        for v in values:
            np.testing.assert_array_equal(v, values[0])


def test_warmup_steps_are_collective_means(comm):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    params = initial(rank)
    with paramwin.AveragingAgent(layout(), comm, warmup_steps=2, topology="ring") as agent:
        agent.publish(params)
        r = agent.step(params)
        assert r.kind == "synchronous"
        values = comm.allgather(flat(params))
        np.testing.assert_array_equal(values[rank], values[0])
        agent.step(params)
        r = agent.step(params)
        assert r.kind == "gossip"


def test_bad_options_are_refused_on_every_rank(comm):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    with pytest.raises(paramwin.InvalidArgument, match="interval"):
        paramwin.AveragingAgent(layout(), comm, interval=0)
    with pytest.raises(paramwin.InvalidArgument, match="sum|1"):
        paramwin.AveragingAgent(layout(), comm, self_weight=0.5,
                                peer_weights=[0.9] * (comm.Get_size() - 1))
    # Only rank 0's options are wrong: every rank raises (the others naming rank 0).
    with pytest.raises(paramwin.InvalidArgument, match="self_weight"):
        paramwin.AveragingAgent(layout(), comm, self_weight=-1.0 if rank == 0 else 0.5)
    with pytest.raises(paramwin.InvalidArgument, match="topology"):
        paramwin.AveragingAgent(layout(), comm, topology=[[5]] * comm.Get_size())
    with pytest.raises(paramwin.InvalidArgument, match="symmetric averaging runs its rounds"):
        paramwin.AveragingAgent(layout(), comm, symmetric=True, background=True)
    with pytest.raises(paramwin.InvalidArgument, match="topology"):
        paramwin.AveragingAgent(layout(), comm, topology=3.5)
    other = paramwin.Layout().add("w", SHAPE, "float64")
    with pytest.raises(paramwin.LayoutMismatch):
        paramwin.AveragingAgent(other if rank == 1 else layout(), comm)


def test_wrong_arrays_change_nothing(comm):
    need_ranks(comm, 2)
    params = initial(comm.Get_rank())
    with paramwin.AveragingAgent(layout(), comm) as agent:
        agent.publish(params)
        comm.Barrier()
        bad = {"w": np.zeros((3, 4)), "b": params["b"]}
        keep = flat(params).copy()
        with pytest.raises(paramwin.InvalidArgument, match="shape"):
            agent.step(bad)
        with pytest.raises(paramwin.InvalidArgument, match="dtype|float32"):
            agent.step({"w": params["w"].astype(np.float32), "b": params["b"]})
        np.testing.assert_array_equal(flat(params), keep)
        assert agent.steps == 0
        comm.Barrier()
    with pytest.raises(paramwin.InvalidArgument, match="closed"):
        agent.step(params)


def test_torch_module_averages_in_place(comm):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    storage = [p.data_ptr() for p in model.parameters()]
    with pytest.raises(paramwin.InvalidArgument, match="host"):
        TorchAveragingAgent(model, comm, memory="cuda")
    with TorchAveragingAgent(model, comm, topology="all") as agent:
        for _ in range(3):
            x = torch.randn(8, 5)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            r = agent.step()
            assert r.kind == "gossip"
        assert [p.data_ptr() for p in model.parameters()] == storage  # mixed in place
        agent.finish()
        mine = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
        for v in comm.allgather(mine):
            np.testing.assert_array_equal(v, mine)


def torch_model(rank, device="cpu"):
    torch.manual_seed(rank)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 2)).double().to(device)


def torch_device(comm, where):
    """The device of the test's module: the CPU, or this rank's GPU (ranks share the GPUs
    round-robin; skipped on every rank alike where torch sees none)."""
    if where == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False")
    return torch.device("cuda", comm.Get_rank() % torch.cuda.device_count())


def make_optimizer(kind, model):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=0.01, amsgrad=kind == "amsgrad")


def state_fields(kind):
    return {"sgd": ["momentum_buffer"], "adam": ["exp_avg", "exp_avg_sq"],
            "amsgrad": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]}[kind]


def model_and_state(model, opt, kind):
    """The parameters, then each parameter's state tensors (zeros where it has none), flat."""
    parts = [p.detach().reshape(-1) for p in model.parameters()]
    for p in model.parameters():
        state = opt.state.get(p, {})
        for field in state_fields(kind):
            t = state.get(field)
            parts.append(torch.zeros(p.numel(), dtype=p.dtype, device=p.device) if t is None
                         else t.detach().reshape(-1))
    return torch.cat(parts).cpu().numpy().copy()


def own_steps(model, opt):
    return [float(opt.state[p]["step"]) if "step" in opt.state.get(p, {}) else 0.0
            for p in model.parameters()]


def train_step(model, opt, rng):
    x = torch.from_numpy(rng.standard_normal((8, 5))).to(next(model.parameters()).device)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


@pytest.mark.parametrize("kind", ["adam", "amsgrad", "sgd"])
@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_torch_optimizer_state_is_mixed_with_the_parameters_weights(comm, kind, background,
                                                                      where):
    """CPU modules in place; CUDA ones (parameters and moments) staged through host buffers."""
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    rng = np.random.default_rng(50 + rank)
    model = torch_model(rank, torch_device(comm, where))
    opt = make_optimizer(kind, model)
    published = []  # (version, parameters and state) of each publish of this rank
    rounds = []  # (values before the step, the round, values after)
    with TorchAveragingAgent(model, comm, optimizer=opt, mix_optimizer_state=True,
                             topology="all", background=background) as agent:
        assert agent.agent.layout.names[4:6] == (
            ["optimizer/0.weight/momentum_buffer", "optimizer/0.weight/has_momentum_buffer"]
            if kind == "sgd" else ["optimizer/0.weight/exp_avg", "optimizer/0.weight/exp_avg_sq"])
        published.append((agent.publish().version, model_and_state(model, opt, kind)))
        comm.Barrier()
        for t in range(8):
            train_step(model, opt, rng)
            if rank == 0 and t % 3 == 0:
                train_step(model, opt, rng)  # rank 0 ahead: Adam's step counts differ
            before, steps = model_and_state(model, opt, kind), own_steps(model, opt)
            r = agent.step()
            assert own_steps(model, opt) == steps  # the step count is each rank's own
            if r.published:
                published.append((r.version, model_and_state(model, opt, kind)))
            rounds.append((before, r, model_and_state(model, opt, kind)))
            comm.Barrier()  # rounds in lock step: the peers have published
        table = gathered_table(comm, published)
        check_mixes(rounds, table, background)
        assert agent.optimizer_states_mixed > 0
        steps = own_steps(model, opt)
        agent.finish()
        assert own_steps(model, opt) == steps
        mine = model_and_state(model, opt, kind)
        for v in comm.allgather(mine):
            np.testing.assert_array_equal(v, mine)  # every rank: the same weights and state


def check_mixes(rounds, table, background):
    """Every applied round's values are the weighted mix of the published versions it reports
    (inline: of the values before it; background: the correction lands on the progress)."""
    mixed = 0
    for before, r, after in rounds:
        if background:
            if r.background_applied:
                mixed += 1
            continue
        assert r.applied, r.note
        want = r.self_weight * before
        for p in r.peers:
            if p.skipped == "none":
                want = want + p.weight * table[(p.rank, p.version)]
                mixed += 1
        np.testing.assert_allclose(after, want, rtol=0, atol=1e-12)
    assert mixed > 0


def test_torch_optimizer_state_mixing_refuses_bad_input_on_every_rank(comm):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    model = torch_model(rank)
    with pytest.raises(paramwin.InvalidArgument, match="needs an optimizer"):
        TorchAveragingAgent(model, comm, mix_optimizer_state=True)
    with pytest.raises(paramwin.InvalidArgument, match="keeps no state"):
        TorchAveragingAgent(model, comm, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                            mix_optimizer_state=True)
    # Only rank 0's optimizer is unsupported: every rank raises (the others naming rank 0).
    opt = (torch.optim.RMSprop(model.parameters()) if rank == 0
           else torch.optim.Adam(model.parameters()))
    with pytest.raises(paramwin.InvalidArgument, match="RMSprop" if rank == 0 else "rank 0"):
        TorchAveragingAgent(model, comm, optimizer=opt, mix_optimizer_state=True)
    # Without the option the optimizer's state is left alone.
    adam = torch.optim.Adam(model.parameters())
    with TorchAveragingAgent(model, comm, optimizer=adam) as agent:
        train_step(model, adam, np.random.default_rng(rank))
        n = sum(p.numel() for p in model.parameters())
        kept = model_and_state(model, adam, "adam")[n:]
        agent.step()
        np.testing.assert_array_equal(model_and_state(model, adam, "adam")[n:], kept)
        assert agent.optimizer_states_mixed == 0
        comm.Barrier()


def test_hierarchical_groups_mean_every_step_and_finish_agrees(comm):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    if n % 2:
        pytest.skip("needs groups of 2 ranks")
    params = initial(rank)
    mean = sum(flat(initial(r)) for r in range(n)) / n
    with paramwin.AgentGroups(comm, ranks_per_agent=2) as groups:
        group_comm = groups.agent_comm
        with paramwin.HierarchicalAveragingAgent(groups, layout(), topology="all",
                                                 wire="native") as agent:
            assert agent.group == rank // 2 and agent.group_size == 2
            assert agent.leader == (rank % 2 == 0)
            agent.publish(params)
            for t in range(5):
                params["b"] += 0.01 * (rank + 1)
                before = group_comm.allgather(flat(params))
                r = agent.step(params)
                assert r.group == agent.group and r.group_size == 2
                members = group_comm.allgather(flat(params))
                np.testing.assert_array_equal(members[0], members[1])
                if not r.across.applied:
                    np.testing.assert_allclose(members[0], (before[0] + before[1]) / 2,
                                               rtol=0, atol=1e-12)
                if not agent.leader:
                    assert r.across.peers == [] and "leader" in r.across.note
            comm.Barrier()
            params = initial(rank)  # fresh values: finish() is then exactly the global mean
            agent.finish(params)
            everyone = comm.allgather(flat(params))
            for v in everyone:
                np.testing.assert_array_equal(v, everyone[0])
            np.testing.assert_allclose(everyone[0], mean, rtol=0, atol=1e-12)
        with pytest.raises(paramwin.InvalidArgument, match="float32 or float64"):
            paramwin.HierarchicalAveragingAgent(groups, paramwin.Layout().add("h", 3, "float16"))
