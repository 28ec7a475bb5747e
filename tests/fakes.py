"""Seeded fakes for the hardware seams: a clock, ops with known durations, a timer."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeOp:
    """An op whose call takes ``seconds`` of fake time."""

    clock: FakeClock
    seconds: float
    calls: int = 0

    def __call__(self, *args: Any) -> None:
        self.calls += 1
        self.clock.advance(self.seconds)


@dataclass
class FakeTimer:
    """Times FakeOps with seeded noise: log-normal jitter, linear drift, rare outliers.

    ``drift`` is the fractional slow-down per second of fake time (thermal drift);
    ``outlier_rate`` of samples take ``outlier_factor`` times as long.
    """

    clock: FakeClock
    seed: int = 0
    sigma: float = 0.01
    drift: float = 0.0
    outlier_rate: float = 0.0
    outlier_factor: float = 3.0
    method: str = "fake timer"
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        op = fn if isinstance(fn, FakeOp) else getattr(fn, "op")
        per_call = op.seconds * (1 + self.drift * self.clock.now) * self.rng.lognormvariate(0, self.sigma)
        if self.rng.random() < self.outlier_rate:
            per_call *= self.outlier_factor
        self.clock.advance(per_call * number)
        return per_call
