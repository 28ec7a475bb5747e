"""Imports sit at the top of a module (issue 48). One inside a function says why, on its own
line or in a comment line above it and the imports that follow it: ``# lazy: <reason>`` (an
optional or slow dependency, a process that must not import torch, an import cycle broken on
purpose). Held for the lower stages first; a stage joins the list once it is clean."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLEAN = ["core", "zoo", "verdict", "report", "manifest", "checks", "timing", "workload", "bench", "api", "suites", "cli",
         "runner.py", "pytest_plugin.py", "__init__.py"]


def _unexplained(path: Path) -> list:
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                here = lines[inner.lineno - 1]
                i = inner.lineno - 2
                while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
                    i -= 1  # one reason covers the imports below it
                above = lines[i].strip() if i >= 0 else ""
                if "# lazy:" not in here and not above.startswith("# lazy:"):
                    out.append(f"{path.relative_to(ROOT)}:{inner.lineno}: {here.strip()}")
    return out


@pytest.mark.parametrize("stage", CLEAN)
def test_every_import_inside_a_function_says_why(stage):
    where = ROOT / "expkit" / stage
    found = [u for p in (sorted(where.rglob("*.py")) if where.is_dir() else [where]) for u in _unexplained(p)]
    assert not found, "an import inside a function with no `# lazy:` reason:\n" + "\n".join(found)


def test_the_rule_sees_an_unexplained_import(tmp_path):
    f = ROOT / "expkit" / "_probe_imports.py"
    try:
        f.write_text("def f():\n    import json\n    # lazy: slow\n    import csv\n    import io\n    x = 1\n"
                     "    import re\n    import os  # lazy: why\n")
        assert _unexplained(f) == ["expkit/_probe_imports.py:2: import json", "expkit/_probe_imports.py:7: import re"]
    finally:
        f.unlink()
