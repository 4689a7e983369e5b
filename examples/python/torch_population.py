"""torch_population.py: a population of PyTorch MLPs, one per MPI rank, each trained with Adam
at its own learning rate on a synthetic regression task. Through paramwin.torch.TorchAgent
each agent dies at an age drawn from [lo, hi] and is reborn from the mean of its fittest
donors' parameters (read one-sidedly: the donors keep training), with its Adam state reset.
The same population then trains again without replacement (same seeds, same data) as a
control, and both are compared — the Python twin of examples/torch_population (same table,
same CSV files, same plot).

    mpiexec.openmpi -n 4 .venv/bin/python examples/python/torch_population.py [--steps N] [--out DIR] ...

(Open MPI, whose mpi4py Debian ships: mpiexec.openmpi; as root add --allow-run-as-root, and
--oversubscribe with more ranks than cores.) .venv is the virtual environment paramwin was
pip-installed into (docs/python.md, "Install"); from a build tree instead, run
/usr/bin/python3 with PYTHONPATH=<build>/python.
"""

import argparse
import math
import os
import sys
import time

import torch
from mpi4py import MPI

import paramwin
from paramwin.torch import TorchAgent

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (the table, CSV and plot code beside this file)


def parse_args():
    def span(text, kind):
        lo, sep, hi = text.partition("..")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected LO..HI, got '{text}'")
        return kind(lo), kind(hi)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600, help="training steps per run (600)")
    p.add_argument("--out", default="out/torch_population_py", help="output directory")
    p.add_argument("--seed", type=int, default=1, help="seed of data, initialisations, deaths")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="do not run gnuplot")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="skip the control run (no replacement)")
    p.add_argument("--report-every", type=int, default=50, help="progress table cadence (50)")
    p.add_argument("--age", type=lambda t: span(t, int), default=(60, 120),
                   help="range of the drawn maximum age (60..120)")
    p.add_argument("--donors", type=int, default=1, help="donors per rebirth, fittest first (1)")
    p.add_argument("--lr", type=lambda t: span(t, float), default=(1e-4, 0.3),
                   help="Adam learning rates, log-spaced over the agents (1e-4..0.3)")
    p.add_argument("--hidden", type=int, default=32, help="hidden units per layer (32)")
    p.add_argument("--last", type=int, default=100, help="steps averaged in the comparison")
    o = p.parse_args()
    if min(o.steps, o.report_every, o.hidden, o.last, o.donors) < 1:
        p.error("--steps, --report-every, --hidden, --last and --donors must be >= 1")
    if not (0 < o.lr[0] <= o.lr[1]):
        p.error("--lr needs 0 < MIN <= MAX")
    if not (1 <= o.age[0] <= o.age[1]):
        p.error("--age needs 1 <= LO <= HI")
    return o


def polite_barrier(comm):
    """A barrier that sleeps while it waits: 4 ranks share 2 cores and MPI busy-polls."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.0002)


def make_data(o):
    """y = sin(3 x0) cos(2 x1) + 0.5 x0 x1 (+ noise on the training set), x in [-1, 1]^2."""
    torch.manual_seed(o.seed)

    def target(x):
        a, b = x[:, 0], x[:, 1]
        return (torch.sin(3 * a) * torch.cos(2 * b) + 0.5 * a * b).unsqueeze(1)

    x_train = torch.rand(256, 2) * 2 - 1
    y_train = target(x_train) + 0.05 * torch.randn(256, 1)
    x_test = torch.rand(1024, 2) * 2 - 1
    return x_train, y_train, x_test, target(x_test)


def make_mlp(o, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(2, o.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(o.hidden, o.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(o.hidden, 1))


def agent_lr(o, rank, size):
    if size == 1:
        return o.lr[0]
    return o.lr[0] * (o.lr[1] / o.lr[0]) ** (rank / (size - 1))


def run_population(o, data, replace, comm):
    """Trains this rank's agent; returns the gathered RunResult on rank 0 (None elsewhere)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    name = "replacement" if replace else "control"
    x_train, y_train, x_test, y_test = data
    model = make_mlp(o, o.seed * 1000003 + rank)
    lr = agent_lr(o, rank, size)
    adam = torch.optim.Adam(model.parameters(), lr=lr)

    agent = None
    if replace:
        # Collective. A diverged donor (NaN) is left out of the mean; on a rebirth the module
        # gets the donors' mean and Adam's state of the replaced parameters is dropped.
        agent = TorchAgent(model, adam, comm, seed=o.seed, age=o.age, selection="fittest",
                           k=min(o.donors, size - 1), non_finite="skip_donor")
        agent.publish()  # every agent is a donor from the start
    if rank == 0:
        report.print_progress_header(name)
    polite_barrier(comm)
    t0 = MPI.Wtime()

    history, deaths = [], []
    for step in range(o.steps):
        adam.zero_grad()
        loss_t = torch.nn.functional.mse_loss(model(x_train), y_train)
        loss = loss_t.item()
        if not math.isfinite(loss):
            loss = sys.float_info.max
        history.append(loss)
        reborn = False
        if agent is not None:
            # The loss belongs to the parameters as they are: step() publishes them with it,
            # or replaces them (and resets Adam) if this agent dies now.
            ev = agent.step(step, loss)
            if ev.died:
                reborn = True
                deaths.append((step, ev.generation, ";".join(str(d.rank) for d in ev.donors),
                               ";".join(str(d.version) for d in ev.donors), loss))
        if not reborn:  # after a rebirth the gradient would belong to the dead parameters
            loss_t.backward()
            adam.step()
        if (step + 1) % o.report_every == 0 or step + 1 == o.steps:
            rows = comm.gather((loss, len(deaths)), root=0)
            if rank == 0:
                report.print_progress_row(step + 1, o.steps, report.spread([r[0] for r in rows]),
                                          sum(r[1] for r in rows))
    with torch.no_grad():
        test_loss = torch.nn.functional.mse_loss(model(x_test), y_test).item()
    gathered = comm.gather((history, lr, test_loss, deaths), root=0)
    seconds = MPI.Wtime() - t0
    polite_barrier(comm)  # free the windows together (the free is collective)
    if agent is not None:
        agent.close()
    polite_barrier(comm)
    if rank != 0:
        return None

    result = report.RunResult(name, size, o.steps, seconds=seconds)
    for a, (hist, a_lr, a_test, a_deaths) in enumerate(gathered):
        result.losses.append(hist)
        result.lrs.append(a_lr)
        result.test_losses.append(a_test)
        for step, generation, donors, versions, before in a_deaths:
            after = hist[step + 1] if step + 1 < o.steps else math.nan
            result.deaths.append(report.DeathRecord(a, step, generation, "age", donors, versions,
                                                    before, after))
    result.deaths.sort(key=lambda d: (d.step, d.agent))
    print(f"  {name} run: {o.steps} steps in {seconds:.2f} s, {len(result.deaths)} deaths",
          flush=True)
    return result


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    o = parse_args()
    torch.set_num_threads(1)  # the ranks already share the cores
    if size < 2:
        if rank == 0:
            print("torch_population.py: needs at least 2 ranks (one agent per rank)",
                  file=sys.stderr)
        return 2
    if rank == 0:
        os.makedirs(o.out, exist_ok=True)
        print(f"torch_population.py: {size} agents (one per rank), {o.steps} steps, PyTorch "
              f"{torch.__version__} MLP 2-{o.hidden}-{o.hidden}-1 (tanh), Adam, 256 training "
              f"points; paramwin over {paramwin.mpi_vendor}")
        print(f"  deaths at an age drawn from [{o.age[0]}, {o.age[1]}]; donors: fittest, "
              f"k={min(o.donors, size - 1)}, mean")
        print("  learning rates: " + " ".join(f"{agent_lr(o, r, size):.4g}" for r in range(size)),
              flush=True)
    data = make_data(o)
    repl = run_population(o, data, True, comm)
    ctrl = run_population(o, data, False, comm) if o.control else None
    if rank == 0:
        runs = [repl] + ([ctrl] if ctrl else [])
        report.write_losses_csv(os.path.join(o.out, "losses.csv"), runs)
        report.write_deaths_csv(os.path.join(o.out, "deaths.csv"), runs)
        report.write_summary_csv(os.path.join(o.out, "summary.csv"), runs)
        if ctrl:
            report.print_comparison(repl, ctrl, o.last)
            if o.plot and report.render_plot(o.out, repl, ctrl):
                print(f"\nplot: {os.path.join(o.out, 'losses.png')}")
        print("data: " + "  ".join(os.path.join(o.out, f) for f in
                                   ("losses.csv", "deaths.csv", "summary.csv")))
    polite_barrier(comm)
    if rank == 0:
        print(f"torch_population.py: all {size} ranks finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
