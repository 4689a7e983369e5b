"""PEP 517 build backend of paramwin's Python package (pyproject.toml: ``backend-path =
["python/backend"]``): configures the CMake project with only the Python extension enabled,
builds the target ``paramwin_python`` and packs ``<build>/python/paramwin`` into a wheel.

No third-party requirement (no setuptools, scikit-build, network): it works offline with
``pip install --no-build-isolation .`` and ``python -m build --no-isolation --wheel``.

- MPI: the library the interpreter's mpi4py uses (``MPI.Get_library_version()``, asked in a
  subprocess with mpi4py's initialisation off), its ``mpicxx.<mpi>`` / ``mpiexec.<mpi>`` (or
  mpi4py's configured ``mpicxx``), ``-DPARAMWIN_MPI`` to match.
- Python, pybind11, mpi4py's headers, numpy and torch: those of the interpreter running the
  build (``sys.executable``).
- Version: ``project(paramwin VERSION ...)`` in CMakeLists.txt, the one place.
- Build directory: ``PARAMWIN_BUILD_DIR`` (kept, so a rebuild is incremental), else a
  temporary one (removed). ccache is used when found (``CCACHE_BASEDIR`` defaults to the
  source tree's parent, so builds from other directories reuse its objects).
- ``PARAMWIN_CMAKE_ARGS``: more ``-D...`` arguments (split on spaces);
  ``CMAKE_BUILD_PARALLEL_LEVEL``: build jobs (default: the CPU count).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["build_wheel", "build_sdist", "get_requires_for_build_wheel",
           "get_requires_for_build_sdist", "prepare_metadata_for_build_wheel"]

ROOT = Path(__file__).resolve().parents[2]
NAME = "paramwin"
SUMMARY = "Population training over MPI one-sided windows"


def _log(msg: str) -> None:
    print(f"paramwin_backend: {msg}", file=sys.stderr, flush=True)


def version() -> str:
    """The project's version, from project() in CMakeLists.txt."""
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*paramwin\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        raise RuntimeError("paramwin_backend: no 'project(paramwin VERSION x.y.z' in "
                           f"{ROOT / 'CMakeLists.txt'}")
    return m.group(1)


def mpi4py_mpi() -> Tuple[str, str, str]:
    """(kind "OpenMPI"/"MPICH", library version text, mpi4py's configured mpicxx) of the
    interpreter's mpi4py, asked without initialising MPI."""
    code = ("import mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI\n"
            "print(mpi4py.get_config().get('mpicxx', ''))\n"
            "print(MPI.Get_library_version().strip())\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True).stdout
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"paramwin_backend: {sys.executable} cannot import mpi4py "
                           f"(Debian: python3-mpi4py; a venv: --system-site-packages):\n"
                           f"{e.stderr}") from None
    mpicxx, _, text = out.partition("\n")
    if "Open MPI" in text:
        kind = "OpenMPI"
    elif "MPICH" in text:
        kind = "MPICH"
    else:
        raise RuntimeError(f"paramwin_backend: mpi4py's MPI is neither Open MPI nor MPICH: "
                           f"{text.splitlines()[0] if text else '?'}")
    return kind, text, mpicxx.strip()


def _tool(kind: str, name: str, fallback: str) -> str:
    suffix = "openmpi" if kind == "OpenMPI" else "mpich"
    found = shutil.which(f"{name}.{suffix}")
    if found:
        return found
    if fallback and shutil.which(fallback):
        return shutil.which(fallback) or fallback
    raise RuntimeError(f"paramwin_backend: no {name}.{suffix} for mpi4py's {kind} "
                       f"(Debian: {'libopenmpi-dev openmpi-bin' if kind == 'OpenMPI' else 'libmpich-dev mpich'})")


def cmake_args(build_dir: Path) -> List[str]:
    """The configure command line."""
    kind, text, mpicxx = mpi4py_mpi()
    _log(f"mpi4py's MPI: {text.splitlines()[0]} -> PARAMWIN_MPI={kind}")
    args = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPARAMWIN_MPI={kind}",
            f"-DMPI_CXX_COMPILER={_tool(kind, 'mpicxx', mpicxx)}",
            f"-DMPIEXEC_EXECUTABLE={_tool(kind, 'mpiexec', 'mpiexec')}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DPARAMWIN_WITH_PYTHON=ON", "-DPARAMWIN_PYTHON_REQUIRED=ON",
            "-DPARAMWIN_BUILD_TESTS=OFF", "-DPARAMWIN_BUILD_BENCHMARKS=OFF",
            "-DPARAMWIN_BUILD_EXAMPLES=OFF", "-DPARAMWIN_HEADER_CHECK=OFF",
            # The package's torch support is pure Python over the interpreter's torch: the
            # LibTorch adapter (C++) is not needed.
            "-DPARAMWIN_WITH_TORCH=OFF"]
    if shutil.which("ccache"):
        args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    args += shlex.split(os.environ.get("PARAMWIN_CMAKE_ARGS", ""))
    return args


def _run(cmd: List[str], env: Dict[str, str]) -> None:
    _log(" ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True, env=env)


def build_package(build_dir: Path) -> Path:
    """Configures and builds the extension in ``build_dir``; returns <build>/python/paramwin."""
    env = dict(os.environ)
    env.setdefault("CCACHE_BASEDIR", str(ROOT.parent))
    _run(cmake_args(build_dir), env)
    jobs = env.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run(["cmake", "--build", str(build_dir), "--target", "paramwin_python", "-j", jobs], env)
    pkg = build_dir / "python" / NAME
    if not any(pkg.glob("_core*.so")):
        raise RuntimeError(f"paramwin_backend: the build made no extension in {pkg}")
    return pkg


def wheel_tag() -> str:
    """cpXY-cpXY-<platform> of the running interpreter."""
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    abi = sysconfig.get_config_var("SOABI") or ""
    m = re.match(r"cpython-(\d+)([a-z]*)", abi)
    abi_tag = f"cp{m.group(1)}{m.group(2)}" if m else impl
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{abi_tag}-{platform}"


def metadata_text() -> str:
    """The METADATA file (core metadata 2.1)."""
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}",
             f"Summary: {SUMMARY}", "Requires-Python: >=3.9", "Requires-Dist: numpy",
             "Requires-Dist: mpi4py", "Provides-Extra: torch",
             "Requires-Dist: torch ; extra == \"torch\""]
    return "\n".join(lines) + "\n"


def _dist_info() -> str:
    return f"{NAME}-{version()}.dist-info"


def _record_row(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def write_wheel(pkg: Path, wheel_directory: str) -> str:
    """Packs ``pkg`` (the package directory) into a wheel in ``wheel_directory``."""
    tag = wheel_tag()
    name = f"{NAME}-{version()}-{tag}.whl"
    dist = _dist_info()
    files: List[Tuple[str, bytes]] = []
    for path in sorted(pkg.iterdir()):
        if path.is_file() and (path.suffix in (".py", ".pyi", ".so") or path.name == "py.typed"):
            files.append((f"{NAME}/{path.name}", path.read_bytes()))
    files.append((f"{dist}/METADATA", metadata_text().encode()))
    wheel = ("Wheel-Version: 1.0\nGenerator: paramwin_backend\nRoot-Is-Purelib: false\n"
             f"Tag: {tag}\n")
    files.append((f"{dist}/WHEEL", wheel.encode()))
    record = [_record_row(a, d) for a, d in files] + [f"{dist}/RECORD,,"]
    files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    out = Path(wheel_directory) / name
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    _log(f"wrote {out}")
    return name


# -- PEP 517 hooks ------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    """Nothing to install: the backend needs only the standard library and CMake."""
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    """Nothing to install."""
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[dict] = None) -> str:
    """Writes the dist-info directory (METADATA) without building."""
    dist = Path(metadata_directory) / _dist_info()
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(metadata_text())
    return dist.name


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    """Builds the extension with CMake and packs the package into a wheel."""
    kept = os.environ.get("PARAMWIN_BUILD_DIR") or (config_settings or {}).get("build-dir")
    if kept:
        return write_wheel(build_package(Path(kept).resolve()), wheel_directory)
    with tempfile.TemporaryDirectory(prefix="paramwin-build-") as tmp:
        return write_wheel(build_package(Path(tmp)), wheel_directory)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    """A source archive of the files git tracks (what ``pip install`` of it rebuilds)."""
    import tarfile

    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    base = f"{NAME}-{version()}"
    out = Path(sdist_directory) / f"{base}.tar.gz"
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for f in filter(None, files):
            if (ROOT / f).is_file():
                tar.add(ROOT / f, arcname=f"{base}/{f}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = metadata_text().encode()
        info.size = len(data)
        import io

        tar.addfile(info, io.BytesIO(data))
    return out.name
