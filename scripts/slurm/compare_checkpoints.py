#!/usr/bin/env python3
"""Compares paramwin population checkpoints (HDF5, docs/checkpoints.md) with h5py.

    compare_checkpoints.py [--ignore-attr NAME]... A.h5 B.h5
        exit 0 when both hold the same population: the same groups and datasets (names,
        dtypes, shapes, bytes) and the same attributes, save those that say when or where the
        file was written (created, created_unix, the checkpoint_path word of options, and
        every --ignore-attr); else list every difference and exit 1
    compare_checkpoints.py --digest FILE.h5...
        print one digest per file (SHA-256 over the same contents the comparison looks at)

The kill/requeue tests (tests/slurm) and scripts/slurm/kill_soak.sh use it to show that a run
killed and resumed from its checkpoints ends with the population of its uninterrupted twin.
Exit status 2: a file cannot be read (missing, truncated, not HDF5).
"""

import argparse
import hashlib
import sys

import h5py
import numpy as np

DEFAULT_IGNORED = ("created", "created_unix")
# Words of the "options" attribute that say where a file was written, not what it holds.
WHERE_WORDS = ("checkpoint_path=",)


def without_where(text):
    return " ".join(w for w in text.split(" ") if not w.startswith(WHERE_WORDS))


def attr_bytes(value):
    """An attribute's value as comparable bytes (strings, scalars and arrays alike)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    arr = np.asarray(value)
    return arr.dtype.str.encode() + b"|" + repr(arr.shape).encode() + b"|" + arr.tobytes()


def contents(path, ignored):
    """Every object of the file: {"/path": bytes}, datasets and attributes, in file order."""
    out = {}

    def attrs(name, obj):
        for key in sorted(obj.attrs.keys()):
            if key in ignored:
                continue
            value = obj.attrs[key]
            if key == "options" and isinstance(value, (str, bytes)):
                value = without_where(value.decode() if isinstance(value, bytes) else value)
            out[f"{name}@{key}"] = attr_bytes(value)

    with h5py.File(path, "r") as f:
        attrs("/", f)

        def visit(name, obj):
            full = "/" + name
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                arr = np.asarray(data)
                out[full] = (arr.dtype.str.encode() + b"|" + repr(arr.shape).encode() + b"|" +
                             arr.tobytes())
            else:
                out[full] = b"group"
            attrs(full, obj)

        f.visititems(visit)
    return out


def digest(items):
    h = hashlib.sha256()
    for key in sorted(items):
        h.update(key.encode() + b"\0" + items[key] + b"\0")
    return h.hexdigest()


def load(path, ignored):
    try:
        return contents(path, ignored)
    except (OSError, KeyError, ValueError) as e:
        print(f"compare_checkpoints: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)


def difference(a, b):
    """What differs between two encoded values, briefly."""
    if len(a) + len(b) <= 160:
        return f"{a!r} != {b!r}"
    head_a, _, body_a = a.partition(b"|")
    head_b, _, body_b = b.partition(b"|")
    if head_a != head_b or len(a) != len(b):
        return f"{len(a)} bytes ({head_a.decode(errors='replace')}) != {len(b)} bytes " \
               f"({head_b.decode(errors='replace')})"
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    lines_a = a.split(b"\n")
    lines_b = b.split(b"\n")
    if len(lines_a) > 2 and len(lines_a) == len(lines_b):  # text (an agent's state): the lines
        changed = [(x, y) for x, y in zip(lines_a, lines_b) if x != y]
        return "; ".join(f"{x[:60]!r} != {y[:60]!r}" for x, y in changed[:3])
    return f"{len(diff)} of {len(a)} bytes differ, the first at byte {diff[0]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ignore-attr", action="append", default=[],
                        help="an attribute name to leave out (besides created, created_unix)")
    parser.add_argument("--digest", action="store_true", help="print a digest per file")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    ignored = set(DEFAULT_IGNORED) | set(args.ignore_attr)
    if args.digest:
        for path in args.files:
            print(f"{digest(load(path, ignored))}  {path}")
        return 0
    if len(args.files) != 2:
        parser.error("give two files to compare (or --digest FILE...)")
    a_path, b_path = args.files
    a, b = load(a_path, ignored), load(b_path, ignored)
    differences = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            differences.append(f"{key}: only in {b_path}")
        elif key not in b:
            differences.append(f"{key}: only in {a_path}")
        elif a[key] != b[key]:
            differences.append(f"{key}: {difference(a[key], b[key])}")
    if differences:
        print(f"compare_checkpoints: {a_path} and {b_path} differ in {len(differences)} of "
              f"{len(set(a) | set(b))} objects:")
        for d in differences[:40]:
            print("  " + d)
        if len(differences) > 40:
            print(f"  ... and {len(differences) - 40} more")
        return 1
    print(f"compare_checkpoints: same population ({len(a)} objects, digest {digest(a)[:16]}): "
          f"{a_path} == {b_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
