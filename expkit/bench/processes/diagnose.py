"""Why a worker process ended without a result, in one line.

From its exit code and the end of its stderr: the signal that killed it (SIGKILL named
with its usual sender, the kernel's out-of-memory killer), the frame a time limit
caught it in (from a ``faulthandler`` dump; where the innermost frame is library code,
the innermost frame of the user's own code too), the last exception line of a worker
that exited, and the last CUDA error line, which names a fault better than the signal
does. Used for the bench's isolated worker (:mod:`..sides.endpoint`) and for a suite's
workers (:mod:`expkit.suites.manifest_process`).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

#: The folder in which the bench's side workers keep their stdout and stderr until they close
#: (:class:`..sides.endpoint.WorkerEndpoint`); the system's temporary folder where unset. A suite's
#: supervisor sets it to a folder of the job's run folder, so that a job killed for time keeps
#: its workers' stack dumps there, for :func:`diagnose` and for the user, and leaves nothing behind.
WORKER_OUTPUT_ENV = "EXPKIT_WORKER_OUTPUT"

_CUDA_ERROR = re.compile(
    r"CUDA error|CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|cudaError\w*|"
    r"illegal memory access|device-side assert|an illegal instruction|misaligned address|"
    r"unspecified launch failure|NCCL error", re.IGNORECASE)


def _signal_text(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    if signum == signal.SIGKILL:
        return (f"{name} (the kernel's out-of-memory killer sends it, and so does `kill -9`; "
                "`dmesg` says which)")
    desc = signal.strsignal(signum) or ""
    return f"{name} ({desc})" if desc else name


# expkit's own code: its package folder, and the file names of its modules in every stage
# package (the zoo's left out, as they were when the modules all sat in one folder).
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_PACKAGE_DIR = str(_PACKAGE_ROOT).replace("\\", "/") + "/"
_PACKAGE_NAMES = tuple(sorted({f"{p.name}:" for p in _PACKAGE_ROOT.rglob("*.py")
                               if p.relative_to(_PACKAGE_ROOT).parts[0] != "zoo"}))


def _frames(block: Sequence[str]) -> List[Tuple[str, str, str]]:
    """A dump's frames, innermost first; ``faulthandler`` writes ``line ???`` where it cannot
    tell a frame's line (a trace hook caught mid-call), and that frame is read too."""
    out = []
    for line in block:
        m = re.match(r'\s*File "([^"]+)", line (\d+|\?\?\?) in (\S+)', line)
        if not m:
            break
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _is_library(path: str) -> bool:
    p = path.replace("\\", "/")
    return p.startswith("<") or "/site-packages/" in p or "/dist-packages/" in p or bool(re.search(r"/lib/python3[.\d]*/", p)) \
        or p.startswith(_PACKAGE_DIR)


def _last_frame(tail: str) -> Optional[str]:
    """Where a faulthandler dump says the worker was: its innermost frame, and where
    that is library code (ctypes, torch), the innermost frame of the user's own code;
    where it is expkit's own (a trace hook the defences set), the user's frame alone.

    Of the dump's threads, the first with a frame of the user's code is taken, else the
    first whose innermost frame is not in ``threading.py``: threads parked there (a
    profiler's, a pool's) are not where the work was, and a helper thread of the harness
    may be listed before the one that ran the user's code."""
    lines = tail.splitlines()
    found: List[Tuple[bool, str]] = []
    for i, line in enumerate(lines):
        if not re.match(r"(Current thread|Thread) 0x[0-9a-f]+", line.strip()):
            continue
        frames = _frames(lines[i + 1:])
        if not frames or Path(frames[0][0]).name == "threading.py":
            continue
        path, lineno, func = frames[0]
        text = f"{Path(path).name}:{lineno} in {func}"
        user = next((f for f in frames if not _is_library(f[0])), None)
        if _is_library(path) and user is not None:
            text = f"{func} ({Path(path).parent.name}/{Path(path).name}:{lineno}), called from " \
                   f"{Path(user[0]).name}:{user[1]} in {user[2]}"
            if path.replace("\\", "/").startswith(_PACKAGE_DIR):  # expkit's own hook (a tracer) around the user's line
                text = f"{Path(user[0]).name}:{user[1]} in {user[2]}"
        found.append((user is not None, text))
    return next((text for mine, text in found if mine), found[0][1] if found else None)


def _last_exception(tail: str) -> Optional[str]:
    for line in reversed(tail.splitlines()):
        s = line.strip()
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*", s) or s.startswith("error: "):
            return s[:300]
    return None


def _cuda_error(tail: str) -> Optional[str]:
    for line in reversed(tail.splitlines()):
        if _CUDA_ERROR.search(line):
            return line.strip()[:300]
    return None


def _where(tails: Sequence[str]) -> Optional[str]:
    """The most telling frame of the dumps: one in the user's code if any has it."""
    found = [w for w in (_last_frame(t) for t in tails) if w]
    return next((w for w in found if "called from" in w or not w.startswith(_PACKAGE_NAMES)), None) \
        or (found[0] if found else None)


def diagnose(returncode: Optional[int], *, timed_out: bool, timeout: float, tail: str | Sequence[str]) -> str:
    """One line saying why a worker ended without a result (see the module docstring).
    ``tail`` is the end of the worker's stderr, or a list of such ends, most relevant first."""
    tails = [tail] if isinstance(tail, str) else list(tail)
    tail = "\n".join(reversed(tails))  # the worker's own last: its lines win the "last line" searches
    if timed_out:
        where = _where(tails)
        text = f"timed out after {timeout:g} s (launcher.timeout_seconds) and was killed"
        if where:
            text += f"; it was in {where}"
    elif returncode is not None and returncode < 0:
        text = f"killed by {_signal_text(-returncode)}"
        where = _where(tails)
        if where:
            text += f" in {where}"
    else:
        text = f"exited with status {returncode} without writing result.json"
        exc = _last_exception(tail)
        if exc:
            text += f": {exc}"
    cuda = _cuda_error(tail)
    if cuda and cuda not in text:
        text += f"; CUDA: {cuda}"
    return text
