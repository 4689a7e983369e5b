"""A stream whose distribution shifts: the drift task's permuted Fashion-MNIST.

At a few shift steps, drawn per seed and told to no method, the images get a new fixed
permutation of their 784 pixels (Permuted Fashion-MNIST, the continual-learning benchmark:
Goodfellow et al. 2013, Kirkpatrick et al. 2017). Every split follows the stream: an agent's
training step t trains on the images of phase(t), and its evaluations after step t (the
validation metric the methods rank on, the held-out accuracy the report reads) see the same
phase. So what was learnt before a shift is of little use after it, and the best learning rate
moves during training in a way that no fixed schedule of the agent's steps follows: high after
each shift, low as the phase goes on, at times no method knows in advance.

The clock of the stream is the agent's own step count (all its trials' steps for Optuna), the
same for every method and agent of a seed.
"""

from __future__ import annotations

from typing import List

import torch


class Drift:
    """The shifts of one seed: ``shifts`` steps, the k-th drawn uniformly within ±30 % of an
    even spacing's k-th point (steps·k/(shifts+1)), and one pixel permutation per phase
    (phase 0 keeps the images as they are). No shifts: every call leaves the data alone."""

    def __init__(self, seed: int, steps: int, shifts: int) -> None:
        if shifts < 0 or steps <= shifts:
            raise ValueError(f"Drift: {shifts} shifts over {steps} steps: shifts >= 0 and "
                             "fewer than the steps")
        rng = torch.Generator().manual_seed(7919 * seed + 5)
        spacing = steps / (shifts + 1)
        jitter = int(0.3 * spacing)
        self.shift_steps: List[int] = [
            int(round(spacing * k)) + int(torch.randint(-jitter, jitter + 1, (1,), generator=rng))
            for k in range(1, shifts + 1)]
        self._perms = [None] + [torch.randperm(784, generator=rng) for _ in range(shifts)]

    def phase(self, step: int) -> int:
        """The phase of training step ``step`` (0-based): the shifts at or before it."""
        return sum(1 for s in self.shift_steps if step >= s)

    def images(self, x: torch.Tensor, step: int) -> torch.Tensor:
        """``x`` [n, 784] as the stream shows it at training step ``step``."""
        perm = self._perms[self.phase(step)]
        return x if perm is None else x.index_select(1, perm)
