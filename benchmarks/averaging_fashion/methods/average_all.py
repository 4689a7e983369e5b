"""torchgfn's ``AverageAllPolicy``: every H steps (and at step 0) every rank replaces its
parameters by the mean over all ranks; no warm-up, the optimizer state kept. torchgfn
all-reduces each parameter tensor through torch.distributed; here, as issue 34 has it, the
parameters go flattened through one ``MPI_Allreduce`` (mpi4py, Open MPI) — nonblocking and
waited for politely (a test, then a 0.5 ms sleep: blocking MPI busy-polls, and ranks
outnumber cores here), the transport paramwin's methods use too."""

import numpy as np
import torch
from mpi4py import MPI

from common import polite_wait


class AverageAll:
    def __init__(self, run):
        self.rounds = 0

    def wrap(self, run, model):
        return model

    @torch.no_grad()
    def after_step(self, run, step):
        if step % run.period != 0:
            return
        params = list(run.model.parameters())
        flat = torch.nn.utils.parameters_to_vector(params).numpy()
        total = np.empty_like(flat)
        polite_wait(run.comm.Iallreduce(flat, total, op=MPI.SUM))
        total /= run.size
        torch.nn.utils.vector_to_parameters(torch.from_numpy(total), params)
        self.rounds += 1
        run.extra["rounds"] = self.rounds

    def finish(self, run):
        pass


def make(run):
    return AverageAll(run)
