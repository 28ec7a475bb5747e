"""Callables as the ``module:qualname`` a fresh worker process imports them by.

The code under test runs in a worker process that imports it afresh (``defences.isolate``),
so a callable in a Python manifest is written down as a name: the ``module:qualname`` it
is bound to, checked to resolve back to the very same object in this process, from a
module that this process's import system finds without help from ``sys.modules`` (the
worker starts with the same ``sys.path``). A script run as ``python script.py`` is named
by its file (``__main__`` becomes the file's module name; ``python -m pkg.mod`` keeps
``pkg.mod``). When a callable's own ``__module__``/``__qualname__`` do not lead back to
it (torch's custom ops, C functions re-exported elsewhere), every loaded module's globals
are searched for a name bound to it, public modules first. Lambdas, functions defined
inside functions, ``__main__`` without a file (a notebook cell, the REPL) and
``functools.partial`` objects have no such name: :func:`reference` raises a
:class:`~expkit.ManifestError` naming the key and the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

from ..core.errors import ManifestError

#: The name a dict manifest's errors give for the file (there is none yet).
DICT_SOURCE = "manifest (dict)"

__all__ = ["reference", "DICT_SOURCE"]


def _module_file(module: Any) -> Optional[Path]:
    f = getattr(module, "__file__", None)
    return Path(f).resolve() if f else None


def _find_fresh(name: str) -> Any:
    """What a fresh process's import system finds for the top-level module ``name`` (never ``sys.modules``)."""
    if name in sys.builtin_module_names:
        return "built-in"
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, None)
        except Exception:  # a finder that cannot handle the name: the next one may
            continue
        if spec is not None:
            return spec
    return None


def _importable(name: str, module: Any) -> Optional[str]:
    """None when a fresh process with this ``sys.path`` imports ``name`` as ``module``'s file; else why not.

    The top-level package is looked up through the import system's finders, as a fresh
    process would (``importlib.util.find_spec`` would answer from ``sys.modules``); a
    module's file must be the one found, or lie inside the package found."""
    top = name.split(".")[0]
    spec = _find_fresh(top)
    if spec is None:
        return f"module {top!r} is not on sys.path"
    mine = _module_file(module)
    if spec == "built-in" or mine is None:
        return None
    roots = [Path(p).resolve() for p in (getattr(spec, "submodule_search_locations", None) or [])]
    origin = getattr(spec, "origin", None)
    if roots:
        if any(r in mine.parents for r in roots):
            return None
        return f"module {name!r} is imported from {mine}, outside the package {top!r} found on sys.path"
    if top == name and origin not in (None, "built-in", "frozen") and Path(origin).resolve() != mine:
        return f"the name {name!r} imports {origin}, not {mine}"
    return None


def _lookup(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _main_module_name() -> Tuple[Optional[str], str]:
    """The name under which a fresh process imports ``__main__``'s file, or (None, why not)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return spec.name, ""  # python -m package.module
    file = getattr(main, "__file__", None)
    if not file or not str(file).endswith(".py"):
        return None, ("it is defined in `__main__` without a .py file (a notebook cell or the REPL), which the "
                      "worker process that runs the code under test cannot import")
    return Path(file).stem, ""


def _candidates(obj: Any) -> Iterator[Tuple[str, str]]:
    """(module name, attribute path) pairs that may name ``obj``: its own, then any module global bound to it."""
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    own = isinstance(mod, str) and isinstance(qual, str)
    private = own and any(s.startswith("_") for s in str(mod).split(".")) and mod not in ("__main__", "__mp_main__")
    if own and not private:
        yield str(mod), str(qual)
    found = [] if not private else [(str(mod), str(qual))]
    for name, module in list(sys.modules.items()):
        try:
            d = vars(module)
        except TypeError:
            continue
        for attr, value in list(d.items()):
            if value is obj and not attr.startswith("__"):
                found.append((name, attr))
    # Prefer public modules, then the module the callable names, then short names.
    found.sort(key=lambda p: (any(s.startswith("_") for s in p[0].split(".")), p[0] != mod, p[1].startswith("_"),
                              len(p[0]), p[0], p[1]))
    yield from found


def reference(obj: Any, key: str, source: str = DICT_SOURCE) -> str:
    """The ``module:qualname`` a fresh worker process imports ``obj`` by; see the module docstring.

    A string is returned as it is (after a check of its form). Raises :class:`ManifestError`
    naming ``key`` and the fix when ``obj`` cannot be imported by name.
    """
    if isinstance(obj, str):
        if obj.count(":") != 1 or not all(obj.split(":")):
            raise ManifestError(source, key, f"{obj!r} is not a `module:function` reference",
                                "write it as `my_kernels:forward`, or pass the callable itself")
        return obj
    if not callable(obj):
        raise ManifestError(source, key, f"expected a callable or a `module:function` string, got "
                            f"{type(obj).__name__} {obj!r}")
    label = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    qual = getattr(obj, "__qualname__", "") or ""
    if "<lambda>" in qual or "<locals>" in qual:
        raise ManifestError(source, key, f"`{label}` is a lambda or is defined inside a function: the worker "
                            "process that runs the code under test imports module-level names only",
                            "define it at the top level of a .py module and pass that function")
    first_why = ""
    for module_name, attr in _candidates(obj):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        try:
            if _lookup(module, attr) is not obj:
                continue
        except AttributeError:
            continue
        name = module_name
        if module_name in ("__main__", "__mp_main__"):
            name, why = _main_module_name()
            if name is None:
                first_why = first_why or why
                continue
        why = _importable(name, module)
        if why is None:
            return f"{name}:{attr}"
        first_why = first_why or why
    raise ManifestError(source, key, f"`{label}` cannot be imported by name: {first_why or 'no module binds it to a name'}",
                        "define it at the top level of a .py module on sys.path (e.g. kernels.py beside the notebook "
                        "or script) and pass it from there, or give a `module:function` string")


#: Keys whose values are references (``module:function``), by path in the manifest.
