"""paramwin's symmetric (mean-preserving) averaging: each inline round is a two-sided exchange
through the peers' shared-memory inboxes, so averaging never moves the ranks' mean (see
_paramwin.py and docs/averaging.md, "Symmetric averaging")."""

from methods._paramwin import ParamwinAveraging


def make(run):
    return ParamwinAveraging(run, background=False, symmetric=True)
