"""A one-line progress display for long runs, quiet when stderr is not a terminal.

The measurement loop calls :meth:`Progress.update` once a round with the case, the rounds
so far, the relative half-width of the current interval on the speedup (``None`` until the
first check) and the timed-work budget left for that case. The line shows the run and the
case (``case 2/3`` once :meth:`plan` has said how many there are), the samples taken (two a
round: one block per side), the interval against its target, and the budget left::

    honest-win · case 1/2 square-1024 · 84 samples · interval ±3.1% (target ±5.0%) · 1.2 s of budget left

It rewrites one line with a carriage return, so it is for terminals only: where the stream is
not a TTY (CI logs, pipes) or ``enabled`` is False (``--quiet``, ``--json``) it writes nothing
at all. Writes are throttled to ``min_interval`` seconds so a fast loop does not spend its time
printing.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, Sequence, TextIO


class Progress:
    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, *,
                 min_interval: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(enabled and isatty is not None and isatty())
        self.min_interval = min_interval
        self._clock = clock
        self._last = ""
        self._last_t = float("-inf")
        self._name = ""
        self._cases: Sequence[str] = ()
        self._target: Optional[float] = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def plan(self, name: str, cases: Sequence[str], target_ci: Optional[float] = None) -> None:
        """Say which run comes next and its cases, so the line can read ``case 2/3``."""
        self._name, self._cases, self._target = name, tuple(cases), target_ci

    def clear(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\r" + " " * len(self._last) + "\r")
            self.stream.flush()
            self._last = ""

    def line(self, case: str, rounds: int, width: Optional[float], budget_left: float) -> str:
        """The text shown for one update (also what the tests read)."""
        parts = [self._name] if self._name else []
        if case in self._cases:
            parts.append(f"case {list(self._cases).index(case) + 1}/{len(self._cases)} {case}")
        else:
            parts.append(f"case {case}")
        parts.append(f"{2 * rounds} samples")
        w = f"±{width:.1%}" if width is not None else "±? (not checked yet)"
        if self._target is not None:
            w += f" (target ±{self._target:.1%})"
        parts.append(f"interval {w}")
        parts.append(f"{max(budget_left, 0):.1f} s of budget left")
        return " · ".join(parts)

    def update(self, case: str, rounds: int, width: Optional[float], budget_left: float) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last_t < self.min_interval:
            return
        self._last_t = now
        line = self.line(case, rounds, width, budget_left)
        self.stream.write("\r" + line.ljust(len(self._last)))
        self.stream.flush()
        self._last = line
