"""The command line's one boundary: every exception ends as one line on stderr and an exit code.

* An :class:`~expkit.ExpkitError` (the user's to fix: a manifest, a setting, a path)
  prints its own message, which names file, key and fix, and exits with its code (2,
  or 5 for :class:`~expkit.core.errors.OutOfMemoryPlan`).
* ``KeyboardInterrupt`` prints ``interrupted`` and exits 130.
* Anything else -- a bug in expkit, a failure of its environment, an exception that a
  stage let through -- is written, with its full traceback and the command line, to
  ``error.txt`` in the run's folder (or, when the command has none, a new
  ``expkit-error-*.txt`` in the folder ``$EXPKIT_ERROR_DIR`` names, else in the system's
  temporary folder), and prints one line naming the stage it was raised in and that file;
  exit code 6. (The test suite points ``EXPKIT_ERROR_DIR`` at a temporary folder of its
  own, so that its deliberate failures leave nothing behind.)

The stage is the package of ``expkit`` that the innermost expkit frame of the traceback
belongs to (``bench``, ``checks``, ``report``, ...), with that frame's file and line;
where the exception was raised outside expkit (torch, the code under test) that place
is named too. No traceback is ever printed.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import tempfile
import traceback
from pathlib import Path
from types import TracebackType
from typing import Iterable, Optional, Sequence, Tuple

from ..core.errors import EXIT_INTERNAL
from ..core.version import __version__

ERROR_FILE = "error.txt"
#: The environment variable naming where a command with no folder of its own writes its details.
ERROR_DIR_ENV = "EXPKIT_ERROR_DIR"
_PACKAGE = Path(__file__).resolve().parent.parent  # .../expkit
#: The words for each stage of expkit, by package (docs/architecture.md).
STAGES = {
    "manifest": "loading the manifest", "verdict": "judging the verdict", "report": "writing the report",
    "checks": "the checks", "timing": "timing", "workload": "the end-to-end workload",
    "bench": "the bench (worker process and channel)", "runner": "the runner", "suites": "the suite",
    "api": "the Python API", "cli": "the command line", "core": "expkit's core", "zoo": "the model zoo",
    "pytest_plugin": "the pytest plugin",
}
MAX_MESSAGE = 240


def _frames(tb: Optional[TracebackType]) -> Iterable[Tuple[str, int, str]]:
    for fs in traceback.extract_tb(tb):
        yield fs.filename, fs.lineno or 0, fs.name


def _in_expkit(filename: str) -> Optional[Path]:
    try:
        return Path(filename).resolve().relative_to(_PACKAGE)
    except (ValueError, OSError):
        return None


def locate(exc: BaseException) -> Tuple[str, str, str]:
    """(stage words, ``expkit/…py:line`` of the innermost expkit frame, the place outside expkit or '')."""
    stage, where, outside = "expkit", "", ""
    last_expkit = -1
    frames = list(_frames(exc.__traceback__))
    for i, (filename, line, func) in enumerate(frames):
        rel = _in_expkit(filename)
        if rel is not None:
            last_expkit = i
            package = rel.parts[0].removesuffix(".py") if rel.parts else ""
            stage = STAGES.get(package, package or "expkit")
            where = f"expkit/{rel.as_posix()}:{line} in {func}"
    if frames and last_expkit < len(frames) - 1:
        filename, line, func = frames[-1]
        outside = f"{filename}:{line} in {func}"
    return stage, where, outside


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or a word saying it failed (an exception's ``__str__`` may raise too)."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 -- the boundary must not fail while reporting
        return "<the exception's str() failed>"


def first_line(exc: BaseException) -> str:
    text = " ".join(safe_str(exc).strip().split("\n")[0].split())
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def details(exc: BaseException, argv: Sequence[str]) -> str:
    """The text of ``error.txt``: when, what command, which expkit, and the whole traceback."""
    head = [
        f"time: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"command: expkit {' '.join(argv)}",
        f"cwd: {os.getcwd()}",
        f"expkit: {__version__}; Python {platform.python_version()}; {platform.platform()}",
        "",
    ]
    return "\n".join(head) + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def details_dir() -> Optional[str]:
    """The folder ``$EXPKIT_ERROR_DIR`` names, created if missing; None (the system's
    temporary folder) where it is unset, empty or cannot be made."""
    folder = os.environ.get(ERROR_DIR_ENV)
    if not folder:
        return None
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def write_details(exc: BaseException, argv: Sequence[str], folder: Optional[Path]) -> Tuple[Optional[Path], str]:
    """Write :func:`details` to ``folder/error.txt``, else a new ``expkit-error-*.txt`` in
    :func:`details_dir`: (path, '') or (None, why not)."""
    text = details(exc, argv)
    if folder is not None:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            path = Path(folder) / ERROR_FILE
            path.write_text(text)
            return path, ""
        except OSError:
            pass
    try:
        fd, name = tempfile.mkstemp(prefix="expkit-error-", suffix=".txt", dir=details_dir())
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return Path(name), ""
    except OSError as e:
        return None, f"the details could not be written ({e})"


def crash(exc: BaseException, command: str, argv: Sequence[str], folder: Optional[Path]) -> int:
    """Report an unexpected exception in one line on stderr; returns :data:`EXIT_INTERNAL`."""
    stage, where, outside = locate(exc)
    path, why = write_details(exc, argv, folder)
    place = f" ({where})" if where else ""
    raised = f", raised at {outside}" if outside else ""
    tail = f"traceback in {path}" if path is not None else why
    print(f"error: expkit {command} failed in {stage}{place}{raised}: {first_line(exc)}; {tail} "
          f"(exit {EXIT_INTERNAL}: a failure of expkit or its environment, not a verdict)", file=sys.stderr)
    return EXIT_INTERNAL
