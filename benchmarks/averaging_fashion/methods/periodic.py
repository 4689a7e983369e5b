"""PyTorch's own local SGD: ``PeriodicModelAverager(period=H, warmup_steps=W)`` after every
optimizer step, with the DDP communication hook ``post_localSGD_hook`` PyTorch pairs it with:
gradients are all-reduced every step during the W warm-up steps (``start_localSGD_iter=W``),
then not at all (``post_local_gradient_allreduce=False``: no intra-node subgroup, all ranks are
on one node here), and the parameters are all-reduced (averaged, one flattened tensor) every
H steps over gloo."""

import torch
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as plh
from torch.distributed.algorithms.model_averaging import averagers


class Periodic:
    def __init__(self, run):
        self.averager = averagers.PeriodicModelAverager(period=run.period,
                                                        warmup_steps=run.warmup)

    def wrap(self, run, model):
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        state = plh.PostLocalSGDState(process_group=None, subgroup=None,
                                      start_localSGD_iter=run.warmup,
                                      post_local_gradient_allreduce=False)
        ddp.register_comm_hook(state, plh.post_localSGD_hook)
        return ddp

    def after_step(self, run, step):
        self.averager.average_parameters(run.model.parameters())

    def finish(self, run):
        pass


def make(run):
    return Periodic(run)
