"""One manifest, end to end: load, preflight, measure, judge, store, report.

This is the library entry point the CLI and the tests call. It never prints a
traceback for a user's mistake (those raise :class:`ExpkitError` before anything
runs) and never loses a result: a candidate that crashes makes the run ``invalid``
with the error in its reasons, and the report is still written.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .bench.processes import environment
from .bench.sides.endpoint import OutOfMemory, warm_up_forkserver
from .bench.sides.pair import Pair, open_pair
from .bench.sides.replicates import Replicates
from .checks import preflight
from .checks.contention import contention_findings, share_findings
from .checks.expectations import unidentified
from .timing import measure
from .timing.figures import judged, timing_findings, timing_section
from .report import run_report, store
from .report.result import RESULT_SCHEMA_VERSION, RunResult
from .verdict import stats
from .core.errors import ExpkitError, OutOfMemoryPlan
from .core.findings import WARNING, Finding
from .core.version import __version__
from .manifest import catalog, prices
from .manifest.spec import LoadedManifest, load as load_manifest
from .manifest.settings import Settings, load_settings
from .verdict import pipeline
from .verdict.rules import INCONCLUSIVE, INVALID, Verdict
from .bench.sides.ledger import peaks
from .verdict.roofline import Work, roofline
from .verdict.savings import savings
from .workload.assess import judge


@dataclass(frozen=True)
class RunOutcome:
    verdict: str
    exit_code: int
    out_dir: Path
    result: RunResult


def default_out_dir(name: str, root: Path = Path("reports")) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    out = root / f"{stamp}-{safe}"
    n = 1
    while out.exists():
        n += 1
        out = root / f"{stamp}-{safe}-{n}"
    return out


def _cost(seconds: float, device: str, env: Mapping[str, Any], settings: Settings) -> Dict[str, Any]:
    if settings.cost.usd_per_hour is not None:
        rate, source = settings.cost.usd_per_hour, "cost.usd_per_hour override"
    elif device != "cuda":
        rate, source = 0.0, "CPU run: priced at zero (override with cost.usd_per_hour=...)"
    else:
        rate, source = None, None
        try:
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
    plots: bool = True,
) -> RunOutcome:
    """Run one manifest and write ``result.json``, ``samples.csv``, ``env.json`` and ``report.md``.

    Each side runs in a worker process of its own (:mod:`expkit.bench.sides.pair`); this
    process never imports the code under test and never initialises CUDA: what it
    knows of the GPU comes from the baseline's worker. ``plots=False`` leaves the report's
    figures to a later ``report.run_report.write(out_dir)`` (the CLI draws them after it
    has printed the verdict)."""
    t_start = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    lm = load_manifest(path)
    m = lm.manifest
    settings = settings or load_settings(overrides, m.measure)
    device = m.device
    stages = Stages(t_start)
    if settings.defences.enabled and settings.defences.isolate:  # workers to start: get them ready
        warm_up_forkserver(settings.defences.start_method, device)
    stages.mark("load")
    pair = open_pair(lm, settings, device, baseline_first=True)
    stages.mark("start")
    try:
        return _run(lm, settings, pair, out_dir, progress, t_start, started, stages, plots)
    finally:
        pair.close(None)


class Stages:
    """Wall seconds by stage of one run, in order (``result.json``'s ``stages``)."""

    def __init__(self, t0: float) -> None:
        self.t = t0
        self.seconds: Dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + (now - self.t)
        self.t = now


def _run(lm: LoadedManifest, settings: Settings, pair: Pair, out_dir: Optional[Path],
         progress: Optional[measure.ProgressFn], t_start: float, started: str, stages: Stages,
         plots: bool = True) -> RunOutcome:
    m, device = lm.manifest, lm.manifest.device
    if device == "cuda" and not (pair.gpu or {}).get("name") and not pair.session_findings:
        raise ExpkitError(f"{lm.path}: device: the manifest needs a CUDA GPU and none is visible "
                          "(run it on a GPU machine, or see manifests/examples/cpu/ for CPU examples)")
    run_seed = settings.seed if settings.seed is not None else secrets.randbits(62)
    out_dir = store.make_folder(Path(out_dir) if out_dir is not None else default_out_dir(m.name), "run folder")

    env = environment.capture(lm.folder, device, [], gpu=pair.gpu if device == "cuda" else None)
    env["sources"] = pair.sources()
    if device == "cpu" and settings.measure.cpu_threads is not None:
        env["torch_threads"] = settings.measure.cpu_threads  # what the code under test ran with
    store.write_json(out_dir / store.ENV, env)

    findings: List[Finding] = pair.findings()
    try:
        memory = pair.plan_memory(run_seed) if not any(f.invalidates for f in findings) else None
    except OutOfMemoryPlan as e:
        # No verdict: the code under test cannot run once. The report says so; the CLI
        # prints one line and exits 5.
        _write_unrun(lm, settings, out_dir, env, run_seed, started, t_start, pair,
                     Finding("memory", False, f"{e} (no verdict: exit code 5)", severity=WARNING))
        raise
    stages.mark("plan")
    pre = pair.preflight(run_seed)
    findings += list(pre.findings)
    stages.mark("preflight")
    findings += pair.model_oracles()
    stages.mark("model_oracles")
    estimates: Dict[str, stats.Estimate] = {}
    measured: Dict[str, measure.CaseSamples] = {}
    rows: List[Dict[str, Any]] = []
    telemetry_note = "not collected (CPU run)" if device != "cuda" else "unavailable"
    clock_logs: Dict[str, Any] = {}
    keeps: Dict[str, List[bool]] = {}
    unmeasured: Dict[str, str] = {}  # case -> why it has no estimate
    clocked: List[Finding] = []  # the parent's clock against the candidate's figures
    if not any(f.invalidates for f in findings):
        replicates = Replicates(lm, settings, device, pair, run_seed, memory, out_dir)
        got = measure.measure_replicated([c.name for c in m.cases], replicates.open, settings.measure,
                                         rng=random.Random(run_seed), progress=progress)
        replicates.drop_spare()
        clocked = replicates.clock_findings()
        findings += replicates.findings + clocked
        for name, e in got.errors.items():
            if isinstance(e, OutOfMemory):
                findings.append(Finding("memory", False, f"ran out of memory while being timed ({e}); the memory "
                                        f"plan was {memory.to_dict() if memory else 'not made'}", name))
            else:
                findings.append(Finding("crash", False, f"raised {type(e).__name__}: {e} while being timed", name))
        for name, cs in got.cases.items():
            flags = replicates.flags(name, cs)
            measured[name] = cs
            keeps[name] = [not f for f in flags]
            for s, f in zip(cs.samples, flags):
                rows.append({**asdict(s), "flagged": bool(f)})
            try:
                estimates[name] = measure.case_estimate(judged(cs), confidence=settings.measure.confidence,
                                                        resamples=settings.measure.bootstrap,
                                                        seed=run_seed % (2**32), keep=keeps[name])
            except ValueError as e:  # every round lost a side to the telemetry's flags, or no round was whole
                # The case stays in the result, unmeasured, and the verdict judges it so
                # (``verdict.rules.decide``): never a verdict on the cases that happened to be measurable.
                unmeasured[name] = (f"every round lost a side to the telemetry's flags ({sum(flags)} of "
                                    f"{len(flags)} samples flagged: taken at a low SM clock); rerun on a device "
                                    f"whose clock holds" if any(flags) else f"no estimate could be made: {e}")
            note = replicates.describe(name, flags)
            if note is not None:
                telemetry_note = note
                clock_logs[name] = next(g for g in replicates.logs[name] if g is not None)
        findings += timing_findings(measured, keeps)
    stages.mark("measure")
    e2e = _end_to_end(lm, pair, settings, run_seed, estimates, findings)
    findings += e2e.findings if e2e is not None else ()
    stages.mark("end_to_end")
    findings += pair.close(out_dir)
    waited = contention_findings(pair.evidence.get("resources", {}))  # each side's wait for a CPU, all processes
    findings += waited
    shared = share_findings(pair.evidence.get("resources", {}), settings.measure.cpu_threads)  # more threads, busy host
    findings += shared
    unconfirmed = [f for f in clocked if not f.ok and f.severity == WARNING]  # most requests unconfirmed, loaded host
    claims = {c.name: m.claimed(c) for c in m.cases}
    v, added = pipeline.judge(pipeline.Evidence(
        findings=tuple(findings), estimates=estimates, claims=claims, tolerance=m.claim.tolerance,
        aggregate=m.aggregate, budget={name: cs.budget_spent for name, cs in measured.items()},
        unmeasured=dict(unmeasured), resources=pair.evidence.get("resources", {}),
        busy=frozenset(f.case for f in waited if f.case), shared=tuple(shared) + tuple(unconfirmed), manifest=m,
        gpu_name=(env.get("gpu") or {}).get("name"), defences=settings.defences if settings.defences.enabled else None,
        end_to_end=e2e, unidentified=unidentified(m.expect, device == "cuda")))
    findings += added  # the host-load and plausibility warnings, the identity note (verdict/pipeline.py)
    wall = time.perf_counter() - t_start
    doc = _result(lm, settings, v, findings, pre, estimates, measured, claims, env, run_seed, started, wall,
                  _cost(wall, device, env, settings), telemetry_note, unmeasured=unmeasured)
    ledger = pair.evidence.pop("ledger", None)
    stages.mark("judge")
    result = RunResult.of({
        **doc, **_v2_fields(lm, doc, rows, clock_logs, telemetry_note),
        "defences": {"enabled": settings.defences.enabled, **pair.evidence},
        "timing": {**doc["timing"], **timing_section(measured, keeps)},
        "memory": _memory_section(memory, ledger),
        "end_to_end": e2e.to_dict() if e2e is not None else None,
        "stages": dict(stages.seconds)})
    _store(out_dir, result, rows, plots)
    return RunOutcome(v.verdict, v.exit_code, out_dir, result)


def _store(out_dir: Path, result: RunResult, rows: Sequence[Mapping[str, Any]], plots: bool = True) -> None:
    """The run folder's files: samples.csv, result.json, and report.md rendered from ``result``
    (without ``plots``, saying how its figures are drawn)."""
    store.write_samples(out_dir / store.SAMPLES, list(rows))
    store.write_json(out_dir / store.RESULT, result)
    run_report.write(out_dir, plots=plots, result=result, undrawn=not plots)


def _memory_section(memory: Any, ledger: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """result.json's ``memory``: the plan (null fields where none was made) and what each
    side's requests measured (``bench.sides.ledger``)."""
    if memory is None and not ledger:
        return None

    out = memory.to_dict() if memory is not None else {"input_sets": None, "notes": ["no memory plan was made"]}
    out["measured"] = ({role: {"peaks": peaks(rows), "requests": rows} for role, rows in ledger.items()}
                       if ledger else None)
    return out


def _write_unrun(lm: LoadedManifest, settings: Settings, out_dir: Path, env: Mapping[str, Any], run_seed: int,
                 started: str, t_start: float, pair: Pair, finding: Finding) -> None:
    """result.json and report.md for a run that ended before any check: ``inconclusive``,
    with the reason; the caller decides the exit code."""
    m = lm.manifest
    findings = [finding] + pair.close(out_dir)
    v = Verdict(INCONCLUSIVE, tuple(f.reason() for f in findings))
    wall = time.perf_counter() - t_start
    claims = {c.name: m.claimed(c) for c in m.cases}
    note = "not collected (the run did not reach measurement)"
    doc = _result(lm, settings, v, findings, preflight.PreflightResult((), ()), {}, {}, claims, env, run_seed,
                  started, wall, _cost(wall, m.device, env, settings), note)
    ledger = pair.evidence.pop("ledger", None)
    _store(out_dir, RunResult.of({**doc, **_v2_fields(lm, doc, [], {}, note),
                                  "defences": {"enabled": settings.defences.enabled, **pair.evidence},
                                  "memory": _memory_section(None, ledger)}), [])


def write_invalid_run(path: str | Path, out_dir: Path, finding: Finding, overrides: Sequence[str] = (), *,
                      started: str, wall: float) -> RunOutcome:
    """Write ``result.json`` and ``report.md`` for a run that died before writing its own.

    A suite (``suites/manifest_process.py``) calls this when a manifest's worker process crashed, hung or
    was killed: the verdict is ``invalid`` with ``finding`` as its reason, in the same
    schema :func:`run_manifest` writes, so session and compare renderers read it like
    any other run. The environment is the worker's ``env.json`` where it got that far;
    otherwise this process's, with the device marked as not recorded.
    """

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
    where = None if recorded else f"not recorded (the worker died before recording it); supervised on {_where(env)}"
    doc = _result(lm, settings, v, [finding], preflight.PreflightResult((), ()), {}, {}, claims, env, None,
                  started, wall, _cost(wall, m.device, env, settings), note, where=where)
    result = RunResult.of({**doc, **_v2_fields(lm, doc, [], {}, note)})
    _store(out_dir, result, [])
    return RunOutcome(v.verdict, v.exit_code, out_dir, result)


def _v2_fields(lm: LoadedManifest, result: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               logs: Mapping[str, Any], telemetry_note: str) -> Dict[str, Any]:
    """Fields of result.json schema 2: savings, roofline, telemetry summary (see report/store.py)."""

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


def _end_to_end(lm: LoadedManifest, pair: Any, settings: Settings, run_seed: int,
                estimates: Mapping[str, stats.Estimate], findings: Sequence[Finding]) -> Any:
    """The workload the kernel is for (``end_to_end:``), measured after the kernel; None without one.

    The workload runs where the code under test runs (the session's worker, see
    ``workload.collect``); its statistics and judgement are made here. Skipped
    (recorded, nothing run) when the run is already invalid: minutes of workload
    timing are not spent on a kernel that failed its seconds of checks."""
    if lm.manifest.end_to_end is None:
        return None

    bad = next((f for f in findings if f.invalidates), None)
    if bad is not None:
        return judge(lm, None, estimates, settings, skip=f"the run is already invalid ({bad.reason()})")
    try:
        collected = pair.end_to_end(run_seed)
    except ExpkitError:  # the user's to fix (a builder that does not import or build): exit 2
        raise
    except Exception as e:  # never lose the kernel's result to the workload's machinery
        collected = {"skipped": "the end-to-end measurement failed", "evidence": {},
                     "findings": [asdict(Finding("end_to_end:error", False, f"{type(e).__name__}: {e}",
                                                 severity=WARNING))]}
    return judge(lm, collected, estimates, settings, seed=run_seed)


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


def _result(lm: LoadedManifest, settings: Settings, v: Verdict, findings: Sequence[Finding],
            pre: preflight.PreflightResult, estimates: Mapping[str, stats.Estimate],
            measured: Mapping[str, measure.CaseSamples], claims: Mapping[str, float], env: Mapping[str, Any],
            seed: Optional[int], started: str, wall: float, cost: Mapping[str, Any], telemetry_note: str, *,
            unmeasured: Optional[Mapping[str, str]] = None, where: Optional[str] = None) -> Dict[str, Any]:
    """result.json's document but for the sections only a finished run has (the caller
    adds them); ``where`` replaces the environment's description (a worker that died
    before recording it)."""
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
            **est.record(),
        }
    overall = stats.overall(list(estimates.values()), settings.measure.confidence)
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
        "schema_version": RESULT_SCHEMA_VERSION,
        "expkit_version": __version__,
        "name": m.name,
        "description": m.description,
        "verdict": v.verdict,
        "reasons": list(v.reasons),
        "claim": {**asdict(m.claim), "cases": {c.name: c.claim for c in m.cases if c.claim is not None},
                  "aggregate": m.aggregate},
        "target": asdict(m.target),
        "claim_mismatch": mismatch,
        "measured": {"cases": cases, "overall": overall, "confidence": settings.measure.confidence,
                     "unmeasured": dict(unmeasured or {})},
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
        "environment": {"where": where or _where(env), "torch": env.get("torch"), "python": env.get("python"),
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
