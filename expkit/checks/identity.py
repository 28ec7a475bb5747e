"""The identity check: did the intended code run? Read from a profile of one call per side.

Formerly the runner's private helpers; here, with the other checks, so that the bench
that runs the preflight in the worker process need not import the orchestrator.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

from ..core.findings import Finding
from ..manifest.spec import LoadedManifest
from . import expectations, recording
from .preflight import CaseRun, IdentitySummary, clone_inputs
from .target import check_kernels


def identity_check(lm: LoadedManifest, baseline: Callable, candidate: Callable, device: str):
    """The preflight's identity hook for one manifest: ``check(run, inputs) -> (findings, summary)``.

    One call of each side under the profiler; the candidate's trace is held against the
    manifest's ``expect:`` (:mod:`.expectations`) and its kernels' launch resources
    against the claim's target GPU (:func:`target_findings`). Declared cases report
    every finding, added edge cases only failures."""
    cuda = device == "cuda"

    def check(run: CaseRun, inputs: Sequence[Any]):
        cand_args, base_args = clone_inputs(inputs), clone_inputs(inputs)
        try:
            _, cand_trace = recording.capture(lambda: candidate(*cand_args), cuda=cuda)
        except Exception as e:
            return [Finding("crash", False, f"candidate raised {type(e).__name__}: {e} while profiled", run.name)], None
        _, base_trace = recording.capture(lambda: baseline(*base_args), cuda=cuda)
        found = expectations.check_expectations(lm.manifest.expect, cand_trace, base_trace,
                                                harness_stream=cand_trace.harness_stream)
        findings = [Finding(f.check, f.ok, f.message, run.name, severity=getattr(f, "severity", "invalid"))
                    for f in found if not f.ok or run.declared]
        findings += [f for f in target_findings(lm, cand_trace, run.name)]
        summary = IdentitySummary(
            run.name,
            tuple(o.name for o in cand_trace.top_level_ops()),
            tuple(o.name for o in base_trace.top_level_ops()),
            tuple(kernel_row(k) for k in cand_trace.kernels),
            tuple(kernel_row(k) for k in base_trace.kernels),
        )
        return findings, summary

    return check


def kernel_row(k: Any) -> Dict[str, Any]:
    """A profiled kernel's launch configuration, as ``result.json``'s ``identity`` block stores it."""
    return {"name": k.name, "grid": list(k.grid), "block": list(k.block),
            "registers_per_thread": k.registers_per_thread, "shared_memory": k.shared_memory, "stream": k.stream}


def target_findings(lm: LoadedManifest, tr: Any, case: str, gpu_name: Optional[str] = None) -> List[Finding]:
    """Each candidate kernel's launch resources against the claim's target GPU (and the GPU
    in hand, ``gpu_name``, as the baseline's worker reported it)."""
    if not tr.kernels:
        return []

    return list(check_kernels(lm.manifest.target, tr.kernels, case=case, gpu_name=gpu_name))
