"""Random search: every agent trains with its initial hyperparameters (the same draws as every
other method's), no exploit, no explore."""

from __future__ import annotations

import torch

import model as M
from common import Context


def run(ctx: Context) -> None:
    hyper = M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed()))
    net = M.make_model(ctx.agent_seed(1))
    opt = M.make_optimizer(net, hyper)
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    step = 0
    while not ctx.out_of_budget(step):
        ctx.train_step(net, opt, batches)
        step += 1
        if step % ctx.interval == 0:
            ctx.record(step, ctx.evaluate(net), net, hyper)
