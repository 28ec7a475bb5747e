"""``expkit import kernelbench DIR``: one manifest per KernelBench-style problem/solution pair.

Files are told apart by what they define (:func:`classify`) and paired by file stem
(:func:`find_pairs`); :func:`write_manifests` writes one manifest per pair, with the
importer's default claim for the user to replace. How such a manifest runs -- the
baseline, candidate and inputs built from the pair -- is :mod:`expkit.manifest.kernelbench`.
"""

from __future__ import annotations

import ast
import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..core.errors import ExpkitError
from ..manifest.kernelbench import PRECISION_DTYPES
from ..report.store import atomic_write

@dataclass(frozen=True)
class Pair:
    problem: Path
    solution: Path

    @property
    def name(self) -> str:
        return self.solution.stem if self.solution.stem != self.problem.stem else \
            f"{self.problem.stem}-{self.solution.parent.name}"


def classify(path: Path) -> Optional[str]:
    """``"solution"`` (defines ``class ModelNew``), ``"problem"`` (``class Model`` and
    ``get_inputs``) or None, read from the file's syntax tree without importing it."""
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError:
        # A solution that does not parse still gets its manifest: it fails as a candidate.
        return "solution" if "class ModelNew" in text else None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    if "ModelNew" in names:
        return "solution"
    if {"Model", "get_inputs", "get_init_inputs"} <= names:
        return "problem"
    return None


def find_pairs(root: Path) -> Tuple[List[Pair], List[Path]]:
    """Problem/solution pairs under ``root`` (searched recursively) and unpaired solutions.

    Files are told apart by what they define (:func:`classify`). A solution pairs
    with the problem whose file stem is the longest prefix of its own stem, so
    ``19_ReLU.py`` pairs with ``19_ReLU_new.py`` beside it and with
    ``solutions/19_ReLU.py`` in another folder; ``1_Conv.py`` never claims
    ``11_Conv_new.py``, because a prefix must end at the stem or at ``_``/``-``/``.``.
    Several solutions may share a problem (one manifest each).
    """
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    kinds = {p: classify(p) for p in files}
    problems = [p for p, k in kinds.items() if k == "problem"]
    pairs, orphans = [], []
    for sol in (p for p, k in kinds.items() if k == "solution"):
        best = None
        for prob in problems:
            s, q = sol.stem, prob.stem
            if s == q or (s.startswith(q) and s[len(q)] in "_-."):
                if best is None or len(q) > len(best.stem) or (len(q) == len(best.stem) and prob.parent == sol.parent):
                    best = prob
        if best is None:
            orphans.append(sol)
        else:
            pairs.append(Pair(best, sol))
    return pairs, orphans


_MANIFEST = """\
# Written by `{command} {root}` on {date}.
# The claim below is the importer's default ({speedup:g}x with tolerance {tolerance:g}: "correct and
# at least as fast", KernelBench's fast_1 bar less the tolerance); replace it with what was claimed.
# A candidate that runs the baseline's own ops is invalid by default (expect.forbid_baseline);
# list ops it may legitimately reuse under `expect: {{allow: [...]}}`.
name: {name}
description: KernelBench-style pair, problem {problem_name}, solution {solution_name}.
kernelbench:
  problem: {problem}
  solution: {solution}
  precision: {precision}
{free}claim:
  speedup: {speedup}
  tolerance: {tolerance}
  source: "{command}"
device: {device}
cases:
  - name: default
{params}"""


def _int_global(path: Path, name: str) -> Optional[int]:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                return int(node.value.value)
    return None


def manifest_text(pair: Pair, out: Path, name: str, *, root: Path, device: str = "cuda", precision: str = "fp32",
                  speedup: float = 1.0, tolerance: float = 0.05, params: Optional[Dict[str, int]] = None,
                  extra: str = "", command: str = "expkit import kernelbench") -> str:
    """The manifest of one pair, written to sit in ``out`` (its paths are relative to it).

    ``extra`` is YAML appended as it is (``expkit audit`` adds ``expect:`` there)."""
    params = params or {}
    return _MANIFEST.format(
        command=command, root=root, date=_dt.date.today().isoformat(), name=name, speedup=speedup, tolerance=tolerance,
        problem_name=pair.problem.name, solution_name=pair.solution.name,
        problem=os.path.relpath(pair.problem, out), solution=os.path.relpath(pair.solution, out),
        precision=precision, device=device,
        free=f"  free: [{', '.join(params)}]\n" if params else "",
        params=("    params: {" + ", ".join(f"{k}: {v}" for k, v in params.items()) + "}\n") if params else "",
    ) + extra


def write_manifests(root: Path, out: Optional[Path] = None, *, device: str = "cuda", precision: str = "fp32",
                    speedup: float = 1.0, tolerance: float = 0.05, free: Sequence[str] = (),
                    overwrite: bool = False) -> Tuple[List[Path], List[Path]]:
    """Write one manifest per pair found under ``root`` into ``out`` (default ``root``).

    Returns the manifests written and the solutions that found no problem. Each
    name in ``free`` (``batch_size``, say) that a problem defines as an integer
    global goes into its case's params and its ``kernelbench.free``; a name that no
    problem defines is an error (a typo, most likely).
    """
    root = Path(root)
    if not root.is_dir():
        raise ExpkitError(f"{root}: not a folder (expkit import kernelbench takes a folder of problem files)")
    if precision not in PRECISION_DTYPES:
        raise ExpkitError(f"--precision {precision!r}: one of {', '.join(PRECISION_DTYPES)}")
    out = Path(out) if out is not None else root
    out.mkdir(parents=True, exist_ok=True)
    pairs, orphans = find_pairs(root)
    missing = [g for g in free if not any(_int_global(p.problem, g) is not None for p in pairs)]
    if missing:
        raise ExpkitError(f"--free {', '.join(missing)}: no problem under {root} has an integer global of that name")
    written: List[Path] = []
    used: Dict[str, int] = {}
    found: Dict[str, int] = {}
    for pair in pairs:
        name = pair.name
        used[name] = used.get(name, 0) + 1
        if used[name] > 1:
            name = f"{name}-{used[name]}"
        target = out / f"{name}.yaml"
        if target.exists() and not overwrite:
            raise ExpkitError(f"{target}: already exists (pass --overwrite to replace it)")
        params = {g: v for g in free if (v := _int_global(pair.problem, g)) is not None}
        found.update(params)
        atomic_write(target, manifest_text(pair, out, name, root=root, device=device, precision=precision,
                                           speedup=speedup, tolerance=tolerance, params=params))
        written.append(target)
    return written, orphans
