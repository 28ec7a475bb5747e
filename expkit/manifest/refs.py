"""Resolve ``module:function`` references from a manifest.

A reference is looked up first relative to the manifest's folder (so an example can
keep its kernels in a file beside it) and then on the ordinary import path. A module
loaded from the manifest's folder is imported under its own name with that folder
put at the front of ``sys.path`` for the duration of the import only.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

from ..core.errors import ManifestError


def resolve(ref: str, folder: Path, *, manifest_path: Path, key: str) -> Callable[..., Any]:
    """Return the callable ``ref`` names, or raise :class:`ManifestError` for ``key``."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ManifestError(manifest_path, key, f"{ref!r} is not a `module:function` reference",
                            "write it as `my_kernels:forward`")
    module = _import(module_name, folder, manifest_path=manifest_path, key=key)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(module) if not n.startswith("_")]

            near = difflib.get_close_matches(part, names, n=1)
            fix = f"did you mean `{module_name}:{near[0]}`?" if near else f"define `{part}` in {module_name}"
            raise ManifestError(manifest_path, key, f"module {module_name!r} has no attribute {part!r}", fix) from None
    if not callable(obj):
        raise ManifestError(manifest_path, key, f"{ref!r} is a {type(obj).__name__}, not a callable",
                            "point it at a function")
    return obj


def _import(module_name: str, folder: Path, *, manifest_path: Path, key: str) -> Any:
    local = folder / (module_name.replace(".", "/") + ".py")
    added = False
    if local.is_file() or (folder / module_name.split(".")[0]).is_dir():
        sys.path.insert(0, str(folder))
        added = True
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ManifestError(manifest_path, key, f"cannot import module {module_name!r}",
                                f"put {module_name}.py beside the manifest or install it") from None
        raise ManifestError(manifest_path, key, f"importing {module_name!r} failed: {e}",
                            "install the missing package") from None
    except Exception as e:  # the module itself raised while importing
        raise ManifestError(manifest_path, key, f"importing {module_name!r} raised {type(e).__name__}: {e}",
                            "fix the module so that it imports") from None
    finally:
        if added:
            sys.path.remove(str(folder))
