"""Silent fallbacks (check ``fallback``): a candidate that catches its own exception and
goes on without the intended kernel.

The bench wraps the one profiled identity call of each case in an
:class:`ExceptionWitness`; when the identity check fails on a case where the candidate
swallowed an exception raised in its own files, the failure says so.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

FALLBACK = "fallback"


class ExceptionWitness:
    """Wraps a callable; records exceptions raised in ``files`` that the call swallowed.

    ``sys.settrace`` is installed only for the wrapped call and only traces frames of
    the candidate's own files, so torch's internals run untraced. Used for the one
    profiled identity call per case, never for a timed one. If the call returns
    normally, every exception seen in those frames was handled somewhere inside it."""

    def __init__(self, fn: Callable[..., Any], files: Sequence[str]) -> None:
        self.fn = fn
        self.files = frozenset(os.path.realpath(f) for f in files)
        self._seen: List[Tuple[str, str, str, int]] = []
        self.swallowed: Tuple[Tuple[str, str, str, int], ...] = ()
        self._real: Dict[str, bool] = {}

    def _ours(self, filename: str) -> bool:
        hit = self._real.get(filename)
        if hit is None:
            hit = self._real[filename] = os.path.realpath(filename) in self.files
        return hit

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._seen = []
        self.swallowed = ()

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "exception":
                exc_type, exc, _ = arg
                self._seen.append((exc_type.__name__, str(exc)[:160], Path(frame.f_code.co_filename).name,
                                   frame.f_lineno))
            return local

        def outer(frame: Any, event: str, arg: Any) -> Any:
            return local if self._ours(frame.f_code.co_filename) else None

        previous = sys.gettrace()
        sys.settrace(outer)
        try:
            out = self.fn(*args, **kwargs)
        finally:
            sys.settrace(previous)
        # Each raise is reported once per frame it passes through; keep the first.
        self.swallowed = tuple(dict.fromkeys(self._seen))
        return out


def candidate_files(fn: Callable[..., Any], folder: Path) -> List[str]:
    """The candidate's own source files: its defining file and the manifest's folder."""
    files = [str(p) for p in Path(folder).glob("*.py")]
    try:
        src = inspect.getsourcefile(inspect.unwrap(fn))
        if src:
            files.append(src)
    except (TypeError, OSError):
        pass
    return files
