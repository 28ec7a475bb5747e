"""The end-to-end workload, the worker's half: one step per request, in one side's process.

The parent's half, which asks both sides for these steps and judges, is
:mod:`.workload_pair`.

Each side in its own process also ends a confound the one-process collection had to
check for: Dynamo compiles (or gives up on) shared code once per process, so a
candidate built after the baseline could change how the baseline's workload ran. In
separate processes it cannot, and the isolation finding says so; in-process (the
undefended harness) the baseline is profiled again after the candidate is built and
compared, as before (:func:`expkit.workload.collect.isolation_findings`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional

from ...checks import oracles
from ...core.findings import Finding
from ...manifest.refs import resolve
from ...manifest.spec import PER_CALL_ORACLE_KINDS
from ...workload.collect import SideEvidence, WallTimer, build_side, sync_for
from ...workload.compile import compile_stats, dynamo_snapshot
from ...workload.profile import ProfileSummary, record_runs, summarize_trace
from ...workload.utilisation import Utilisation, cuda_index, cuda_uuid, observe_utilisation, open_utilisation
from ..defences.clock import CLOCK
from .side import BASELINE, SideBench
from ..processes.transport import Importer

def _profile_dict(p: Optional[ProfileSummary]) -> Optional[Dict[str, Any]]:
    return None if p is None else {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(p).items()}


# --- the worker's half -------------------------------------------------------------------


def workload_request(side: SideBench, judge: Any, msg: Mapping[str, Any]) -> Dict[str, Any]:
    """One step of the workload comparison, in the side's worker."""
    st: Dict[str, Any] = side.__dict__.setdefault("_workload", {})
    step = msg.get("step")
    lm, e2e = side.lm, side.lm.manifest.end_to_end
    cuda = side.device == "cuda"
    sync = sync_for(side.device)
    if step == "build":
        st.clear()
        seed = int(msg["seed"])
        before = dynamo_snapshot()
        wl = build_side(lm, side.fn, side.role, e2e.params, seed, side.device)
        try:
            t0 = side_clock()
            wl.run()
            if sync:
                sync()
            first_s = side_clock() - t0
            first = dynamo_snapshot()
            out = wl.run()  # the steady state, which the timing sees
            if sync:
                sync()
        except Exception as e:
            return {"raised": f"{type(e).__name__}: {e}"}
        st.update(wl=wl, out=out, compile=compile_stats(before, first, dynamo_snapshot(), first_s))
        return {}
    if step == "outputs":  # the candidate's final outputs, for the baseline's process to judge
        return {"outputs": side.exporter.export(list(oracles.flatten(st["out"])))}
    if step == "judge":
        return {"findings": [asdict(f) for f in _judge_outputs(side, st, msg["outputs"])]}
    if step == "profile":
        replaced = e2e.replaced if side.role == BASELINE else ()
        prof = summarize_trace(record_runs(st["wl"].run, int(msg.get("runs", e2e.profile_runs)), cuda=cuda),
                               st["wl"].steps, replaced)
        if msg.get("keep", True):
            st["profile"] = prof
            st["settled"] = dynamo_snapshot()
        return {"profile": _profile_dict(prof)}
    if step == "observe":
        util = Utilisation(missing="not available: CPU run (NVML reads GPUs only)")
        if cuda:
            uuid = cuda_uuid()
            sampler = open_utilisation(cuda_index(), uuid=uuid)
            if isinstance(sampler, str) and uuid is not None:
                sampler = open_utilisation(cuda_index())
            try:
                util = observe_utilisation(st["wl"].run, e2e.utilisation_seconds, sampler, sync=sync)
            finally:
                if not isinstance(sampler, str):
                    sampler.close()
        ev = SideEvidence(st["wl"].steps, st["wl"].step, st.get("profile"), st["compile"], util)
        return {"evidence": ev.to_dict()}
    if step == "warm_up":
        end = side_clock() + float(msg["seconds"])
        st["wl"].run()
        while side_clock() < end:
            st["wl"].run()
        return {}
    if step == "call":
        st["wl"].run()
        return {}
    if step == "block":
        timer = WallTimer(sync)
        return {"seconds": timer.sample(st["wl"].run, int(msg["number"])), "method": timer.method}
    if step == "late":
        late = compile_stats(st["settled"], st["settled"], dynamo_snapshot(), 0.0)
        return {"graphs": late.graphs, "recompiles": late.recompiles,
                "recompile_reasons": list(late.recompile_reasons)}
    if step == "release":
        side.exporter.release_exports()
        return {}
    raise ValueError(f"unknown end-to-end step {step!r}")


def side_clock() -> float:
    return CLOCK()


def _judge_outputs(side: SideBench, st: Mapping[str, Any], descs: Any) -> List[Finding]:
    lm, e2e = side.lm, side.lm.manifest.end_to_end
    where = f"workload {e2e.name}"
    custom = {i: resolve(o.function, lm.folder, manifest_path=lm.path, key=f"end_to_end.oracles[{i}].function")
              for i, o in enumerate(e2e.oracles) if o.function}
    imp = Importer()
    found: List[Finding] = []
    try:
        theirs = tuple(imp.open(descs))
        for i, spec in enumerate(e2e.oracles):
            if spec.kind not in PER_CALL_ORACLE_KINDS:
                found.append(Finding(f"end_to_end:oracle:{spec.kind}", False, "only per-output oracles (allclose, "
                                     "relative_error, exact, custom) apply to a workload's outputs", where))
                continue
            try:
                f = oracles.check_outputs(spec, st["out"], theirs, case=where, custom=custom.get(i))
            except (TypeError, ValueError) as e:
                f = Finding(f"oracle:{spec.kind}", False, f"cannot compare the outputs: {e}", where)
            # No float64 reference of a whole workload exists: the baseline's outputs are the reference.
            message = f.message.replace("against a float64 reference", "against the baseline workload's outputs")
            found.append(Finding(f"end_to_end:{f.check}", f.ok, f"final outputs: {message}", where,
                                 figure=f.figure, threshold=f.threshold))
    finally:
        imp.close()
    return found
