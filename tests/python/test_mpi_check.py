"""The import check: `import paramwin` raises ImportError naming both MPIs when the running
mpi4py's MPI is not the one paramwin was built against (faked here by replacing
MPI.Get_library_version before a fresh import), and passes for the real one."""

import sys

import pytest
from mpi4py import MPI

import paramwin
from paramwin import _build_info
from paramwin._mpi_check import check_mpi, running_mpi


def test_running_mpi_reads_both_vendors():
    assert running_mpi("Open MPI v4.1.4, package: Debian OpenMPI") == ("OpenMPI", "4.1.4")
    assert running_mpi("MPICH Version:\t4.0.2\nMPICH Release date: ...") == ("MPICH", "4.0.2")
    assert running_mpi("Intel(R) MPI Library 2021") == ("Intel(R)", "")


def test_the_real_mpi_passes():
    check_mpi(MPI, _build_info)
    assert paramwin.__version__ == _build_info.VERSION == paramwin._core.version


def fake(text):
    class Fake:
        __file__ = "/fake/mpi4py/MPI.so"

        @staticmethod
        def Get_library_version():  # noqa: N802 - mpi4py's name
            return text

    return Fake


@pytest.mark.parametrize("text", ["MPICH Version:\t4.0.2\nMPICH Release date: x",
                                  "Open MPI v9.0.0, package: elsewhere"])
def test_a_mismatched_mpi_is_an_import_error_naming_both(text):
    running = running_mpi(text)
    if running[0] == _build_info.MPI_KIND and \
            running[1].split(".")[0] == _build_info.MPI_VERSION.split(".")[0]:
        pytest.skip("the fake is this build's MPI")
    with pytest.raises(ImportError) as info:
        check_mpi(fake(text), _build_info)
    msg = str(info.value)
    assert f"built against {_build_info.MPI_KIND} {_build_info.MPI_VERSION}" in msg
    assert f"uses {running[0]} {running[1]}" in msg and "/fake/mpi4py/MPI.so" in msg


def test_import_paramwin_refuses_a_mismatched_mpi(monkeypatch):
    # A fresh `import paramwin` with mpi4py's MPI claiming to be another library.
    other = ("MPICH Version:\t4.0.2" if _build_info.MPI_KIND == "OpenMPI"
             else "Open MPI v4.1.4, package: x")
    monkeypatch.setattr(MPI, "Get_library_version", lambda: other)
    saved = {k: v for k, v in sys.modules.items() if k == "paramwin" or k.startswith("paramwin.")}
    for k in saved:
        if k != "paramwin._core":  # an extension module cannot be loaded twice
            monkeypatch.delitem(sys.modules, k)
    try:
        with pytest.raises(ImportError, match="built against .* but the running mpi4py .* uses"):
            import paramwin as again  # noqa: F401
    finally:
        for k, v in saved.items():
            sys.modules[k] = v
