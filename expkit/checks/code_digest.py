"""The code each side's process imported, as a digest that fresh processes can compare.

Every replicate is a fresh pair of workers, and each imports its side's code anew, from
the files as they are then. The candidate's worker can write files: the baseline's module,
or a bytecode file (``__pycache__/*.pyc``) beside it that Python loads in place of an
unchanged source, so that every later replicate's baseline runs other code than the one
the preflight checked (``tests/adversarial/cpu/baseline_rewrite.yaml``: a candidate that
appended a slower ``ref_matmul`` to the baseline's module was ``supported``).

:func:`imported_code` digests, for each module a side's import brought in from a file
outside the Python installation (the project's own code: installed packages are the
machine's, see ``docs/threat-model.md``), the module's code object as its loader gives it
now: the bytecode file if Python would use it, else the source compiled. That is what the
import ran, every function's code and every constant of the module included. The digest is
stable across processes: it walks the code objects' fields, never ``marshal``'s bytes
(which depend on reference counts), and sorts the elements of a ``frozenset`` constant
(whose order follows string hashing, which differs per process).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import types
from typing import AbstractSet, Any, Dict, Iterable, Optional, Tuple


def _installation() -> Tuple[str, ...]:
    """Folders of the Python installation and its installed packages."""
    paths = sysconfig.get_paths()
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots.update(paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, types.CodeType):
        h.update(b"code(")
        h.update(value.co_code)
        for part in (value.co_names, value.co_varnames, value.co_freevars, value.co_cellvars, value.co_name,
                     value.co_argcount, value.co_kwonlyargcount, value.co_posonlyargcount, value.co_flags):
            h.update(repr(part).encode())
        for const in value.co_consts:
            _feed(h, const)
        h.update(b")")
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for v in value:
            _feed(h, v)
        h.update(b")")
    elif isinstance(value, frozenset):
        h.update(b"{")
        for r in sorted(repr(v) for v in value):
            h.update(r.encode() + b",")
        h.update(b"}")
    else:
        h.update(f"{type(value).__name__}:{value!r};".encode())


def code_digest(code: types.CodeType) -> str:
    """sha256 of a code object and every code object among its constants."""
    h = hashlib.sha256()
    _feed(h, code)
    return h.hexdigest()


def _module_code(module: types.ModuleType) -> Optional[types.CodeType]:
    """The module's code as its loader gives it; from its source where the loader gives none
    (pytest's assertion-rewriting loader, for a module named like a test file)."""
    spec = getattr(module, "__spec__", None)
    if spec is None:
        return None
    try:
        get_code = getattr(spec.loader, "get_code", None)
        if get_code is not None:
            return get_code(spec.name)
        with open(spec.origin, "rb") as f:
            return compile(f.read(), spec.origin, "exec")
    except Exception:  # the file gone, or no longer Python: nothing to compare
        return None


def imported_code(before: AbstractSet[str], modules: Optional[Dict[str, Any]] = None,
                  installation: Optional[Iterable[str]] = None) -> Dict[str, str]:
    """``module name -> digest`` for each module in ``modules`` (default ``sys.modules``) not
    in ``before``, loaded from a file outside ``installation`` (default: this Python's)."""
    modules = sys.modules if modules is None else modules
    skip = tuple(installation) if installation is not None else _installation()
    out: Dict[str, str] = {}
    for name in sorted(set(modules) - set(before)):
        module = modules.get(name)
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if not isinstance(module, types.ModuleType) or not origin or not os.path.isfile(origin):
            continue
        if os.path.realpath(origin).startswith(skip):
            continue
        code = _module_code(module)
        if code is not None:
            out[name] = code_digest(code)
    return out


def changed_code(first: Dict[str, str], now: Dict[str, str]) -> Tuple[str, ...]:
    """Modules both processes of a side imported whose code differs between them. A module
    only one of them counted is no evidence either way: a worker forked from a process that
    had imported it already (a notebook that did) finds it there, while one from the fork
    server imports it; and code that changed to import another module changed itself."""
    return tuple(sorted(n for n in set(first) & set(now) if first[n] != now[n]))
