"""Compiler evidence: what ``torch._dynamo`` did while one side of a workload was built and run.

Graph breaks and frames Dynamo gave up on (with its reasons), graphs compiled,
recompilations (from Dynamo's compilation metrics), CUDA-graph skips and the first
call's time, compilation included: differences of Dynamo's process-wide counters
taken before building a side, after its first run and after the later runs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple


def dynamo_snapshot() -> Dict[str, Any]:
    """Dynamo's counters and compilation metrics now; empty if dynamo was never imported
    (nothing was compiled, and importing it here would cost seconds)."""
    if "torch._dynamo.utils" not in sys.modules:
        return {}
    try:
        # lazy: only where a compile has already imported it (the check above); never imported for this
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
