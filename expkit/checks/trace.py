"""What actually ran: torch.profiler traces read into typed events.

A speed claim is about one kernel; a timing only says that *something* took that long.
This module records one call of a function under ``torch.profiler`` and reads the
exported chrome trace back into two flat lists:

* :class:`OpEvent` -- CPU-side ops (``cat`` ``cpu_op``: aten and ``torch.library``
  custom ops by their qualified names, e.g. ``expkit_examples::attn_basic``; and
  ``user_annotation``: ``record_function`` labels), with their nesting depth on their
  thread;
* :class:`KernelEvent` -- GPU kernels as CUPTI recorded them (``cat`` ``kernel``):
  name, grid, block, registers per thread, shared memory (static + dynamic), stream,
  and the ``External id`` that ties each kernel to the op that launched it.

Why the exported JSON and not ``prof.events()``: the in-memory ``FunctionEvent`` API
keeps kernel names and durations but drops grid, block, registers and shared memory;
kineto writes all of them into the chrome trace's kernel ``args``. So :func:`capture`
exports to a temporary file, parses it and deletes it.

Bookkeeping the profiler adds is dropped from ``ops``: ``ProfilerStep#N`` spans,
Python-function events, memory instants, flow arrows, process/thread metadata. The
op nesting is then recomputed per thread from the intervals, so an op that sat under
a dropped span becomes top level.

The harness stream. CUPTI numbers streams itself (the ``stream`` arg, e.g. 7 for the
legacy default stream); that number is not ``torch.cuda.Stream.cuda_stream`` and no
public torch API maps one to the other. So on CUDA :func:`.recording.capture` first launches one
tiny fill kernel on the current stream inside a ``record_function`` named
:data:`HARNESS_MARKER`; the parser reads that kernel's stream into
``meta["harness_stream"]`` and removes the marker (the span, the ops under it and
their kernels) from the trace, so it never counts as the candidate's work.

Work on other streams. The entry marker ends with a spin of about a millisecond
(:data:`ENTRY_SPIN_CYCLES`), and a second marker (:data:`HARNESS_JOIN`) is launched
on the same stream as soon as the call returns. A library that runs kernels on
streams of its own (cuDNN's grouped convolutions do) orders them with the caller's
stream at both ends: they start after the spin has ended and end before the join
marker starts. Work that does not wait for the caller's stream starts during the
spin; work the caller's stream does not wait for is still running when the join
marker starts. ``meta["entry_end_us"]`` and ``meta["join_start_us"]`` keep the two
instants (:meth:`Trace.unordered_kernels`).

Approximations: nesting comes from timestamps on one thread (kineto writes
microseconds with nanosecond decimals, and a child's interval lies inside its
parent's); kernels launched outside any op (e.g. by a library called straight from
Python with no dispatcher op around it) have no ``External id`` and belong to no op
unless their launch record carries one (looked up by ``correlation``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union


#: ``record_function`` label of the marker kernel :func:`.recording.capture` launches on the
#: harness stream (see the module docstring).
HARNESS_MARKER = "expkit::harness_stream_marker"
#: ``record_function`` label of the marker :func:`.recording.capture` launches on the harness
#: stream right after the profiled call returns (see the module docstring).
HARNESS_JOIN = "expkit::harness_stream_join"
#: Cycles of the spin the entry marker ends with (about 1 ms at 2 GHz): long against the
#: host's time to launch a call's first kernels, so that work on another stream that
#: does not wait for the caller's stream visibly starts before the spin has ended.
ENTRY_SPIN_CYCLES = 2_000_000

#: Trace categories read as ops.
OP_CATEGORIES = ("cpu_op", "user_annotation")
#: Trace categories of launch records; read only to link a kernel with no
#: ``External id`` to an op through its ``correlation``.
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Categories that only exist where the CUDA activity was recorded.
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset") + LAUNCH_CATEGORIES
#: Profiler bookkeeping spans that are not work of the profiled function.
_BOOKKEEPING = re.compile(r"^(ProfilerStep#\d+|\[memory\]|\[OutOfMemory\]|PyTorch Profiler.*)$")


@dataclass(frozen=True)
class OpEvent:
    """One CPU-side op. ``depth`` 0 is top level on thread ``tid``."""

    name: str
    external_id: Optional[int]
    ts_us: float
    dur_us: float
    tid: Union[int, str]
    depth: int = 0

    @property
    def end_us(self) -> float:
        return self.ts_us + self.dur_us


@dataclass(frozen=True)
class KernelEvent:
    """One GPU kernel launch as CUPTI recorded it.

    ``grid`` and ``block`` are 3-tuples; ``shared_memory`` is static + dynamic bytes
    per block. Fields the trace did not carry are ``None``."""

    name: str
    grid: Tuple[int, ...]
    block: Tuple[int, ...]
    registers_per_thread: Optional[int]
    shared_memory: Optional[int]
    stream: Optional[int]
    correlation: Optional[int]
    external_id: Optional[int]
    ts_us: float
    dur_us: float
    device: Optional[int]

    @property
    def short_name(self) -> str:
        return kernel_short_name(self.name)


@dataclass(frozen=True)
class Trace:
    """The ops and kernels of one profiled call, in time order.

    ``device_properties`` and ``meta`` are plain dicts taken from the trace (CUDA
    runtime/driver/CUPTI versions, ``activities``, ``harness_stream``, a fixture's
    ``expkit_fixture`` note); treat them as read-only. They take no part in hashing.
    """

    ops: Tuple[OpEvent, ...]
    kernels: Tuple[KernelEvent, ...]
    device_properties: Tuple[Dict[str, Any], ...] = field(default=(), hash=False)
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        by_ext: Dict[int, OpEvent] = {}
        for op in self.ops:
            if op.external_id is not None:
                by_ext.setdefault(op.external_id, op)
        # A cache, not a field: equality and hashing stay defined by the events.
        object.__setattr__(self, "_op_by_external_id", by_ext)

    # --- derived views -------------------------------------------------------------

    @property
    def on_gpu(self) -> bool:
        """Whether the CUDA activity was recorded (so "no kernel ran" is evidence)."""
        return "cuda" in tuple(self.meta.get("activities", ()))

    @property
    def harness_stream(self) -> Optional[int]:
        return self.meta.get("harness_stream")

    def top_level_ops(self) -> Tuple[OpEvent, ...]:
        """Ops not nested inside another op on the same thread."""
        return tuple(op for op in self.ops if op.depth == 0)

    def op_names(self, *, top_level: bool = False) -> Tuple[str, ...]:
        """Distinct op names in order of first appearance."""
        return _unique(op.name for op in (self.top_level_ops() if top_level else self.ops))

    def kernel_names(self) -> Tuple[str, ...]:
        """Distinct kernel names (full, as demangled by CUPTI) in order of first launch."""
        return _unique(k.name for k in self.kernels)

    def descendants(self, op: OpEvent) -> Tuple[OpEvent, ...]:
        """Ops nested inside ``op`` on its thread, at any depth."""
        return tuple(o for o in self.ops if o.tid == op.tid and o.depth > op.depth
                     and o.ts_us >= op.ts_us and o.ts_us < op.end_us and o is not op)

    def root_of(self, op: OpEvent) -> OpEvent:
        """The top-level op that ``op`` runs under (``op`` itself if top level)."""
        if op.depth == 0:
            return op
        for o in self.ops:
            if o.tid == op.tid and o.depth == 0 and o.ts_us <= op.ts_us < o.end_us:
                return o
        return op

    def unordered_kernels(self, stream: int) -> Tuple[KernelEvent, ...]:
        """Kernels off ``stream`` that were not ordered with it at both ends of the call:
        started before the entry marker's spin ended, or ended after the join marker
        started (see the module docstring). Where the trace lacks either instant (a trace
        expkit did not record), every kernel off the stream counts as unordered."""
        entry, join = self.meta.get("entry_end_us"), self.meta.get("join_start_us")
        off = [k for k in self.kernels if k.stream != stream]
        if entry is None or join is None:
            return tuple(off)
        eps = 0.05  # kineto writes microseconds with nanosecond decimals
        return tuple(k for k in off if k.ts_us < entry - eps or k.ts_us + k.dur_us > join + eps)

    def kernels_of_op(self, op: OpEvent, *, nested: bool = True) -> Tuple[KernelEvent, ...]:
        """Kernels launched by ``op`` (``External id`` equal to the op's), and with
        ``nested`` also those launched by the ops nested inside it: a kernel carries
        the id of the innermost op around its launch, e.g. ``aten::mm`` under
        ``aten::matmul``."""
        ids = {op.external_id}
        if nested:
            ids |= {o.external_id for o in self.descendants(op)}
        ids.discard(None)
        return tuple(k for k in self.kernels if k.external_id in ids)

    def op_of_kernel(self, kernel: KernelEvent) -> Optional[OpEvent]:
        """The innermost op that launched ``kernel``, if the trace links them."""
        if kernel.external_id is None:
            return None
        return self._op_by_external_id.get(kernel.external_id)


# --- kernel names ----------------------------------------------------------------

_ANON = "(anonymous namespace)"


def _strip_trailing_group(s: str, open_: str, close: str) -> str:
    """Drop a balanced ``open_ ... close`` group at the end of ``s``."""
    if not s.endswith(close):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == close:
            depth += 1
        elif s[i] == open_:
            depth -= 1
            if depth == 0:
                return s[:i]
    return s


def kernel_short_name(name: str) -> str:
    """The unqualified function name inside a demangled kernel name.

    ``void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, ...)``
    gives ``cunn_SoftMaxForward``; ``attn_basic_k128(float const*, float*, float, int)``
    gives ``attn_basic_k128``; a name with no parameter list (cuDNN's generated
    kernels, Triton's) is returned whole. Users write patterns against this name, not
    against return types, namespaces and template arguments."""
    qualified = kernel_qualified_name(name)
    parts = _split_top_level(qualified, "::")
    return parts[-1] if parts else qualified


def kernel_qualified_name(name: str) -> str:
    """``ns::func`` of a demangled kernel name: no return type, template arguments or
    parameter list."""
    s = name.replace(_ANON, "{anonymous}").strip()
    s = _strip_trailing_group(s, "(", ")").rstrip()
    s = _strip_trailing_group(s, "<", ">").rstrip()
    # A template's demangled name starts with its return type ("void "); the function
    # name is what follows the last space outside <...> and (...).
    depth, cut = 0, -1
    for i, ch in enumerate(s):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == " " and depth == 0:
            cut = i
    return s[cut + 1:] or name


def _split_top_level(s: str, sep: str) -> list:
    out, depth, start, i = [], 0, 0, 0
    while i < len(s):
        ch = s[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            out.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(s[start:])
    return out


# --- parsing ---------------------------------------------------------------------


def _arg(args: Mapping[str, Any], *names: str) -> Any:
    """First present arg among ``names``; kineto's spelling changed over versions
    ("External id" vs "external id"), so fall back to a case-insensitive match."""
    for n in names:
        if n in args:
            return args[n]
    lowered = {k.lower(): v for k, v in args.items()}
    for n in names:
        if n.lower() in lowered:
            return lowered[n.lower()]
    return None


def _int(v: Any) -> Optional[int]:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _dims(v: Any) -> Tuple[int, ...]:
    if isinstance(v, (list, tuple)):
        out = tuple(int(x) for x in v if _int(x) is not None)
        return out + (1,) * (3 - len(out)) if 0 < len(out) < 3 else out
    return ()


def _load(data: Union[Mapping[str, Any], str, os.PathLike]) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    path = Path(data)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _with_depth(ops: Iterable[OpEvent]) -> Tuple[OpEvent, ...]:
    """Recompute nesting per thread: sort by (start, longest first) and keep a stack
    of open intervals; an op's depth is the number of intervals still open at its
    start. Ties keep file order (kineto writes a parent before its children)."""
    ops = list(ops)
    order = sorted(range(len(ops)), key=lambda i: (str(ops[i].tid), ops[i].ts_us, -ops[i].dur_us, i))
    depth: Dict[int, int] = {}
    stacks: Dict[str, list] = {}
    for i in order:
        op = ops[i]
        stack = stacks.setdefault(str(op.tid), [])
        while stack and stack[-1] <= op.ts_us:
            stack.pop()
        depth[i] = len(stack)
        stack.append(op.end_us)
    out = [OpEvent(op.name, op.external_id, op.ts_us, op.dur_us, op.tid, depth[i]) for i, op in enumerate(ops)]
    out.sort(key=lambda o: (o.ts_us, o.depth))
    return tuple(out)


def parse_chrome_trace(data: Union[Mapping[str, Any], str, os.PathLike], *,
                       activities: Optional[Iterable[str]] = None) -> Trace:
    """Read a ``torch.profiler`` chrome trace (a dict, or a ``.json``/``.json.gz`` path).

    Only ``"ph": "X"`` events of the categories above are read; every arg other than
    name, ts and dur is optional (CPU-only traces have no kernels; newer kineto adds
    fields such as ``occupancy`` or ``graph id``, which are ignored).

    ``activities`` (``"cpu"``, ``"cuda"``) says what was recorded; where not given it
    is inferred: ``"cuda"`` if any GPU-side event (kernel, memcpy, memset, launch
    record) is present. A CPU-only recording on a GPU machine still carries
    ``deviceProperties``, so that field proves nothing about what was recorded.
    """
    raw = _load(data)
    events = raw.get("traceEvents", []) if isinstance(raw, Mapping) else []
    ops: list = []
    kernels_raw: list = []
    launch_ext: Dict[int, int] = {}
    launch_at: Dict[int, Tuple[Any, float]] = {}
    saw_gpu = False
    for ev in events:
        if not isinstance(ev, Mapping) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        args = ev.get("args") or {}
        if cat in _GPU_CATEGORIES:
            saw_gpu = True
        if cat in OP_CATEGORIES:
            name = str(ev.get("name", ""))
            if _BOOKKEEPING.match(name):
                continue
            ops.append(OpEvent(name, _int(_arg(args, "External id")), float(ev.get("ts", 0.0)),
                               float(ev.get("dur", 0.0)), ev.get("tid", 0)))
        elif cat == "kernel":
            kernels_raw.append(ev)
        elif cat in LAUNCH_CATEGORIES:
            corr, ext = _int(_arg(args, "correlation")), _int(_arg(args, "External id"))
            if corr is not None and ext is not None:
                launch_ext[corr] = ext
            if corr is not None:
                launch_at[corr] = (ev.get("tid", 0), float(ev.get("ts", 0.0)))

    # A kernel launched inside a marker's span with no op of its own (torch.cuda._sleep's
    # spin is not a dispatcher op) belongs to the marker: by its launch record's thread and time.
    markers = [o for o in ops if o.name in (HARNESS_MARKER, HARNESS_JOIN) and o.external_id is not None]
    known = {o.external_id for o in ops}
    kernels = []
    for ev in kernels_raw:
        args = ev.get("args") or {}
        corr = _int(_arg(args, "correlation"))
        ext = _int(_arg(args, "External id"))
        if ext is None and corr is not None:
            ext = launch_ext.get(corr)
        if (ext is None or ext not in known) and corr in launch_at:
            tid, at = launch_at[corr]
            ext = next((m.external_id for m in markers if m.tid == tid and m.ts_us <= at <= m.end_us), ext)
        kernels.append(KernelEvent(
            name=str(ev.get("name", "")),
            grid=_dims(_arg(args, "grid")),
            block=_dims(_arg(args, "block")),
            registers_per_thread=_int(_arg(args, "registers per thread")),
            shared_memory=_int(_arg(args, "shared memory")),
            stream=_int(_arg(args, "stream")) if _arg(args, "stream") is not None else _int(ev.get("tid")),
            correlation=corr,
            external_id=ext,
            ts_us=float(ev.get("ts", 0.0)),
            dur_us=float(ev.get("dur", 0.0)),
            device=_int(_arg(args, "device")) if _arg(args, "device") is not None else _int(ev.get("pid")),
        ))
    kernels.sort(key=lambda k: k.ts_us)

    meta: Dict[str, Any] = {k: v for k, v in raw.items()
                            if k not in ("traceEvents", "deviceProperties") and not isinstance(v, list)}
    if activities is None:
        activities = raw.get("expkit_activities") or (("cpu", "cuda") if saw_gpu else ("cpu",))
    meta["activities"] = tuple(activities)
    if isinstance(raw.get("expkit_calls"), list):
        meta["calls"] = raw["expkit_calls"]
    trace = Trace(_with_depth(ops), tuple(kernels),
                  tuple(dict(p) for p in raw.get("deviceProperties", []) or [] if isinstance(p, Mapping)), meta)
    return _remove_marker(trace)


def _remove_marker(trace: Trace) -> Trace:
    """Read the harness stream and the entry and join instants off the markers (see the
    module docstring) and drop them (their spans, the ops under them, their kernels)."""
    drop_ops: set = set()
    found: Dict[str, list] = {HARNESS_MARKER: [], HARNESS_JOIN: []}
    for m in trace.ops:
        if m.name in found:
            drop_ops.add(id(m))
            drop_ops.update(id(o) for o in trace.descendants(m))
            found[m.name].extend(trace.kernels_of_op(m))
    if not drop_ops:
        return trace
    entry, join = found[HARNESS_MARKER], found[HARNESS_JOIN]
    streams = _unique(k.stream for k in entry if k.stream is not None)
    meta = dict(trace.meta)
    if len(streams) == 1:
        meta["harness_stream"] = streams[0]
        if join and all(k.stream == streams[0] for k in join):
            meta["entry_end_us"] = max(k.ts_us + k.dur_us for k in entry)
            meta["join_start_us"] = min(k.ts_us for k in join)
    drop_k = {id(k) for k in entry + join}
    ops = _with_depth(op for op in trace.ops if id(op) not in drop_ops)
    kernels = tuple(k for k in trace.kernels if id(k) not in drop_k)
    return Trace(ops, kernels, trace.device_properties, meta)


def _unique(items: Iterable[Any]) -> Tuple[Any, ...]:
    return tuple(dict.fromkeys(items))
