"""Optuna's TPE sampler with its median pruner, the agents as parallel workers of one study.

Every agent runs trials one after another until its step budget (or the wall-clock budget) is
spent. A trial trains a fresh model for up to ``trial_steps`` steps, reports the validation
accuracy every interval and stops early when the median pruner says so. The first trial of
the study are the agents' initial draws (the same as random search's); TPE proposes the rest from the
study, which the agents share through a journal file (Optuna's JournalFileStorage, read under
its writers' lock: LockedJournalFile).
"""

from __future__ import annotations

import os

import optuna
import torch

import model as M
from common import Context, polite_barrier

TRIALS_PER_AGENT = 3  # a full-length trial is steps / 3: pruning buys room for more


class LockedJournalFile(optuna.storages.JournalFileStorage):
    """Optuna's journal file, read under the lock its writers take.

    Optuna 3.1 (Debian 12's) reads the journal without that lock, so a reader can meet half of
    a line another process is appending and fail with a JSONDecodeError (optuna#5138, fixed in
    optuna 3.6 by #5195). It happened to CI's 4-rank run. Reading under the writers' lock means
    every line a reader sees is whole.
    """

    def __init__(self, path: str) -> None:
        self._shared_lock = optuna.storages.JournalFileSymlinkLock(path)
        super().__init__(path, lock_obj=self._shared_lock)

    def read_logs(self, log_number_from: int) -> list:
        self._shared_lock.acquire()
        try:
            return super().read_logs(log_number_from)
        finally:
            self._shared_lock.release()


def _study(ctx: Context) -> optuna.Study:
    path = os.path.join(ctx.out_dir, f"optuna-{ctx.method}-seed{ctx.seed}.journal")
    if ctx.rank == 0 and os.path.exists(path):
        os.remove(path)
    polite_barrier(ctx.comm)
    storage = optuna.storages.JournalStorage(LockedJournalFile(path))
    name = f"fashion-seed{ctx.seed}"
    sampler = optuna.samplers.TPESampler(seed=ctx.agent_seed(4))
    pruner = optuna.pruners.MedianPruner(n_startup_trials=ctx.size, n_warmup_steps=1)
    if ctx.rank == 0:
        optuna.create_study(study_name=name, storage=storage, direction="maximize")
    polite_barrier(ctx.comm)
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def run(ctx: Context) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _study(ctx)
    distributions = {name: optuna.distributions.FloatDistribution(lo, hi, log=True)
                     for name, (lo, hi) in M.SPACE.items()}
    trial_steps = max(ctx.interval, ctx.steps // TRIALS_PER_AGENT)
    batches = M.Batches(ctx.data.train, ctx.agent_seed(2))
    # The initial draws (random search's) are the first trials, whichever agent asks first.
    study.enqueue_trial(M.initial_hyper(torch.Generator().manual_seed(ctx.agent_seed())))
    polite_barrier(ctx.comm)
    step = 0  # this agent's total training steps, over all its trials
    number = 0
    while not ctx.out_of_budget(step):
        trial = study.ask(distributions)
        hyper = dict(trial.params)
        net = M.make_model(ctx.agent_seed(100 + number))
        opt = M.make_optimizer(net, hyper)
        val, state = 0.0, optuna.trial.TrialState.COMPLETE
        for local in range(1, trial_steps + 1):
            ctx.train_step(net, opt, batches)
            step += 1
            if local % ctx.interval == 0 or ctx.out_of_budget(step):
                val = ctx.evaluate(net)
                trial.report(val, (local + ctx.interval - 1) // ctx.interval)
                ctx.record(step, val, net, hyper, trial=trial.number)
                if ctx.out_of_budget(step):
                    break
                if trial.should_prune():
                    state = optuna.trial.TrialState.PRUNED
                    break
        study.tell(trial, val if state == optuna.trial.TrialState.COMPLETE else None,
                   state=state)
        number += 1
