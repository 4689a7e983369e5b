"""A replica of the seed's spawn policy (torchgfn ``AsyncSelectiveAveragingPolicympi4pyFast``,
../shared/seeds/: the API reference, not the code), written from its documented behaviour:
every rank exposes a flat copy of its model through an mpi4py window; an agent dies at an
age drawn from ``age_range``; it is reborn from the mean of ``k`` random donors, each read
with a shared lock, one ``Get`` of the donor's whole flat buffer and an unlock, then
``add_`` and a division. No snapshot guarantee (a donor may be rewriting its buffer while it
is read), no checks. Used by examples/python/train_seed.py and by the benchmark
(benchmarks/python_pull_bench.py: the "seed method" rows)."""

import random

import numpy as np
import torch
from mpi4py import MPI


class SeedSpawnPolicy:
    """``policy(iteration, model, optimizer, local_metric)`` once per step; True on a rebirth."""

    def __init__(self, model, age_range=(50, 150), k=1, seed=0, comm=MPI.COMM_WORLD):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.params = [p for p in model.parameters()]
        self.count = sum(p.numel() for p in self.params)
        self.win = MPI.Win.Allocate(self.count * 4, 4, comm=comm)
        self.buf = np.frombuffer(self.win.tomemory(), dtype=np.float32, count=self.count)
        self.tmp = np.empty(self.count, np.float32)
        self.age_range, self.k = age_range, min(k, self.size - 1)
        self.rng = random.Random(seed * 7919 + self.rank)
        self.age, self.max_age = 0, self.rng.randint(*age_range)
        self.agents_killed = 0

    def expose(self, model):
        """Copies the parameters into the window (what other ranks read)."""
        self.buf[:] = torch.cat([p.detach().reshape(-1) for p in self.params]).numpy()

    def mean_of(self, donors, out):
        """The seed's read: per donor lock, Get of the whole buffer, unlock, add; then divide."""
        acc = torch.zeros(self.count)
        for d in donors:
            self.win.Lock(d, MPI.LOCK_SHARED)
            self.win.Get(self.tmp, d)
            self.win.Unlock(d)
            acc.add_(torch.from_numpy(self.tmp))
        torch.div(acc, len(donors), out=out)

    def mean_of_per_layer(self, donors, out, layer_counts):
        """The per-layer variant: one lock/Get/unlock per layer and donor."""
        acc = torch.zeros(self.count)
        for d in donors:
            offset = 0
            for c in layer_counts:
                self.win.Lock(d, MPI.LOCK_SHARED)
                self.win.Get([self.tmp[offset:offset + c], MPI.FLOAT], d, [offset, c, MPI.FLOAT])
                self.win.Unlock(d)
                offset += c
            acc.add_(torch.from_numpy(self.tmp))
        torch.div(acc, len(donors), out=out)

    def __call__(self, iteration, model, optimizer, local_metric):
        self.age += 1
        reborn = False
        if self.age >= self.max_age and self.k > 0:
            donors = self.rng.sample([r for r in range(self.size) if r != self.rank], self.k)
            flat = torch.empty(self.count)
            self.mean_of(donors, flat)
            with torch.no_grad():
                offset = 0
                for p in self.params:
                    p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
            optimizer.state.clear()
            self.age, self.max_age = 0, self.rng.randint(*self.age_range)
            self.agents_killed += 1
            reborn = True
        self.expose(model)
        return reborn

    def shutdown(self):
        self.win.Free()
