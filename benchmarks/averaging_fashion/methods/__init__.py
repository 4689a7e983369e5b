"""The method registry: one file per method in this folder, named as the method.

A method file defines ``make(run) -> method``, where the method object has

- ``wrap(run, model) -> module``: what the training loop calls forward/backward on (the model
  itself, or e.g. ``DistributedDataParallel(model)``); the optimizer always holds
  ``run.model``'s parameters;
- ``after_step(run, step)``: called after every optimizer step (``step`` counts from 0);
  averaging methods average here (or begin/finish a background round);
- ``finish(run)``: after the last step, before the final parameters are copied (flush a
  background round, free windows).

``run`` (harness.Run) carries mpi4py's ``COMM_WORLD`` (``run.comm``), the rank and size, the
period ``run.period``, the warm-up ``run.warmup`` and ``run.extra`` (counters the record keeps).
torch.distributed is initialised (gloo, every rank) before any method runs. Files are imported
only when their method is asked for, so a method that needs paramwin's Python package does not
make the others need it. Adding a method = adding a file here (and its name to the script's
list).
"""

from __future__ import annotations

import importlib
import os
from typing import List


def available() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_"))


def make(name: str, run):
    if name not in available():
        raise ValueError(f"unknown method {name!r}; methods: {', '.join(available())}")
    module = importlib.import_module(f"methods.{name}")
    return module.make(run)
