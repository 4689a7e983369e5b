"""paramwin's asynchronous model averaging, background (Bagua's design): a round's mix is
applied at a later step as a correction ``mix - own_at_read``, keeping the local progress made
meanwhile (see _paramwin.py)."""

from methods._paramwin import ParamwinAveraging


def make(run):
    return ParamwinAveraging(run, background=True)
