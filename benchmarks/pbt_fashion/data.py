"""Fashion-MNIST from Debian's dataset-fashion-mnist package (never downloaded).

The 60,000 training images are split once, by a fixed permutation, into 50,000 for training
and 10,000 for validation (the metric PBT ranks on and Optuna prunes on); the 10,000 test images
are the held-out set that only the report reads.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

import numpy as np
import torch

DATASET_DIR = "/usr/share/datasets/fashion-mnist"
_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


@dataclass
class Split:
    x: torch.Tensor  # float32 [n, 784], standardised
    y: torch.Tensor  # int64 [n]


@dataclass
class FashionMnist:
    train: Split
    validation: Split
    test: Split


def _read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    dims = magic & 0xFF
    if magic >> 8 != 0x08 or dims not in (1, 3):
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {data.size} bytes of data for shape {shape}")
    return data.reshape(shape)


def load(dataset_dir: str = DATASET_DIR, train_subset: int = 0, validation_size: int = 10000,
         test_subset: int = 0) -> FashionMnist:
    """The three splits as tensors. ``train_subset``/``test_subset`` > 0 keep only that many
    images (the short version in the test suite); the validation split is taken first, so it
    never overlaps the training images."""
    paths = {k: os.path.join(dataset_dir, v) for k, v in _FILES.items()}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(
            "Fashion-MNIST not found: " + ", ".join(missing) +
            " (install Debian's dataset-fashion-mnist: scripts/setup.sh does)")
    images = _read_idx(paths["train_images"]).reshape(-1, 784)
    labels = _read_idx(paths["train_labels"]).astype(np.int64)
    test_x = _read_idx(paths["test_images"]).reshape(-1, 784)
    test_y = _read_idx(paths["test_labels"]).astype(np.int64)
    order = np.random.default_rng(20200523).permutation(len(images))
    val_idx, train_idx = order[:validation_size], order[validation_size:]
    if train_subset > 0:
        train_idx = train_idx[:train_subset]
    if test_subset > 0:
        test_x, test_y = test_x[:test_subset], test_y[:test_subset]
    mean, std = 72.94, 90.02  # the training images' pixel mean and standard deviation

    def split(x: np.ndarray, y: np.ndarray) -> Split:
        xt = (torch.from_numpy(x.astype(np.float32)) - mean) / std
        return Split(xt.contiguous(), torch.from_numpy(y).contiguous())

    return FashionMnist(split(images[train_idx], labels[train_idx]),
                        split(images[val_idx], labels[val_idx]), split(test_x, test_y))
