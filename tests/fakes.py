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


@dataclass
class FakeReplicate:
    """One fake replicate (a fresh worker pair, ``timing.measure.Replicate``) with a
    process-level random effect: each side's op is ``exp(N(0, process_sd))`` times
    slower or faster in this process than its nominal ``seconds``, drawn from ``seed``.

    ``log`` (shared by the replicates of one run) records the calls the loop makes, so
    tests can check the order: ``open r``, ``sides r case``, ``finish r case``, ``close r``."""

    clock: FakeClock
    replicate: int
    base_s: float
    cand_s: float
    process_sd: float = 0.0
    sigma: float = 0.01
    seed: int = 0
    log: list = field(default_factory=list)
    fail_on: str = ""  # a case whose sides() raises in this replicate

    def __post_init__(self) -> None:
        rng = random.Random(self.seed * 7919 + self.replicate)
        self.factors = (rng.lognormvariate(0, self.process_sd), rng.lognormvariate(0, self.process_sd))
        self.timer = FakeTimer(self.clock, seed=self.seed * 104729 + self.replicate, sigma=self.sigma)
        self.log.append(f"open {self.replicate}")

    def sides(self, case: str) -> Any:
        from expkit.timing.measure import CaseSides

        self.log.append(f"sides {self.replicate} {case}")
        if case == self.fail_on:
            raise RuntimeError(f"{case} broke in replicate {self.replicate}")
        return CaseSides(FakeOp(self.clock, self.base_s * self.factors[0]),
                         FakeOp(self.clock, self.cand_s * self.factors[1]), self.timer)

    def finish(self, case: str) -> None:
        self.log.append(f"finish {self.replicate} {case}")

    def close(self) -> None:
        self.log.append(f"close {self.replicate}")
