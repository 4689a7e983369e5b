"""The import check: the MPI library the running mpi4py uses must be the one paramwin's
extension was built against (one process holds one MPI library; an extension built against
another would load a second one beside it and fail in obscure ways). Run by ``import
paramwin`` before the extension is loaded; raises ImportError naming both."""

from __future__ import annotations

import re
from typing import Any, Tuple

__all__ = ["running_mpi", "check_mpi"]


def running_mpi(library_version: str) -> Tuple[str, str]:
    """(kind, version) of an MPI library from its MPI_Get_library_version text: kind is
    "OpenMPI", "MPICH" or the text's first word; version "" when not found."""
    m = re.search(r"Open MPI v(\d+(?:\.\d+)*)", library_version)
    if m:
        return "OpenMPI", m.group(1)
    m = re.search(r"MPICH Version:\s*(\d+(?:\.\d+)*)", library_version)
    if m:
        return "MPICH", m.group(1)
    words = library_version.split()
    return (words[0] if words else "unknown"), ""


def _major(version: str) -> str:
    return version.split(".")[0] if version else ""


def check_mpi(mpi: Any, built: Any) -> None:
    """Raises ImportError unless the MPI that mpi4py's module ``mpi`` runs is ``built``'s
    (a module with MPI_KIND, MPI_VERSION, MPI_COMPILER, MPI4PY_MODULE): same implementation
    and the same major version (the library's ABI)."""
    text = str(mpi.Get_library_version()).strip()
    kind, version = running_mpi(text)
    if kind == built.MPI_KIND and _major(version) == _major(built.MPI_VERSION):
        return
    first = text.splitlines()[0] if text else "(no version text)"
    raise ImportError(
        f"paramwin: this paramwin was built against {built.MPI_KIND} {built.MPI_VERSION} "
        f"({built.MPI_COMPILER}, mpi4py {built.MPI4PY_MODULE}), but the running mpi4py "
        f"({getattr(mpi, '__file__', '?')}) uses {kind} {version or '?'} ('{first}'). One "
        "process holds one MPI library: reinstall paramwin with this interpreter "
        "(`python -m pip install --no-build-isolation --force-reinstall <paramwin source>`), "
        "which builds it against the MPI its mpi4py uses.")
