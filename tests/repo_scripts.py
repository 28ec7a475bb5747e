"""Load a script of this repository (``benchmarks/NAME.py``) as a module, for its tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """The script at ``ROOT / relative``, executed as a fresh module (its ``main`` not run)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
