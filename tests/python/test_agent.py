"""Agent from Python: a population run where every rebirth equals the mean of the donors
it records (rank and version), checked against what every donor published at that version;
keyword and string options; callbacks; pause as a context manager."""

import numpy as np

import paramwin

LAYOUT = paramwin.Layout().add("w", (5, 3)).add("b", 3, "float64").add("s", ())
STEPS = 60


def params_at(rank, step):
    v = float(rank * 1000 + step)
    return [np.full((5, 3), v, np.float32), np.full(3, v), np.array(v, np.float32)]


def value_of(params):
    v = float(params[0].flat[0])
    for p in params:
        assert (p == v).all(), "a layer was not written whole"
    return v


def test_every_rebirth_is_the_mean_of_its_recorded_donors(comm):
    rank, n = comm.Get_rank(), comm.Get_size()
    k = min(2, max(n - 1, 1))
    rebirths = []
    published = {}  # version -> value this rank published at it
    notified = []
    with paramwin.Agent(LAYOUT, comm, seed=11, age=(3, 6), k=k, selection="uniform",
                        shortfall="clamp", on_rebirth=lambda ev: notified.append(ev.step)) as agent:
        params = params_at(rank, 0)
        published[agent.publish(params).version] = 0.0 + rank * 1000
        comm.Barrier()
        for step in range(1, STEPS + 1):
            for p, v in zip(params, params_at(rank, step)):
                p[...] = v
            event = agent.step(step, metric=float(rank), params=params)
            assert event.rank == rank and event.iteration == step
            if event.died:
                rebirths.append(([(d.rank, d.version) for d in event.donors], value_of(params)))
                assert event.reason == "age" and event.mixing == "mean"
            if event.published:
                published[event.version] = value_of(params)
        assert agent.generation == len(rebirths) == len(notified)
        assert agent.stats.deaths == len(rebirths) and agent.stats.steps == STEPS
        comm.Barrier()  # every agent stays readable until all have finished
    everyone = comm.allgather(published)
    for donors, got in rebirths:
        assert 1 <= len(donors) <= k
        want = sum(everyone[r][v] for r, v in donors) / len(donors)
        assert got == want, f"rebirth from {donors}: {got} != mean {want}"
    if n > 1:
        assert rebirths, "60 steps with ages 3..6 and donors: some rebirth must happen"


def test_options_string_pause_and_closed_agent(comm):
    rank, n = comm.Get_rank(), comm.Get_size()
    agent = paramwin.Agent(LAYOUT, comm, options="seed=3 age=2..2 shortfall=clamp k=1")
    params = params_at(rank, 0)
    agent.publish(params)
    comm.Barrier()
    with agent.paused():
        assert agent.is_paused
        event = agent.step(1, 0.0, params)
        assert event.paused and not event.published
        if n > 1:
            assert any(e.state == "paused" for e in agent.roster_all() if e.rank == rank)
    assert not agent.is_paused
    comm.Barrier()
    agent.close()
    assert agent.closed
    try:
        agent.step(2, 0.0, params)
    except paramwin.InvalidArgument as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("step on a closed agent must raise")


def test_option_keys_come_from_the_library_table(comm):
    keys = {k: (aliases, value, doc) for k, aliases, value, doc in paramwin.option_keys()}
    assert {"seed", "selection", "k", "checkpoint_every", "explore.NAME"} <= set(keys)
    assert keys["worst_fraction"][0] == "fraction"
    assert all(doc for _, _, doc in keys.values()), "every key has a one-line doc"
    try:
        paramwin.Agent(LAYOUT, comm, no_such_key=1)
    except paramwin.InvalidArgument as e:
        # The unknown-key message lists the table's keys, on every rank.
        assert "unknown option 'no_such_key'" in str(e) and "checkpoint_async" in str(e)
    else:
        raise AssertionError("an unknown option must raise")
