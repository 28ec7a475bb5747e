"""One side's workload: what a builder returns, how it is timed, what it did.

:class:`Workload` is what a manifest's ``end_to_end.workload`` builder returns;
:func:`build_side` builds one side's (with that side's op where the kernel goes);
:class:`WallTimer` times whole runs; :class:`SideEvidence` is what one side's workload
did beyond its time. Each side's workload runs in that side's worker process; the
parent's half of the comparison, which asks each side for these and judges, is
:func:`expkit.bench.sides.workload_pair.collect_pair`, and :func:`.assess.judge` turns its raw
samples into the estimate, the prediction and the verdict.

Checks before any timing: both workloads' final outputs agree (the manifest's
``end_to_end.oracles``), the candidate workload ran the candidate
(``expect.must_run``, :func:`identity_findings`), and, where both sides share a
process (the in-process harness only), the baseline still runs as it did once the
candidate is built (:func:`isolation_findings`). Each failure invalidates the run.

Approximation, stated once: the workload's timing is taken in each side's worker on
the harness's clock, block by block, without the envelope check that guards the
kernel's blocks. The estimate, prediction and verdict are the parent's, from the raw
samples.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch

from ..core.findings import WARNING, Finding
from ..verdict.wording import fmt_num
from .compile import CompileStats
from .profile import ProfileSummary
from .utilisation import Utilisation
from ..checks.expectations import matches_kernel, matches_op
from ..checks.preflight import make_generator
from ..core.errors import ManifestError
from ..manifest.refs import resolve

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


def sync_for(device: str) -> Optional[Callable[[], None]]:
    """The device drain a workload's timer and first run need (None on the CPU)."""
    if device != "cuda":
        return None

    return torch.cuda.synchronize


def build_side(lm: Any, op: Callable[..., Any], side: str, params: Mapping[str, Any], seed: int,
               device: str) -> Workload:
    """One side's workload from the manifest's builder, with ``op`` where the kernel goes."""

    e2e = lm.manifest.end_to_end
    builder = resolve(e2e.workload, lm.folder, manifest_path=lm.path, key="end_to_end.workload")
    try:
        return as_workload(builder(op, side, dict(params), make_generator(seed, device), device))
    except Exception as e:
        raise ManifestError(lm.path, "end_to_end.workload", f"{e2e.workload} raised {type(e).__name__}: {e} "
                            f"while building the {side} workload",
                            "make the builder accept (op, side, params, generator, device) and return a "
                            "Workload or a callable") from None


def identity_findings(replaced: Sequence[str], must_run: Sequence[str], base: Optional[ProfileSummary],
                      cand: Optional[ProfileSummary], where: str) -> List[Finding]:
    """The baseline workload ran the op it replaces; the candidate workload ran the candidate.

    The candidate side is held against the manifest's ``expect.must_run`` patterns (ops
    or kernels, matched as in the micro preflight): a workload that never runs the
    candidate kernel says nothing about it, so that failure invalidates the run. A
    ``replaced`` pattern that matches nothing in the baseline only costs the prediction
    its measured share (a warning)."""

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
                        f"is built ({fmt_num(ops_b)} dispatcher ops per step, {len(rb)} compiled regions)", where)]
    return [Finding("end_to_end:isolation", False,
                    f"building the candidate changed how the baseline workload runs: compiled regions "
                    f"{rb or 'none'} before, {ra or 'none'} after; dispatcher ops per step {fmt_num(ops_b)} before, "
                    f"{fmt_num(ops_a)} after. Both sides share code that torch.compile compiles (or gives up on) once "
                    "per process: build each side from its own copy of the model code", where)]


