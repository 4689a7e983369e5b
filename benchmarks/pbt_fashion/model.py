"""The model every method trains, its optimizer, one training step and the evaluations.

A small MLP (784-128-10, ReLU; 101,770 float32 parameters) trained with SGD + Nesterov
momentum 0.9 on mini-batches of 64. Small on purpose: Debian's PyTorch multiplies matrices with
the reference BLAS (``BLAS_INFO=generic``), so a step's time grows with the parameters, and a
run is 4 agents on the 2 cores of the development machine (docs/pbt-fashion.md gives the
measured step time). Two hyperparameters are searched: the learning rate and
the weight decay (both log scale). One thread per rank (``torch.set_num_threads(1)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from data import Split
from tasks import TASKS

BATCH = 64
MOMENTUM = 0.9
# The search space every method shares (the explore bounds of the PBT methods, the TPE
# distributions, the initial draws): the task's (use_task), read at every use.
SPACE = dict(TASKS["default"]["space"])


def use_task(name: str) -> None:
    """Makes ``name``'s search space the one every method reads (SPACE, in place)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: one of {sorted(TASKS)}")
    SPACE.clear()
    SPACE.update(TASKS[name]["space"])


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def make_optimizer(model: torch.nn.Module, hyper: Dict[str, float]) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=hyper["lr"], momentum=MOMENTUM,
                           nesterov=True, weight_decay=hyper["weight_decay"])


def apply_hyper(optimizer: torch.optim.Optimizer, hyper: Dict[str, float]) -> None:
    """Sets every param group's lr and weight decay (after an exploit/explore)."""
    for group in optimizer.param_groups:
        group["lr"] = float(hyper["lr"])
        group["weight_decay"] = float(hyper["weight_decay"])


def anneal_lr(optimizer: torch.optim.Optimizer, hyper: Dict[str, float], step: int,
              steps: int) -> float:
    """The PBT methods' `_cosine` forms: sets every param group's lr to the searched rate
    hyper["lr"] annealed to 0 over the agent's steps, the rate for its training step @p step
    (0-based): the same cosine as random_cosine's CosineAnnealingLR (T_max = steps), so that the
    search acts on the schedule's peak. Returns the rate."""
    lr = float(hyper["lr"]) * 0.5 * (1.0 + math.cos(math.pi * min(step, steps) / steps))
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def initial_hyper(rng: torch.Generator) -> Dict[str, float]:
    """A log-uniform draw from SPACE: the same draw for every method, given the seed."""
    out = {}
    for name, (lo, hi) in SPACE.items():
        u = float(torch.rand(1, generator=rng))
        out[name] = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return out


@dataclass
class Batches:
    """An endless, seeded stream of shuffled mini-batches of one split."""
    split: Split
    seed: int

    def __post_init__(self) -> None:
        self._rng = torch.Generator().manual_seed(self.seed)
        self._order = torch.randperm(len(self.split.y), generator=self._rng)
        self._at = 0

    def next(self):
        if self._at + BATCH > len(self._order):
            self._order = torch.randperm(len(self.split.y), generator=self._rng)
            self._at = 0
        idx = self._order[self._at:self._at + BATCH]
        self._at += BATCH
        return self.split.x[idx], self.split.y[idx]


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def accuracy(model: torch.nn.Module, split: Split, limit: int = 0,
             images: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> float:
    """Fraction of ``split`` (its first ``limit`` images when > 0) classified correctly;
    ``images`` (the drift task's) maps the images to what the stream shows now."""
    x, y = (split.x, split.y) if limit <= 0 else (split.x[:limit], split.y[:limit])
    if images is not None:
        x = images(x)
    correct = 0
    for i in range(0, len(y), 2048):
        correct += int((model(x[i:i + 2048]).argmax(1) == y[i:i + 2048]).sum())
    return correct / max(1, len(y))
