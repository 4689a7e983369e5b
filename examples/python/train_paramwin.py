"""A population trainer as a torchgfn user writes it today, with paramwin's TorchAgent in
place of the seed's spawn policy (train_seed.py); docs/python-port.md shows the diff.

    mpiexec.openmpi -n 4 .venv/bin/python examples/python/train_paramwin.py
"""

import torch
from mpi4py import MPI

from paramwin.torch import TorchAgent

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
torch.set_num_threads(1)
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * (rank + 1))

agent = TorchAgent(model, optimizer, comm, age=(50, 150), k=2, seed=7)
agent.publish()
comm.Barrier()

torch.manual_seed(42)  # the same task on every rank
x = torch.rand(256, 2) * 2 - 1
y = torch.sin(3 * x[:, :1])
rebirths = 0
for iteration in range(500):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    if agent.step(iteration, loss.item()).died:
        rebirths += 1
        continue  # the gradient belongs to the replaced parameters
    loss.backward()
    optimizer.step()

print(f"rank {rank}: {rebirths} rebirths, final loss {loss.item():.5f}")
comm.Barrier()
agent.close()
