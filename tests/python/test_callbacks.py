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
    n = comm.Get_size()
    seen = []

    def trigger(ctx):
        seen.append((ctx.step, ctx.age, ctx.population))
        return ctx.step == 3

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, triggers="none", custom_trigger=trigger, k=1,
                        shortfall="clamp") as agent:
        agent.publish([w])
        comm.Barrier()
        events = [agent.step(s, 0.0, [w]) for s in range(1, 5)]
        assert [s for s, _, _ in seen][:3] == [1, 2, 3] and seen[0][2] == n
        assert events[2].reason == paramwin.DeathReason.custom
        assert events[2].died or events[2].deferred
        assert not any(e.died or e.deferred for e in events[:2])
        if n > 1:
            assert events[2].died and agent.generation == 1
        comm.Barrier()


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


def test_explore_changes_the_reborn_hyperparameters(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    contexts = []

    def explore(ctx, values):
        contexts.append(ctx)
        return {"lr": 0.5 + ctx.generation}

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, seed=9, age=(2, 2), k=1, shortfall="clamp",
                        custom_explore=explore) as agent:
        agent.set_hyperparameters({"lr": 0.01 * (rank + 1)})
        agent.publish([w])
        comm.Barrier()
        for s in range(1, 6):
            event = agent.step(s, float(rank), [w])
            if event.died:
                assert event.hyper["lr"] == 0.5 + event.generation
                assert agent.hyperparameters["lr"] == 0.5 + event.generation
        if n > 1:
            assert contexts and isinstance(contexts[0], paramwin.ExploreContext)
            assert len(contexts[0].donors) == 1 and contexts[0].weights == [1.0]
        comm.Barrier()


def test_a_raising_explore_function_is_a_callback_error(comm):
    n = comm.Get_size()
    if n < 2:
        pytest.skip("needs a rebirth, so 2 ranks")

    def explore(ctx, values):
        raise KeyError("no such rule")

    w = np.zeros(4, np.float32)
    with paramwin.Agent(LAYOUT, comm, seed=9, age=(2, 2), k=1, shortfall="clamp",
                        custom_explore=explore) as agent:
        agent.publish([w])
        comm.Barrier()
        agent.step(1, 0.0, [w])
        with pytest.raises(paramwin.CallbackError, match="custom_explore.*KeyError"):
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
