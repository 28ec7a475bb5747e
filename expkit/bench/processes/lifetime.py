"""A worker process's life, tied to its parent's (Linux ``prctl``; elsewhere nothing).

* :func:`become_subreaper`: a process the side's code started and detached (a double
  fork) stays below the worker, where the parent finds it when the worker closes.
* :func:`die_with_parent`: the worker is killed when its parent dies. A worker that is
  running sees its parent go through its channel and ends; one the parent left stopped
  (``bench/defences/freeze.py`` stops the idle worker while the other side is timed) runs nothing
  until something continues it, and would outlive a parent that was killed mid-run:
  on the 2-core machine, one did, stopped, after its parent was sent ``SIGKILL``.
  ``SIGKILL`` ends a stopped process too.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """Have Linux send this process ``SIGKILL`` when its parent dies (``PR_SET_PDEATHSIG``)."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
