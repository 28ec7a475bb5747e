"""The shape of the package (docs/architecture.md): imports run only downward, no module
grows past ~500 lines without saying why, and no private helper crosses a module.

The import contracts live in pyproject.toml (``[tool.importlinter]``); this runs them, so
that ``python -m pytest`` fails on an upward import, naming it. The other checks guard
what the contracts cannot see: module sizes, private names used across modules, and
module paths written as strings (a stale one fails silently where it is used).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "expkit"

#: A module longer than this must say why at the top of its docstring.
MAX_LINES = 500
#: The marker: a line of the module docstring that starts with it and gives the reason.
SIZE_MARKER = "Size:"


def test_import_contracts_hold():
    """``lint-imports`` with the contracts of pyproject.toml: layers, no cycles, no torch below."""
    try:
        import importlinter  # noqa: F401
    except ImportError:
        pytest.fail("import-linter is not installed: pip install -e '.[test]' (it checks the layers)")
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, "import contracts broken (pyproject.toml [tool.importlinter]):\n" + out.stdout + out.stderr


def _modules() -> Iterator[Tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def test_no_module_over_the_size_limit_without_a_reason():
    too_long = []
    for name, path in _modules():
        text = path.read_text()
        n = len(text.splitlines())
        if n <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.startswith(SIZE_MARKER) for line in doc.splitlines()):
            too_long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not too_long, (f"modules over {MAX_LINES} lines: split them by responsibility, or give the reason "
                          f"in a docstring line starting {SIZE_MARKER!r}: " + "; ".join(too_long))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_private_name_is_used_across_modules():
    """``from x import _helper`` or ``x._helper`` where x is another expkit module: a private
    helper is its module's own; what two modules share gets a public name (and a home
    that both may import)."""
    found: List[str] = []
    for name, path in _modules():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        modules: Dict[str, str] = {}  # local name -> expkit module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                if not source.startswith("expkit"):
                    continue
                for alias in node.names:
                    if _is_module(f"{source}.{alias.name}"):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif alias.name.startswith("_") and not alias.name.startswith("__") and source != name:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {source} import {alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {modules[node.value.id]}.{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_module_paths_written_as_strings_import():
    """The fork servers' preload lists and the modules the bench imports before its
    snapshot name modules by string; a name left behind by a move would fail silently."""
    from expkit.bench.sides.side import HARNESS_MODULES
    from expkit.bench.sides.preload import GPU_PRELOAD, PRELOAD as BENCH_PRELOAD
    from expkit.suites.manifest_process import PRELOAD as SUITE_PRELOAD

    names = [f"expkit.{m}" for m in HARNESS_MODULES] + [m for m in (*BENCH_PRELOAD, *GPU_PRELOAD, *SUITE_PRELOAD)
                                                         if m.startswith("expkit")]
    missing = []
    for m in names:
        try:
            importlib.import_module(m)
        except ImportError as e:
            missing.append(f"{m} ({e})")
    assert not missing, missing


def test_the_tamper_checks_hot_prefixes_name_expkit_functions():
    """Each expkit prefix of the per-batch tamper check still matches functions after a move."""
    from expkit.bench.sides.side import _harness_modules
    from expkit.bench.defences.tamper import HOT_PREFIXES, FunctionSnapshot

    _harness_modules()
    entries = FunctionSnapshot.take().entries
    stale = [p for p in HOT_PREFIXES if p.startswith("expkit.") and not any(n.startswith(p) for n in entries)]
    assert not stale, stale


def test_every_stage_package_ships_in_the_wheel():
    """pyproject.toml lists the packages explicitly (conf/ maps to expkit.conf): a new stage
    package missing from the list would be left out of the wheel."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.relative_to(ROOT).parent.parts) for p in PACKAGE.rglob("__init__.py")}
    assert on_disk <= listed, sorted(on_disk - listed)
