"""Random search with a cosine learning-rate schedule: every agent trains with its initial
hyperparameters (the same draws as every other method's), its learning rate annealed from the
drawn value to 0 over the agent's step budget (``torch.optim.lr_scheduler.CosineAnnealingLR``,
one scheduler step per training step); no exploit, no explore. The honest baseline of a task
where a schedule beats every constant rate: it gets a schedule without searching for one."""

from __future__ import annotations

import torch

import model as M
from common import Context


def run(ctx: Context) -> None:
    hyper = M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed()))
    net = M.make_model(ctx.agent_seed(1))
    opt = M.make_optimizer(net, hyper)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=ctx.steps)
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    step = 0
    while not ctx.out_of_budget(step):
        ctx.train_step(net, opt, batches)
        schedule.step()
        step += 1
        if step % ctx.interval == 0:
            ctx.record(step, ctx.evaluate(net), net, hyper, lr_now=opt.param_groups[0]["lr"])
