"""The shared files that carry host tensors between workers (:mod:`.transport`): their names,
and their removal once the process that made them has ended. Imports no torch, so that a
suite's supervisor can remove a killed run's files.

Each file is named for the process that made it, ``expkit-<pid>-<random>``, in
``/dev/shm`` (memory, on Linux) or a temporary folder elsewhere. A worker that closes
removes its own; one that crashed, was killed or ran past its time cannot, and its files
(its placed input sets: as large as the case's inputs) would hold that memory until the
machine restarts. Whoever ended it removes them by the pid in their name:

* the worker's parent, as it closes the worker (:mod:`..sides.endpoint`), and
* a suite's supervisor, for the workers of a manifest process it killed or that died:
  each worker's output folder names the worker's pid (:data:`PID_FILE`).

A top-level process killed outright leaves its workers' files; :func:`left_behind` lists
them (``expkit doctor``), and removes nothing.

Where the folder has no room for a file (a container's ``/dev/shm`` is small by default),
:func:`check_room` stops the run with one line naming the fix: more shared memory, or
``EXPKIT_SHM_DIR``, a folder of the user's choosing.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from ...core.errors import ExpkitError

#: Where a user points the files instead (a folder on a larger filesystem, where a
#: container's ``/dev/shm`` is small); read when this module is imported.
SHM_DIR_ENV = "EXPKIT_SHM_DIR"
SHM_DIR = os.path.abspath(os.environ.get(SHM_DIR_ENV) or ("/dev/shm" if os.path.isdir("/dev/shm")
                                                           else tempfile.gettempdir()))
PREFIX = "expkit-"
#: In a worker's output folder: the worker's pid, for whoever must clean up after it.
PID_FILE = "pid"


def free_bytes() -> Optional[int]:
    """Bytes free in :data:`SHM_DIR` now; None where that cannot be read."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class SharedFolderError(ExpkitError):
    """The folder of the shared files has no room for one, or is not a folder: the machine's
    setting, not a verdict on the code under test (exit 2, with the fix)."""


def full(nbytes: int) -> SharedFolderError:
    """The error for a file of ``nbytes`` that does not fit, with what is free and the fix."""
    free = free_bytes()
    room = "no room" if free is None else f"{free / (1 << 20):.1f} MiB free"
    return SharedFolderError(
        f"{SHM_DIR} has {room}, and a tensor of {nbytes / (1 << 20):.1f} MiB that expkit's workers pass "
        f"between them needs a file there. Fix: give the machine or container more shared memory (for "
        f"Docker, `docker run --shm-size=16g ...`), or set {SHM_DIR_ENV} to a folder on a larger filesystem")


def check_room(nbytes: int) -> None:
    """Raise :class:`SharedFolderError` where a file of ``nbytes`` cannot be made now. Checked
    before a file is mapped: a mapping written past a full ``tmpfs`` kills the process
    with ``SIGBUS``, which would read as the code under test crashing."""
    if not os.path.isdir(SHM_DIR) or not os.access(SHM_DIR, os.W_OK | os.X_OK):
        raise SharedFolderError(f"{SHM_DIR} ({SHM_DIR_ENV}) is not a folder this user can write, and expkit's "
                                f"workers pass tensors between them in files there. Fix: create it or give write "
                                f"access, or unset {SHM_DIR_ENV}")
    free = free_bytes()
    if free is not None and nbytes > free:
        raise full(nbytes)


def new_path() -> str:
    """A new file name for this process."""
    return os.path.join(SHM_DIR, f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}")


def remove_files_of(pids: Iterable[int]) -> List[str]:
    """Remove the shared files made by the processes ``pids``, which have ended; the paths removed.

    Only for processes that have ended: a live process's files may be in use. One that has
    a tensor mapped keeps reading it after its file is removed."""
    wanted = tuple(f"{PREFIX}{int(p)}-" for p in pids)
    if not wanted:
        return []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    removed = []
    for name in names:
        if name.startswith(wanted):
            path = os.path.join(SHM_DIR, name)
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:  # gone already, or another user's file
                continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user now has that pid
        return True
    return True


def left_behind() -> List[Tuple[str, int]]:
    """The files (path, bytes) whose maker has ended: left by a process killed outright, whose
    workers died with it and whose parent could not clean up. Read only; a process in another
    pid namespace that shares this folder can look ended from here."""
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(PREFIX)]
    except OSError:
        return []
    out = []
    for name in sorted(names):
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        path = os.path.join(SHM_DIR, name)
        try:
            out.append((path, os.stat(path).st_size))
        except OSError:
            continue
    return out


def remove_files_of_folders(folders: Iterable[Path], wait: float = 2.0) -> List[str]:
    """Remove the shared files of the workers whose output folders are ``folders`` (each
    names its worker's pid in :data:`PID_FILE`), once their parent has ended: they die with
    it (``..lifetime.die_with_parent``), so each is given ``wait`` seconds to be gone, and
    one still alive then keeps its files."""
    pids = []
    for folder in folders:
        try:
            pids.append(int((Path(folder) / PID_FILE).read_text()))
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + wait
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return remove_files_of([p for p in pids if not _alive(p)])
