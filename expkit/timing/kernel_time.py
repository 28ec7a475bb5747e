"""Kernel time: each call's span on the GPU, from the GPU's own activity records.

The seam between the CUDA timer and a recorder of GPU activity (CUPTI in
:mod:`.cupti_recorder`; recorded fixtures in the tests), and the span logic over what it
records. Nothing here imports torch or CUPTI. What it guarantees:

* **Harness work is excluded by correlation, never by kernel name.** Every host call that can
  launch GPU work runs under a tag pushed on the recorder (CUPTI's external correlation):
  ``hold`` for the spin, ``harness`` for the flush and the bench's per-call hook,
  ``first_call + i`` for call ``i`` (:class:`ChunkTags`). A candidate kernel named like the
  harness's is still the candidate's.
* **A call's span** runs from its first record's start to its last record's end, on any stream
  or device (flagged ``other-stream``, ``other-device``): a side stream can lengthen a span,
  never shorten it. A record another thread launched while the call was on the host's stack
  (autograd's backward) is the call's (``other-thread``). A call with no record has no kernel
  time (``unrecorded``), never a time of zero.
* **Foreign work voids the block.** An untagged record inside a chunk's window on the GPU may
  have shared the GPU with the calls: the timer then falls back to the host's wall time.
* **Clock.** Timestamps arrive in the recorder's ticks, measured against the host clock
  (Kineto may leave a callback that changes them); the hold's recorded duration is
  cross-checked with its CUDA events (:func:`hold_agrees`), measured again on disagreement,
  and else taken from the holds (:func:`block_kernel_time`).

Approximations: GPU time a call causes without launching it (an L2 write-back of the flush)
is in its span; work a call defers to code the harness runs counts as the harness's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Set, Tuple

KINDS = ("kernel", "memcpy", "memset")

#: Flags of a chunk (and of the block they make up), in the order reports list them.
OTHER_STREAM = "other-stream"
OTHER_DEVICE = "other-device"
FOREIGN = "foreign"
OTHER_THREAD = "other-thread"
UNRECORDED = "unrecorded"
CLOCK_MISMATCH = "clock-mismatch"
NO_HOLD_RECORD = "no-hold-record"
RECORDER_ERROR = "recorder-error"
CLOCK_FROM_HOLD = "clock-from-hold"

#: Shortest hold (by its events) whose record may set the recorder's ticks: the events'
#: own microseconds are then under 0.3% of it.
MIN_HOLD_FOR_CLOCK_S = 1e-3


@dataclass(frozen=True)
class GpuRecord:
    """One kernel, memcpy or memset as the recorder saw it.

    ``tag`` is the tag pushed when it was launched (None: launched under no tag of
    the recorder's). ``start``/``end`` are in the recorder's ticks (0: unknown).
    ``correlation``: the number CUPTI gave the API call that launched it (0: unknown);
    ``launched``: that API call's start on the host, in the recorder's ticks (0: unknown).
    ``grid`` and ``block``: a kernel's launch dimensions (empty: not read)."""

    kind: str
    tag: Optional[int]
    start: int
    end: int
    stream: int
    device: int
    name: str = ""
    correlation: int = 0
    launched: int = 0
    grid: Tuple[int, ...] = ()
    block: Tuple[int, ...] = ()

    @property
    def timed(self) -> bool:
        return self.start > 0 and self.end >= self.start


@dataclass(frozen=True)
class Recorded:
    """What a recorder collected between ``start`` and ``stop``.

    ``ticks_per_second`` converts the records' timestamps; ``host_seconds`` is what
    collecting cost the host after the block (flush and parsing). ``tagged``: every API
    call made under one of the recorder's tags, as ``(correlation, tag, host start)``
    (launches or not: the brackets of :func:`attribute`)."""

    records: Tuple[GpuRecord, ...]
    ticks_per_second: float = 1e9
    host_seconds: float = 0.0
    dropped: int = 0
    tagged: Tuple[Tuple[int, ...], ...] = ()
    #: Why the recorder's own state is not what it was built with (empty: intact).
    altered: str = ""


class Recorder(Protocol):
    """GPU activity recorder: the seam :class:`~.cuda_timer.CudaTimer` records through.

    ``start`` begins collecting; ``push(tag)``/``pop()`` bracket host calls whose
    launches belong to ``tag`` (a non-negative int below 2**32); ``stop`` ends
    collecting and returns every record since ``start``. ``recalibrate`` measures
    ``ticks_per_second`` again (the timer calls it when the hold's record and its
    events disagree) and returns it."""

    def start(self) -> None: ...
    def push(self, tag: int) -> None: ...
    def pop(self) -> None: ...
    def stop(self) -> Recorded: ...
    def recalibrate(self) -> float: ...
    def describe(self) -> str: ...


class RecorderUnavailable(RuntimeError):
    """No GPU activity recorder can run here; the message says why (shown in reports)."""


@dataclass(frozen=True)
class ChunkTags:
    """The tags of one chunk of calls under one hold: ``hold``, ``harness`` and
    ``first_call .. first_call + calls - 1``."""

    hold: int
    harness: int
    first_call: int
    calls: int

    def tags(self) -> range:
        return range(min(self.hold, self.harness, self.first_call), self.first_call + self.calls)

    def call_tags(self) -> range:
        return range(self.first_call, self.first_call + self.calls)


class TagCounter:
    """Hands out fresh tags: a retried chunk never reuses the tags of its first try."""

    def __init__(self) -> None:
        self._next = 0

    def chunk(self, calls: int) -> ChunkTags:
        t = ChunkTags(self._next, self._next + 1, self._next + 2, calls)
        self._next += 2 + calls
        return t

    def reset(self) -> None:
        self._next = 0


@dataclass(frozen=True)
class ChunkKernels:
    """The kernel time of one chunk: per call, seconds (None: no usable record).

    ``hold_seconds``: the hold's recorded duration (None: not recorded).
    ``other_stream`` / ``other_device``: calls with a record off the hold's stream /
    device. ``foreign``: records of no tag of the block inside the chunk's window.
    ``untimed``: records without timestamps. ``other_thread``: calls with a record
    another thread launched while they ran (module docstring)."""

    calls: Tuple[Optional[float], ...]
    hold_seconds: Optional[float]
    other_stream: int = 0
    other_device: int = 0
    foreign: int = 0
    untimed: int = 0
    hold_ticks: Optional[int] = None
    other_thread: int = 0

    @property
    def unrecorded(self) -> int:
        return sum(1 for c in self.calls if c is None)

    def flags(self) -> Tuple[str, ...]:
        out = []
        if self.other_stream:
            out.append(OTHER_STREAM)
        if self.other_device:
            out.append(OTHER_DEVICE)
        if self.other_thread:
            out.append(OTHER_THREAD)
        if self.foreign:
            out.append(FOREIGN)
        if self.unrecorded:
            out.append(UNRECORDED)
        if self.hold_seconds is None:
            out.append(NO_HOLD_RECORD)
        return tuple(out)


def attribute(recorded: Recorded, chunks: Sequence[ChunkTags], known: Iterable[ChunkTags] = (),
              ticks_per_second: Optional[float] = None) -> List[ChunkKernels]:
    """Per chunk of ``chunks``, each call's span (see the module docstring).

    ``known`` are further chunks of the same block (retried attempts whose timings
    were thrown away): their records are neither a call's of ``chunks`` nor foreign.
    ``ticks_per_second`` overrides the recorder's own figure (after a recalibration)."""
    tps = float(ticks_per_second or recorded.ticks_per_second)
    if tps <= 0:
        raise ValueError(f"ticks_per_second must be positive, got {tps}")
    by_tag, strangers, borrowed = _sorted_records(recorded, chunks, known)
    def hold_of(c: ChunkTags) -> Optional[GpuRecord]:
        timed = [r for r in by_tag.get(c.hold, ()) if r.timed]
        return min(timed, key=lambda r: r.start) if timed else None

    # A chunk's window on the GPU runs from its hold's start to the next chunk's hold
    # (any attempt's) or, for the last, to the end of the recording: nothing else of
    # the harness runs between them.
    starts = sorted(h.start for h in (hold_of(c) for c in list(chunks) + list(known)) if h is not None)
    out = []
    for c in chunks:
        hold = hold_of(c)
        ref_stream = hold.stream if hold is not None else None
        ref_device = hold.device if hold is not None else None
        spans: List[Optional[float]] = []
        other_stream = other_device = untimed = 0
        other_thread = sum(1 for tag in c.call_tags() if tag in borrowed)
        lo: Optional[int] = hold.start if hold is not None else None
        for tag in c.call_tags():
            recs = by_tag.get(tag, ())
            timed = [r for r in recs if r.timed]
            untimed += len(recs) - len(timed)
            if not timed or len(timed) < len(recs):
                # A call with a record CUPTI could not time has no span we can trust.
                spans.append(None)
            else:
                s, e = min(r.start for r in timed), max(r.end for r in timed)
                spans.append((e - s) / tps)
                lo = s if lo is None else min(lo, s)
            if ref_stream is not None and any(r.stream != ref_stream for r in timed):
                other_stream += 1
            if ref_device is not None and any(r.device != ref_device for r in timed):
                other_device += 1
        foreign = 0
        if lo is not None:
            hi = next((x for x in starts if x > lo), None)
            foreign = sum(1 for r in strangers if r.end > lo and (hi is None or r.start < hi))
        out.append(ChunkKernels(tuple(spans), None if hold is None else (hold.end - hold.start) / tps,
                                other_stream, other_device, foreign, untimed,
                                None if hold is None else hold.end - hold.start, other_thread))
    return out


def _sorted_records(recorded: Recorded, chunks: Sequence[ChunkTags], known: Iterable[ChunkTags]
                    ) -> Tuple[Dict[int, List[GpuRecord]], List[GpuRecord], Set[int]]:
    """(records by tag, timed records of no tag of the block, call tags that took a record
    another thread launched while they ran): the attribution :func:`attribute` and
    :func:`call_launches` share."""
    known = list(known)
    ours: Set[int] = set()
    for c in list(chunks) + known:
        ours.update(c.tags())
    by_tag: Dict[int, List[GpuRecord]] = {}
    strangers: List[GpuRecord] = []
    borrowed: Set[int] = set()  # call tags with a record of another thread's
    owner = _bracketing_call(recorded.tagged, chunks, known)
    for r in recorded.records:
        if r.tag is not None and r.tag in ours:
            by_tag.setdefault(r.tag, []).append(r)
            continue
        t = owner(r) if r.tag is None else None
        if t is not None:
            by_tag.setdefault(t, []).append(r)
            borrowed.add(t)
        elif r.timed:
            strangers.append(r)
    return by_tag, strangers, borrowed


#: One kernel launch as the per-call launch check compares it: (name, grid, block).
Launch = Tuple[str, Tuple[int, ...], Tuple[int, ...]]


def call_launches(recorded: Recorded, chunks: Sequence[ChunkTags], known: Iterable[ChunkTags] = (),
                  demangle: Callable[[str], str] = lambda s: s) -> List[Tuple[Launch, ...]]:
    """Per call of ``chunks``, in order, the kernels the record attributes to it (the same
    attribution as its span: by tag, and another thread's launches made while it ran), in
    the order they started, as ``(name, grid, block)``; ``demangle`` turns a recorded name
    into the profiler's spelling. Copies and sets are left out: the check compares
    kernels. Harness work (the hold, the L2 flush, the bench's hook) is under tags of its
    own and never among a call's launches."""
    by_tag, _, _ = _sorted_records(recorded, chunks, known)
    names: Dict[str, str] = {}

    def spelled(n: str) -> str:
        if n not in names:
            names[n] = demangle(n)
        return names[n]

    out: List[Tuple[Launch, ...]] = []
    for c in chunks:
        for tag in c.call_tags():
            recs = sorted((r for r in by_tag.get(tag, ()) if r.kind == "kernel"), key=lambda r: (r.start, r.correlation))
            out.append(tuple((spelled(r.name), tuple(r.grid), tuple(r.block)) for r in recs))
    return out


def launch_summary(calls: Sequence[Tuple[Launch, ...]]) -> Dict[str, Any]:
    """Per-call launches as plain data, each distinct launch and each distinct sequence
    once: ``kernels`` ([name, grid, block]), ``sequences`` (indices into ``kernels``) and
    ``calls`` (an index into ``sequences`` per call)."""
    kernels: Dict[Launch, int] = {}
    seqs: Dict[Tuple[int, ...], int] = {}
    per_call = []
    for launches in calls:
        seq = tuple(kernels.setdefault(k, len(kernels)) for k in launches)
        per_call.append(seqs.setdefault(seq, len(seqs)))
    return {"kernels": [[n, list(g), list(b)] for (n, g, b) in kernels],
            "sequences": [list(s) for s in seqs], "calls": per_call}


def block_launches(rec: Any, recorded: Recorded, attribution: Optional[Dict[str, Any]], flags: Sequence[str],
                   demangle: Callable[[str], str] = lambda s: s) -> Dict[str, Any]:
    """A block's kept calls' launches (:func:`call_launches`, :func:`launch_summary`) as plain
    data for the parent's per-call launch check; ``altered``: what of the recorder was
    replaced since it was built, asked through its class so that the instance's own
    replacement does not answer. Without a record of the timer's own holds the recorder
    was not recording: ``missing`` instead of the calls."""
    ask = getattr(type(rec), "altered", None)
    out: Dict[str, Any] = {"altered": ask(rec) if callable(ask) else ""}
    if NO_HOLD_RECORD in flags:
        return {**out, "missing": "no record of the timer's own hold kernel"}
    at = attribution or {}
    return {**out, **launch_summary(call_launches(recorded, at.get("kept", ()), at.get("attempted", ()), demangle))}


def _bracketing_call(tagged: Sequence[Tuple[int, ...]], chunks: Sequence[ChunkTags],
                     known: Iterable[ChunkTags]) -> Callable[[GpuRecord], Optional[int]]:
    """``record -> call tag`` for an untagged record launched while a call ran: the
    nearest tagged API calls before and after its launch are the same call's, or a
    call's and the next call's of the same chunk (module docstring); None otherwise."""
    if not tagged:
        return lambda r: None
    by_time = all(len(t) > 2 and t[2] > 0 for t in tagged)
    calls: Dict[int, ChunkTags] = {}
    for c in list(chunks) + list(known):
        for t in c.call_tags():
            calls[t] = c
    order = sorted((t[2] if by_time else t[0], t[1]) for t in tagged)
    keys = [k for k, _ in order]

    def owner(r: GpuRecord) -> Optional[int]:
        key = r.launched if by_time else r.correlation
        if key <= 0:
            return None
        i = bisect.bisect_left(keys, key)
        if i == 0 or i == len(keys) or keys[i] == key:
            return None
        before, after = order[i - 1][1], order[i][1]
        c = calls.get(before)
        if c is None:
            return None
        if after == before or (after == before + 1 and after in c.call_tags()):
            return before
        return None

    return owner


def hold_agrees(recorded_s: Optional[float], event_s: float, rel: float = 0.02, abs_s: float = 5e-6) -> bool:
    """Whether the hold's recorded duration matches its CUDA events.

    The events around the hold add their own latency (about 1-3 us on an H100 /
    H200: ``cuda_timer``'s measured bias), so the check allows ``abs_s`` on top of
    ``rel``. Ticks misread fail it by far: after torch.profiler had run in the process,
    CUPTI's spans of the same ops came out 2.10x their length in nanoseconds on an H100
    (every op, 4 us to 205 us), which a timestamp callback of Kineto's counting CPU cycles explains."""
    if recorded_s is None:
        return False
    return abs(recorded_s - event_s) <= rel * event_s + abs_s


@dataclass(frozen=True)
class KernelBlock:
    """The kernel time of a whole block (its kept chunks), and whether to trust it.

    ``calls``: per call, seconds or None. ``flags``: the union of the chunks' flags,
    plus ``clock-mismatch`` when a hold's record and events disagreed even after the
    recorder measured its ticks again. ``usable``: every call has a span, every hold
    a record, and the clocks agree (foreign work is judged by the timer, which falls
    back to the host's wall time for it)."""

    calls: Tuple[Optional[float], ...]
    flags: Tuple[str, ...]
    ticks_per_second: float

    @property
    def usable(self) -> bool:
        return not ({UNRECORDED, NO_HOLD_RECORD, CLOCK_MISMATCH} & set(self.flags))

    @property
    def total(self) -> float:
        return sum(c for c in self.calls if c is not None)


FLAG_ORDER = (OTHER_STREAM, OTHER_DEVICE, OTHER_THREAD, FOREIGN, UNRECORDED, NO_HOLD_RECORD, CLOCK_MISMATCH,
              CLOCK_FROM_HOLD, RECORDER_ERROR)


def block_kernel_time(recorded: Recorded, kept: Sequence[ChunkTags], attempted: Sequence[ChunkTags],
                      event_holds: Sequence[float], recalibrate: Optional[Callable[[], float]] = None,
                      ticks_per_second: Optional[float] = None) -> KernelBlock:
    """Attribute a block's records to its kept chunks and check the recorder's clock.

    ``event_holds[i]`` is chunk ``i``'s hold as its CUDA events timed it. The ticks are
    ``ticks_per_second`` (what agreed last time) or the recorder's own figure. When a
    hold's record disagrees with its events (:func:`hold_agrees`): ``recalibrate()`` is
    asked for the ticks again once; if they still disagree, the ticks are taken from
    the holds themselves (their recorded ticks over their event seconds, median over the
    holds of at least :data:`MIN_HOLD_FOR_CLOCK_S`; flag ``clock-from-hold``), which
    every hold must then agree with; a disagreement that remains is ``clock-mismatch``.
    ``KernelBlock.ticks_per_second`` is the figure used, for the next block."""
    tps = float(ticks_per_second or recorded.ticks_per_second)
    chunks = attribute(recorded, kept, attempted, tps)

    def disagree(cs: Sequence[ChunkKernels]) -> bool:
        return any(c.hold_seconds is not None and not hold_agrees(c.hold_seconds, e)
                   for c, e in zip(cs, event_holds))

    flags: Set[str] = set()
    mismatch = disagree(chunks)
    if mismatch and recalibrate is not None:
        tps = float(recalibrate())
        chunks = attribute(recorded, kept, attempted, tps)
        mismatch = disagree(chunks)
    if mismatch:
        rates = sorted(c.hold_ticks / e for c, e in zip(chunks, event_holds)
                       if c.hold_ticks and e >= MIN_HOLD_FOR_CLOCK_S)
        if rates:
            tps = rates[len(rates) // 2]
            chunks = attribute(recorded, kept, attempted, tps)
            mismatch = disagree(chunks)
            flags.add(CLOCK_FROM_HOLD)
    flags.update(f for c in chunks for f in c.flags())
    if mismatch:
        flags.add(CLOCK_MISMATCH)
    return KernelBlock(tuple(x for c in chunks for x in c.calls), tuple(f for f in FLAG_ORDER if f in flags), tps)
