"""One manifest, end to end: load, preflight, measure, judge, store, report.

This is the library entry point the CLI and the tests call. It never prints a
traceback for a user's mistake (those raise :class:`ExpkitError` before anything
runs) and never loses a result: a candidate that crashes makes the run ``invalid``
with the error in its reasons, and the report is still written.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import random
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import __version__, defences, environment, measure, preflight, report, stats, store
from .errors import ExpkitError
from .findings import WARNING, Finding
from .manifest import LoadedManifest, load as load_manifest
from .settings import Settings, load_settings
from .verdict import INVALID, Verdict, decide


@dataclass(frozen=True)
class RunOutcome:
    verdict: str
    exit_code: int
    out_dir: Path
    result: Mapping[str, Any]


def default_out_dir(name: str, root: Path = Path("reports")) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    out = root / f"{stamp}-{safe}"
    n = 1
    while out.exists():
        n += 1
        out = root / f"{stamp}-{safe}-{n}"
    return out


def _rotating(fn: Callable[..., Any], sets: Sequence[Tuple[Any, ...]]) -> Callable[[], Any]:
    it = itertools.cycle(sets)
    return lambda: fn(*next(it))


def _timer(device: str, settings: Settings) -> Any:
    if device == "cuda":
        from .cuda_timer import CudaTimer

        return CudaTimer(cold=settings.measure.cold)
    from .timing import PerfCounterTimer

    return PerfCounterTimer()


def _telemetry(device: str) -> Any:
    if device != "cuda":
        return None
    from . import telemetry

    return telemetry.for_device(device)


def _identity_check(lm: LoadedManifest, baseline: Callable, candidate: Callable, device: str):
    from . import expectations, trace

    cuda = device == "cuda"

    def check(run: preflight.CaseRun, inputs: Sequence[Any]):
        cand_args, base_args = preflight.clone_inputs(inputs), preflight.clone_inputs(inputs)
        try:
            _, cand_trace = trace.capture(lambda: candidate(*cand_args), cuda=cuda)
        except Exception as e:
            return [Finding("crash", False, f"candidate raised {type(e).__name__}: {e} while profiled", run.name)], None
        _, base_trace = trace.capture(lambda: baseline(*base_args), cuda=cuda)
        found = expectations.check_expectations(lm.manifest.expect, cand_trace, base_trace,
                                                harness_stream=cand_trace.harness_stream)
        findings = [Finding(f.check, f.ok, f.message, run.name, severity=getattr(f, "severity", "invalid"))
                    for f in found if not f.ok or run.declared]
        findings += [f for f in _target_findings(lm, cand_trace, run.name)]
        summary = preflight.IdentitySummary(
            run.name,
            tuple(o.name for o in cand_trace.top_level_ops()),
            tuple(o.name for o in base_trace.top_level_ops()),
            tuple(_kernel_row(k) for k in cand_trace.kernels),
            tuple(_kernel_row(k) for k in base_trace.kernels),
        )
        return findings, summary

    return check


def _kernel_row(k: Any) -> Dict[str, Any]:
    return {"name": k.name, "grid": list(k.grid), "block": list(k.block),
            "registers_per_thread": k.registers_per_thread, "shared_memory": k.shared_memory, "stream": k.stream}


def _target_findings(lm: LoadedManifest, tr: Any, case: str) -> List[Finding]:
    """Each candidate kernel's launch resources against the claim's target GPU."""
    if not tr.kernels:
        return []
    from .target import check_kernels

    return list(check_kernels(lm.manifest.target, tr.kernels, case=case))


def _cost(seconds: float, device: str, env: Mapping[str, Any], settings: Settings) -> Dict[str, Any]:
    if settings.cost.usd_per_hour is not None:
        rate, source = settings.cost.usd_per_hour, "cost.usd_per_hour override"
    elif device != "cuda":
        rate, source = 0.0, "CPU run: priced at zero (override with cost.usd_per_hour=...)"
    else:
        rate, source = None, None
        try:
            from . import catalog, prices

            spec = catalog.match_device(env["gpu"].get("name") or "")
            price = prices.price_for(spec.key, settings.cost.provider) if spec else None
            if price is not None:
                rate, source = price.usd_per_hour, f"{price.provider}, {price.source}, as of {price.as_of}"
        except Exception as e:  # a missing price never fails a run
            source = f"price lookup failed: {e}"
    if rate is None:
        return {"seconds": seconds, "usd_per_hour": None, "usd": None,
                "note": source or "no price for this GPU in the price list; set cost.usd_per_hour=..."}
    return {"seconds": seconds, "usd_per_hour": rate, "usd": seconds / 3600 * rate, "price_source": source}


def run_manifest(
    path: str | Path,
    overrides: Sequence[str] = (),
    out_dir: Optional[Path] = None,
    *,
    progress: Optional[measure.ProgressFn] = None,
    settings: Optional[Settings] = None,
) -> RunOutcome:
    """Run one manifest and write ``result.json``, ``samples.csv``, ``env.json`` and ``report.md``."""
    t_start = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    lm = load_manifest(path)
    m = lm.manifest
    settings = settings or load_settings(overrides, m.measure)
    device = m.device
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ExpkitError(f"{lm.path}: device: the manifest needs a CUDA GPU and none is visible "
                              "(run it on a GPU machine, or see manifests/examples/cpu/ for CPU examples)")
    # The session imports baseline, candidate and factory (defences.resolve_sides):
    # in a worker process when the defences isolate them (channel.py), so that this
    # process, which times and judges, never runs the code under test.
    session = defences.open_session(lm, settings, device)
    run_seed = settings.seed if settings.seed is not None else secrets.randbits(62)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(m.name)
    out_dir.mkdir(parents=True, exist_ok=True)

    env = environment.capture(lm.folder, device, [])
    env["sources"] = session.sources()
    if device == "cpu" and settings.measure.cpu_threads is not None:
        env["torch_threads"] = settings.measure.cpu_threads  # what the code under test ran with
    store.write_json(out_dir / store.ENV, env)

    pre = session.preflight(run_seed)
    findings: List[Finding] = session.findings() + list(pre.findings)
    if device == "cuda":
        from .target import catalog_mismatches

        findings += catalog_mismatches()
    findings += session.model_oracles()
    estimates: Dict[str, stats.Estimate] = {}
    measured: Dict[str, measure.CaseSamples] = {}
    rows: List[Dict[str, Any]] = []
    telemetry_note = "not collected (CPU run)" if device != "cuda" else "unavailable"
    clock_logs: Dict[str, Any] = {}
    if not any(f.invalidates for f in findings):
        tel = _telemetry(device)
        rng = random.Random(run_seed)
        for case in m.cases:
            try:
                if tel is not None:
                    tel.start()
                cs, case_findings = session.measure_case(case, run_seed, rng=rng, progress=progress)
                findings += case_findings
            except Exception as e:
                findings.append(Finding("crash", False, f"raised {type(e).__name__}: {e} while being timed",
                                        case.name))
                continue
            finally:
                log = tel.stop() if tel is not None else None
            flags = _flag(cs, log, tel)
            kept = [s for s, f in zip(cs.samples, flags) if not f]
            measured[case.name] = cs
            for s, f in zip(cs.samples, flags):
                rows.append({**asdict(s), "flagged": bool(f)})
            b = [s.seconds for s in kept if s.side == "baseline"]
            c = [s.seconds for s in kept if s.side == "candidate"]
            if b and c:
                estimates[case.name] = stats.estimate(b, c, confidence=settings.measure.confidence,
                                                      resamples=settings.measure.bootstrap, seed=run_seed % (2**32))
            if log is not None:
                telemetry_note = tel.describe(log, flags)
                clock_logs[case.name] = log
    e2e = _end_to_end(lm, session, settings, run_seed, estimates, findings)
    findings += e2e.findings if e2e is not None else ()
    findings += session.close(out_dir)
    claims = {c.name: m.claimed(c) for c in m.cases}
    budget = {name: cs.budget_spent for name, cs in measured.items()}
    v = decide(findings, estimates, claims, m.claim.tolerance, budget, m.aggregate)
    if settings.defences.enabled:
        plausible = defences.plausibility(m, estimates, (env.get("gpu") or {}).get("name"), settings.defences)
        findings += plausible
        v = defences.apply_plausibility(v, plausible)
    if e2e is not None:  # a claim that names the workload is judged on it too (end_to_end.apply)
        from . import end_to_end

        v = end_to_end.apply(v, e2e)
    wall = time.perf_counter() - t_start
    result = _result(lm, settings, v, findings, pre, estimates, measured, claims, env, run_seed, started, wall,
                     _cost(wall, device, env, settings), telemetry_note)
    result.update(_v2_fields(lm, result, rows, clock_logs, telemetry_note))
    result["defences"] = {"enabled": settings.defences.enabled, **session.evidence}
    result["end_to_end"] = e2e.to_dict() if e2e is not None else None
    store.write_samples(out_dir / store.SAMPLES, rows)
    store.write_json(out_dir / store.RESULT, result)
    report.write(out_dir)
    return RunOutcome(v.verdict, v.exit_code, out_dir, result)


def write_invalid_run(path: str | Path, out_dir: Path, finding: Finding, overrides: Sequence[str] = (), *,
                      started: str, wall: float) -> RunOutcome:
    """Write ``result.json`` and ``report.md`` for a run that died before writing its own.

    A suite (``suite.py``) calls this when a manifest's worker process crashed, hung or
    was killed: the verdict is ``invalid`` with ``finding`` as its reason, in the same
    schema :func:`run_manifest` writes, so session and compare renderers read it like
    any other run. The environment is the worker's ``env.json`` where it got that far;
    otherwise this process's, with the device marked as not recorded.
    """
    import json

    lm = load_manifest(path)
    m = lm.manifest
    settings = load_settings(overrides, m.measure)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env_path = out_dir / store.ENV
    recorded = env_path.is_file()
    env = json.loads(env_path.read_text()) if recorded else environment.capture(lm.folder, "cpu", [])
    v = Verdict(INVALID, (finding.reason(),))
    claims = {c.name: m.claimed(c) for c in m.cases}
    note = "not collected (the run did not reach measurement)"
    result = _result(lm, settings, v, [finding], preflight.PreflightResult((), ()), {}, {}, claims, env, None,
                     started, wall, _cost(wall, m.device, env, settings), note)
    if not recorded:
        result["environment"]["where"] = (f"not recorded (the worker died before recording it); "
                                          f"supervised on {_where(env)}")
    result.update(_v2_fields(lm, result, [], {}, note))
    store.write_samples(out_dir / store.SAMPLES, [])
    store.write_json(out_dir / store.RESULT, result)
    report.write(out_dir)
    return RunOutcome(v.verdict, v.exit_code, out_dir, result)


def _v2_fields(lm: LoadedManifest, result: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               logs: Mapping[str, Any], telemetry_note: str) -> Dict[str, Any]:
    """Fields of result.json schema 2: savings, roofline, telemetry summary (see store.py)."""
    from .roofline import Work, roofline
    from .savings import savings

    m = lm.manifest
    cases = result["measured"]["cases"]
    per_day = {c.name: c.calls_per_day or m.claim.calls_per_day for c in m.cases}
    work = {c.name: Work(c.flops, c.bytes, c.precision) for c in m.cases}
    tel_cases: Dict[str, Any] = {}
    for r in rows:
        t = tel_cases.setdefault(r["case"], {"samples": 0, "flagged": 0, "clocks": None})
        t["samples"] += 1
        t["flagged"] += int(bool(r["flagged"]))
    for name, log in logs.items():
        if name in tel_cases and hasattr(log, "summary"):
            tel_cases[name]["clocks"] = log.summary()
    return {
        "savings": savings(cases, result["cost"], per_day),
        "roofline": roofline(cases, work, result["environment"].get("gpu")),
        "telemetry": {"note": telemetry_note, "samples": sum(t["samples"] for t in tel_cases.values()),
                      "flagged": sum(t["flagged"] for t in tel_cases.values()), "cases": tel_cases},
    }


def _flag(cs: measure.CaseSamples, log: Any, tel: Any) -> List[bool]:
    if log is None or tel is None:
        return [False] * len(cs.samples)
    return list(tel.flag(log, [(s.t_start, s.t_end) for s in cs.samples]))


def _end_to_end(lm: LoadedManifest, session: Any, settings: Settings, run_seed: int,
                estimates: Mapping[str, stats.Estimate], findings: Sequence[Finding]) -> Any:
    """The workload the kernel is for (``end_to_end:``), measured after the kernel; None without one.

    The workload runs where the code under test runs (the session's worker, see
    ``end_to_end.collect``); its statistics and judgement are made here. Skipped
    (recorded, nothing run) when the run is already invalid: minutes of workload
    timing are not spent on a kernel that failed its seconds of checks."""
    if lm.manifest.end_to_end is None:
        return None
    from . import end_to_end

    bad = next((f for f in findings if f.invalidates), None)
    if bad is not None:
        return end_to_end.judge(lm, None, estimates, settings, skip=f"the run is already invalid ({bad.reason()})")
    try:
        collected = session.end_to_end(run_seed)
    except ExpkitError:  # the user's to fix (a builder that does not import or build): exit 2
        raise
    except Exception as e:  # never lose the kernel's result to the workload's machinery
        collected = {"skipped": "the end-to-end measurement failed", "evidence": {},
                     "findings": [asdict(Finding("end_to_end:error", False, f"{type(e).__name__}: {e}",
                                                 severity=WARNING))]}
    return end_to_end.judge(lm, collected, estimates, settings, seed=run_seed)


def _model_oracles(lm: LoadedManifest, baseline: Callable, candidate: Callable, device: str) -> List[Finding]:
    kinds = {o.kind for o in lm.manifest.oracles}
    if not kinds & {"perplexity", "kl_divergence"}:
        return []
    from .model_oracles import run_model_oracles

    return list(run_model_oracles(lm, baseline, candidate, device))


def _where(env: Mapping[str, Any]) -> str:
    gpu = env.get("gpu") or {}
    if gpu.get("name"):
        bits = [gpu["name"]]
        if gpu.get("driver"):
            bits.append(f"driver {gpu['driver']}")
        if gpu.get("cuda_runtime"):
            bits.append(f"CUDA {gpu['cuda_runtime']}")
        return ", ".join(bits)
    return f"CPU: {env.get('cpu', 'unknown')} ({env.get('torch_threads', '?')} torch threads)"


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _result(lm: LoadedManifest, settings: Settings, v: Verdict, findings: Sequence[Finding],
            pre: preflight.PreflightResult, estimates: Mapping[str, stats.Estimate],
            measured: Mapping[str, measure.CaseSamples], claims: Mapping[str, float], env: Mapping[str, Any],
            seed: int, started: str, wall: float, cost: Mapping[str, Any], telemetry_note: str) -> Dict[str, Any]:
    m = lm.manifest
    case_verdicts = {c.case: c for c in v.cases}
    cases: Dict[str, Any] = {}
    for name, est in estimates.items():
        cv = case_verdicts.get(name)
        cs = measured[name]
        cases[name] = {
            "speedup": est.speedup, "ci_low": est.ci_low, "ci_high": est.ci_high, "confidence": est.confidence,
            "baseline": asdict(est.baseline), "candidate": asdict(est.candidate),
            "claimed": claims[name], "threshold": cv.threshold if cv else None,
            "verdict": cv.verdict if cv else None, "stopped": cs.stopped,
            "timed_seconds": cs.timed_seconds, "wall_seconds": cs.wall_seconds, "warnings": list(est.warnings),
        }
    overall = None
    if estimates:
        ests = list(estimates.values())
        # Geometric mean across cases; its interval combines the cases' bounds the same
        # way, which is conservative (it assumes the cases' errors move together).
        overall = {"speedup": _geomean([e.speedup for e in ests]), "ci_low": _geomean([e.ci_low for e in ests]),
                   "ci_high": _geomean([e.ci_high for e in ests]), "confidence": settings.measure.confidence,
                   "cases": len(ests)}
    gpu_name = (env.get("gpu") or {}).get("name")
    mismatch = None
    if m.claim.claimed_on:
        measured_on = gpu_name or "CPU"
        if not _same_gpu(m.claim.claimed_on, measured_on):
            mismatch = {"claimed_on": m.claim.claimed_on, "measured_on": measured_on,
                        "note": "Speed does not transfer between devices: this run tests the claim on the device "
                                "in hand, not on the one it was made for."}
    method = next(iter(measured.values())).method if measured else "n/a (not measured)"
    return {
        "schema_version": store.RESULT_SCHEMA_VERSION,
        "expkit_version": __version__,
        "name": m.name,
        "description": m.description,
        "verdict": v.verdict,
        "reasons": list(v.reasons),
        "claim": {**asdict(m.claim), "cases": {c.name: c.claim for c in m.cases if c.claim is not None},
                  "aggregate": m.aggregate},
        "target": asdict(m.target),
        "claim_mismatch": mismatch,
        "measured": {"cases": cases, "overall": overall, "confidence": settings.measure.confidence},
        "checks": [asdict(f) for f in findings],
        "identity": [{"case": i.case, "candidate": list(i.candidate_ops) + [k["name"] for k in i.candidate_kernels],
                      "baseline": list(i.baseline_ops) + [k["name"] for k in i.baseline_kernels],
                      "kernels": [dict(k) for k in i.candidate_kernels]}
                     for i in pre.identity if i.case in claims],
        "cases_checked": list(pre.cases_checked),
        "timing": {"method": method, "preset": settings.measure.name, "target_ci": settings.measure.target_ci,
                   "max_seconds": settings.measure.max_seconds, "settings": asdict(settings.measure),
                   "notes": [f"samples flagged and left out: {telemetry_note}"]},
        "cost": dict(cost),
        "environment": {"where": _where(env), "torch": env.get("torch"), "python": env.get("python"),
                        "cpu": env.get("cpu"), "gpu": gpu_name, "git_commit": env["git"].get("commit"),
                        "git_dirty": env["git"].get("dirty"), "telemetry": telemetry_note},
        "seed": seed,
        "settings": {"overrides": list(settings.overrides), "oracle": asdict(settings.oracle)},
        "manifest": {"path": str(lm.path), "sha256": lm.sha256},
        "started": started,
        "wall_seconds": wall,
    }


def _same_gpu(claimed: str, measured: str) -> bool:
    norm = lambda s: "".join(ch for ch in s.lower() if ch.isalnum()).replace("nvidia", "")
    a, b = norm(claimed), norm(measured)
    return bool(a) and (a in b or b in a)
