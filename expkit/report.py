"""Render ``report.md`` from a run folder's stored files alone.

The template only formats; every figure and every word choice is made here, from
``result.json`` and ``samples.csv``, so that a report re-rendered a year later says
exactly what it said the day it was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import jinja2

from . import store
from .paths import templates_dir
from .verdict import EXIT_CODES
from .wording import fmt_time, fmt_x, headline, speed_phrase

_MARK = {True: "pass", False: "**FAIL**"}


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _cell(text: Any) -> str:
    """Table cells cannot hold pipes or newlines in GitHub markdown."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _side(s: Dict[str, Any]) -> str:
    return f"{fmt_time(s['median'])} [{fmt_time(s['ci_low'])}, {fmt_time(s['ci_high'])}]"


def context(result: Dict[str, Any], samples: Any) -> Dict[str, Any]:
    claim = result["claim"]
    measured = result.get("measured") or {}
    conf = measured.get("confidence", 0.95)
    cases: List[Dict[str, str]] = []
    notes: List[str] = []
    for name, c in (measured.get("cases") or {}).items():
        n_b = int(((samples["case"] == name) & (samples["side"] == "baseline")).sum()) if len(samples) else 0
        n_c = int(((samples["case"] == name) & (samples["side"] == "candidate")).sum()) if len(samples) else 0
        cases.append({
            "name": _cell(name),
            "baseline": _side(c["baseline"]),
            "candidate": _side(c["candidate"]),
            "speedup": f"{fmt_x(c['speedup'])} [{fmt_x(c['ci_low'])}, {fmt_x(c['ci_high'])}]",
            "claimed": fmt_x(c["claimed"]) + ("" if c.get("claimed_per_case") else ""),
            "bar": fmt_x(c["threshold"]),
            "verdict": c["verdict"],
            "samples": f"{n_b} + {n_c}",
        })
        phrase = speed_phrase(c["speedup"], c["ci_low"], c["ci_high"], conf)
        notes.append(f"`{name}`: candidate {phrase}; sampling stopped because the {c['stopped']}.")
        for w in c.get("warnings", []):
            notes.append(f"`{name}`: {w}")
    checks = [{"check": _cell(f["check"]), "case": _cell(f.get("case") or "all"),
               "mark": _MARK[f["ok"]] if f.get("severity", "invalid") == "invalid" or f["ok"] else "warning",
               "message": _cell(f["message"])} for f in result.get("checks", [])]
    identity = [{"case": _cell(i["case"]),
                 "candidate": _cell(", ".join(f"`{o}`" for o in i["candidate"]) or "nothing"),
                 "baseline": _cell(", ".join(f"`{o}`" for o in i["baseline"]) or "nothing")}
                for i in result.get("identity", [])]
    env = result.get("environment", {})
    cost = result.get("cost", {})
    if cost.get("usd") is None:
        cost_text = f"{cost.get('seconds', 0):.1f} s of machine time; price unknown ({cost.get('note', 'no price')})"
    else:
        cost_text = (f"${cost['usd']:.4f} for {cost['seconds']:.1f} s at ${cost['usd_per_hour']:.2f}/h "
                     f"({cost.get('price_source', 'price list')})")
    timing = result.get("timing", {})
    claim_bits = [f"{fmt_x(claim['speedup'])} ± {claim['tolerance']:.0%}"]
    if claim.get("source"):
        claim_bits.append(f"source: {claim['source']}")
    if claim.get("by"):
        claim_bits.append(f"by {claim['by']}")
    if claim.get("claimed_on"):
        claim_bits.append(f"claimed on {claim['claimed_on']}")
    if claim.get("date"):
        claim_bits.append(claim["date"])
    env_rows = [(k, _cell(v)) for k, v in (
        ("Device", env.get("where", "n/a")),
        ("torch", env.get("torch", "n/a")),
        ("Python", env.get("python", "n/a")),
        ("Git commit", f"`{env.get('git_commit')}`" + (" (dirty tree)" if env.get("git_dirty") else "")
         if env.get("git_commit") else "not in a git repository"),
        ("Telemetry", env.get("telemetry", "n/a")),
    )]
    return {
        "name": result["name"],
        "description": result.get("description", "").strip(),
        "headline": headline(result),
        "verdict": result["verdict"],
        "exit_code": EXIT_CODES[result["verdict"]],
        "claim_text": _cell("; ".join(claim_bits)),
        "where": _cell(env.get("where", "n/a")),
        "mismatch": result.get("claim_mismatch"),
        "started": result.get("started", "n/a"),
        "duration": f"{result.get('wall_seconds', 0):.1f} s",
        "seed": result.get("seed"),
        "cost_text": _cell(cost_text),
        "reasons": [_cell(r) for r in result.get("reasons", [])],
        "confidence": f"{conf:.0%}",
        "cases": cases,
        "case_notes": notes,
        "not_measured": "the preflight found the run invalid, so no time was spent measuring."
        if result["verdict"] == "invalid" else "no case was measured.",
        "checks": checks,
        "identity": identity,
        "has_kernels": any(i.get("kernels") for i in result.get("identity", [])),
        "timing": {
            "method": timing.get("method", "n/a"),
            "preset": timing.get("preset", "n/a"),
            "target": f"{timing.get('target_ci', 0):.1%}",
            "budget": f"{timing.get('max_seconds', 0):g} s",
            "notes": timing.get("notes", []),
        },
        "environment": env_rows,
        "expkit_version": result.get("expkit_version", "?"),
        "schema_version": result.get("schema_version"),
        "manifest_path": result.get("manifest", {}).get("path", "?"),
        "manifest_sha": (result.get("manifest", {}).get("sha256") or "?")[:12],
    }


def render(run_dir: Path) -> str:
    result = store.load_result(run_dir / store.RESULT)
    samples = store.read_samples(run_dir / store.SAMPLES)
    return _env().get_template("report.md.j2").render(**context(result, samples))


def write(run_dir: Path) -> Path:
    out = run_dir / store.REPORT
    store.atomic_write(out, render(run_dir))
    return out
