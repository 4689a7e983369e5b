#!/usr/bin/python3
"""The keys of scripts/tidy.sh's record of clean checks (scripts/tidy/clean.txt).

    /usr/bin/python3 scripts/tidy/cache.py DB ROOT CLANG_TIDY FILE...

Prints one line per FILE (a path relative to ROOT that DB, a compile_commands.json, compiles):
"<key> <file>". The key is a SHA-256 over everything clang-tidy's verdict on the file depends
on: clang-tidy's version, the root .clang-tidy, the file's path, its compile command's
arguments (the compiler, -o and -c left out), and the file as clang 14's preprocessor sees it
with those arguments and the shim tidy.sh includes (clang++-14 -E -P -CC: every header it
includes, system headers too, every macro, and the comments, where a NOLINT would be). ROOT is replaced by a placeholder in the
arguments and the preprocessed text, so that a clone elsewhere (the CI's) gets the same keys.
A key that cannot be computed (clang++-14 missing, the preprocessor failing) is printed as
"-": tidy.sh then checks the file.
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys

PLACEHOLDER = "@PARAMWIN_ROOT@"


def arguments(entry):
    """The compile command's arguments, without the compiler, the output and -c."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c":
            out.append(a)
    return out


def key(entry, rel, root, common):
    args = arguments(entry)
    source = os.path.join(root, rel)
    pre = [a for a in args if a != source and a != rel]
    shim = os.path.join(root, "scripts/tidy/source_location.hpp")
    try:
        text = subprocess.run(
            ["clang++-14", "-E", "-P", "-CC", "-w", "-include", shim] + pre + [source],
            cwd=entry.get("directory", root), capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "-"
    h = hashlib.sha256(common)
    h.update(rel.encode() + b"\0")
    h.update(" ".join(pre).replace(root, PLACEHOLDER).encode() + b"\0")
    h.update(text.replace(root.encode(), PLACEHOLDER.encode()))
    return h.hexdigest()


def main():
    db, root, clang_tidy, files = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4:]
    entries = {}
    for e in json.load(open(db, encoding="utf-8")):
        f = os.path.normpath(os.path.join(e.get("directory", ""), e["file"]))
        entries.setdefault(os.path.relpath(f, root), e)
    version = subprocess.run([clang_tidy, "--version"], capture_output=True).stdout
    common = hashlib.sha256(version)
    for path in (".clang-tidy", "scripts/tidy/source_location.hpp"):
        with open(os.path.join(root, path), "rb") as f:
            common.update(f.read())
    common = common.digest()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        keys = pool.map(lambda rel: key(entries[rel], rel, root, common) if rel in entries else "-",
                        files)
        for rel, k in zip(files, keys):
            print(k, rel)


if __name__ == "__main__":
    main()
