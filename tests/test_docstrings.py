"""expkit's docstrings and comments say what the code guarantees, not when or where it was measured.

History belongs to git and docs/decisions.md, figures' sources to evidence/README.md: a date, a
commit id, a results path or a debug script in a docstring goes stale the day the evidence
moves. Code strings (a message a user reads) are not scanned: they are tested where they are made.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parent.parent

STALE = {
    "a date": re.compile(r"\b20\d\d-[01]\d\b"),
    "a benchmarks/ path": re.compile(r"benchmarks/"),
    "a results/ path": re.compile(r"\bresults/"),
    "a debug script": re.compile(r"scripts/debug_"),
    "DESIGN.md, which is not in the repository": re.compile(r"DESIGN\.md"),
    "a commit id": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"),
}


def _prose(path: Path) -> Iterator[Tuple[int, str]]:
    """(line, text) of every docstring and comment of a module."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def test_no_docstring_or_comment_carries_history():
    found = [f"{path.relative_to(ROOT)}:{line}: {what}"
             for path in sorted((ROOT / "expkit").rglob("*.py"))
             for line, text in _prose(path)
             for what, pattern in STALE.items() if pattern.search(text)]
    assert not found, "move history to docs/decisions.md and figures' sources to evidence/README.md:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    text = '"""Measured on 2026-11-25 at 5aee705 (benchmarks/results/x.md, scripts/debug_y.py)."""\n# DESIGN.md\n'
    hits = {what for what, pattern in STALE.items() if pattern.search(text)}
    assert hits == set(STALE)
