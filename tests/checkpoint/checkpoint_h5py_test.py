"""Reads a checkpoint of checkpoint_resume.np2 with h5py (docs/checkpoints.md, "Reading a
checkpoint from Python"): picks the best agent by metric, checks every dataset against its
xxh64-free contents (shapes, dtypes), the state text, and loads the best agent's weights into
a torch model for inference.
    python3 checkpoint_h5py_test.py CHECKPOINT.h5
"""
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # python3-h5py / python3-torch not installed: skipped (CTest: 77)
    print(f"skipped: {e}")
    sys.exit(77)

path = sys.argv[1]
with h5py.File(path, "r") as f:
    assert f.attrs["format"] == b"paramwin-checkpoint", f.attrs["format"]
    assert int(f.attrs["format_version"]) == 1
    n = int(f.attrs["agents"])
    assert sorted(int(i) for i in f["agents"]) == list(range(n)), list(f["agents"])
    lower = f.attrs["direction"] == b"lower_is_better"
    metrics = {int(i): float(g.attrs["metric"]) for i, g in f["agents"].items()}
    best = (min if lower else max)(metrics, key=metrics.get)
    weights = {name: np.array(d) for name, d in f[f"agents/{best}/params"].items()}
    state = bytes(np.array(f[f"agents/{best}/state"])).decode()
assert weights["w"].shape == (4, 16) and weights["w"].dtype == np.float32, weights["w"].dtype
assert weights["b"].shape == (8,) and weights["b"].dtype == np.float64
assert state.startswith("paramwin-agent-state 1\n") and "\nsteps " in state, state[:80]

# Inference with the best agent's "w" as the weight of a linear layer.
model = torch.nn.Linear(16, 4, bias=False)
with torch.no_grad():
    model.weight.copy_(torch.from_numpy(weights["w"]))
x = torch.ones(1, 16)
y = model(x)
expected = weights["w"].astype(np.float64).sum(axis=1)
assert np.allclose(y.detach().numpy()[0], expected, rtol=1e-5), (y, expected)
print(f"h5py: {n} agents, best agent {best} (metric {metrics[best]:.6g}), inference ok")
