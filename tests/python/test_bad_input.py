"""Bad input from Python raises a clear paramwin exception (the C++ message) on the ranks
concerned, and changes nothing: the caller's arrays keep their values, the window stays
usable."""

import sys

import numpy as np
import pytest
import torch

import paramwin
from conftest import need_ranks

LAYOUT = paramwin.Layout().add("w", (4, 3)).add("s", ())


def fresh(rank):
    return [np.full((4, 3), float(rank), np.float32), np.array(float(rank), np.float32)]


@pytest.fixture
def win(comm):
    with paramwin.ParameterWindow(LAYOUT, comm) as w:
        w.publish(fresh(comm.Get_rank()))
        comm.Barrier()
        yield w
        comm.Barrier()


def refuses(win, out, exc, match, donors=None):
    """Pull into out must raise exc matching match and leave out and the window as they were."""
    before = [a.clone() if isinstance(a, torch.Tensor) else np.array(a, copy=True) for a in out]
    version = win.version
    donor = (win.rank + 1) % win.size
    with pytest.raises(exc, match=match):
        win.pull([donor] if donors is None else donors, out)
    for got, was in zip(out, before):
        assert (np.asarray(got) == np.asarray(was)).all()
    assert win.version == version  # and the window still works:
    assert win.publish(fresh(win.rank)).version == version + 1


def test_wrong_shape(win):
    out = [np.zeros((3, 4), np.float32), np.zeros((), np.float32)]
    refuses(win, out, paramwin.InvalidArgument,
            r"layer #0 \('w' \[4x3 float32\]\): got an array of shape \(3, 4\) float32, "
            r"expected shape \(4, 3\)")


def test_wrong_scalar_shape(win):
    out = [np.zeros((4, 3), np.float32), np.zeros((1,), np.float32)]
    refuses(win, out, paramwin.InvalidArgument, r"'s' \[scalar float32\]\): got an array of shape \(1,\)")


def test_unsupported_dtype(win):
    out = [np.zeros((4, 3), np.int32), np.zeros((), np.float32)]
    refuses(win, out, paramwin.InvalidArgument, r"layer #0: dtype int32 is not supported")


def test_other_supported_dtype_than_the_layer(comm, win):
    need_ranks(comm, 2)  # the core checks the donors first, the layers' dtypes next
    out = [np.zeros((4, 3), np.float64), np.zeros((), np.float32)]
    refuses(win, out, paramwin.InvalidArgument, r"float64")


def test_non_contiguous_numpy(win):
    big = np.zeros((4, 6), np.float32)
    out = [big[:, ::2], np.zeros((), np.float32)]
    refuses(win, out, paramwin.InvalidArgument, r"not C-contiguous")


def test_non_contiguous_torch(win):
    out = [torch.zeros(3, 4).t(), torch.zeros(())]
    refuses(win, out, paramwin.InvalidArgument, r"tensor is not contiguous")


def test_read_only_array(win):
    w = np.zeros((4, 3), np.float32)
    w.flags.writeable = False
    refuses(win, [w, np.zeros((), np.float32)], paramwin.InvalidArgument, r"read-only")


def test_not_an_array(win):
    refuses(win, [[1.0] * 12, np.zeros((), np.float32)], paramwin.InvalidArgument,
            r"expected a numpy array, a torch tensor")


def test_unknown_layer_name(win):
    with pytest.raises(paramwin.InvalidArgument, match="nope"):
        win.pull([(win.rank + 1) % win.size], {"nope": np.zeros((4, 3), np.float32)})


def test_too_few_layers(comm, win):
    need_ranks(comm, 2)  # the core checks the donors first, the layer count next
    refuses(win, [np.zeros((4, 3), np.float32)], paramwin.InvalidArgument, r"layer")


def test_bad_donors(win):
    out = fresh(win.rank)
    refuses(win, out, paramwin.InvalidArgument, r"is this rank itself", donors=[win.rank])
    refuses(win, out, paramwin.InvalidArgument, r"out of range", donors=[win.size])


def test_bad_option_names(win):
    with pytest.raises(paramwin.InvalidArgument, match=r"unknown read mode 'fast' \(valid: auto"):
        win.pull([(win.rank + 1) % win.size], fresh(win.rank), read_mode="fast")


def test_never_published_donor(comm):
    need_ranks(comm, 2)
    with paramwin.ParameterWindow(LAYOUT, comm) as win:
        out = fresh(comm.Get_rank())
        with pytest.raises(paramwin.DonorError, match="never published") as info:
            win.pull([(win.rank + 1) % win.size], out)
        assert info.value.rank == (win.rank + 1) % win.size
        assert (out[0] == comm.Get_rank()).all()
        comm.Barrier()


def test_closed_window(comm):
    win = paramwin.ParameterWindow(LAYOUT, comm)
    win.close()
    win.close()  # twice: a no-op
    assert win.closed
    out = fresh(comm.Get_rank())
    for call in (lambda: win.publish(out), lambda: win.pull([0], out), lambda: win.roster_all(),
                 lambda: win.version):
        with pytest.raises(paramwin.InvalidArgument, match="the window is closed"):
            call()
    assert (out[0] == comm.Get_rank()).all()


def test_layout_mismatch_on_every_rank(comm):
    need_ranks(comm, 2)
    layout = paramwin.Layout().add("w", (4, 3) if comm.Get_rank() == 0 else (3, 4))
    with pytest.raises(paramwin.LayoutMismatch, match="w"):
        paramwin.ParameterWindow(layout, comm)


def test_bad_agent_options(comm):
    with pytest.raises(paramwin.InvalidArgument, match="nonsense"):
        paramwin.Agent(LAYOUT, comm, nonsense=3)
    with pytest.raises(paramwin.InvalidArgument, match="selection"):
        paramwin.Agent(LAYOUT, comm, selection="best-looking")
    with pytest.raises(paramwin.InvalidArgument, match="given twice"):
        paramwin.Agent(LAYOUT, comm, options="k=1", k=1)


def test_bad_comm():
    with pytest.raises(TypeError, match="mpi4py"):
        paramwin.ParameterWindow(LAYOUT, comm=42)


def test_exception_hierarchy():
    assert issubclass(paramwin.InvalidArgument, ValueError)
    assert issubclass(paramwin.ReadTimeout, paramwin.DonorError)
    assert issubclass(paramwin.ReadTimeout, TimeoutError)  # the builtin: except TimeoutError
    e = paramwin.ReadTimeout("paramwin: rank 1 late", 1)
    assert str(e) == "paramwin: rank 1 late" and e.rank == 1 and e.errno is None
    assert "TimeoutError" not in paramwin.__all__  # no longer shadows the builtin
    with pytest.warns(DeprecationWarning, match="ReadTimeout"):
        assert paramwin.TimeoutError is paramwin.ReadTimeout
    with pytest.warns(DeprecationWarning, match="ReadTimeout"):
        assert paramwin.errors.TimeoutError is paramwin.ReadTimeout
    with pytest.raises(AttributeError):
        paramwin.NoSuchName  # noqa: B018
    for cls in (paramwin.InvalidArgument, paramwin.LayoutMismatch, paramwin.DonorError,
                paramwin.VerificationError, paramwin.MpiError):
        assert issubclass(cls, paramwin.Error) and issubclass(cls, RuntimeError)


def test_second_live_unnamed_window_of_one_layout_is_refused_on_every_rank(comm):
    """Every Python window is created at one line of the bindings, so the creation site cannot
    tell two unnamed windows apart: created in opposite orders on two ranks they would pair
    crosswise (a pull from A returning B's data) and hang when closed. The second live one is
    refused on every rank before anything is allocated, naming the live one."""
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    windows = {}
    first, second = ("A", "B") if rank == 0 else ("B", "A")
    windows[first] = paramwin.ParameterWindow(LAYOUT, comm)
    with pytest.raises(paramwin.InvalidArgument,
                       match=r"a second unnamed window with the same layout over the same ranks "
                             r"while the unnamed window created at .* is still alive.*name your "
                             r"windows \(WindowOptions::name\)"):
        windows[second] = paramwin.ParameterWindow(LAYOUT, comm)
    assert second not in windows
    windows[first].close()  # the window created first (agreed on every rank) closes cleanly
    comm.Barrier()

    # Named, in one order on every rank: both alive at once, each pairs with itself.
    donor = (rank + 1) % comm.Get_size()
    with paramwin.ParameterWindow(LAYOUT, comm, name="A") as a, \
            paramwin.ParameterWindow(LAYOUT, comm, name="B") as b:
        a.publish(fresh(100 + rank))
        b.publish(fresh(200 + rank))
        comm.Barrier()
        out = fresh(-1)
        a.pull([donor], out)
        assert (out[0] == 100 + donor).all()
        b.pull([donor], out)
        assert (out[0] == 200 + donor).all()
        comm.Barrier()

    # One after the other: allowed. Another layout alive at once: allowed.
    for _ in range(2):
        with paramwin.ParameterWindow(LAYOUT, comm) as w:
            assert w.size == comm.Get_size()
    other = paramwin.Layout().add("w", (2,))
    with paramwin.ParameterWindow(LAYOUT, comm), paramwin.ParameterWindow(other, comm):
        comm.Barrier()


def test_exit_on_exception_refuses_a_code_that_is_not_an_int():
    before = sys.excepthook
    for bad in ("1", 1.0, True, None):
        with pytest.raises(TypeError, match="exit_on_exception: code must be an int"):
            paramwin.exit_on_exception(bad)
    assert sys.excepthook is before  # nothing changed
