"""Random search with a cosine learning-rate schedule: every agent trains with its initial
hyperparameters (the same draws as every other method's), its learning rate annealed from the
drawn value to 0 over the agent's step budget (``torch.optim.lr_scheduler.CosineAnnealingLR``,
one scheduler step per training step); no exploit, no explore. The honest baseline of a task
where a schedule beats every constant rate: it gets a schedule without searching for one.
The loop is random_search's."""

from __future__ import annotations

import random_search
from common import Context


def run(ctx: Context) -> None:
    random_search.run(ctx, anneal=True)
