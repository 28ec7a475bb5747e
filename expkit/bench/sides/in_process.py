"""Both sides given as callables and run in this process: the checks and the workload
comparison without worker processes (tests, scripts, and the in-process harness)."""

from __future__ import annotations

from typing import Any, Callable, Dict

from ...checks.preflight import PreflightResult
from ...manifest.settings import DefenceSettings, Settings
from .pair import Pair
from .side import BASELINE, CANDIDATE
from .workload_pair import collect_pair


def preflight_in_process(lm: Any, baseline: Callable[..., Any], candidate: Callable[..., Any],
                         factory: Callable[..., Any], *, run_seed: int, settings: Any, device: str,
                         defended: bool = True, identity: bool = False) -> PreflightResult:
    """The preflight's correctness trials (and with ``identity`` the profiled identity
    check) with both sides given as callables, run in this process (tests, and scripts
    that want the checks without worker processes). ``settings`` are the oracle settings."""
    full = Settings(oracle=settings, defences=DefenceSettings(enabled=defended, isolate=False))
    pair = Pair(lm, full, device, sides={BASELINE: (baseline, factory), CANDIDATE: (candidate, factory)})
    try:
        return pair.preflight(run_seed, identity=identity)
    finally:
        pair.close(None)


def collect_in_process(lm: Any, baseline: Any, candidate: Any, *, device: str, settings: Any, run_seed: int,
                       progress: Any = None) -> Dict[str, Any]:
    """The workload comparison (:func:`.workload_pair.collect_pair`) with both sides given as
    callables and run in this process (the in-process harness, and tests)."""
    pair = Pair(lm, settings, device, sides={BASELINE: (baseline, None), CANDIDATE: (candidate, None)})
    try:
        return collect_pair(pair, run_seed, progress)
    finally:
        pair.close(None)
