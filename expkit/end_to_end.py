"""End-to-end truth: does the kernel's win survive in the workload it was written for?

A micro-benchmark times one op on prepared inputs. A workload -- a decode loop, a
training step -- runs that op among hundreds of others, under a compiler, inside CUDA
graphs, with a host that must keep the device fed. A kernel can be faster alone and
still make the workload slower: it breaks the compiled graph, forces a layout
conversion or a host-device synchronisation on every step, or launches more kernels
than the host can issue. This module measures the workload beside the kernel and
holds the two results against each other.

The prediction (Amdahl's law)
-----------------------------
If the replaced op takes a share ``f`` of the baseline workload's time and the kernel
is ``s`` times faster, the workload should become ``1 / ((1 - f) + f / s)`` times
faster, and no more. ``f`` is read from a profile of the baseline workload
(``torch.profiler``): on a GPU, the time of the kernels the replaced op launched (or
whose names the manifest's ``replaced`` patterns match) over the run's wall time; on
the CPU, the time of the matching ops (outermost ones only) over the wall time.

The prediction carries an interval. The micro interval ``[s_lo, s_hi]`` comes from
the micro measurement; the share's spread ``[f_lo, f_hi]`` from several profiled runs
(min and max), or ``[0, 1]`` where no pattern names the replaced op. The predicted
speedup is monotone in each of ``f`` and ``s``, so its interval is the smallest and
largest value at the four corners of that box. This is conservative: it treats the
two uncertainties as if they could take their extremes together.

The disagreement rule
---------------------
With the measured end-to-end interval ``[e_lo, e_hi]`` and the predicted ``[p_lo, p_hi]``:

* ``e_hi < p_lo``: the workload falls short of the prediction beyond both intervals.
  Where the micro result is a win (``s_lo > 1``) and the workload a loss (``e_hi < 1``),
  that is **"micro win, end-to-end loss"**; where the workload still gains
  (``e_lo > 1``), **"end-to-end gain smaller than predicted"**; otherwise
  "end-to-end below prediction".
* ``e_lo > p_hi``: "end-to-end gain larger than predicted" (the change helped the
  workload in some way the kernel's timing does not show).
* otherwise "as predicted": the intervals overlap, and the run has no evidence of a
  disagreement -- which is not evidence of agreement when the intervals are wide.

Only an interval falling short counts; a point estimate below the prediction inside
overlapping intervals does not. When the claim names the workload
(``end_to_end.claim``), the workload's interval is judged against that figure like a
case (``verdict.judge_case``), and a refuted workload refutes the run
(:func:`apply`).

Why it differs: the evidence
----------------------------
For each side, from the same profiled runs: kernels executed and launch calls per
step, CUDA-graph launches per step, host-device synchronisations per step (calls to
the runtime's synchronise functions and blocking copies), scalar reads to the host
(``aten::_local_scalar_dense``: ``.item()``, ``int(t)``), dispatcher ops per step (the
evidence that remains on a CPU), the fraction of the wall time the GPU was busy
(union of kernel intervals), and the operators and kernels whose time grew most. For
compiled workloads, ``torch._dynamo``'s counters across the build and the first runs:
graph breaks and frames Dynamo gave up on, with its reasons, graphs compiled,
recompilations (from Dynamo's compilation metrics), CUDA-graph skips, and the first
call's time (compilation included). On a GPU, NVML's utilisation counter sampled
while each side runs alone.

Checks before any timing: both workloads' final outputs agree (the manifest's
``end_to_end.oracles``), the candidate workload ran the candidate
(``expect.must_run``), and the baseline still runs as it did once the candidate is
built (:func:`isolation_findings`). Each failure invalidates the run.

Approximations, stated once:

* Profiling slows every op by a roughly constant amount, so shares of a profiled run
  overweight workloads made of many small ops; the share is a ratio of two profiled
  times, which cancels part of it. The end-to-end timing itself is never profiled.
* NVML's utilisation is the fraction of its own sample period (1/6 s to 1 s depending
  on the product, per NVML's documentation of ``nvmlDeviceGetUtilizationRates``) in
  which at least one kernel ran; it says nothing about how full the GPU was. The
  profile's busy fraction is the finer figure; NVML's is the one a user's dashboard
  shows.
* Both sides run in one process, and Dynamo caches compiled code per Python code
  object. Where they share code, the second side built compiles as a
  *recompilation* of the first side's code (a guard on the swapped op fails), and a
  frame one side makes Dynamo give up on is given up for both: the isolation check
  catches the second; the first is reported as counted, with a note.
* The workload runs beside the code under test (in the defences' worker process);
  its timing is taken there on the harness's clock, without the parent's envelope
  check that guards the kernel's blocks. The estimate, prediction and verdict are the
  parent's, from the raw samples.
"""

from __future__ import annotations

import importlib
import math
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .findings import WARNING, Finding

# Labels of the disagreement rule (see the module docstring).
AS_PREDICTED = "as predicted"
MICRO_WIN_E2E_LOSS = "micro win, end-to-end loss"
SMALLER_GAIN = "end-to-end gain smaller than predicted"
BELOW = "end-to-end below prediction"
LARGER_GAIN = "end-to-end gain larger than predicted"
SHORT_LABELS = (MICRO_WIN_E2E_LOSS, SMALLER_GAIN, BELOW)

#: ``record_function`` label around each profiled run of a workload.
RUN_LABEL = "expkit::end_to_end_run"
#: CUDA runtime/driver calls that block the host until the device has caught up.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy",
})
#: CUDA runtime/driver calls that launch one kernel.
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
})
#: CUDA runtime/driver calls that replay a captured graph.
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
#: The dispatcher op behind ``.item()`` / ``int(tensor)``: a synchronisation on a GPU.
SCALAR_READ_OPS = frozenset({"aten::_local_scalar_dense"})
TOP_GROWN = 6


# --- Amdahl and the disagreement rule ----------------------------------------------


def amdahl(share: float, speedup: float) -> float:
    """Speedup of the whole when a part taking ``share`` of its time gets ``speedup`` faster."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    if speedup <= 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    return 1.0 / ((1.0 - share) + share / speedup)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.value <= self.high:
            raise ValueError(f"interval [{self.low}, {self.high}] does not hold its value {self.value}")


@dataclass(frozen=True)
class Prediction:
    """The end-to-end speedup the micro result predicts, with the inputs behind it.

    ``share_source`` says where the share came from: ``"profile"`` (measured) or
    ``"unknown"`` (no pattern named the replaced op, so any share in [0, 1])."""

    share: Interval
    micro: Interval
    speedup: Interval
    share_source: str = "profile"


def predict(micro: Interval, share: Optional[Interval]) -> Prediction:
    """Amdahl's law over the box ``share x micro`` (see the module docstring)."""
    source = "profile"
    if share is None:
        share, source = Interval(0.5, 0.0, 1.0), "unknown"
    corners = [amdahl(f, s) for f in (share.low, share.high) for s in (micro.low, micro.high)]
    point = amdahl(share.value, micro.value)
    return Prediction(share, micro, Interval(point, min(corners + [point]), max(corners + [point])), source)


@dataclass(frozen=True)
class Agreement:
    """The verdict of the disagreement rule: one of the labels above, and why."""

    label: str
    detail: str

    @property
    def short(self) -> bool:
        """The measurement falls short of the prediction beyond both intervals."""
        return self.label in SHORT_LABELS


def _x(v: float) -> str:
    return f"{v:.3g}x"


def compare(prediction: Prediction, measured: Interval) -> Agreement:
    """Hold the measured end-to-end interval against the predicted one."""
    p, e, s = prediction.speedup, measured, prediction.micro
    said = (f"measured {_x(e.value)} [{_x(e.low)}, {_x(e.high)}] end to end; the micro speedup "
            f"{_x(s.value)} [{_x(s.low)}, {_x(s.high)}] predicts {_x(p.value)} [{_x(p.low)}, {_x(p.high)}]")
    if e.high < p.low:
        if s.low > 1.0 and e.high < 1.0:
            return Agreement(MICRO_WIN_E2E_LOSS, said)
        if e.low > 1.0:
            return Agreement(SMALLER_GAIN, said)
        return Agreement(BELOW, said)
    if e.low > p.high:
        return Agreement(LARGER_GAIN, said)
    return Agreement(AS_PREDICTED, said)


# --- workloads ---------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One side's workload, as a builder returns it.

    ``run()`` performs the whole workload once, from the same starting state every
    time (a decode loop restarts from its prompt; a training step from the same
    weights, or the drift of the weights must not change its cost), and returns its
    final outputs: tensors, or tuples/lists/dicts of them, for the oracles. ``steps``
    is how many steps one run takes (tokens decoded, optimizer steps), so that counts
    can be given per step; ``step`` names one."""

    run: Callable[[], Any]
    steps: int = 1
    step: str = "step"

    def __post_init__(self) -> None:
        if not callable(self.run):
            raise TypeError("Workload.run must be callable")
        if self.steps < 1:
            raise ValueError(f"Workload.steps must be >= 1, got {self.steps}")


def as_workload(obj: Any) -> Workload:
    """A builder may return a :class:`Workload` or a bare zero-argument callable."""
    if isinstance(obj, Workload):
        return obj
    if callable(obj):
        return Workload(obj)
    raise TypeError(f"the workload builder returned a {type(obj).__name__}, not a Workload or a callable")


class WallTimer:
    """Host wall clock around a block of whole workload runs, device drained on both ends.

    Not the micro-benchmark's timer on purpose: a workload's cost includes the host's
    Python, dispatch, graph breaks and synchronisations, and a user waits for all of
    it. ``sync`` (``torch.cuda.synchronize`` on a GPU) runs before the clock starts, so
    earlier work is not billed to this block, and before it stops, so queued work is."""

    def __init__(self, sync: Optional[Callable[[], None]] = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._sync = sync
        self._clock = clock
        self.method = ("end to end: time.perf_counter around a block of whole runs"
                       + (", device synchronised before and after" if sync else ""))

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        if self._sync is not None:
            self._sync()
        start = self._clock()
        for _ in range(number):
            fn()
        if self._sync is not None:
            self._sync()
        return (self._clock() - start) / number


# --- compiler evidence -------------------------------------------------------------


def _dynamo_snapshot() -> Dict[str, Any]:
    """Dynamo's counters and compilation metrics now; empty if dynamo was never imported
    (nothing was compiled, and importing it here would cost seconds)."""
    if "torch._dynamo.utils" not in sys.modules:
        return {}
    try:
        from torch._dynamo import utils as du
    except Exception:  # a torch without dynamo
        return {}
    counters = getattr(du, "counters", {})
    snap: Dict[str, Any] = {k: dict(counters.get(k, {}))
                            for k in ("graph_break", "unimplemented", "stats", "inductor", "frames")}
    # Private in torch (a bounded deque of CompilationMetrics); read defensively.
    snap["metrics"] = list(getattr(du, "_compilation_metrics", ()) or ())
    return snap


@dataclass(frozen=True)
class CompileStats:
    """What the compiler did while one side was built and first run.

    ``frames`` counts the Python frames Dynamo tried to compile, ``frames_compiled``
    those it did. A graph break splits a frame's graph in two with Python between
    them (``graph_breaks``); where Dynamo cannot split -- a break inside a loop, in the
    torch versions we read -- it gives up on the whole frame, which then runs eagerly
    (``fallbacks``; Dynamo files these under ``counters["unimplemented"]``). Reasons
    are Dynamo's own messages, first lines only, most frequent first. ``compiled`` is
    False where Dynamo saw no frame at all; every count is then 0."""

    compiled: bool
    first_call_seconds: float
    frames: int = 0
    frames_compiled: int = 0
    graphs: int = 0
    graphs_after_first_call: int = 0
    graph_breaks: int = 0
    graph_break_reasons: Tuple[Tuple[str, int], ...] = ()
    fallbacks: int = 0
    fallback_reasons: Tuple[Tuple[str, int], ...] = ()
    recompiles: int = 0
    recompile_reasons: Tuple[str, ...] = ()
    cudagraph_skips: int = 0
    cudagraph_skip_reasons: Tuple[str, ...] = ()


def _count(snap: Mapping[str, Any], cat: str, key: Optional[str] = None) -> int:
    d = snap.get(cat, {}) or {}
    if key is None:
        return int(sum(v for v in d.values() if isinstance(v, (int, float))))
    return int(d.get(key, 0) or 0)


def _new_metrics(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[Any]:
    seen = {id(m) for m in before.get("metrics", ())}
    return [m for m in after.get("metrics", ()) if id(m) not in seen]


_CHAINED = "*** While handling this graph break, another graph break occurred: ***"


def reason_summary(message: str, limit: int = 240) -> str:
    """Dynamo's graph-break message in one line: its first line, the first line of a
    break it caused (``graph break in loop``), and whether the frame fell back to eager."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    out = lines[0] if lines else str(message)
    if _CHAINED in message:
        after = [ln.strip() for ln in message.split(_CHAINED, 1)[1].splitlines() if ln.strip()]
        if after:
            out += f"; then: {after[0]}"
    if "falling back to eager" in message or "frame skipped" in message:
        out += " (the frame runs eagerly)"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _delta_reasons(before: Mapping[str, Any], after: Mapping[str, Any], cat: str) -> Dict[str, int]:
    b = before.get(cat, {}) or {}
    got: Dict[str, int] = {}
    for k, v in (after.get(cat, {}) or {}).items():
        n = int(v) - int(b.get(k, 0))
        if n > 0:
            key = reason_summary(k)
            got[key] = got.get(key, 0) + n
    return got


def compile_stats(before: Mapping[str, Any], first: Mapping[str, Any], after: Mapping[str, Any],
                  first_call_seconds: float) -> CompileStats:
    """Differences of three Dynamo snapshots: before building, after the first run, after
    the later runs. Pure, so tests feed it made-up snapshots."""
    frames = _count(after, "frames", "total") - _count(before, "frames", "total")
    frames_ok = _count(after, "frames", "ok") - _count(before, "frames", "ok")
    graphs = _count(after, "stats", "unique_graphs") - _count(before, "stats", "unique_graphs")
    later = _count(after, "stats", "unique_graphs") - _count(first, "stats", "unique_graphs")
    breaks = _delta_reasons(before, after, "graph_break")
    fallbacks = _delta_reasons(before, after, "unimplemented")
    metrics = _new_metrics(before, after)
    recompile_reasons = tuple(str(r) for r in (getattr(m, "recompile_reason", None) for m in metrics) if r)
    skip_reasons = tuple(dict.fromkeys(str(r) for r in (getattr(m, "cudagraph_skip_reason", None) for m in metrics)
                                       if r))
    top = lambda d: tuple(sorted(d.items(), key=lambda kv: -kv[1])[:5])  # noqa: E731
    return CompileStats(
        compiled=frames > 0 or graphs > 0,
        first_call_seconds=first_call_seconds,
        frames=max(frames, 0),
        frames_compiled=max(frames_ok, 0),
        graphs=max(graphs, 0),
        graphs_after_first_call=max(later, 0),
        graph_breaks=sum(breaks.values()),
        graph_break_reasons=top(breaks),
        fallbacks=sum(fallbacks.values()),
        fallback_reasons=top(fallbacks),
        recompiles=len(recompile_reasons),
        recompile_reasons=tuple(dict.fromkeys(reason_summary(r) for r in recompile_reasons))[:5],
        cudagraph_skips=max(_count(after, "inductor", "cudagraph_skips") - _count(before, "inductor", "cudagraph_skips"),
                            0),
        cudagraph_skip_reasons=skip_reasons[:5],
    )


# --- profiles ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileSummary:
    """One side's profiled runs, reduced to per-run and per-step figures.

    Times are microseconds per run (means over the runs); counts are per step.
    GPU-only figures are ``None`` on a CPU-only trace."""

    runs: int
    steps: int
    wall_us: Tuple[float, ...]
    shares: Tuple[float, ...]
    matched: Tuple[str, ...]
    ops_per_step: float
    scalar_reads_per_step: float
    kernels_per_step: Optional[float] = None
    launches_per_step: Optional[float] = None
    graph_launches_per_step: Optional[float] = None
    syncs_per_step: Optional[float] = None
    gpu_busy: Optional[float] = None
    op_self_us: Mapping[str, float] = field(default_factory=dict)
    op_counts: Mapping[str, float] = field(default_factory=dict)
    kernel_us: Mapping[str, float] = field(default_factory=dict)
    kernel_counts: Mapping[str, float] = field(default_factory=dict)

    @property
    def share(self) -> Optional[Interval]:
        if not self.shares or not self.matched:
            return None
        mean = sum(self.shares) / len(self.shares)
        return Interval(mean, min(self.shares), max(self.shares))


def _runtime_events(raw: Mapping[str, Any]) -> List[Tuple[str, float, float]]:
    from .trace import LAUNCH_CATEGORIES

    out = []
    for ev in raw.get("traceEvents", []) or []:
        if isinstance(ev, Mapping) and ev.get("ph") == "X" and ev.get("cat") in LAUNCH_CATEGORIES:
            out.append((str(ev.get("name", "")), float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))))
    return out


def _with_parents(ops: Sequence[Any]) -> Iterator[Tuple[Any, Optional[Any]]]:
    """Each op with the op directly around it on its thread (or None), parents before
    children: a stack sweep over each thread's ops sorted by start, longest first on ties."""
    by_tid: Dict[str, List[Any]] = {}
    for op in ops:
        by_tid.setdefault(str(op.tid), []).append(op)
    for tops in by_tid.values():
        tops.sort(key=lambda o: (o.ts_us, -o.dur_us))
        stack: List[Any] = []
        for op in tops:
            while stack and stack[-1].end_us <= op.ts_us:
                stack.pop()
            yield op, (stack[-1] if stack else None)
            stack.append(op)


def _self_times(ops: Sequence[Any]) -> Dict[int, float]:
    """Self time of each op: its duration less its direct children's."""
    self_us: Dict[int, float] = {}
    for op, parent in _with_parents(ops):
        self_us[id(op)] = op.dur_us
        if parent is not None:
            self_us[id(parent)] -= op.dur_us
    return self_us


def _outermost(ops: Sequence[Any], match: Callable[[str], bool]) -> Tuple[List[Any], Dict[int, bool]]:
    """Matching ops not nested in another matching op; and, for every op, whether it or
    an op around it matches."""
    under: Dict[int, bool] = {}
    outer: List[Any] = []
    for op, parent in _with_parents(ops):
        parent_in = under[id(parent)] if parent is not None else False
        me = match(op.name)
        if me and not parent_in:
            outer.append(op)
        under[id(op)] = parent_in or me
    return outer, under


def _union_us(intervals: Sequence[Tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def summarize_trace(raw: Mapping[str, Any], steps: int, replaced: Sequence[str] = ()) -> ProfileSummary:
    """Reduce a chrome trace of runs wrapped in :data:`RUN_LABEL` spans to a
    :class:`ProfileSummary`. Pure: tests feed it synthetic traces."""
    from .expectations import matches_kernel, matches_op
    from .trace import parse_chrome_trace

    tr = parse_chrome_trace(raw)
    spans = sorted((o for o in tr.ops if o.name.startswith(RUN_LABEL)), key=lambda o: o.ts_us)
    if not spans:
        raise ValueError(f"the trace holds no {RUN_LABEL!r} span")
    runtime = _runtime_events(raw)
    on_gpu = tr.on_gpu
    ops = [o for o in tr.ops if not o.name.startswith(RUN_LABEL)]
    self_us = _self_times(ops)

    def op_match(name: str) -> bool:
        return any(matches_op(p, name) for p in replaced)

    outer, under = _outermost(ops, op_match)
    n_runs = len(spans)
    walls, shares, matched = [], [], set()
    totals = {"ops": 0, "scalar": 0, "kernels": 0, "launch": 0, "graph": 0, "sync": 0}
    busy_sum = 0.0
    op_self: Dict[str, float] = {}
    op_n: Dict[str, float] = {}
    k_us: Dict[str, float] = {}
    k_n: Dict[str, float] = {}
    for i, span in enumerate(spans):
        t0, t1 = span.ts_us, span.end_us
        # Kernels of run i start before run i+1's span (the profiler loop drains the
        # device between runs), and may end after run i's span ends.
        nxt = spans[i + 1].ts_us if i + 1 < n_runs else math.inf
        r_ops = [o for o in ops if t0 <= o.ts_us < t1]
        r_kernels = [k for k in tr.kernels if t0 <= k.ts_us < nxt]
        end = max([t1] + [k.ts_us + k.dur_us for k in r_kernels])
        wall = end - t0
        walls.append(wall)
        totals["ops"] += len(r_ops)
        totals["scalar"] += sum(1 for o in r_ops if o.name in SCALAR_READ_OPS)
        for o in r_ops:
            op_self[o.name] = op_self.get(o.name, 0.0) + self_us.get(id(o), 0.0)
            op_n[o.name] = op_n.get(o.name, 0.0) + 1
        if on_gpu:
            totals["kernels"] += len(r_kernels)
            r_rt = [name for name, ts, _ in runtime if t0 <= ts < t1]
            totals["launch"] += sum(1 for n in r_rt if n in LAUNCH_CALLS)
            totals["graph"] += sum(1 for n in r_rt if n in GRAPH_LAUNCH_CALLS)
            totals["sync"] += sum(1 for n in r_rt if n in SYNC_CALLS)
            busy_sum += _union_us([(k.ts_us, k.ts_us + k.dur_us) for k in r_kernels]) / wall if wall > 0 else 0.0
            for k in r_kernels:
                short = k.short_name
                k_us[short] = k_us.get(short, 0.0) + k.dur_us
                k_n[short] = k_n.get(short, 0.0) + 1
        if replaced:
            if on_gpu and r_kernels:
                part = 0.0
                for k in r_kernels:
                    op = tr.op_of_kernel(k)
                    if any(matches_kernel(p, k.name) for p in replaced):
                        part += k.dur_us
                        matched.add(k.short_name)
                    elif op is not None and under.get(id(op), False):
                        part += k.dur_us
                        matched.add(op.name)
            else:
                mine = [o for o in outer if t0 <= o.ts_us < t1]
                part = sum(o.dur_us for o in mine)
                matched.update(o.name for o in mine)
            shares.append(min(part / wall, 1.0) if wall > 0 else 0.0)
    per_step = n_runs * steps
    return ProfileSummary(
        runs=n_runs,
        steps=steps,
        wall_us=tuple(walls),
        shares=tuple(shares) if matched else (),
        matched=tuple(sorted(matched)),
        ops_per_step=totals["ops"] / per_step,
        scalar_reads_per_step=totals["scalar"] / per_step,
        kernels_per_step=totals["kernels"] / per_step if on_gpu else None,
        launches_per_step=totals["launch"] / per_step if on_gpu else None,
        graph_launches_per_step=totals["graph"] / per_step if on_gpu else None,
        syncs_per_step=totals["sync"] / per_step if on_gpu else None,
        gpu_busy=busy_sum / n_runs if on_gpu else None,
        op_self_us={k: v / n_runs for k, v in op_self.items()},
        op_counts={k: v / per_step for k, v in op_n.items()},
        kernel_us={k: v / n_runs for k, v in k_us.items()},
        kernel_counts={k: v / per_step for k, v in k_n.items()},
    )


def record_runs(run: Callable[[], Any], runs: int, *, cuda: bool) -> Dict[str, Any]:
    """``runs`` runs under ``torch.profiler``, each in a :data:`RUN_LABEL` span; the raw
    chrome trace. The device is drained before the profiler starts and after each run,
    outside the spans, so the harness's own synchronisations are not counted."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for i in range(runs):
            with record_function(f"{RUN_LABEL}#{i}"):
                run()
            if cuda:
                torch.cuda.synchronize()
    from .trace import exported

    return exported(prof, cuda=cuda)


@dataclass(frozen=True)
class Growth:
    """An op (CPU self time) or kernel (GPU time) whose time per run grew."""

    kind: str
    name: str
    baseline_us: float
    candidate_us: float
    baseline_per_step: float
    candidate_per_step: float

    @property
    def grew_us(self) -> float:
        return self.candidate_us - self.baseline_us


def grown(base: ProfileSummary, cand: ProfileSummary, top: int = TOP_GROWN) -> Tuple[Growth, ...]:
    """The ops and kernels whose time per run grew most from baseline to candidate."""
    rows: List[Growth] = []
    for kind, b_us, c_us, b_n, c_n in (("op", base.op_self_us, cand.op_self_us, base.op_counts, cand.op_counts),
                                       ("kernel", base.kernel_us, cand.kernel_us, base.kernel_counts,
                                        cand.kernel_counts)):
        for name in set(b_us) | set(c_us):
            g = Growth(kind, name, b_us.get(name, 0.0), c_us.get(name, 0.0), b_n.get(name, 0.0), c_n.get(name, 0.0))
            if g.grew_us > 0:
                rows.append(g)
    rows.sort(key=lambda g: -g.grew_us)
    return tuple(rows[:top])


# --- GPU utilisation through NVML --------------------------------------------------


@dataclass(frozen=True)
class Utilisation:
    """NVML's GPU utilisation (percent) while one side ran alone; ``missing`` says why not."""

    mean: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    samples: int = 0
    runs: int = 0
    seconds: float = 0.0
    missing: Optional[str] = None


class NvmlUtilisation:
    """Samples ``nvmlDeviceGetUtilizationRates(handle).gpu`` on a background thread.

    The same seam as :class:`expkit.telemetry.NvmlTelemetry`: ``nvml`` is any object
    with ``nvmlInit``, ``nvmlShutdown``, ``nvmlDeviceGetHandleByIndex`` (or
    ``...ByUUID``), ``nvmlDeviceGetUtilizationRates`` and ``NVMLError``; tests pass a
    seeded fake. The counter is NVML's own running figure over its sample period, so
    reading it more often than every few tens of milliseconds only repeats values."""

    available = True

    def __init__(self, device_index: int = 0, *, nvml: Any = None, uuid: Optional[str] = None,
                 period_s: float = 0.05, clock: Callable[[], float] = time.perf_counter) -> None:
        self._nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        self._nvml.nvmlInit()
        try:
            self._handle = (self._nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None
                            else self._nvml.nvmlDeviceGetHandleByIndex(device_index))
        except self._nvml.NVMLError:
            self._nvml.nvmlShutdown()
            raise
        self.period_s = period_s
        self._clock = clock
        self._rows: List[Tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def read(self) -> float:
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except self._nvml.NVMLError:
            return math.nan

    def _loop(self) -> None:
        self._rows.append((self._clock(), self.read()))
        while not self._stop.wait(self.period_s):
            self._rows.append((self._clock(), self.read()))

    def start(self) -> None:
        self._rows = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="expkit-nvml-utilisation", daemon=True)
        self._thread.start()

    def stop(self) -> Tuple[Tuple[float, float], ...]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._rows.append((self._clock(), self.read()))
        return tuple(self._rows)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_utilisation(device_index: int = 0, *, nvml: Any = None, uuid: Optional[str] = None,
                     period_s: float = 0.05) -> "NvmlUtilisation | str":
    """An :class:`NvmlUtilisation`, or the reason there is none (a sentence)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return "NVML not available: the nvidia-ml-py package (module pynvml) is not installed"
    try:
        return NvmlUtilisation(device_index, nvml=nvml, uuid=uuid, period_s=period_s)
    except Exception as e:  # NVMLError subclasses: no driver, not loaded, no permission
        return f"NVML not available: {e or type(e).__name__}"


def observe_utilisation(run: Callable[[], Any], seconds: float, sampler: "NvmlUtilisation | str", *,
                        sync: Optional[Callable[[], None]] = None,
                        clock: Callable[[], float] = time.perf_counter) -> Utilisation:
    """Run ``run`` back to back for about ``seconds`` while ``sampler`` reads NVML."""
    if isinstance(sampler, str):
        return Utilisation(missing=sampler)
    if seconds <= 0:
        return Utilisation(missing="not sampled (end_to_end.utilisation_seconds is 0)")
    if sync is not None:
        sync()
    sampler.start()
    t0, n = clock(), 0
    try:
        while clock() - t0 < seconds or n == 0:
            run()
            n += 1
        if sync is not None:
            sync()
    finally:
        rows = sampler.stop()
    values = [v for _, v in rows if not math.isnan(v)]
    if not values:
        return Utilisation(runs=n, seconds=clock() - t0, missing="NVML returned no utilisation reading")
    return Utilisation(sum(values) / len(values), min(values), max(values), len(values), n, clock() - t0)


# --- the whole comparison ----------------------------------------------------------
#
# Two halves, because the code under test may run in a worker process (channel.py):
# :func:`collect` runs beside the code (builds, checks, profiles, observes and times
# the workloads) and returns plain JSON-able data; :func:`judge` runs where the
# verdict is made and turns the raw samples into an estimate, a prediction and a
# comparison. Like the kernel's, the workload's statistics are the parent's own.


@dataclass(frozen=True)
class SideEvidence:
    """What one side's workload did, beyond its time."""

    steps: int
    step: str
    profile: Optional[ProfileSummary]
    compile: CompileStats
    utilisation: Utilisation

    def to_dict(self) -> Dict[str, Any]:
        prof = None
        if self.profile is not None:
            p = self.profile
            prof = {k: getattr(p, k) for k in ("runs", "steps", "ops_per_step", "scalar_reads_per_step",
                                                 "kernels_per_step", "launches_per_step", "graph_launches_per_step",
                                                 "syncs_per_step", "gpu_busy")}
            prof.update(wall_us=list(p.wall_us), shares=list(p.shares), matched=list(p.matched))
        comp = asdict(self.compile)
        comp["graph_break_reasons"] = [list(r) for r in self.compile.graph_break_reasons]
        comp["fallback_reasons"] = [list(r) for r in self.compile.fallback_reasons]
        comp["recompile_reasons"] = list(self.compile.recompile_reasons)
        comp["cudagraph_skip_reasons"] = list(self.compile.cudagraph_skip_reasons)
        return {"steps": self.steps, "step": self.step, "profile": prof, "compile": comp,
                "utilisation": asdict(self.utilisation)}


def _finding_dict(f: Finding) -> Dict[str, Any]:
    return asdict(f)


def _finding(d: Mapping[str, Any]) -> Finding:
    names = Finding.__dataclass_fields__
    return Finding(**{k: v for k, v in d.items() if k in names})


def _sync(device: str) -> Optional[Callable[[], None]]:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def _build(builder: Callable[..., Any], op: Callable[..., Any], side: str, params: Mapping[str, Any], seed: int,
           device: str, lm: Any) -> Workload:
    from .errors import ManifestError
    from .preflight import make_generator

    try:
        return as_workload(builder(op, side, dict(params), make_generator(seed, device), device))
    except Exception as e:
        e2e = lm.manifest.end_to_end
        raise ManifestError(lm.path, "end_to_end.workload", f"{e2e.workload} raised {type(e).__name__}: {e} "
                            f"while building the {side} workload",
                            "make the builder accept (op, side, params, generator, device) and return a "
                            "Workload or a callable") from None


def _stopped(findings: Sequence[Finding], why: str, evidence: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    return {"skipped": why, "findings": [_finding_dict(f) for f in findings], "evidence": dict(evidence or {})}


def collect(
    lm: Any,
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    *,
    device: str,
    settings: Any,
    run_seed: int,
    nvml: Any = None,
    progress: Any = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, Any]:
    """Build, check, profile, observe and time both sides' workloads; plain data back.

    In order, each step only if the one before passed: build both sides from one seed
    and run each twice (the first run's time, compilation included, and the compiler's
    counters are kept); hold the second runs' outputs against each other with the
    workload's oracles (a disagreement invalidates the run: a fast wrong workload is no
    speedup); profile ``profile_runs`` runs of each; sample NVML utilisation while each
    runs alone (GPU); check that the candidate workload ran the candidate
    (``expect.must_run``); then time both, interleaved, with the micro-benchmark's
    measurement loop and settings (:func:`expkit.measure.measure_case`)."""
    import random

    from . import measure, oracles
    from .preflight import derive_seed
    from .refs import resolve

    m = lm.manifest
    e2e = m.end_to_end
    builder = resolve(e2e.workload, lm.folder, manifest_path=lm.path, key="end_to_end.workload")
    custom = {i: resolve(o.function, lm.folder, manifest_path=lm.path, key=f"end_to_end.oracles[{i}].function")
              for i, o in enumerate(e2e.oracles) if o.function}
    seed = derive_seed(run_seed, "end_to_end", e2e.name)
    sync = _sync(device)
    cuda = device == "cuda"
    where = f"workload {e2e.name}"
    findings: List[Finding] = []

    sides: Dict[str, Dict[str, Any]] = {}
    for side, op in (("baseline", baseline), ("candidate", candidate)):
        before = _dynamo_snapshot()
        wl = _build(builder, op, side, e2e.params, seed, device, lm)
        try:
            t0 = clock()
            wl.run()
            if sync:
                sync()
            first_s = clock() - t0
            first = _dynamo_snapshot()
            out = wl.run()  # the steady state, which the timing sees
            if sync:
                sync()
        except Exception as e:
            check = "end_to_end:crash" if side == "candidate" else "end_to_end:baseline"
            findings.append(Finding(check, False, f"the {side} workload raised {type(e).__name__}: {e}", where))
            return _stopped(findings, f"the {side} workload failed")
        # Each side's compiler counters close, and its profile is taken, before the other
        # side is built: the counters are process-wide, and the other side's build may
        # change how this one runs (see isolation_findings).
        comp = compile_stats(before, first, _dynamo_snapshot(), first_s)
        prof = summarize_trace(record_runs(wl.run, e2e.profile_runs, cuda=cuda), wl.steps,
                               e2e.replaced if side == "baseline" else ())
        sides[side] = {"wl": wl, "out": out, "compile": comp, "profile": prof}
    settled = _dynamo_snapshot()
    again = summarize_trace(record_runs(sides["baseline"]["wl"].run, 1, cuda=cuda), sides["baseline"]["wl"].steps)
    findings += isolation_findings(sides["baseline"]["profile"], again, where)

    for i, spec in enumerate(e2e.oracles):
        if spec.kind not in ("allclose", "relative_error", "exact", "custom"):
            findings.append(Finding(f"end_to_end:oracle:{spec.kind}", False, "only per-output oracles (allclose, "
                                    "relative_error, exact, custom) apply to a workload's outputs", where))
            continue
        try:
            f = oracles.check_outputs(spec, sides["baseline"]["out"], sides["candidate"]["out"], case=where,
                                      custom=custom.get(i))
        except (TypeError, ValueError) as e:
            f = Finding(f"oracle:{spec.kind}", False, f"cannot compare the outputs: {e}", where)
        # No float64 reference of a whole workload exists: the baseline's outputs are the reference.
        message = f.message.replace("against a float64 reference", "against the baseline workload's outputs")
        findings.append(Finding(f"end_to_end:{f.check}", f.ok, f"final outputs: {message}", where,
                                figure=f.figure, threshold=f.threshold))
    if any(f.invalidates for f in findings):
        return _stopped(findings, "the two workloads' final outputs disagree")

    evidence: Dict[str, SideEvidence] = {}
    sampler: Any = "not available: CPU run (NVML reads GPUs only)"
    if cuda:
        # By UUID first (NVML and CUDA may number GPUs differently), then by index.
        uuid = _cuda_uuid()
        sampler = open_utilisation(_cuda_index(), nvml=nvml, uuid=uuid)
        if isinstance(sampler, str) and uuid is not None:
            sampler = open_utilisation(_cuda_index(), nvml=nvml)
    try:
        for side in ("baseline", "candidate"):
            s = sides[side]
            wl = s["wl"]
            prof = s["profile"]
            util = (observe_utilisation(wl.run, e2e.utilisation_seconds, sampler, sync=sync, clock=clock) if cuda
                    else Utilisation(missing=str(sampler)))
            evidence[side] = SideEvidence(wl.steps, wl.step, prof, s["compile"], util)
    finally:
        if not isinstance(sampler, str):
            sampler.close()
    ev = {side: e.to_dict() for side, e in evidence.items()}
    ev["grown"] = [{**asdict(g), "grew_us": g.grew_us}
                   for g in grown(evidence["baseline"].profile, evidence["candidate"].profile)]
    findings += identity_findings(e2e.replaced, m.expect.must_run, evidence["baseline"].profile,
                                  evidence["candidate"].profile, where)
    if any(f.invalidates for f in findings):
        why = ("the candidate workload never ran the candidate kernel"
               if any(f.check == "end_to_end:identity" and f.invalidates for f in findings)
               else "building the candidate changed how the baseline workload runs")
        return _stopped(findings, why, ev)

    timer = WallTimer(sync, clock)
    cs = measure.measure_case(f"end_to_end:{e2e.name}", sides["baseline"]["wl"].run, sides["candidate"]["wl"].run,
                              timer, settings.measure, rng=random.Random(seed), clock=clock, progress=progress)
    share = evidence["baseline"].profile.share if evidence["baseline"].profile is not None else None
    # Compilation while profiling and timing (either side): a workload that keeps compiling.
    late = compile_stats(settled, settled, _dynamo_snapshot(), 0.0)
    ev["late_compilation"] = {"graphs": late.graphs, "recompiles": late.recompiles,
                              "recompile_reasons": list(late.recompile_reasons)}
    return {
        "skipped": None,
        "findings": [_finding_dict(f) for f in findings],
        "samples": {"baseline": cs.times("baseline"), "candidate": cs.times("candidate")},
        "stopped": cs.stopped,
        "budget_spent": cs.budget_spent,
        "timed_seconds": cs.timed_seconds,
        "method": timer.method,
        "share": None if share is None else {"value": share.value, "low": share.low, "high": share.high},
        "evidence": ev,
    }


@dataclass(frozen=True)
class EndToEndResult:
    """Everything the report says about the workload; ``skipped`` says why it was not measured."""

    name: str
    case: Optional[str]
    skipped: Optional[str] = None
    estimate: Any = None
    method: str = ""
    stopped: str = ""
    samples: Mapping[str, Tuple[float, ...]] = field(default_factory=dict)
    prediction: Optional[Prediction] = None
    agreement: Optional[Agreement] = None
    judged: Any = None
    claim: Optional[float] = None
    tolerance: Optional[float] = None
    findings: Tuple[Finding, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def refutes(self) -> bool:
        return self.judged is not None and self.judged.verdict == "refuted"

    def to_dict(self) -> Dict[str, Any]:
        """The ``end_to_end`` block of result.json (see the README's result.json notes)."""

        def iv(i: Optional[Interval]) -> Optional[Dict[str, float]]:
            return None if i is None else {"value": i.value, "low": i.low, "high": i.high}

        est = self.estimate
        measured = None
        if est is not None:
            measured = {"speedup": est.speedup, "ci_low": est.ci_low, "ci_high": est.ci_high,
                        "confidence": est.confidence, "baseline": asdict(est.baseline),
                        "candidate": asdict(est.candidate), "warnings": list(est.warnings),
                        "method": self.method, "stopped": self.stopped}
        pred = None
        if self.prediction is not None:
            pr = self.prediction
            pred = {"speedup": iv(pr.speedup), "share": iv(pr.share), "share_source": pr.share_source,
                    "micro": iv(pr.micro), "formula": "1 / ((1 - f) + f / s)"}
        ev = dict(self.evidence)
        return {
            "name": self.name,
            "case": self.case,
            "skipped": self.skipped,
            "claim": self.claim,
            "tolerance": self.tolerance,
            "measured": measured,
            "samples": {k: list(v) for k, v in self.samples.items()},
            "prediction": pred,
            "agreement": None if self.agreement is None else {"label": self.agreement.label,
                                                              "short": self.agreement.short,
                                                              "detail": self.agreement.detail},
            "judged": None if self.judged is None else {"verdict": self.judged.verdict,
                                                        "threshold": self.judged.threshold,
                                                        "reason": self.judged.reason},
            "refutes": self.refutes,
            "baseline": ev.get("baseline"),
            "candidate": ev.get("candidate"),
            "grown": ev.get("grown", []),
            "late_compilation": ev.get("late_compilation"),
        }


def judge(lm: Any, collected: Optional[Mapping[str, Any]], estimates: Mapping[str, Any], settings: Any, *,
          seed: int = 0, skip: Optional[str] = None) -> EndToEndResult:
    """The workload's estimate, the micro result's prediction, their comparison and, where
    the claim names the workload, its judgement (see the module docstring).

    ``collected`` is what :func:`collect` returned; ``skip`` (a reason) records the block
    without it, e.g. when the run was invalid before the workload was reached."""
    from . import stats
    from .verdict import judge_case

    m = lm.manifest
    e2e = m.end_to_end
    case = e2e.case or (m.cases[0].name if m.cases else None)
    tolerance = e2e.tolerance if e2e.tolerance is not None else m.claim.tolerance
    base = dict(name=e2e.name, case=case, claim=e2e.claim, tolerance=tolerance)
    if skip is not None or collected is None:
        return EndToEndResult(**base, skipped=skip or "not run")
    findings = [_finding(f) for f in collected.get("findings", ())]
    evidence = collected.get("evidence") or {}
    if collected.get("skipped"):
        return EndToEndResult(**base, skipped=collected["skipped"], findings=tuple(findings), evidence=evidence)
    b, c = list(collected["samples"]["baseline"]), list(collected["samples"]["candidate"])
    est = stats.estimate(b, c, confidence=settings.measure.confidence, resamples=settings.measure.bootstrap,
                         seed=seed % (2**32))
    measured = Interval(est.speedup, est.ci_low, est.ci_high)
    where = f"workload {e2e.name}"
    prediction = agreement = None
    micro = estimates.get(case) if case is not None else None
    if micro is not None:
        sh = collected.get("share")
        share = Interval(sh["value"], sh["low"], sh["high"]) if sh else None
        prediction = predict(Interval(micro.speedup, micro.ci_low, micro.ci_high), share)
        agreement = compare(prediction, measured)
        if agreement.short:
            findings.append(Finding("end_to_end:prediction", False, f"{agreement.label}: {agreement.detail}", where,
                                    severity=WARNING, figure=est.speedup, threshold=prediction.speedup.low))
    judged = None
    if e2e.claim is not None:
        judged = judge_case(e2e.name, est, e2e.claim, tolerance, bool(collected.get("budget_spent")))
    return EndToEndResult(**base, estimate=est, method=collected.get("method", ""),
                          stopped=collected.get("stopped", ""), samples={"baseline": tuple(b), "candidate": tuple(c)},
                          prediction=prediction, agreement=agreement, judged=judged, findings=tuple(findings),
                          evidence=evidence)


def run_end_to_end(lm: Any, baseline: Callable[..., Any], candidate: Callable[..., Any], *, device: str,
                   settings: Any, run_seed: int, estimates: Mapping[str, Any], nvml: Any = None,
                   progress: Any = None) -> EndToEndResult:
    """Both halves in this process (tests, and the in-process bench)."""
    got = collect(lm, baseline, candidate, device=device, settings=settings, run_seed=run_seed, nvml=nvml,
                  progress=progress)
    return judge(lm, got, estimates, settings, seed=run_seed)


def apply(verdict: Any, result: EndToEndResult) -> Any:
    """The run's verdict once the workload is held against a claim that names it.

    Invalid stays invalid. Otherwise the worse of the kernel's verdict and the
    workload's (refuted > inconclusive > supported), the workload's reason first where
    it decided or shares the outcome. Without a claim on the workload: unchanged."""
    from .verdict import INCONCLUSIVE, INVALID, REFUTED, SUPPORTED, Verdict

    if verdict.verdict == INVALID or result.judged is None:
        return verdict
    words = (verdict.verdict, result.judged.verdict)
    overall = REFUTED if REFUTED in words else INCONCLUSIVE if INCONCLUSIVE in words else SUPPORTED
    label = f" ({result.agreement.label})" if result.agreement is not None and result.agreement.short else ""
    mine = f"end_to_end [workload {result.name}]{label}: {result.judged.reason}"
    if result.judged.verdict == overall:
        reasons = (mine,) + tuple(verdict.reasons)
    else:
        reasons = tuple(verdict.reasons) + (mine,)
    return Verdict(overall, reasons, verdict.cases)


def identity_findings(replaced: Sequence[str], must_run: Sequence[str], base: Optional[ProfileSummary],
                      cand: Optional[ProfileSummary], where: str) -> List[Finding]:
    """The baseline workload ran the op it replaces; the candidate workload ran the candidate.

    The candidate side is held against the manifest's ``expect.must_run`` patterns (ops
    or kernels, matched as in the micro preflight): a workload that never runs the
    candidate kernel says nothing about it, so that failure invalidates the run. A
    ``replaced`` pattern that matches nothing in the baseline only costs the prediction
    its measured share (a warning)."""
    from .expectations import matches_kernel, matches_op

    out: List[Finding] = []
    if replaced and base is not None and not base.matched:
        out.append(Finding("end_to_end:replaced", False,
                           f"no op or kernel of the baseline workload matches {list(replaced)}; the prediction "
                           "assumes any share from 0 to 1", where, severity=WARNING))
    if must_run and cand is not None:
        missing = [p for p in must_run
                   if not any(matches_op(p, n) for n in cand.op_counts)
                   and not any(matches_kernel(p, n) for n in cand.kernel_counts)]
        if missing:
            ran = sorted(list(cand.op_counts) + list(cand.kernel_counts))
            out.append(Finding("end_to_end:identity", False,
                               f"the candidate workload never ran {missing} (expect.must_run); it ran "
                               f"{', '.join(ran[:8]) or 'nothing'}" + (" ..." if len(ran) > 8 else ""), where))
        else:
            out.append(Finding("end_to_end:identity", True, f"the candidate workload ran {list(must_run)}", where))
    return out


#: Relative change of the baseline's dispatcher ops per step that counts as "runs differently".
ISOLATION_OPS_TOLERANCE = 0.05
_REGION = "Torch-Compiled Region"


def isolation_findings(before: ProfileSummary, after: ProfileSummary, where: str) -> List[Finding]:
    """Does the baseline workload still run as it did before the candidate was built?

    Both sides live in one process, and ``torch._dynamo`` keeps its compiled code, and
    its decision to give up on a frame, per Python code object. Where the two sides
    share code (one model class, the op swapped in), a frame the candidate makes Dynamo
    give up on runs eagerly from then on for the baseline too, and the comparison would
    time a baseline nobody ships. The baseline is profiled once more after the
    candidate is built; its compiled regions and its dispatcher ops per step must be
    what they were. A change invalidates the run, with the way out in the message."""
    regions = lambda p: sorted(n for n in p.op_counts if n.startswith(_REGION))  # noqa: E731
    rb, ra = regions(before), regions(after)
    ops_b, ops_a = before.ops_per_step, after.ops_per_step
    moved = abs(ops_a - ops_b) > ISOLATION_OPS_TOLERANCE * max(ops_b, 1.0)
    if rb == ra and not moved:
        return [Finding("end_to_end:isolation", True, "the baseline workload runs as before once the candidate "
                        f"is built ({_num(ops_b)} dispatcher ops per step, {len(rb)} compiled regions)", where)]
    return [Finding("end_to_end:isolation", False,
                    f"building the candidate changed how the baseline workload runs: compiled regions "
                    f"{rb or 'none'} before, {ra or 'none'} after; dispatcher ops per step {_num(ops_b)} before, "
                    f"{_num(ops_a)} after. Both sides share code that torch.compile compiles (or gives up on) once "
                    "per process: build each side from its own copy of the model code", where)]


def _cuda_index() -> int:
    import torch

    return torch.cuda.current_device()


def _cuda_uuid() -> Optional[str]:
    """The current CUDA device's NVML UUID: NVML and CUDA may number GPUs differently."""
    try:
        import torch

        uuid = torch.cuda.get_device_properties(torch.cuda.current_device()).uuid
        return f"GPU-{uuid}"
    except Exception:
        return None


# --- the report's "End to end" section ---------------------------------------------


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _num(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _us(x: Optional[float]) -> str:
    from .wording import fmt_time

    return "n/a" if x is None else fmt_time(x * 1e-6)


def what_changed(base: Mapping[str, Any], cand: Mapping[str, Any], grown_rows: Sequence[Mapping[str, Any]]
                 ) -> List[str]:
    """The evidence worth reading first, in words: each figure that moved enough to
    explain a slower workload. The thresholds only pick what to mention; every figure is
    in the table beside them."""
    out: List[str] = []
    bp, cp = base.get("profile") or {}, cand.get("profile") or {}
    bc, cc = base.get("compile") or {}, cand.get("compile") or {}
    step = base.get("step", "step")
    if cc.get("graph_breaks", 0) > bc.get("graph_breaks", 0):
        out.append(f"graph breaks {bc.get('graph_breaks', 0)} → {cc['graph_breaks']}: the compiled workload "
                   "is cut into pieces, with Python between them")
    if cc.get("fallbacks", 0) > bc.get("fallbacks", 0):
        why = (cc.get("fallback_reasons") or [["", 0]])[0][0]
        out.append(f"frames that fell back to eager {bc.get('fallbacks', 0)} → {cc['fallbacks']}"
                   + (f" ({why})" if why else ""))
    if cc.get("recompiles", 0) > bc.get("recompiles", 0) or \
            cc.get("graphs_after_first_call", 0) > bc.get("graphs_after_first_call", 0):
        out.append(f"graphs compiled after the first run {bc.get('graphs_after_first_call', 0)} → "
                   f"{cc.get('graphs_after_first_call', 0)}, recompilations {bc.get('recompiles', 0)} → "
                   f"{cc.get('recompiles', 0)}")
    bg, cg = bp.get("graph_launches_per_step"), cp.get("graph_launches_per_step")
    if bg and cg is not None and cg < bg:
        out.append(f"CUDA-graph launches per {step} {_num(bg)} → {_num(cg)}"
                   + (": the candidate's steps are not captured" if not cg else ""))
    for key, label in (("syncs_per_step", "host-device synchronisations"),
                       ("scalar_reads_per_step", "scalar reads to the host")):
        b, c = bp.get(key), cp.get(key)
        if b is not None and c is not None and c > b + 0.5:
            on_gpu = bp.get("syncs_per_step") is not None
            out.append(f"{label} per {step} {_num(b)} → {_num(c)}"
                       + (": the host waits for the device" if on_gpu else " (on a GPU, each one a synchronisation)"))
    for key, label in (("launches_per_step", "kernel launch calls"), ("ops_per_step", "dispatcher ops")):
        b, c = bp.get(key), cp.get(key)
        if b and c is not None and c > 1.2 * b:
            out.append(f"{label} per {step} {_num(b)} → {_num(c)}")
    bu, cu = (base.get("utilisation") or {}).get("mean"), (cand.get("utilisation") or {}).get("mean")
    if bu is not None and cu is not None and cu < bu - 10:
        out.append(f"GPU utilisation (NVML) {bu:.0f}% → {cu:.0f}%: the GPU waits for the host")
    bb, cb = bp.get("gpu_busy"), cp.get("gpu_busy")
    if bb is not None and cb is not None and cb < bb - 0.1:
        out.append(f"GPU busy {bb:.0%} → {cb:.0%} of the wall time (profile)")
    if grown_rows:
        g = grown_rows[0]
        out.append(f"most added time: {g['kind']} `{g['name']}`, +{_us(g['grew_us'])} per run "
                   f"({_num(g['baseline_per_step'])} → {_num(g['candidate_per_step'])} calls per {step})")
    return out


def report_context(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The section's figures and words, from ``result.json``'s ``end_to_end`` block alone
    (``report.md`` is re-rendered from stored files). None where the run had no workload."""
    from .report import cell
    from .wording import fmt_time, fmt_x, speed_phrase

    e = result.get("end_to_end")
    if not e:
        return None
    conf = (e.get("measured") or {}).get("confidence", (result.get("measured") or {}).get("confidence", 0.95))
    ctx: Dict[str, Any] = {"name": cell(e["name"]), "skipped": cell(e["skipped"]) if e.get("skipped") else None,
                           "confidence": f"{conf:.0%}", "rows": [], "why": [], "grown": [], "notes": [],
                           "label": None, "lead": "", "changed": [], "step": "step"}

    def iv(d: Optional[Mapping[str, float]], fmt: Callable[[float], str] = fmt_x) -> str:
        if not d:
            return "n/a"
        return f"{fmt(d['value'])} [{fmt(d['low'])}, {fmt(d['high'])}]"

    pred, meas, agree = e.get("prediction"), e.get("measured"), e.get("agreement")
    if meas:
        ctx["lead"] = (f"The workload `{cell(e['name'])}` with the candidate in it runs "
                       f"{speed_phrase(meas['speedup'], meas['ci_low'], meas['ci_high'], conf)}.")
    if pred:
        ctx["rows"].append((f"Kernel alone (case `{cell(e.get('case'))}`)", iv(pred["micro"])))
        share_text = iv(pred["share"], lambda v: f"{v:.0%}")
        if pred["share_source"] == "unknown":
            share_text += " (no pattern in `end_to_end.replaced` matched: any share assumed)"
        ctx["rows"].append(("Share of the baseline workload's time in the replaced op (profile)", share_text))
        ctx["rows"].append(("Workload, predicted by Amdahl's law, 1 / ((1 - f) + f / s)", iv(pred["speedup"])))
    if meas:
        ctx["rows"].append(("Workload, measured", f"{fmt_x(meas['speedup'])} [{fmt_x(meas['ci_low'])}, "
                                                  f"{fmt_x(meas['ci_high'])}]"))
    if e.get("claim") is not None:
        judged = e.get("judged") or {}
        ctx["rows"].append(("Claim on the workload", f"{fmt_x(e['claim'])} ± {e.get('tolerance') or 0:.0%}, bar "
                                                      f"{fmt_x(judged.get('threshold'))}: "
                                                      f"{judged.get('verdict', 'not judged')}"))
    if agree:
        ctx["label"] = agree["label"]
        ctx["detail"] = cell(agree["detail"])
    b, c = e.get("baseline") or {}, e.get("candidate") or {}
    if b and c:
        step = b.get("step", "step")
        bp, cp = b.get("profile") or {}, c.get("profile") or {}
        why: List[Tuple[str, str, str]] = []
        if meas:
            why.append(("Time per run (median, timed)", fmt_time(meas["baseline"]["median"]),
                        fmt_time(meas["candidate"]["median"])))
        if bp and cp:
            rows = [("Dispatcher ops", "ops_per_step"), ("Kernels executed", "kernels_per_step"),
                    ("Kernel launch calls", "launches_per_step"), ("CUDA-graph launches", "graph_launches_per_step"),
                    ("Host-device synchronisations", "syncs_per_step"),
                    ("Scalar reads to the host (`.item()`, `int(t)`)", "scalar_reads_per_step")]
            for label, key in rows:
                if bp.get(key) is None and cp.get(key) is None:
                    continue
                why.append((f"{label} per {step}", _num(bp.get(key)), _num(cp.get(key))))
            if bp.get("gpu_busy") is not None or cp.get("gpu_busy") is not None:
                why.append(("GPU busy (union of kernel times over wall time, profile)", _pct(bp.get("gpu_busy")),
                            _pct(cp.get("gpu_busy"))))
        bu, cu = b.get("utilisation") or {}, c.get("utilisation") or {}
        if bu.get("mean") is not None or cu.get("mean") is not None:
            fmt_u = lambda u: (f"{u['mean']:.0f}% (min {u['low']:.0f}%, {u['samples']} samples)"  # noqa: E731
                               if u.get("mean") is not None else f"n/a ({u.get('missing')})")
            why.append(("GPU utilisation (NVML)", fmt_u(bu), fmt_u(cu)))
        else:
            ctx["notes"].append(f"GPU utilisation: {bu.get('missing') or cu.get('missing') or 'not sampled'}.")
        bc, cc = b.get("compile") or {}, c.get("compile") or {}
        if bc.get("compiled") or cc.get("compiled"):
            why.append(("Frames compiled, of those Dynamo saw", f"{bc.get('frames_compiled', 0)} of {bc.get('frames', 0)}",
                        f"{cc.get('frames_compiled', 0)} of {cc.get('frames', 0)}"))
            for label, key in (("Graph breaks", "graph_breaks"),
                               ("Frames that fell back to eager", "fallbacks"), ("Graphs compiled", "graphs"),
                               ("Graphs compiled after the first run", "graphs_after_first_call"),
                               ("Recompilations", "recompiles"), ("CUDA-graph skips", "cudagraph_skips")):
                why.append((label, str(bc.get(key, 0)), str(cc.get(key, 0))))
            for side, comp in (("candidate", cc), ("baseline", bc)):
                for reason, n in comp.get("graph_break_reasons", [])[:3]:
                    ctx["notes"].append(f"{side}: graph break ({n}x): {cell(reason)}")
                for reason, n in comp.get("fallback_reasons", [])[:3]:
                    ctx["notes"].append(f"{side}: frame not compiled ({n}x): {cell(reason)}")
                for reason in comp.get("recompile_reasons", [])[:2]:
                    ctx["notes"].append(f"{side}: recompiled because {cell(reason)}"
                                        + (" (both sides run in one process: the candidate's first compilation "
                                           "of code the baseline compiled first counts as a recompilation)"
                                           if side == "candidate" else ""))
                for reason in comp.get("cudagraph_skip_reasons", [])[:2]:
                    ctx["notes"].append(f"{side}: CUDA graphs skipped: {cell(reason)}")
            late = (e.get("late_compilation") or {})
            if late.get("graphs") or late.get("recompiles"):
                ctx["notes"].append(f"While profiling and timing, {late.get('graphs', 0)} more graphs were compiled "
                                    f"and {late.get('recompiles', 0)} recompilations happened: some of the timed "
                                    "runs paid for compilation.")
        else:
            ctx["notes"].append("Neither workload was compiled (torch._dynamo compiled no frame).")
        why.append(("First run, compilation included", fmt_time(bc.get("first_call_seconds")),
                    fmt_time(cc.get("first_call_seconds"))))
        ctx["why"] = [(cell(a), cell(x), cell(y)) for a, x, y in why]
        ctx["changed"] = [cell(x) for x in what_changed(b, c, e.get("grown") or [])]
        ctx["step"] = step
        for g in e.get("grown") or []:
            ctx["grown"].append((g["kind"], f"`{cell(g['name'])}`", _us(g["baseline_us"]), _us(g["candidate_us"]),
                                 _us(g["grew_us"]), f"{_num(g['baseline_per_step'])} → {_num(g['candidate_per_step'])}"))
        if bp.get("matched"):
            ctx["notes"].append("The replaced op, as found in the baseline's profile: "
                                + ", ".join(f"`{cell(n)}`" for n in bp["matched"][:6]) + ".")
    if meas:
        for w in meas.get("warnings", []):
            ctx["notes"].append(f"workload timing: {cell(w)}")
        ctx["notes"].append(f"Workload timing: {cell(meas.get('method', ''))}; sampling stopped: "
                            f"{cell(meas.get('stopped', ''))}.")
    return ctx
