"""The baseline: PBT whose exploit goes through checkpoint files, as Ray Tune's does.

At every interval boundary the agents agree on one ranking (an allgather of the validation
metric, like Ray's ``synch=True``); the top ceil(q·n) (at most n/2) save their model and
optimizer state with ``torch.save`` (Ray checkpoints the upper quantile), and each of the
bottom ceil(q·n) loads a random top agent's file with ``torch.load`` and explores its
hyperparameters (resample with probability 0.25, else perturb by 0.8 or 1.2, as Ray).
Each exploit's cost is recorded: the donor's save and the loader's load, in seconds.
With ``anneal`` (method checkpoint_pbt_cosine) the searched learning rate is the peak of a
cosine schedule over the agent's steps (model.anneal_lr), as random_cosine's.
"""

from __future__ import annotations

import os
import time

import torch

import model as M
from common import Context, explore, pbt_counts, polite_allgather, polite_barrier

QUANTILE = 0.25


def run(ctx: Context, anneal: bool = False) -> None:
    hyper = M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed()))
    net = M.make_model(ctx.agent_seed(1))
    opt = M.make_optimizer(net, hyper)
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    rng = torch.Generator().manual_seed(ctx.agent_seed(3))
    ckpt_dir = os.path.join(ctx.out_dir, f"ckpt-{ctx.method}-seed{ctx.seed}")
    os.makedirs(ckpt_dir, exist_ok=True)
    step = 0
    done = False
    while not done:
        lr_now = M.anneal_lr(opt, hyper, step, ctx.steps) if anneal else None
        ctx.train_step(net, opt, batches)
        step += 1
        if step % ctx.interval:
            continue
        val = ctx.evaluate(net)
        now = {"lr_now": lr_now} if anneal else {}
        # Every agent stops at the same boundary (one agent out of budget stops them all),
        # so the collectives below always match.
        rows = polite_allgather(ctx.comm, (val, ctx.rank, ctx.out_of_budget(step)))
        done = any(r[2] for r in rows)
        if done:
            ctx.record(step, val, net, hyper, **now)
            break
        order = sorted(rows, key=lambda r: (-r[0], r[1]))  # best first, ties by rank
        tail = pbt_counts(ctx.size, QUANTILE)
        top = [r[1] for r in order[:tail]]
        bottom = [r[1] for r in order[len(order) - tail:]]
        extra = dict(now)
        if ctx.rank in top:
            t0 = time.perf_counter()
            path = os.path.join(ckpt_dir, f"{ctx.rank}.pt")
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                        "hyper": hyper}, path + ".tmp")
            os.replace(path + ".tmp", path)
            extra["save_seconds"] = time.perf_counter() - t0
        polite_barrier(ctx.comm)
        if ctx.rank in bottom:
            donor = top[int(torch.randint(len(top), (1,), generator=rng))]
            t0 = time.perf_counter()
            state = torch.load(os.path.join(ckpt_dir, f"{donor}.pt"))
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            extra["load_seconds"] = time.perf_counter() - t0
            hyper = explore(state["hyper"], rng)
            M.apply_hyper(opt, hyper)
            extra.update({"died": True, "donor": donor, "val_before": val})
            val = next(r[0] for r in rows if r[1] == donor)  # the loaded weights' metric
        # The save and load above are part of training time: they stay on the clock.
        polite_barrier(ctx.comm)  # nobody overwrites a file another agent is still loading
        ctx.record(step, val, net, hyper, **extra)
