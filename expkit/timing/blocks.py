"""The CUDA timer's block account and its small pure helpers (split from :mod:`.cuda_timer`).

:class:`BlockReport` is what one ``CudaTimer.sample`` call saw; :func:`split_calls` cuts a
block into chunks under one hold each; :func:`lead_gap` reads from a block's records how
long the GPU idled between a lead spin's end and its hold's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from .timer import EVENTS


@dataclass(frozen=True)
class BlockReport:
    """Diagnostics of the last ``sample`` call (all its held sub-blocks together).

    ``hold_ok``: every sub-block's hold outlasted the host's queuing. ``attempts``: held
    blocks run, retries included. ``queue_s``: host seconds spent queuing (kept
    attempts). ``hold_s``: GPU seconds spent in holds. ``span_s``: GPU seconds from hold
    start to the last event; ``envelope_s``: host seconds from before the hold to the
    return of the device-wide sync; ``max_slack_s``: the largest envelope minus span of
    a sub-block. ``foreign_work``: some sub-block's slack exceeded the tolerance, or the
    recorder saw foreign records, and the sample is the host wall time (see the module
    docstring). ``kernel_seconds``: the recorded kernel time per call (None without a
    recorder or when it could not be trusted); ``record_s``: host seconds the recorder
    took after the block; ``source`` and ``flags`` as in ``last_timing``.
    """

    calls: int
    chunks: int
    attempts: int
    hold_ok: bool
    queue_s: float
    hold_s: float
    span_s: float
    envelope_s: float
    max_slack_s: float
    foreign_work: bool
    event_seconds: float
    returned_seconds: float
    kernel_seconds: Optional[float] = None
    record_s: float = 0.0
    source: str = EVENTS
    flags: Tuple[str, ...] = ()


def split_calls(number: int, max_per_chunk: int) -> list[int]:
    """``number`` calls cut into near-equal chunks of at most ``max_per_chunk``."""
    if number < 1:
        raise ValueError(f"number must be at least 1, got {number}")
    if max_per_chunk < 1:
        raise ValueError(f"max_per_chunk must be at least 1, got {max_per_chunk}")
    k = -(-number // max_per_chunk)
    base, extra = divmod(number, k)
    return [base + 1] * extra + [base] * (k - extra)


def lead_gap(recorded: Any, chunks: Sequence[Any], ticks_per_second: float) -> float:
    """Seconds the GPU idled, at most over ``chunks``, between the end of a chunk's lead spin
    (its ``harness`` tag, before the hold) and the start of its hold: the hold's launch
    reached the GPU after the lead had ended (76-97 us under CUPTI on an H100, where the
    host's own time for the launch was shorter), and that gap sits inside the hold's events."""
    gap = 0.0
    for c in chunks:
        if c is None:
            continue
        leads = [r for r in recorded.records if r.tag == c.harness and r.timed]
        holds = [r for r in recorded.records if r.tag == c.hold and r.timed]
        if not leads or not holds:
            continue
        hold = min(holds, key=lambda r: r.start)
        before = [r for r in leads if r.end <= hold.start]
        if before:
            gap = max(gap, (hold.start - max(r.end for r in before)) / ticks_per_second)
    return gap
