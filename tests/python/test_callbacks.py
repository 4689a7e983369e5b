"""Python callables as the agent's hooks: a custom trigger and an explore function that work,
and ones that raise: CallbackError naming the hook with the original exception as its cause,
on every rank, with nothing changed (a throwing trigger undoes the step); on a GroupAgent the
leader's raising trigger makes every rank of the agent raise."""

import numpy as np
import pytest

import paramwin

LAYOUT = paramwin.Layout().add("w", 4)
LAYOUT.add_hyperparameter("lr")


def test_custom_trigger_kills_when_told(comm):
    # Rank 0's trigger fires at step 3; the others never fire, so they stay eligible donors.
    n, rank = comm.Get_size(), comm.Get_rank()
    seen = []

    def trigger(ctx):
        seen.append((ctx.step, ctx.age, ctx.population))
        return ctx.rank == 0 and ctx.step == 3

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, triggers="none", custom_trigger=trigger, k=1,
                        shortfall="clamp") as agent:
        agent.publish([w])
        comm.Barrier()
        events = [agent.step(s, 0.0, [w]) for s in range(1, 5)]
        comm.Barrier()  # every agent stays readable until all have stepped
        assert [s for s, _, _ in seen][:3] == [1, 2, 3] and seen[0][2] == n
        assert not any(e.died or e.deferred for e in events[:2])
        if rank == 0:
            assert events[2].reason == paramwin.DeathReason.custom
            assert events[2].died or events[2].deferred
            if n > 1:
                assert events[2].died and agent.generation == 1
        else:
            assert not any(e.died or e.deferred for e in events)


def test_a_raising_trigger_raises_on_every_rank_and_changes_nothing(comm):
    def trigger(ctx):
        if ctx.step == 2:
            raise ZeroDivisionError("trigger broke")
        return False

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, triggers="none", custom_trigger=trigger, k=1,
                        shortfall="clamp") as agent:
        agent.step(1, 0.0, [w])
        steps, age, version = agent.steps, agent.age, agent.version
        with pytest.raises(paramwin.CallbackError, match="custom_trigger.*ZeroDivisionError: "
                                                         "trigger broke") as info:
            agent.step(2, 0.0, [w])
        assert info.value.hook == "custom_trigger"
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert (agent.steps, agent.age, agent.version) == (steps, age, version)
        comm.Barrier()


def rank0_dies_at(step):
    """A custom trigger: rank 0 dies at ``step``, the others never (eligible donors)."""
    return lambda ctx: ctx.rank == 0 and ctx.step == step


def test_explore_changes_the_reborn_hyperparameters(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    contexts = []

    def explore(ctx, values):
        contexts.append(ctx)
        return {"lr": 0.5 + ctx.generation}

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, seed=9, triggers="none", custom_trigger=rank0_dies_at(2),
                        k=1, shortfall="clamp", custom_explore=explore) as agent:
        agent.set_hyperparameters({"lr": 0.01 * (rank + 1)})
        agent.publish([w])
        comm.Barrier()
        died = [agent.step(s, float(rank), [w]) for s in range(1, 4)]
        comm.Barrier()
        for event in died:
            if event.died:
                assert event.hyper["lr"] == 0.5 + event.generation
                assert agent.hyperparameters["lr"] == 0.5 + event.generation
        if n > 1 and rank == 0:
            assert died[1].died
            assert contexts and isinstance(contexts[0], paramwin.ExploreContext)
            assert len(contexts[0].donors) == 1 and contexts[0].weights == [1.0]
            assert contexts[0].before == {"lr": 0.01}
        if rank != 0:
            assert not contexts


def test_a_raising_explore_function_is_a_callback_error(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    if n < 2:
        pytest.skip("needs a rebirth, so 2 ranks")

    def explore(ctx, values):
        raise KeyError("no such rule")

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, seed=9, triggers="none", custom_trigger=rank0_dies_at(2),
                        k=1, shortfall="clamp", custom_explore=explore) as agent:
        agent.publish([w])
        comm.Barrier()
        agent.step(1, 0.0, [w])
        if rank == 0:
            with pytest.raises(paramwin.CallbackError, match="custom_explore.*KeyError"):
                agent.step(2, 0.0, [w])
        else:
            agent.step(2, 0.0, [w])
        comm.Barrier()


def test_a_raising_trigger_on_a_group_leader_raises_on_every_rank_of_the_agent(comm):
    n = comm.Get_size()
    g = 2 if n >= 2 and n % 2 == 0 else 1

    def trigger(ctx):
        raise ValueError("leader says no")

    with paramwin.AgentGroups(comm, ranks_per_agent=g) as groups:
        w = np.zeros(4, np.float32)
        with paramwin.GroupAgent(groups, LAYOUT, triggers="none", custom_trigger=trigger,
                                 k=1, shortfall="clamp") as agent:
            with pytest.raises(paramwin.Error) as info:
                agent.step(1, 0.0, [w])
            if agent.leader:
                assert isinstance(info.value, paramwin.CallbackError)
                assert "leader says no" in str(info.value)
            else:
                assert "leader" in str(info.value)
            assert agent.steps == 0
            comm.Barrier()


def test_a_hook_must_be_callable(comm):
    with pytest.raises(paramwin.InvalidArgument, match="custom_trigger must be callable"):
        paramwin.Agent(LAYOUT, comm, custom_trigger=3)


def test_every_hook_of_the_cpp_table_is_a_keyword(comm):
    # The C++ hook table (python/src/callbacks.cpp) drives the keywords: each is accepted.
    names = paramwin._core.hook_names()
    assert {"on_rebirth", "reset", "custom_trigger", "custom_explore", "prepare_params"} <= set(names)
    for name in names:
        with paramwin.Agent(LAYOUT, comm, k=1, shortfall="clamp", **{name: None}):
            pass


def test_custom_selection_chooses_the_donor(comm):
    # Rank 0 dies at step 2 and its selection function picks the worst candidate (last of the
    # best-first list, as ranked by the rosters rank 0 read): the reborn parameters are that
    # donor's.
    n, rank = comm.Get_size(), comm.Get_rank()
    if n < 2:
        pytest.skip("needs a donor")
    contexts = []

    def select(ctx):
        contexts.append((ctx.rank, ctx.want, list(ctx.candidates), ctx.direction))
        return [ctx.candidates[-1][0]]

    w = np.full(4, float(rank), np.float32)
    with paramwin.Agent(LAYOUT, comm, triggers="none", custom_trigger=rank0_dies_at(2), k=1,
                        shortfall="clamp", custom_selection=select) as agent:
        agent.publish([w])
        comm.Barrier()
        events = [agent.step(s, float(rank), [w]) for s in range(1, 4)]
        comm.Barrier()
        if rank == 0:
            assert events[1].died
            dying, want, candidates, direction = contexts[0]
            assert (dying, want, direction) == (0, 1, "lower_is_better")
            assert sorted(r for r, _ in candidates) == list(range(1, n))  # all but the dying
            metrics = [m for _, m in candidates]
            assert metrics == sorted(metrics)  # best (lowest) first
            chosen = candidates[-1][0]
            assert [d.rank for d in events[1].donors] == [chosen]
            assert np.all(w == chosen)
        else:
            assert contexts == []


def test_a_raising_selection_raises_and_keeps_the_death_pending(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    if n < 2:
        pytest.skip("needs a donor")

    def select(ctx):
        raise KeyError("no such donor")

    w = np.full(4, float(rank), np.float32)
    with paramwin.Agent(LAYOUT, comm, triggers="none", custom_trigger=rank0_dies_at(2), k=1,
                        shortfall="clamp", custom_selection=select) as agent:
        agent.publish([w])
        comm.Barrier()
        agent.step(1, 0.0, [w])
        if rank == 0:
            with pytest.raises(paramwin.CallbackError, match="custom_selection.*KeyError") as info:
                agent.step(2, 0.0, [w])
            assert info.value.hook == "custom_selection"
            assert agent.generation == 0 and np.all(w == 0.0)
        else:
            agent.step(2, 0.0, [w])
        comm.Barrier()
