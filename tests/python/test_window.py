"""ParameterWindow from Python: round trips of every dtype (numpy and torch), 0-dim layers,
binding by name, weighted pulls, rosters, the context manager."""

import time

import numpy as np
import pytest
import torch

import paramwin
from conftest import need_ranks

NUMPY_DTYPES = [np.float32, np.float64, np.float16]
TORCH_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
NAME = {np.float32: "float32", np.float64: "float64", np.float16: "float16",
        torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
        torch.float16: "float16"}


def value(rank, i):
    # Small integers: exact in every dtype, also bfloat16 (8 bits of mantissa) and their means.
    return float(rank * 16 + i % 8)


def numpy_layers(rank, dtype):
    w = np.array([value(rank, i) for i in range(12)], dtype=dtype).reshape(3, 4)
    s = np.array(value(rank, 5), dtype=dtype)  # 0-dim
    return [w, s]


def torch_layers(rank, dtype):
    w = torch.tensor([value(rank, i) for i in range(12)], dtype=dtype).reshape(3, 4)
    s = torch.tensor(value(rank, 5), dtype=dtype)  # 0-dim
    return [w, s]


def layout_for(dtype):
    return paramwin.Layout().add("w", (3, 4), NAME[dtype]).add("s", (), NAME[dtype])


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: NAME[d])
def test_numpy_round_trip(comm, dtype):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    with paramwin.ParameterWindow(layout_for(dtype), comm) as win:
        assert win.publish(numpy_layers(rank, dtype)).published
        comm.Barrier()
        donor = (rank + 1) % n
        out = numpy_layers(rank, dtype)
        addresses = [a.__array_interface__["data"][0] for a in out]
        result = win.pull([donor], out)
        assert [d.rank for d in result.donors] == [donor]
        assert result.donors[0].version == 1
        for got, want in zip(out, numpy_layers(donor, dtype)):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype and got.shape == want.shape
        # Zero copy: the pull wrote into the caller's arrays, not into new ones.
        assert [a.__array_interface__["data"][0] for a in out] == addresses
        comm.Barrier()


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: NAME[d])
def test_torch_round_trip_and_mean(comm, dtype):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    with paramwin.ParameterWindow(layout_for(dtype), comm) as win:
        win.publish(torch_layers(rank, dtype))
        comm.Barrier()
        donors = [r for r in range(n) if r != rank][:2]
        out = torch_layers(rank, dtype)
        pointers = [t.data_ptr() for t in out]
        win.pull(donors, {"w": out[0], "s": out[1]})  # bound by name
        want = [sum(t.double() for t in ts) / len(donors)
                for ts in zip(*(torch_layers(d, dtype) for d in donors))]
        for got, w in zip(out, want):
            assert got.dtype == dtype and got.shape == w.shape
            torch.testing.assert_close(got.double(), w, rtol=0, atol=0)
        assert [t.data_ptr() for t in out] == pointers
        comm.Barrier()


def test_zero_dim_only_layout_and_weights(comm):
    need_ranks(comm, 3)
    rank = comm.Get_rank()
    layout = paramwin.Layout().add("a", ()).add("b", (), "float64")
    with paramwin.ParameterWindow(layout, comm, name="scalars") as win:
        win.publish([np.array(rank, np.float32), np.array(10.0 * rank)])
        comm.Barrier()
        a, b = np.zeros((), np.float32), np.zeros(())
        donors = [(rank + 1) % 3, (rank + 2) % 3] if rank < 3 else [0, 1]
        result = win.pull(donors, [a, b], weights=[3.0, 1.0])
        assert [d.weight for d in result.donors] == [0.75, 0.25]
        assert float(a) == 0.75 * donors[0] + 0.25 * donors[1]
        assert float(b) == 10.0 * (0.75 * donors[0] + 0.25 * donors[1])
        comm.Barrier()


def test_rosters_status_and_properties(comm):
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", 8)
    with paramwin.ParameterWindow(layout, comm, transport="rma") as win:
        assert (win.rank, win.size, win.version) == (rank, n, 0)
        assert win.layout == layout and win.wire_bytes >= 32
        win.set_status(iteration=7, metric=0.5 * rank, state="active")
        win.publish([np.zeros(8, np.float32)])
        assert win.status.iteration == 7 and win.status.state == "active"
        comm.Barrier()
        rosters = win.roster_all()
        assert [e.rank for e in rosters] == list(range(n))
        assert all(e.version == 1 and e.state == "active" for e in rosters)
        assert [e.metric for e in rosters] == [0.5 * r for r in range(n)]
        assert win.roster((rank + 1) % n).iteration == 7
        assert win.roster((rank + 1) % n).previous is None  # from the fresh status: no report
        comm.Barrier()
        win.set_status(iteration=8, metric=1.5, state="active")
        comm.Barrier()
        assert win.roster((rank + 1) % n).previous == (7, 0.5 * ((rank + 1) % n))
        assert win.transport_for((rank + 1) % n) == "rma"
        comm.Barrier()
    assert win.closed


def test_liveness_bounds_reach_the_window(comm):
    """suspect_seconds: a reader judges a silent agent a suspect after that long (the default,
    10 s, would not); a negative or non-finite bound is refused on every rank."""
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", 8)
    with paramwin.ParameterWindow(layout, comm, name="liveness", suspect_seconds=0.2,
                                  suspect_beats=0) as win, \
            paramwin.ParameterWindow(layout, comm, name="default liveness") as default:
        for w in (win, default):
            w.set_status(iteration=1, state="active")  # one heartbeat, then silence
        comm.Barrier()
        first = [win.roster_all(), default.roster_all()]  # a reader's first look: alive
        assert not any(e.suspect for rosters in first for e in rosters)
        time.sleep(0.4)
        judged = win.roster_all()
        assert [e.suspect for e in judged] == [r != rank for r in range(n)]
        assert all(e.suspect_reason.startswith("no heartbeat") for e in judged if e.suspect)
        assert not any(e.suspect for e in default.roster_all())
        comm.Barrier()
    for bad in (-1.0, float("nan")):
        with pytest.raises(paramwin.InvalidArgument, match="suspect_seconds"):
            paramwin.ParameterWindow(layout, comm, name="bad liveness", suspect_seconds=bad)
        with pytest.raises(paramwin.InvalidArgument, match="suspect_seconds"):
            paramwin.Agent(layout, comm, name="bad agent liveness", shortfall="clamp",
                           suspect_beats=bad)
        with pytest.raises(paramwin.InvalidArgument, match="suspect_seconds"):
            paramwin.AveragingAgent(layout, comm, name="bad averaging liveness",
                                    suspect_seconds=bad)
        groups = paramwin.AgentGroups(comm)
        with pytest.raises(paramwin.InvalidArgument, match="suspect_seconds"):
            paramwin.GroupAgent(groups, layout, name="bad group liveness", shortfall="clamp",
                                suspect_seconds=bad)
        groups.close()
    with paramwin.Agent(layout, comm, name="agent liveness", shortfall="clamp",
                        suspect_seconds=0.5) as agent:
        assert agent.step(0, 1.0, [np.zeros(8, np.float32)]).published


def test_layout_api():
    layout = paramwin.Layout().add("w1", (64, 32)).add("b1", 64).add("scale", ())
    assert len(layout) == 3 and layout.names == ["w1", "b1", "scale"]
    assert layout["w1"].shape == (64, 32) and layout[-1].shape == () and layout[-1].count == 1
    assert layout.total_elements == 64 * 32 + 64 + 1
    assert "b1" in layout and "nope" not in layout
    assert paramwin.Layout.deserialize(layout.serialize()) == layout
    assert layout.fingerprint != paramwin.Layout().add("w1", (32, 64)).fingerprint
    t = {"w": torch.zeros(2, 3, dtype=torch.bfloat16), "s": torch.tensor(1.0)}
    assert paramwin.layout_of(t.items()) == paramwin.Layout().add("w", (2, 3), "bfloat16").add("s", ())
