"""Profiles of a workload: its runs under ``torch.profiler``, reduced to per-run and per-step figures.

For each side, from the same profiled runs: kernels executed and launch calls per
step, CUDA-graph launches per step, host-device synchronisations per step (calls to
the runtime's synchronise functions and blocking copies), scalar reads to the host
(``aten::_local_scalar_dense``: ``.item()``, ``int(t)``), dispatcher ops per step (the
evidence that remains on a CPU), the fraction of the wall time the GPU was busy
(union of kernel intervals), the share of the baseline's time spent in the replaced
op (the prediction's ``f``), and the operators and kernels whose time grew most.

Profiling slows every op by a roughly constant amount, so shares of a profiled run
overweight workloads made of many small ops; the share is a ratio of two profiled
times, which cancels part of it. The end-to-end timing itself is never profiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..checks.expectations import matches_kernel, matches_op
from ..checks.recording import exported
from ..checks.trace import LAUNCH_CATEGORIES, parse_chrome_trace
from .prediction import Interval

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
    # lazy: torch.profiler's import is slow (bench/sides/preload.py); only a recorded call needs it
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
