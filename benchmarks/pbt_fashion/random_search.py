"""Random search: every agent trains with its initial hyperparameters (the same draws as every
other method's), no exploit, no explore."""

from __future__ import annotations

import torch

import model as M
from common import Context


def run(ctx: Context, anneal: bool = False) -> None:
    """With ``anneal`` the learning rate falls from the draw to 0 over the agent's steps
    (cosine; random_cosine.py), and each record carries the rate then in force (``lr_now``)."""
    hyper = M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed()))
    net = M.make_model(ctx.agent_seed(1))
    opt = M.make_optimizer(net, hyper)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=ctx.steps) if anneal else None
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    step = 0
    while not ctx.out_of_budget(step):
        ctx.train_step(net, opt, batches)
        if schedule is not None:
            schedule.step()
        step += 1
        if step % ctx.interval == 0:
            extra = {"lr_now": opt.param_groups[0]["lr"]} if anneal else {}
            ctx.record(step, ctx.evaluate(net), net, hyper, **extra)
