"""The report's "End to end" section, from ``result.json``'s ``end_to_end`` block alone.

The workload stage (:mod:`expkit.workload`) measures the workload and writes that block;
this module turns the stored block into the section's figures and words, laid out by
``templates/end_to_end.md.j2`` (included by the run template). Like every renderer it
reads stored dicts only, so a report re-rendered later says what it said the day it was
written.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..verdict.wording import fmt_num, fmt_time, fmt_x, speed_phrase
from .formatting import cell


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _us(x: Optional[float]) -> str:
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
        out.append(f"CUDA-graph launches per {step} {fmt_num(bg)} → {fmt_num(cg)}"
                   + (": the candidate's steps are not captured" if not cg else ""))
    for key, label in (("syncs_per_step", "host-device synchronisations"),
                       ("scalar_reads_per_step", "scalar reads to the host")):
        b, c = bp.get(key), cp.get(key)
        if b is not None and c is not None and c > b + 0.5:
            on_gpu = bp.get("syncs_per_step") is not None
            out.append(f"{label} per {step} {fmt_num(b)} → {fmt_num(c)}"
                       + (": the host waits for the device" if on_gpu else " (on a GPU, each one a synchronisation)"))
    for key, label in (("launches_per_step", "kernel launch calls"), ("ops_per_step", "dispatcher ops")):
        b, c = bp.get(key), cp.get(key)
        if b and c is not None and c > 1.2 * b:
            out.append(f"{label} per {step} {fmt_num(b)} → {fmt_num(c)}")
    bu, cu = (base.get("utilisation") or {}).get("mean"), (cand.get("utilisation") or {}).get("mean")
    if bu is not None and cu is not None and cu < bu - 10:
        out.append(f"GPU utilisation (NVML) {bu:.0f}% → {cu:.0f}%: the GPU waits for the host")
    bb, cb = bp.get("gpu_busy"), cp.get("gpu_busy")
    if bb is not None and cb is not None and cb < bb - 0.1:
        out.append(f"GPU busy {bb:.0%} → {cb:.0%} of the wall time (profile)")
    if grown_rows:
        g = grown_rows[0]
        out.append(f"most added time: {g['kind']} `{g['name']}`, +{_us(g['grew_us'])} per run "
                   f"({fmt_num(g['baseline_per_step'])} → {fmt_num(g['candidate_per_step'])} calls per {step})")
    return out


def report_context(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The section's figures and words, from ``result.json``'s ``end_to_end`` block alone
    (``report.md`` is re-rendered from stored files). None where the run had no workload."""
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
                why.append((f"{label} per {step}", fmt_num(bp.get(key)), fmt_num(cp.get(key))))
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
                                 _us(g["grew_us"]), f"{fmt_num(g['baseline_per_step'])} → {fmt_num(g['candidate_per_step'])}"))
        if bp.get("matched"):
            ctx["notes"].append("The replaced op, as found in the baseline's profile: "
                                + ", ".join(f"`{cell(n)}`" for n in bp["matched"][:6]) + ".")
    if meas:
        for w in meas.get("warnings", []):
            ctx["notes"].append(f"workload timing: {cell(w)}")
        ctx["notes"].append(f"Workload timing: {cell(meas.get('method', ''))}; sampling stopped: "
                            f"{cell(meas.get('stopped', ''))}.")
    return ctx
