"""Code under test written into a test's folder beside its manifest, both loaded as a run loads them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Tuple

from expkit.manifest import load


def load_sides(folder: Path, module: str, source: str, manifest: str) -> Tuple[Any, ModuleType]:
    """Write ``module``.py and ``m.yaml`` into ``folder``; the loaded manifest and a fresh import of the module."""
    (folder / f"{module}.py").write_text(source)
    (folder / "m.yaml").write_text(manifest)
    lm = load(folder / "m.yaml")
    sys.path.insert(0, str(folder))
    sys.modules.pop(module, None)
    try:
        return lm, importlib.import_module(module)
    finally:
        sys.path.remove(str(folder))
