"""paramwin's asynchronous model averaging, inline: each round's read of the peers and the mix
run inside ``step()`` after the optimizer step (see _paramwin.py)."""

from methods._paramwin import ParamwinAveraging


def make(run):
    return ParamwinAveraging(run, background=False)
