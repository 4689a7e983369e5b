"""paramwin's PBT (asynchronous and synchronous) and PB2, through paramwin.torch.TorchAgent.

Every agent calls ``step`` once per interval with its validation accuracy: the population
ranks on it, the bottom quantile is reborn from a top-quantile donor's parameters read
one-sidedly from its window (the donor keeps training), and explores the donor's
hyperparameters (PBT: perturb or resample; PB2: a GP bandit's choice); the optimizer's momentum
buffers are inherited with the parameters (``inherit_optimizer_state``). Each rebirth records
``exploit_seconds`` (the step's pull phase: reading the donor's parameters into the model, the
counterpart of the baseline's torch.save + torch.load) and ``rebirth_seconds`` (the whole
``step`` call: ranking, selection, the pull, explore, the republish, and in the synchronous
mode the wait for the other agents). paramwin_pbt_cosine: the asynchronous preset searching the
peak of a cosine learning-rate schedule over the agent's steps (model.anneal_lr), as
random_cosine's. paramwin_pbt_same: the asynchronous preset ranking at the same iteration
(same_iteration=true).
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict

import torch

import model as M
from common import Context, explore, pbt_counts, polite_allgather

from paramwin.torch import TorchAgent

# The options of each paramwin method on top of the shared ones (see options()).
# ``step`` is called once per interval, so the worst-fraction check runs at every call.
METHOD_OPTIONS: Dict[str, Dict[str, Any]] = {
    "paramwin_pbt": {"preset": "pbt", "worst_every": 1},
    "paramwin_pbt_sync": {"preset": "pbt", "worst_every": 1, "sync": True},
    "paramwin_pb2": {"preset": "pbt", "worst_every": 1, "explore_kind": "pb2"},
    # The synchronous mode deciding as the checkpoint-file baseline does, draw for draw: its
    # explore is the baseline's (common.explore on the baseline's per-agent generator, which
    # first draws the donor among the top agents). Same seed, same draws: the two methods
    # make the same decisions, so any difference between their runs is the exploit's own.
    "paramwin_pbt_sync_twin": {"preset": "pbt", "worst_every": 1, "sync": True},
    "paramwin_pbt_cosine": {"preset": "pbt", "worst_every": 1},
    # The asynchronous preset ranking each agent with the others at iterations both have
    # reported (docs/agent.md, "Ranking at the same iteration").
    "paramwin_pbt_same": {"preset": "pbt", "worst_every": 1, "same_iteration": True},
}


def searched(ctx: Context, name: str) -> str:
    """The agent's name of a hyperparameter of M.SPACE. The _cosine form searches the
    schedule's peak as "lr_peak": a TorchAgent hyperparameter named "lr" is the optimizer's
    current rate (each step takes it from the optimizer), which the schedule lowers."""
    return "lr_peak" if name == "lr" and ctx.method.endswith("_cosine") else name


def options(ctx: Context) -> Dict[str, Any]:
    # The donor's momentum buffers travel with its weights, as the checkpoint-file baseline's.
    opts = {"seed": ctx.seed, "direction": "higher_is_better", "inherit_optimizer_state": True,
            "event_log": os.path.join(ctx.out_dir, f"events-{ctx.method}-seed{ctx.seed}-{{rank}}.jsonl")}
    for name, (lo, hi) in M.SPACE.items():
        opts[f"explore.{searched(ctx, name)}"] = f"log_uniform:{lo!r}..{hi!r}"
    opts.update(METHOD_OPTIONS[ctx.method])
    return opts


def baseline_explore(ctx: Context):
    """paramwin_pbt_sync_twin's custom_explore: the checkpoint-file baseline's explore of the
    donor's values on the baseline's generator (checkpoint_pbt.run: the same seed and draws,
    the donor's draw among the top agents first)."""
    rng = torch.Generator().manual_seed(ctx.agent_seed(3))
    top = pbt_counts(ctx.size, 0.25)

    def explore_like_baseline(context, values):
        int(torch.randint(top, (1,), generator=rng))  # the baseline's donor draw
        return explore(dict(context.donors[0]), rng)

    return explore_like_baseline


def run(ctx: Context) -> None:
    hyper = M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed()))
    net = M.make_model(ctx.agent_seed(1))
    opt = M.make_optimizer(net, hyper)
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    hooks = {"custom_explore": baseline_explore(ctx)} if ctx.method.endswith("_twin") else {}
    declared = {searched(ctx, k): v for k, v in hyper.items()}

    def plain(values: Dict[str, Any]) -> Dict[str, Any]:  # M.SPACE's names, for the records
        return {("lr" if k == "lr_peak" else k): v for k, v in values.items()}

    with TorchAgent(net, opt, ctx.comm, hyperparameters=declared, **options(ctx), **hooks) as agent:
        agent.publish()
        step = 0
        anneal = ctx.method.endswith("_cosine")
        lr_now = None
        while True:
            if anneal:  # hyper: the agent's, as its last step left them
                lr_now = M.anneal_lr(opt, hyper, step, ctx.steps)
            ctx.train_step(net, opt, batches)
            step += 1
            if step % ctx.interval:
                continue
            val = ctx.evaluate(net)
            last = ctx.out_of_budget(step)
            if METHOD_OPTIONS[ctx.method].get("sync"):
                # The synchronous mode's step is collective: everyone stops at one boundary.
                last = any(polite_allgather(ctx.comm, last))
            t0 = time.perf_counter()
            event = agent.step(step // ctx.interval, val)
            seconds = time.perf_counter() - t0
            hyper = plain(dict(agent.hyperparameters))
            extra: Dict[str, Any] = {"step_seconds": seconds}
            if anneal:
                extra["lr_now"] = lr_now
            if event.died:
                M.apply_hyper(agent.optimizer, hyper)  # lr is TorchAgent's; weight decay ours
                extra.update({"died": True, "rebirth_seconds": seconds, "val_before": val,
                              "exploit_seconds": event.seconds.pull,
                              "donors": [d.rank for d in event.donors]})
            ctx.record(step, val, net, hyper, **extra)
            if last:
                agent.agent.leave()  # a finished agent is no donor and no death candidate
                break
