"""``oasr.envs`` is the one place an ``OASR_*`` environment variable is read.

The scan parses every Python file of the package, the tests, the benchmarks and the scripts and
fails on a read of an ``OASR_*`` variable anywhere but ``oasr/envs.py``: ``os.environ.get``,
``os.getenv``, ``os.environ[...]`` as a value, ``... in os.environ``. In the package it also
fails on a bare ``"OASR_..."`` string constant (a name kept aside and read indirectly) and on
a read whose name is not a literal (it could be one).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from oasr import envs

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / "oasr" / "envs.py"
_NAME = re.compile(r"OASR_[A-Z0-9_]+")


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id == "environ"


def _read_name(node: ast.AST) -> ast.AST | None:
    """The name argument of an environment read, or None when ``node`` is not one."""
    if isinstance(node, ast.Call):
        func = node.func
        is_get = isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)
        is_getenv = (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
            isinstance(func, ast.Name) and func.id == "getenv")
        if (is_get or is_getenv) and node.args:
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(
            node.value):
        return node.slice
    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn))
                                             for op in node.ops):
        if any(_is_environ(c) for c in node.comparators):
            return node.left
    return None


def _violations(path: Path, in_package: bool) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    read_names: set[int] = set()
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        name = _read_name(node)
        if name is None:
            continue
        read_names.add(id(name))
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            if name.value.startswith("OASR_"):
                found.append(f"{where}: reads {name.value}")
        elif in_package:
            found.append(f"{where}: reads an environment variable by a computed name")
    if in_package:
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: holds the name {node.value}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and _NAME.fullmatch(node.value) and id(node) not in read_names]
    return found


def _files() -> list[tuple[Path, bool]]:
    out = [(p, True) for p in sorted((ROOT / "oasr").rglob("*.py")) if p != ENVS]
    for folder in ("tests", "benchmarks", "scripts"):
        out += [(p, False) for p in sorted((ROOT / folder).rglob("*.py"))]
    return out


def test_only_envs_reads_oasr_variables():
    files = _files()
    assert len(files) > 100  # the scan saw the tree, not an empty folder
    found = [v for path, in_package in files for v in _violations(path, in_package)]
    assert not found, ("read these through an oasr.envs accessor (declare the variable "
                       "there, documented):\n" + "\n".join(found))


@pytest.mark.parametrize("source,expected", [
    ('os.environ.get("OASR_X")', "reads OASR_X"),
    ('os.getenv("OASR_X", "1")', "reads OASR_X"),
    ('os.environ["OASR_X"]', "reads OASR_X"),
    ('"OASR_X" in os.environ', "reads OASR_X"),
    ('NAME = "OASR_X"', "holds the name OASR_X"),
    ('os.environ["OASR_X"] = "1"', "holds the name OASR_X"),
    ('os.environ.get(name)', "computed name"),
])
def test_the_scan_catches_each_form_of_read(tmp_path, monkeypatch, source, expected):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    module = tmp_path / "m.py"
    module.write_text(f"import os\n{source}\n")
    found = _violations(module, in_package=True)
    assert len(found) == 1 and expected in found[0]


def test_other_variables_and_names_in_prose_pass_the_scan(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    module = tmp_path / "m.py"
    module.write_text('import os\nos.environ.get("CUDA_HOME")\n"set OASR_X=1 to ..."\n'
                      'env = {**os.environ, envs.OASR_X.name: "1"}\n')
    assert _violations(module, in_package=True) == []
    # a test or a benchmark may set a variable for a child process or through monkeypatch
    module.write_text('import os\nos.environ["OASR_X"] = "1"\nenv = {"OASR_X": "1"}\n')
    assert _violations(module, in_package=False) == []


def test_every_variable_is_named_documented_and_listed_once():
    names = [v.name for v in envs.ALL]
    assert len(set(names)) == len(names)
    declared = {v.name for v in vars(envs).values() if isinstance(v, envs.EnvVar)}
    assert declared == set(names)
    for var in envs.ALL:
        assert _NAME.fullmatch(var.name) and len(var.doc) > 30, var


@pytest.mark.parametrize("accessor,var,good,bad", [
    (envs.gpus_fake_cpu, "OASR_GPUS_FAKE", {"": False, "cpu": True}, "gpu"),
    (envs.worker_events, "OASR_WORKER_EVENTS", {"": False, "0": False, "1": True}, "yes"),
    (envs.layers_backend, "OASR_LAYERS_BACKEND", {"oasr": "oasr", "torch": "torch"}, "auto"),
    (envs.language_id_enabled, "OASR_LANGUAGE_ID", {"auto": True, "off": False}, "on"),
])
def test_accessors_type_the_value_and_refuse_others_by_name(monkeypatch, accessor, var, good,
                                                            bad):
    for value, expected in good.items():
        monkeypatch.setenv(var, value)
        assert accessor() == expected
    monkeypatch.setenv(var, bad)
    with pytest.raises(ValueError, match=var):
        accessor()


def test_optional_paths(monkeypatch, tmp_path):
    monkeypatch.delenv("OASR_SHARED_DATA", raising=False)
    assert envs.shared_data() is None
    monkeypatch.setenv("OASR_SHARED_DATA", str(tmp_path))
    assert envs.shared_data() == tmp_path
