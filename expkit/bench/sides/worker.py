"""A worker process: where one side's code is imported when the defences isolate it.

:func:`worker_main` captures stdout and stderr to the evidence files, takes the
channel's key from the parent's first message, builds the side's
:class:`~.side.SideBench` (which imports that side's code, and only that side's) and
answers requests (:class:`~.serve.Server`) with plain data until the parent says
``close``. The parent's side is :mod:`.endpoint`.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing import forkserver, resource_tracker
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

from ...checks.interference import count_continues
from ...core.errors import ExpkitError, ManifestError
from ...manifest.spec import load
from ..defences.affinity_guard import AffinityGuard
from ..processes.allocator import steady as steady_allocator
from ..processes.blas import worker_scipy_threads
from ..processes.channel import HEADER, KEY_LEN, MAGIC, Channel, ChannelError, read_exact
from ..defences.confine import confine
from ..processes.cores import current as current_cores
from ..processes.inductor import compile_in_process
from ..processes.lifetime import become_subreaper, die_with_parent
from .memory_plan import PROC_FILES
from .serve import Server
from .side import SideBench


def _redirect(fd: int, path: str) -> None:
    new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(new, fd)
    os.close(new)


def _std_streams_to_fds() -> None:
    """``sys.stdout`` and ``sys.stderr`` writing to descriptors 1 and 2, which now go to the
    evidence files. A worker forked from a parent whose streams were replaced (pytest's
    capture, a notebook) inherits those objects, and what the side's code printed, a CUDA
    fault's text among it, went to the parent's capture instead of the file the worker's
    death is diagnosed from."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name, None)
        try:
            if stream is not None and stream.fileno() == fd:
                continue
        except (AttributeError, OSError, ValueError):
            pass
        setattr(sys, name, open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False))


def release_forkserver_pipe() -> None:
    """Close this process's copy of the fork server's liveness pipe (CPython's private
    attribute, 3.8 to 3.13; where it is missing nothing is closed). See the callers for
    why each needs it closed."""
    try:
        fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
        if fd is not None:
            os.close(fd)
            forkserver._forkserver._forkserver_alive_fd = None
    except (AttributeError, OSError):
        pass


def _release_inherited() -> None:
    """Close the descriptors a worker inherits from ``multiprocessing`` and does not need.

    A forkserver child holds the server's liveness pipe (data written to it makes the
    server stop) and the resource tracker's pipe; code under test that writes to
    every descriptor it finds would break them for the workers after it. Closing
    them leaves the channel's two pipes and stdio. Both attributes are CPython's
    (3.8 to 3.13); where they are missing nothing is closed. A candidate that asks
    for a resource tracker later gets a fresh one. A forked worker also holds the
    parent's ``/proc/self`` files that :mod:`.memory_plan` keeps open (``clear_refs``
    among them, writable): closed too, and the worker opens its own."""
    release_forkserver_pipe()
    for kept in PROC_FILES:  # the parent's own /proc files, kept open by its memory readings
        kept.release_inherited()
    try:
        tracker = resource_tracker._resource_tracker
        fd = getattr(tracker, "_fd", None)
        if fd is not None:
            os.close(fd)
            tracker._fd = None
            tracker._pid = None
    except (AttributeError, OSError):
        pass


def error_reply(e: BaseException) -> Dict[str, Any]:
    if isinstance(e, ManifestError):
        return {"error": {"type": "ManifestError", "path": e.path, "key": e.key, "problem": e.problem,
                          "fix": e.fix}}
    if isinstance(e, ExpkitError):
        return {"error": {"type": "ExpkitError", "message": str(e)}}
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    kind = "oom" if isinstance(e, torch.OutOfMemoryError) else "error"
    return {"error": {"type": kind, "message": f"{type(e).__name__}: {e}{where}"}}


def worker_main(req: Any, rep: Any, manifest_path: str, settings: Any, device: str, role: str,
                stdout_path: str, stderr_path: str, parent_ends: Tuple[Any, ...] = ()) -> None:
    """One side's worker process: capture output, take the key, load the code, serve requests.

    Order matters: stdout and stderr go to the evidence files and the key is read
    before the manifest's modules are imported (inside :class:`~.side.SideBench`). A
    forked worker also holds the parent's ends of the pipes (``parent_ends``); it
    closes them first, so that it sees the parent go and cannot write the parent's side."""
    for conn in parent_ends:
        conn.close()
    start_cores = current_cores()  # before any code under test, for the baseline's AffinityGuard
    become_subreaper()  # what the side's code detaches stays below the worker (.lifetime)
    die_with_parent()  # a worker left stopped by a parent that was killed does not outlive it
    count_continues()  # each stop of this worker, whoever sent it (checks.interference)
    steady_allocator()
    compile_in_process()  # torch.compile leaves no compile pool running after a call (.inductor)
    worker_scipy_threads(settings.measure.cpu_threads)  # the parent loaded scipy's BLAS on one thread (.blas)
    _release_inherited()
    sys.stdout.flush()
    sys.stderr.flush()
    _redirect(1, stdout_path)
    _redirect(2, stderr_path)
    _std_streams_to_fds()
    rfd, wfd = req.fileno(), rep.fileno()
    head = read_exact(rfd, HEADER.size, None, None)
    magic, n, _ = HEADER.unpack(head)
    if magic != MAGIC or n != KEY_LEN:
        os._exit(70)
    ch = Channel(rfd, wfd, read_exact(rfd, n, None, None))
    # Held now, before the side's code is imported: a later replacement of the class's methods
    # (or of what they use, bound in .channel) does not reach the loop below.
    send, recv = ch.send, ch.recv
    # Before the candidate's code is imported: from then on it cannot trace, read the memory
    # of or signal the baseline's worker, the parent or the fork server (.confine).
    confinement = confine() if role == "candidate" and settings.defences.confine else None
    server: Any = None
    startup: Optional[BaseException] = None
    try:
        guard = AffinityGuard(settings.measure.cpu_threads, start_cores) if role == "baseline" and device == "cpu" else None
        server = Server(SideBench(load(manifest_path), settings, device, role), confinement=confinement, guard=guard)
    except BaseException as e:  # reported on the first request, then the worker ends
        startup = e
    while True:
        try:
            msg = recv()
        except ChannelError:
            break
        try:
            if startup is not None:
                reply = error_reply(startup)
            elif msg.get("op") == "close":
                server.side.close()
                send({"bye": True, "ledger": server.ledger.to_dict()})
                break
            else:
                reply = server.handle(msg)
        except BaseException as e:
            reply = error_reply(e)
        try:
            send(reply)
        except OSError:
            break
        if startup is not None:
            break
    sys.stdout.flush()
    sys.stderr.flush()
