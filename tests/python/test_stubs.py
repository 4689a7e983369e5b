"""Type hints and docstrings: the stubs of the extension (paramwin/_core.pyi, shipped with
py.typed) declare every name the extension defines, the generated stubs of the enums
(paramwin/enums.pyi) every member of the name tables, and every public name of the package
has a docstring."""

import ast
import inspect
import os

import paramwin
from paramwin import _core

PKG = os.path.dirname(paramwin.__file__)


def stub_tree():
    with open(os.path.join(PKG, "_core.pyi")) as f:
        return ast.parse(f.read())


def test_py_typed_and_the_stub_ship_with_the_package():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    assert os.path.isfile(os.path.join(PKG, "_core.pyi"))
    assert os.path.isfile(os.path.join(PKG, "enums.pyi"))


def test_the_stub_declares_every_name_of_the_extension():
    tree = stub_tree()
    top = set()
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for b in node.body:
                if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(b.name)
                elif isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
                    members.add(b.target.id)
            classes[node.name] = (members, [b.id for b in node.bases if isinstance(b, ast.Name)])
            top.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)

    def stub_members(name):
        members, bases = classes[name]
        out = set(members)
        for b in bases:
            if b in classes:
                out |= stub_members(b)
        return out

    real = {n for n in dir(_core) if not n.startswith("_")}
    assert real <= top, f"add to _core.pyi: {sorted(real - top)}"
    for name in sorted(real):
        obj = getattr(_core, name)
        if inspect.isclass(obj):
            defined = {n for n in vars(obj) if not n.startswith("_")}
            missing = defined - stub_members(name)
            assert not missing, f"add to _core.pyi's {name}: {sorted(missing)}"


def test_the_enum_stubs_are_the_name_tables():
    # paramwin/enums.pyi is written at build time from the C++ name tables
    # (python/src/enum_stubs.cpp): type checkers see every member the runtime enums have.
    with open(os.path.join(PKG, "enums.pyi")) as f:
        tree = ast.parse(f.read())
    stubbed = {}
    exported = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            stubbed[node.name] = [t.id for b in node.body if isinstance(b, ast.Assign)
                                  for t in b.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"]:
            exported = ast.literal_eval(node.value)
    assert stubbed == _core.enum_tables()
    assert list(stubbed) == list(_core.enum_tables())
    assert exported == paramwin.enums.__all__
    for name, members in stubbed.items():
        assert [m.name for m in getattr(paramwin.enums, name)] == members, name


def test_every_public_name_has_a_docstring():
    undocumented = []
    for name in paramwin.__all__:
        obj = getattr(paramwin, name)
        if isinstance(obj, str):
            continue
        if not (getattr(obj, "__doc__", None) or "").strip():
            undocumented.append(name)
        # Python classes (the extension's members are documented in _core.pyi).
        if inspect.isclass(obj) and obj.__module__.startswith("paramwin") and \
                obj.__module__ not in ("paramwin._core", "paramwin.enums"):
            for member, value in vars(obj).items():
                if member.startswith("_") or not (callable(value) or isinstance(value, property)):
                    continue
                if not (getattr(value, "__doc__", None) or "").strip():
                    undocumented.append(f"{name}.{member}")
    from paramwin.torch import TorchAgent

    for member, value in vars(TorchAgent).items():
        if not member.startswith("_") and (callable(value) or isinstance(value, property)):
            if not (value.__doc__ or "").strip():
                undocumented.append(f"TorchAgent.{member}")
    assert not undocumented, f"no docstring: {undocumented}"
