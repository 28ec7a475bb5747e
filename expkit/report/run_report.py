"""Render ``report.md`` (and its figures) from a run folder's stored files alone.

The template only formats; every figure and every word choice is made here, from
``result.json``, ``samples.csv`` and ``env.json``, so that a report re-rendered a year
later says exactly what it said the day it was written. The order of the report is the
order a reader needs it in: the verdict in one sentence they can quote, why, the claim
against the measurement case by case (with the figures), the evidence behind the verdict,
what it cost and what the speedup is worth, how close to the device's peak it ran, what
the clocks did, and where every input came from.

Words follow the evidence (docs/decisions.md, ``verdict/wording.py``): "demonstrated" only with
an interval behind it, "asserted" for a figure nobody measured here, and never "faster" or
"saves" where the interval includes 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from . import store
from .result import RunResult
from .store import BEFORE_3_INTERVAL
from .formatting import cell, fmt_duration, fmt_usd, settle_hint, template_env
from .memory import memory_context
from .timing import timing_context
from ..verdict.rules import EXIT_CODES, INCONCLUSIVE
from ..verdict.wording import NOT_CHECKED, direction, fmt_time, fmt_x, headline, overall_definition, speed_phrase
from .workload import report_context

_MARK = {True: "pass", False: "**FAIL**"}


def fmt_rate(x: Optional[float], unit: str) -> str:
    if x is None:
        return "n/a"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_fraction(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    return f"{x:.1%}" if x < 10 else f"{x:.3g}×"


def _side(s: Dict[str, Any]) -> str:
    return f"{fmt_time(s['median'])} [{fmt_time(s['ci_low'])}, {fmt_time(s['ci_high'])}]"


def _claim_text(claim: Mapping[str, Any]) -> str:
    bits = [f"{fmt_x(claim['speedup'])} ± {claim['tolerance']:.0%} (asserted)"]
    if claim.get("source"):
        bits.append(f"source: {claim['source']}")
    if claim.get("by"):
        bits.append(f"by {claim['by']}")
    if claim.get("date"):
        bits.append(str(claim["date"]))
    return "; ".join(bits)


def _cost_text(cost: Mapping[str, Any]) -> str:
    seconds = cost.get("seconds", 0) or 0
    if cost.get("usd") is None:
        return f"{seconds:.1f} s of device time; price unknown ({cost.get('note', 'no price')})"
    return (f"{fmt_usd(cost['usd'])} for {seconds:.1f} s at {fmt_usd(cost['usd_per_hour'])}/h "
            f"({cost.get('price_source', 'price list')})")


def _range(r: Optional[Mapping[str, float]], fmt: Any) -> str:
    if not r:
        return "n/a"
    lo, hi = sorted((r["low"], r["high"]))
    return f"{fmt(r['estimate'])} [{fmt(lo)}, {fmt(hi)}]"


def _savings_rows(result: Mapping[str, Any]) -> List[Dict[str, str]]:
    sav = result.get("savings") or {}
    measured = (result.get("measured") or {}).get("cases") or {}
    priced = bool(sav.get("usd_per_hour"))  # zero (a CPU) or unknown: dollars say nothing
    rows = []
    for name, s in (sav.get("cases") or {}).items():
        c = measured.get(name, {})
        word = direction(c.get("ci_low", 0), c.get("ci_high", 0)) if c else "no measurable difference"
        reading = {"faster": "saves", "slower": "costs more"}.get(word, "no measurable saving")
        rows.append({
            "case": cell(name),
            "reading": reading,
            "per_call": _range(s["seconds_per_call"], fmt_duration),
            "per_million": _range(s["seconds_per_million_calls"], fmt_duration),
            "usd_per_million": _range(s.get("usd_per_million_calls"), fmt_usd) if priced else "n/a",
            "calls_per_day": f"{s['calls_per_day']:,.0f} (declared)" if s.get("calls_per_day") else "not declared",
            "per_day": (_range(s.get("usd_per_day"), fmt_usd) if priced and s.get("usd_per_day")
                        else _range(s.get("seconds_per_day"), fmt_duration) if s.get("seconds_per_day") else "n/a"),
        })
    return rows


def _roofline(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    rf = result.get("roofline")
    if not rf:
        return None
    rows = []
    for name, r in (rf.get("cases") or {}).items():
        for side in ("candidate", "baseline"):
            x = r[side]
            rows.append({
                "case": cell(name), "side": side, "time": fmt_time(x["seconds"]),
                "flops": fmt_rate(x["flops_per_second"], "FLOP/s"),
                "bytes": fmt_rate(x["bytes_per_second"], "B/s"),
                "compute": fmt_fraction(x["compute_fraction"]),
                "memory": fmt_fraction(x["memory_fraction"]),
                "roofline": fmt_fraction(x["roofline_fraction"]),
                "bound": r.get("bound") or "n/a",
            })
    notes = list(rf.get("notes") or [])
    sources = []
    for name, r in (rf.get("cases") or {}).items():
        if r.get("note"):
            notes.append(f"`{name}`: {r['note']}")
        work = []
        if r.get("flops") is not None:
            work.append(f"{r['flops']:.4g} FLOP" + (f" at {r['precision']}" if r.get("precision") else ""))
        if r.get("bytes") is not None:
            work.append(f"{r['bytes']:.4g} bytes")
        if r.get("intensity") is not None:
            work.append(f"intensity {r['intensity']:.3g} FLOP/B")
        notes.append(f"`{name}` declares {', '.join(work)} per call")
        for what, src in (r.get("peak_sources") or {}).items():
            if src and src not in sources:
                sources.append(src)
    device = rf.get("device")
    return {"rows": rows, "notes": [cell(n) for n in notes], "sources": [cell(s) for s in sources],
            "device": f"{device['name']} (catalog `{device['key']}`)" if device else None}


def _telemetry(result: Mapping[str, Any], samples: Any) -> Dict[str, Any]:
    tel = result.get("telemetry") or {}
    note = tel.get("note") or (result.get("environment") or {}).get("telemetry") or "not recorded"
    n = int(len(samples))
    flagged = int(samples["flagged"].astype(bool).sum()) if n and "flagged" in samples else 0
    rows = []
    for name, t in (tel.get("cases") or {}).items():
        clocks = t.get("clocks")
        if not clocks:
            continue

        def span(key: str, unit: str) -> str:
            st = clocks.get(key)
            return f"{st['min']:.0f} / {st['mean']:.0f} / {st['max']:.0f} {unit}" if st else "n/a"

        rows.append({"case": cell(name), "sm": span("sm_clock_mhz", "MHz"), "mem": span("mem_clock_mhz", "MHz"),
                     "temp": span("temperature_c", "°C"), "power": span("power_w", "W"),
                     "throttle": cell(", ".join(clocks.get("throttle_reasons") or []) or "none")})
    # Without clock readings nothing was checked: "0 flagged" would suggest the clocks were fine.
    checked = bool(rows) or flagged > 0
    return {"note": cell(note), "samples": n, "flagged": flagged, "rows": rows, "checked": checked}


def _defences(result: Mapping[str, Any]) -> Optional[str]:
    """One line on the harness's own defences (the bench's sessions write the block; shown as recorded)."""
    d = result.get("defences")
    if not d:
        return None
    bits = ["on" if d.get("enabled") else "off"]
    bits += [f"{k}: {v}" for k, v in d.items() if k != "enabled" and isinstance(v, (str, int, float, bool))]
    if "confinement" in d:
        bits.append(_confinement(d["confinement"]))
    if d.get("commitments"):
        bits.append(_commitments(d["commitments"]))
    if d.get("outside_clock"):
        bits.append(_outside_clock(d["outside_clock"]))
    return cell("; ".join(bits))


def _commitments(per_case: Mapping[str, Any]) -> str:
    """The late pick (``bench/defences/commit.py``): how many of the candidate's timed calls could be
    picked for the recheck, and what the memory plan's reservoir left out."""
    calls = sum(int(c.get("calls", 0)) for c in per_case.values())
    held = sum(int(c.get("held", 0)) for c in per_case.values())
    reservoir = sum(int(c.get("reservoir", 0)) for c in per_case.values())
    text = f"{held} of the candidate's {calls} timed calls committed before the recheck's pick"
    if reservoir:
        text += (f" ({reservoir} blocks held fewer outputs than calls, the memory plan's limit: a call not held "
                 "could not be picked)")
    return text


def _outside_clock(per_case: Mapping[str, Any]) -> str:
    """The parent's clock against the candidate's own figures (``bench/defences/outside_clock.py``)."""
    judged = {k: v for k, v in per_case.items() if "excess_s" in v}
    if not judged:
        return "the parent's clock had too few requests to judge the candidate's figures"
    worst = max(judged.items(), key=lambda kv: kv[1]["excess_s"] - kv[1]["allowed_s"])
    return (f"the parent's clock bounded the candidate's timed figures in {len(judged)} case(s) (closest: "
            f"{worst[0]}, {worst[1]['excess_s'] * 1e3:.3g} ms a request unexplained beyond the baseline's, "
            f"{worst[1]['allowed_s'] * 1e3:.3g} ms allowed)")


def _confinement(c: Optional[Mapping[str, Any]]) -> str:
    """What the candidate's worker could not reach (``bench/defences/confine.py``), in words."""
    if not c:
        return "candidate's worker not confined"
    if not c.get("trace"):
        return f"candidate's worker not confined ({c.get('why', 'no reason given')})"
    what = "trace, read the memory of or signal" if c.get("signals") else "trace or read the memory of"
    why = f", {c['why']}" if c.get("why") else ""
    return f"candidate's worker confined: could not {what} another process (Landlock ABI {c.get('landlock_abi')}{why})"


def _end_to_end(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The workload measurement (the workload stage writes the block), if the manifest names one."""
    # The section's figures and words are made in report/workload.py and laid out by
    # templates/end_to_end.md.j2, included by the run template.
    if not result.get("end_to_end"):
        return None  # most runs name no workload: they need not import its section at all

    return report_context(result)


def _provenance(result: Mapping[str, Any], env: Mapping[str, Any]) -> List[tuple]:
    e = result.get("environment", {})
    gpu = env.get("gpu") or {}
    git = env.get("git") or {}
    rows = [("Device", e.get("where", "n/a"))]
    if gpu.get("name"):
        bits = [gpu["name"]]
        if gpu.get("compute_capability"):
            bits.append(f"compute capability {gpu['compute_capability']}")
        driver = gpu.get("driver_version") or gpu.get("driver")
        if driver:
            bits.append(f"driver {driver}")
        if gpu.get("cuda_runtime"):
            bits.append(f"CUDA runtime {gpu['cuda_runtime']}")
        rows.append(("GPU", ", ".join(str(b) for b in bits)))
    cpu = e.get("cpu") or env.get("cpu")
    if cpu:
        extra = f" ({env['cpu_count']} cores, {env.get('torch_threads', '?')} torch threads)" \
            if env.get("cpu_count") else ""
        rows.append(("CPU", f"{cpu}{extra}"))
    rows += [("torch", e.get("torch", "n/a")), ("Python", e.get("python", "n/a"))]
    if env.get("platform"):
        rows.append(("Platform", env["platform"]))
    commit = e.get("git_commit") or git.get("commit")
    if commit:
        dirty = e.get("git_dirty") if e.get("git_dirty") is not None else git.get("dirty")
        text = f"`{commit}`"
        if dirty:
            diff = git.get("diff_sha256")
            text += " with uncommitted changes" + (f" (diff sha256 `{diff[:12]}`)" if diff else "")
        rows.append(("Git commit", text))
    else:
        rows.append(("Git commit", "not in a git repository"))
    m = result.get("manifest", {})
    rows.append(("Manifest", f"`{m.get('path', '?')}` sha256 `{(m.get('sha256') or '?')[:12]}`"))
    for path, sha in (env.get("sources") or {}).items():
        rows.append(("Source", f"`{path}` sha256 `{sha[:12]}`"))
    rows.append(("Seed", f"`{result.get('seed')}`"))
    overrides = (result.get("settings") or {}).get("overrides") or []
    rows.append(("Overrides", ", ".join(f"`{o}`" for o in overrides) or "none"))
    if not env:
        rows.append(("env.json", "not recorded"))
    return [(k, cell(v)) for k, v in rows]


def process_note(case: Mapping[str, Any]) -> Optional[str]:
    """The spread between a case's processes, in words (result.json 3); None for one process."""
    per = case.get("per_process") or []
    if len(per) < 2:
        return None
    s = [p["speedup"] for p in per]
    return (f"{len(per)} processes, each a fresh worker pair: their speedups ran from {fmt_x(min(s))} to "
            f"{fmt_x(max(s))}, a spread of {case['process_spread']:.1%} of the estimate "
            f"(standard deviation {case['process_sd']:.1%}).")


def interval_text(cases: Mapping[str, Mapping[str, Any]], conf: str) -> str:
    """What the speedup and its interval are, and what the interval covers (``verdict/stats.py``)."""
    ks = sorted({int(c.get("processes") or 1) for c in cases.values()})
    several = [k for k in ks if k >= 2]
    parts = [f"Times are medians per call with their {conf} intervals."]
    if several:
        k = "/".join(str(x) for x in several)
        parts.append(f"The speedup is the geometric mean, over {k} fresh processes, of each process's ratio of "
                     f"medians (baseline over candidate); its interval is a Student t interval over those "
                     f"processes, so it covers the spread between processes as well as the noise within each, "
                     f"and is an interval for the speedup over fresh processes, not for any one of them.")
    if 1 in ks:
        old = any(c.get("interval") in (None, BEFORE_3_INTERVAL) for c in cases.values()
                  if int(c.get("processes") or 1) == 1)
        how = ("a bootstrap interval (the two sides resampled independently)" if old
               else "a paired bootstrap interval (rounds resampled as pairs)")
        parts.append(f"{'Where measured in one process, the' if several else 'The'} speedup is the ratio of "
                     f"medians, baseline over candidate, with {how}: it covers the noise within that one process, "
                     f"not the spread between processes, so a rerun may land outside it (`measure.processes`).")
    parts.append("The bar is the claim less its tolerance.")
    return " ".join(parts)


#: The default oracle's rule in one line, under the evidence of every run it judged
#: (``checks/rounding.py``; docs/threat-model.md, "The default oracle").
ORACLE_RULE = ("Correctness (`oracle:rounding`, the default): each output's worst error against a float64 "
               "reference may be at most F x the baseline's own error + (C sqrt(K) u + eps) x max|ref| + "
               "D x u x max|ref on |inputs|| (by default F = 4, C = 2, D = 2, the oracle's `factor` and `bound` "
               "replacing F and C; K the reduction length, u the unit roundoff of the accumulation, eps the "
               "output's; each finding gives its figures). The last term is the size of what was combined, so an "
               "honest sum whose terms cancel is not held to its small result; it counts only where the op is a "
               "sum of products of its inputs.")


def _mark(f: Mapping[str, Any]) -> str:
    """The evidence table's word for a finding: pass, FAIL, warning, or not checked (a
    finding that failed nothing but says what the run could not check)."""
    if f["ok"] and str(f.get("message", "")).startswith(NOT_CHECKED):
        return "not checked"
    return _MARK[f["ok"]] if f.get("severity", "invalid") == "invalid" or f["ok"] else "warning"


def context(result: Dict[str, Any], samples: Any, env: Optional[Mapping[str, Any]] = None,
            plots: Optional[Mapping[str, str]] = None, plot_notes: Optional[List[str]] = None) -> Dict[str, Any]:
    """Everything the run template shows, formatted. ``plots`` names the figures that exist."""
    env = env or {}
    claim = result["claim"]
    measured = result.get("measured") or {}
    conf = measured.get("confidence", 0.95)
    cases: List[Dict[str, str]] = []
    notes: List[str] = []
    settle: List[str] = []
    for name, c in (measured.get("cases") or {}).items():
        n_b = int(((samples["case"] == name) & (samples["side"] == "baseline")).sum()) if len(samples) else 0
        n_c = int(((samples["case"] == name) & (samples["side"] == "candidate")).sum()) if len(samples) else 0
        cases.append({
            "name": cell(name),
            "baseline": _side(c["baseline"]),
            "candidate": _side(c["candidate"]),
            "speedup": f"{fmt_x(c['speedup'])} [{fmt_x(c['ci_low'])}, {fmt_x(c['ci_high'])}]",
            "claimed": fmt_x(c["claimed"]),
            "bar": fmt_x(c["threshold"]),
            "verdict": c["verdict"],
            "samples": f"{n_b} + {n_c}",
        })
        phrase = speed_phrase(c["speedup"], c["ci_low"], c["ci_high"], conf)
        notes.append(f"`{name}`: candidate {phrase}; sampling stopped: {c['stopped']}.")
        spread = process_note(c)
        if spread:
            notes.append(f"`{name}`: {spread}")
        for w in c.get("warnings", []):
            notes.append(f"`{name}`: {w}")
        if result["verdict"] == INCONCLUSIVE and c.get("verdict") == INCONCLUSIVE:
            hint = settle_hint(c)
            if hint:
                settle.append(f"`{name}`: {hint}")
    for name, why in (measured.get("unmeasured") or {}).items():  # declared, never estimated (result.json 5)
        claim = result.get("claim") or {}
        claimed = (claim.get("cases") or {}).get(name, claim.get("speedup"))
        cases.append({"name": cell(name), "baseline": "not measured", "candidate": "not measured",
                      "speedup": "none", "claimed": fmt_x(claimed) if isinstance(claimed, (int, float)) else "n/a",
                      "bar": "n/a", "verdict": INCONCLUSIVE, "samples": "none kept"})
        notes.append(f"`{name}`: not measured: {why}")
    checks = [{"check": cell(f["check"]), "case": cell(f.get("case") or "all"),
               "mark": _mark(f),
               "message": cell(f["message"])} for f in result.get("checks", [])]
    identity = [{"case": cell(i["case"]),
                 "candidate": cell(", ".join(f"`{o}`" for o in i["candidate"]) or "nothing"),
                 "baseline": cell(", ".join(f"`{o}`" for o in i["baseline"]) or "nothing")}
                for i in result.get("identity", [])]
    e = result.get("environment", {})
    cost = result.get("cost", {})
    sav = result.get("savings") or {}
    timing = result.get("timing", {})
    target_gpu = (result.get("target") or {}).get("gpu")
    return {
        "name": result["name"],
        "description": (result.get("description") or "").strip(),
        "headline": headline(result),
        "verdict": result["verdict"],
        "exit_code": EXIT_CODES[result["verdict"]],
        "claim_text": cell(_claim_text(claim)),
        "claimed_on": cell(claim.get("claimed_on") or "not stated"),
        "target_gpu": cell(target_gpu) if target_gpu else None,
        "where": cell(e.get("where", "n/a")),
        "mismatch": result.get("claim_mismatch"),
        "started": result.get("started", "n/a"),
        "duration": f"{result.get('wall_seconds', 0):.1f} s",
        "seed": result.get("seed"),
        "cost_text": cell(_cost_text(cost)),
        "price": f"{fmt_usd(sav['usd_per_hour'])}/h" if sav.get("usd_per_hour") else None,
        "price_zero": sav.get("usd_per_hour") == 0,
        "price_source": cell(sav.get("price_source") or cost.get("price_source") or cost.get("note") or "n/a"),
        "savings": _savings_rows(result),
        "roofline": _roofline(result),
        "memory": memory_context(result),
        "telemetry": _telemetry(result, samples),
        "reasons": [cell(r) for r in result.get("reasons", [])],
        "settle": [cell(s) for s in settle],
        "confidence": f"{conf:.0%}",
        "cases": cases,
        "case_notes": notes,
        "interval_text": " ".join(t for t in (interval_text(measured.get("cases") or {}, f"{conf:.0%}"),
                                              overall_definition(result)) if t),
        "plots": {"speedup": None, "timings": None, **dict(plots or {})},
        "plot_notes": list(plot_notes or []),
        "not_measured": "the preflight found the run invalid, so no time was spent measuring."
        if result["verdict"] == "invalid" else "no case was measured.",
        "checks": checks,
        "oracle_rule": ORACLE_RULE if any(f.get("check") == "oracle:rounding" for f in result.get("checks", []))
        else None,
        "identity": identity,
        "has_kernels": any(i.get("kernels") for i in result.get("identity", [])),
        "defences": _defences(result),
        "end_to_end": _end_to_end(result),
        "timing": timing_context(timing),
        "provenance": _provenance(result, env),
        "expkit_version": result.get("expkit_version", "?"),
        "schema_version": result.get("schema_version"),
        "upgraded_from": result.get("upgraded_from"),
    }


#: The report's note where its figures were left to a later ``expkit report`` (``undrawn=True``).
UNDRAWN = "Figures not drawn with the run: `expkit report` on this run's folder draws them."


def render(run_dir: Path, *, plots: bool = True, result: Optional[RunResult] = None, undrawn: bool = False) -> str:
    """The report of ``run_dir``; with ``plots``, its figures are (re)drawn beside it first;
    without, ``undrawn`` says in the report how to draw them. ``result``: the run's result
    where the caller holds it (else read from the folder). A path that is not a run folder
    is an :class:`ExpkitError` (exit 2), and nothing is created."""
    run_dir = store.run_folder(run_dir)
    if result is None:
        result = store.load_result(run_dir / store.RESULT)
    samples = store.read_samples(run_dir / store.SAMPLES)
    env = store.load_env(run_dir / store.ENV)
    drawn: Dict[str, str] = {}
    plot_notes: List[str] = []
    if plots:
        # lazy: matplotlib's import is slow; a verdict is printed before figures are drawn
        from .plots import write_run_plots

        drawn, plot_notes = write_run_plots(run_dir, result, samples)
    elif undrawn:
        plot_notes = [UNDRAWN]
    return template_env().get_template("report.md.j2").render(**context(result, samples, env, drawn, plot_notes))


def write(run_dir: Path, *, plots: bool = True, result: Optional[RunResult] = None, undrawn: bool = False) -> Path:
    out = Path(run_dir) / store.REPORT
    store.atomic_write(out, render(run_dir, plots=plots, result=result, undrawn=undrawn))
    return out
