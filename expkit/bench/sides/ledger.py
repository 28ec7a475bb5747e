"""What each request cost the worker that answered it: wall time and peak memory.

The memory plan (:mod:`.memory_plan`) is arithmetic over one plain call's bytes; this is the
measurement beside it. Around every request a worker's :class:`Ledger` resets the
peaks, and after it reads them: on a GPU torch's caching allocator's peak allocated
(tensors) and peak reserved (what the allocator held from the device, tensors and
cache), on the host the process's resident-set high-water mark (Linux). Per request
name it keeps the count, the seconds and the largest peaks, and on a GPU the bytes of
tensors already allocated when the request began (``held_allocated``: what earlier
requests left alive, the first thing to read when a peak is larger than the request's
own work explains), so a run's ``result.json``
(``memory.measured``) and report say in which stage each side's memory peaked and how
long each stage took, without a profiler.

Reading the peaks happens between requests, never inside a timed block. The host's
high-water mark is reset when a request of another name than the last begins, and read when
the next such request begins (or the ledger is read). Over a run of requests of one name
(a side's timed blocks, one after another) the mark is the largest of their peaks: the
harness does nothing between two requests, so the resident set there is no larger than at
the end of the first (memory that a thread of the side's own code takes between requests
counts too). One reset and one read serve the run where each request took both (36 us a
block request on the 2-core machine, evidence/README.md). It reads the
allocator's statistics once at each end, as torch returns them (nested): torch's
``memory_allocated`` and ``max_memory_*`` each flatten every statistic into a sorted dict,
which cost 181-184 us a request on an H200 against 27-28 us for the nested reads
(evidence/README.md).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

import torch

from .memory_plan import host_peak_reset, host_rss

#: The figures per request name, in ``to_dict``'s order.
FIELDS = ("count", "seconds", "held_allocated", "peak_allocated", "peak_reserved", "peak_rss")


class Ledger:
    """Per request name: count, seconds and peak memory (see the module docstring)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.rows: Dict[str, Dict[str, Any]] = {}
        self._t0 = 0.0
        self._held: Optional[int] = None
        self._host_op: Optional[str] = None  # the request name whose host peak is still to be read

    def _cuda(self) -> Any:
        if self.device != "cuda":
            return None
        return torch.cuda if torch.cuda.is_initialized() else None

    def start(self, op: Optional[str] = None) -> None:
        """Before request ``op`` (None: a name unlike the last's)."""
        cuda = self._cuda()
        self._held = None
        try:
            if cuda is not None:
                self._held = _device_bytes(cuda.memory_stats_as_nested_dict(), "allocated_bytes", "current")
                cuda.reset_peak_memory_stats()
        except Exception:  # a measurement aid never fails a request (a broken CUDA context, say)
            pass
        if op is None or op != self._host_op:
            self._read_host()
            host_peak_reset()
        self._t0 = time.perf_counter()

    def stop(self, op: str) -> None:
        seconds = time.perf_counter() - self._t0
        row = self.rows.setdefault(op, {"count": 0, "seconds": 0.0, "held_allocated": None, "peak_allocated": None,
                                        "peak_reserved": None, "peak_rss": None})
        row["count"] += 1
        row["seconds"] += seconds
        cuda = self._cuda()
        self._host_op = op
        got: Dict[str, Any] = {"held_allocated": self._held}
        try:
            if cuda is not None:
                stats = cuda.memory_stats_as_nested_dict()
                got.update(peak_allocated=_device_bytes(stats, "allocated_bytes", "peak"),
                           peak_reserved=_device_bytes(stats, "reserved_bytes", "peak"))
        except Exception:  # as in start(): the request's own outcome stands
            pass
        _fold(row, got)

    def _read_host(self) -> None:
        """The host high-water mark since the last reset, into the row of the requests it covers."""
        op, self._host_op = self._host_op, None
        if op is not None:
            _fold(self.rows[op], {"peak_rss": host_rss()[1]})

    def to_dict(self) -> Dict[str, Dict[str, Any]]:
        self._read_host()
        return {op: {k: (round(r[k], 4) if k == "seconds" else r[k]) for k in FIELDS} for op, r in self.rows.items()}


def _fold(row: Dict[str, Any], got: Mapping[str, Any]) -> None:
    for k, v in got.items():
        if v is not None:
            row[k] = v if row[k] is None else max(row[k], v)


def merge(into: Optional[Mapping[str, Mapping[str, Any]]], more: Optional[Mapping[str, Mapping[str, Any]]]
          ) -> Dict[str, Dict[str, Any]]:
    """Two ledgers' figures as one (a run's pairs of workers): counts and seconds add up,
    peaks take the larger."""
    out = {op: dict(r) for op, r in (into or {}).items()}
    for op, r in (more or {}).items():
        if op not in out:
            out[op] = dict(r)
            continue
        row = out[op]
        for k in FIELDS:
            a, b = row.get(k), r.get(k)
            if k in ("count", "seconds"):
                row[k] = round((a or 0) + (b or 0), 4)
            elif k not in row and k not in r:  # a ledger from before the field existed
                continue
            else:
                row[k] = b if a is None else a if b is None else max(a, b)
    return out


def peaks(ledger: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """A side's largest peak of each kind and the request where it happened."""
    out: Dict[str, Any] = {}
    for k in ("peak_allocated", "peak_reserved", "peak_rss"):
        rows = [(r[k], op) for op, r in ledger.items() if r.get(k) is not None]
        if rows:
            v, op = max(rows)
            out[k] = {"bytes": v, "request": op}
    return out


class Laps:
    """Seconds between successive calls, by step name: ``lap = Laps(); ...; lap("imports")``."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}
        self._t = time.perf_counter()

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = round(now - self._t, 4)
        self._t = now


def _device_bytes(stats: Mapping[str, Any], stat: str, which: str) -> Optional[int]:
    """``stats[stat]["all"][which]`` of the allocator's nested statistics, or None where
    it is missing (an allocator that keeps none: its keys are absent, not zero)."""
    try:
        return int(stats[stat]["all"][which])
    except (KeyError, TypeError, ValueError):
        return None
