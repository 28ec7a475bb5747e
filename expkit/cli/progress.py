"""The progress line of a long run, drawn with ``rich``; nothing at all off a terminal.

The measurement loop calls :meth:`Progress.update` once a round with the case, the rounds
so far, the relative half-width of the current interval on the speedup (``None`` until the
first check) and the timed-work budget left for that case. The line shows the run and the
case (``case 2/3`` once :meth:`plan` has said how many there are), the samples taken (two a
round: one block per side), the interval against its target, and the budget left::

    honest-win · case 1/2 square-1024 · 84 samples · interval ±3.1% (target ±5.0%) · 1.2 s of budget left

``rich.live.Live`` redraws the line in place and erases it when the run ends (it is
``transient``), so the verdict printed after it stands alone. Where the stream is not a
TTY (CI logs, pipes, a notebook's captured stderr) or ``enabled`` is False (``--quiet``,
``--json``), nothing is written at all: the check is the stream's own ``isatty()``, not
rich's terminal detection, which ``FORCE_COLOR`` (set on many CI runners) would turn on.
Redraws are throttled to ``min_interval`` seconds so a fast loop does not spend its time
drawing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Sequence, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text


class Progress:
    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, *,
                 min_interval: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(enabled and isatty is not None and isatty())
        self.min_interval = min_interval
        self._clock = clock
        self._last_t = float("-inf")
        self._name = ""
        self._cases: Sequence[str] = ()
        self._target: Optional[float] = None
        self._live: Any = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def plan(self, name: str, cases: Sequence[str], target_ci: Optional[float] = None) -> None:
        """Say which run comes next and its cases, so the line can read ``case 2/3``."""
        self._name, self._cases, self._target = name, tuple(cases), target_ci

    def clear(self) -> None:
        """Erase the line (the display is transient) and give the terminal back."""
        if self._live is not None:
            self._live.stop()
            self._live = None

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

    def _start(self) -> Any:

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        live = Live(console=console, transient=True, auto_refresh=False, redirect_stdout=False,
                    redirect_stderr=False)
        live.start()
        return live

    def update(self, case: str, rounds: int, width: Optional[float], budget_left: float) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last_t < self.min_interval:
            return
        self._last_t = now

        if self._live is None:
            self._live = self._start()
        text = Text(self.line(case, rounds, width, budget_left), no_wrap=True, overflow="ellipsis")  # one line, always
        if self._name:
            text.stylize("bold", 0, len(self._name))
        self._live.update(text, refresh=True)
