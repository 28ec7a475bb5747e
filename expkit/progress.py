"""A one-line progress display for long runs, quiet when stderr is not a terminal."""

from __future__ import annotations

import sys
from typing import Optional, TextIO


class Progress:
    def __init__(self, enabled: bool = True, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.enabled = enabled and stream.isatty()
        self._last = ""

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled and self._last:
            self.stream.write("\r" + " " * len(self._last) + "\r")
            self.stream.flush()

    def update(self, case: str, rounds: int, width: Optional[float], budget_left: float) -> None:
        if not self.enabled:
            return
        w = f"±{width:.2%}" if width is not None else "±?"
        line = f"  {case}: {rounds} rounds, interval {w}, {max(budget_left, 0):.1f} s of budget left"
        self.stream.write("\r" + line.ljust(len(self._last)))
        self.stream.flush()
        self._last = line
