#!/usr/bin/env bash
# The Python package as a user installs it (CTest python.venv_pip / python.venv_wheel,
# docs/python.md "Install"):
#
#   scripts/python_venv_test.sh pip|wheel SOURCE WORK MPIEXEC [BUILD]
#
# pip:   a fresh venv (--system-site-packages: Debian's numpy, mpi4py, torch) in WORK/venv,
#        `pip install --no-build-isolation --no-index SOURCE` (offline);
# wheel: `python -m build --no-isolation --wheel` of SOURCE into WORK/dist from a fresh build
#        venv, then `pip install --no-index` of the wheel into another fresh venv.
# Then, from WORK (outside the source tree, no PYTHONPATH), checks that `import paramwin` is
# the installed package and runs a 2-rank pytest subset of tests/python against it.
# The backend builds in BUILD (default WORK/build). pip mode removes it first (a fresh
# configure and build, as a user's first install); wheel mode keeps it, so that the wheel,
# built after the pip test with the same BUILD, recompiles only what its own configure changes
# (each fresh build of the library costs minutes on 2 cores). The build's warnings are errors
# (-DPARAMWIN_WERROR=ON, as every build of the suite): the package compiles clean, and with
# ccache installed (scripts/test.sh's Open MPI pass compiles through it) pip's build finds the
# pass's objects. Prints the seconds of each step, and "python_venv_test: MODE: ... passed" at
# the end.
set -euo pipefail
mode=$1
src=$(cd "$2" && pwd)
work=$3
mpiexec=$4
build=${5:-$work/build}
py=/usr/bin/python3
unset PYTHONPATH
rm -rf "$work"
mkdir -p "$work"
[ "$mode" = pip ] && rm -rf "$build"
export PARAMWIN_BUILD_DIR=$build
export PARAMWIN_CMAKE_ARGS="-DPARAMWIN_WERROR=ON ${PARAMWIN_CMAKE_ARGS:-}"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$work"

timed() {  # timed LABEL CMD...: runs CMD, prints its seconds
  local label=$1 t0=$EPOCHREALTIME
  shift
  "$@"
  awk -v l="$label" -v a="$t0" -v b="$EPOCHREALTIME" \
    'BEGIN { printf "python_venv_test: %s: %.1f s\n", l, b - a }'
}

timed "venv" "$py" -m venv --system-site-packages "$work/venv"
if [ "$mode" = pip ]; then
  timed "pip install --no-build-isolation ." \
    "$work/venv/bin/pip" install -q --no-build-isolation "$src"
elif [ "$mode" = wheel ]; then
  "$py" -m venv --system-site-packages "$work/build-venv"
  timed "python -m build --no-isolation --wheel" \
    "$work/build-venv/bin/python" -m build --no-isolation --wheel --outdir "$work/dist" "$src"
  wheel=$(ls "$work"/dist/paramwin-*.whl)
  echo "python_venv_test: wheel $(basename "$wheel"):"
  "$py" -m zipfile -l "$wheel"
  timed "pip install the wheel" "$work/venv/bin/pip" install -q "$wheel"
else
  echo "python_venv_test: FAILED: mode must be pip or wheel, got '$mode'" >&2
  exit 2
fi

# The installed package, not the source or build tree.
where=$("$work/venv/bin/python" -c 'import paramwin, os; print(os.path.dirname(paramwin.__file__))')
case "$where" in
  "$work/venv/"*) echo "python_venv_test: import paramwin -> $where" ;;
  *) echo "python_venv_test: FAILED: import paramwin found $where, not the venv's" >&2; exit 1 ;;
esac
for f in py.typed _core.pyi _build_info.py; do
  [ -f "$where/$f" ] || { echo "python_venv_test: FAILED: $f not installed" >&2; exit 1; }
done

tests=("$src/tests/python/test_agent.py" "$src/tests/python/test_checkpoint.py"
       "$src/tests/python/test_options.py" "$src/tests/python/test_mpi_check.py"
       "$src/tests/python/test_device_options.py")
timed "pytest on 2 ranks" "$mpiexec" -n 2 "$work/venv/bin/python" -m pytest -q --color=no \
  -p no:cacheprovider "${tests[@]}"
echo "python_venv_test: $mode: install, import and the 2-rank tests passed"
