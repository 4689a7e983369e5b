"""A population trainer as a torchgfn user writes it today, with the seed's spawn policy
(seed_policy.py: mpi4py windows, age-based replacement). train_paramwin.py is the same loop
on paramwin; docs/python-port.md shows the diff.

    mpiexec.openmpi -n 4 .venv/bin/python examples/python/train_seed.py
"""

import torch
from mpi4py import MPI

from seed_policy import SeedSpawnPolicy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
torch.set_num_threads(1)
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * (rank + 1))

policy = SeedSpawnPolicy(model, age_range=(50, 150), k=2, seed=7)
policy.expose(model)
comm.Barrier()

torch.manual_seed(42)  # the same task on every rank
x = torch.rand(256, 2) * 2 - 1
y = torch.sin(3 * x[:, :1])
rebirths = 0
for iteration in range(500):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    if policy(iteration, model, optimizer, loss.item()):
        rebirths += 1
        continue  # the gradient belongs to the replaced parameters
    loss.backward()
    optimizer.step()

print(f"rank {rank}: {rebirths} rebirths, final loss {loss.item():.5f}")
comm.Barrier()
policy.shutdown()
