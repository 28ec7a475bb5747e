"""A job's stderr files and the stack dumps a kill for time asks of its processes (:mod:`.manifest_process`).

The job's process writes ``STDERR`` in its run folder; the runner's own isolated workers keep
theirs beside it (``*stderr*``); the side workers keep theirs in ``WORKERS`` until they close,
so that what stays is a killed job's. The supervisor reads their ends to say where a job hung
(:func:`expkit.bench.processes.diagnose.diagnose`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List

STDERR = "worker.stderr"
#: The job's side workers keep their output here until they close (``WORKER_OUTPUT_ENV``): what
#: stays is a killed job's, its workers' stack dumps among it.
WORKERS = "workers"
#: What each thread's part of a ``faulthandler`` dump says.
DUMP_MARK = b"most recent call first"


def stderr_files(run_dir: Path) -> List[Path]:
    """This worker's stderr file first, then any the runner kept of its own isolated workers
    (``*stderr*``), then those its side workers left in ``workers/`` when it was killed before
    they closed."""
    run_dir = Path(run_dir)
    paths = [run_dir / STDERR] + sorted(p for p in run_dir.glob("*stderr*") if p.name != STDERR) \
        + sorted((run_dir / WORKERS).glob("*/*stderr*"))
    return [p for p in paths if p.is_file()]


def await_dumps(run_dir: Path, before: Dict[Path, int], proc: Any, grace: float) -> None:
    """Wait until every stderr file of the job's processes holds a stack dump written after
    ``before`` (each file's size when the dump was asked for), the job's process ends, or
    ``grace`` seconds pass: a loaded host can take more than a moment to run every handler."""
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if proc.wait(0.05) is not None:
            return
        files = stderr_files(run_dir)
        if files and all(_dumped(p, before.get(p, 0)) for p in files):
            return


def size(path: Path) -> int:
    """``path``'s bytes; 0 where it is gone."""
    try:  # a side worker that closes removes its files
        return path.stat().st_size
    except OSError:
        return 0


def _dumped(path: Path, start: int) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return DUMP_MARK in f.read()
    except OSError:
        return False


def stderr_tails(run_dir: Path, max_bytes: int = 16384) -> List[str]:
    """The ends of the run folder's stderr files (:func:`stderr_files`, in its order)."""
    tails = []
    for path in stderr_files(run_dir):
        start = max(0, size(path) - max_bytes)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                tails.append(f.read().decode("utf-8", "replace"))
        except OSError:  # removed as its worker closed
            continue
    return tails
