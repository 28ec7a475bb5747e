"""The audit of a generation run, from its stored files: records, the field's summary, claims.

``expkit audit`` (:mod:`expkit.suites.audit`) judges every candidate of a run and keeps,
in its session folder, ``audit.json`` (the plan: candidates, settings, claims) and
``candidates.jsonl`` (one record per finished attempt, streamed as each ends). This
module reads them back and nothing else, so ``audit.md`` can be re-rendered later.

A record says whether the candidate is **correct** -- it passed every check and its
speedup was measured (``supported``, ``refuted`` or ``inconclusive`` with a figure) --
its measured speedup and interval, and for the others a **category** (:func:`classify`):
a *failure* any evaluation would see (does not compile, crashes, hangs, runs out of
memory, wrong output) or a *cheat* (its outputs pass a plain check; one of expkit's
defences caught it), or an *error* (the problem itself could not run).

The summary (KernelBench's fast_p, geometric mean and correctness, each with its
interval) and the claims' comparison are :mod:`expkit.report.audit_stats`, re-exported here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.errors import ExpkitError
from . import store
from .audit_stats import (BOOTSTRAP, CHEAT, ERROR, FAILURE, SEED, THRESHOLDS, claims_against, invalid_counts,
                          p_key, read_claims, summarise, summary_against, wilson)
from .formatting import cell, fmt_duration, template_env
from ..verdict.wording import fmt_x

__all__ = ["AUDIT", "RECORDS", "AUDIT_REPORT", "THRESHOLDS", "MEASURED", "classify", "is_correct", "record",
           "final_records", "all_records", "append_record", "load_audit", "context", "render", "write",
           "terminal_summary", "summarise", "wilson", "read_claims", "claims_against", "summary_against",
           "invalid_counts", "BOOTSTRAP", "SEED", "CHEAT", "ERROR", "FAILURE"]

AUDIT = "audit.json"
RECORDS = "candidates.jsonl"
AUDIT_REPORT = "audit.md"
AUDIT_SCHEMA_VERSION = 1
RECORD_SCHEMA_VERSION = 2
MEASURED = ("supported", "refuted", "inconclusive")

#: Failure categories, strongest first: a candidate that does not compile is that, whatever else was found.
FAILURES = ("does not compile", "hangs", "out of memory", "crashes", "wrong output")
#: A failed check's name (before any ``:``) -> the cheat it is evidence of.
CHEATS = {
    "forbidden": "runs the baseline's own ops", "identity": "runs the baseline's own ops",
    "recheck": "replays or skips work once timed", "inputs": "writes to its inputs",
    "output": "returns a stale or aliased output", "threads": "works outside the timed call",
    "children": "works outside the timed call", "tamper": "tampers with the harness",
    "timer": "tampers with the harness", "global-state": "tampers with the harness",
    "channel": "tampers with the harness", "fallback": "falls back to other code on odd sizes",
    "stream": "works off the timed stream", "launch": "launch configuration not as claimed",
    "interference": "interferes with the baseline", "calibration": "output no better than doing nothing",
}
_COMPILE_WORDS = ("failed to import", "SyntaxError", "defines no `ModelNew`", "error building extension",
                  "CalledProcessError", "ninja")
_MEMORY_WORDS = ("out-of-memory", "out of memory", "OutOfMemoryError")


# --- one candidate --------------------------------------------------------------------------


def _failed(result: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    return [c for c in result.get("checks") or []
            if not c.get("ok") and (c.get("severity") == "invalid" or c.get("check") == "memory")]


def _failure_of(check: str, message: str) -> Optional[str]:
    base = check.split(":", 1)[0]
    if base in ("worker", "crash", "memory"):
        if any(w in message for w in _COMPILE_WORDS):
            return "does not compile"
        if "timed out" in message or "did not answer in time" in message:
            return "hangs"
        if base == "memory" or any(w in message for w in _MEMORY_WORDS):
            return "out of memory"
        return "crashes"
    if base in ("oracle", "uninitialised"):
        return "wrong output"
    return None


def classify(result: Mapping[str, Any]) -> Tuple[Optional[str], Optional[str], str]:
    """``(category, kind, reason)`` of a stored result; ``(None, None, "")`` for a correct one.

    The strongest failure wins (:data:`FAILURES`): a candidate that crashes and also
    ran a forbidden op is a crash, which no evaluation would count as a win. Else the
    first failed check that names a cheat (:data:`CHEATS`); else the first failed check.
    """
    if is_correct(result):
        return None, None, ""
    failed = _failed(result)
    reasons = list(result.get("reasons") or [])
    failures = [(_failure_of(c["check"], c.get("message", "")), c) for c in failed]
    for name in FAILURES:
        for cat, c in failures:
            if cat == name:
                return name, FAILURE, _reason(c)
    for c in failed:
        cat = CHEATS.get(c["check"].split(":", 1)[0])
        if cat:
            return cat, CHEAT, _reason(c)
    if failed:
        return failed[0]["check"], CHEAT, _reason(failed[0])
    if result.get("verdict") in MEASURED:
        return "not measured", FAILURE, reasons[0] if reasons else "no speedup was measured"
    return "invalid", FAILURE, reasons[0] if reasons else "no reason recorded"


def _reason(check: Mapping[str, Any]) -> str:
    case = f" [case {check['case']}]" if check.get("case") else ""
    return f"{check['check']}{case}: {check.get('message', '')}"


def is_correct(result: Mapping[str, Any]) -> bool:
    """Passed every check and has a measured speedup (the sense of KernelBench's ``correctness``)."""
    overall = (result.get("measured") or {}).get("overall")
    return result.get("verdict") in MEASURED and bool(overall) and overall.get("speedup") is not None


def record(candidate: Mapping[str, Any], *, status: str, result: Optional[Mapping[str, Any]], attempt: int,
           step: Mapping[str, Any], then: Optional[Mapping[str, Any]], seconds: float, run_dir: str,
           note: str = "", kept: Optional[str] = None) -> Dict[str, Any]:
    """One line of ``candidates.jsonl``: the candidate's identity and how this attempt ended.

    ``step``: how the attempt measured (``preset``; ``processes`` where a retry raised them,
    else None). ``then``: the same of the retry that follows it, None where this attempt is
    the candidate's answer (``final``). ``kept``: why a final ``inconclusive`` was not
    measured again."""
    rec: Dict[str, Any] = {"schema_version": RECORD_SCHEMA_VERSION, **{k: candidate[k] for k in (
        "candidate", "level", "problem", "problem_name", "sample")}, "attempt": attempt, "preset": step["preset"],
        "processes": step.get("processes"), "final": then is None, "next": dict(then) if then else None,
        "status": status, "seconds": round(float(seconds), 3), "run_dir": run_dir, "kept": kept}
    if result is None:
        rec.update(verdict=None, correct=False, speedup=None, ci_low=None, ci_high=None, category="problem error",
                   kind=ERROR, reason=note or "the manifest could not run")
        return rec
    overall = (result.get("measured") or {}).get("overall") or {}
    category, kind, reason = classify(result)
    if not reason and result.get("verdict") == "inconclusive":
        reason = next(iter(result.get("reasons") or []), "")  # why more measurement was (or is) needed
    rec.update(verdict=result.get("verdict"), correct=is_correct(result), speedup=overall.get("speedup"),
               ci_low=overall.get("ci_low"), ci_high=overall.get("ci_high"), category=category, kind=kind,
               reason=reason[:400], memory=_memory(result))
    return rec


def _memory(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The plain call's peak (the memory plan's) and each side's largest peaks, as the run stored them."""
    mem = result.get("memory")
    if not isinstance(mem, dict):
        return None
    sides = {}
    for side, data in ((mem.get("measured") or {}).items()):
        peaks = (data or {}).get("peaks") or {}
        sides[side] = {kind: (peaks.get(kind) or {}).get("bytes") for kind in ("peak_allocated", "peak_reserved",
                                                                              "peak_rss")}
    return {"plain_peak_bytes": mem.get("plain_peak_bytes"), "sides": sides}


def final_records(session_dir: Path) -> List[Dict[str, Any]]:
    """The last record of each candidate in ``candidates.jsonl`` (a later attempt replaces an earlier)."""
    path = Path(session_dir) / RECORDS
    out: Dict[str, Dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out[rec["candidate"]] = rec
    return list(out.values())


def all_records(session_dir: Path) -> List[Dict[str, Any]]:
    path = Path(session_dir) / RECORDS
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []


# --- the report -----------------------------------------------------------------------------


def load_audit(session_dir: Path) -> Dict[str, Any]:
    path = Path(session_dir) / AUDIT
    if not path.is_file():
        raise ExpkitError(f"{session_dir}: not an audit folder (no {AUDIT})")
    data = json.loads(path.read_text())
    if int(data.get("schema_version", 0)) != AUDIT_SCHEMA_VERSION:
        raise ExpkitError(f"{path}: schema_version {data.get('schema_version')} is not one this expkit reads "
                          f"({AUDIT_SCHEMA_VERSION})")
    return data


def _frac(x: Mapping[str, Any]) -> str:
    if x.get("value") is None:
        return "n/a"
    iv = f" [{x['ci_low']:.2f}, {x['ci_high']:.2f}]" if x.get("ci_low") is not None else ""
    return f"{x['value']:.2f}{iv} ({x['k']}/{x['n']})"


def _gm(x: Mapping[str, Any]) -> str:

    if x.get("value") is None:
        return "n/a (nothing correct)"
    iv = f" [{fmt_x(x['ci_low'])}, {fmt_x(x['ci_high'])}]" if x.get("ci_low") is not None else ""
    return f"{fmt_x(x['value'])}{iv} (over {x['n']})"


def _speed(r: Optional[Mapping[str, Any]]) -> str:

    if not r or r.get("speedup") is None:
        return "not measured"
    iv = f" [{fmt_x(r['ci_low'])}, {fmt_x(r['ci_high'])}]" if r.get("ci_low") is not None else ""
    return f"{fmt_x(r['speedup'])}{iv}"


def _summary_tables(views: Mapping[str, Any], thresholds: Sequence[float]) -> Tuple[List[Dict[str, Any]],
                                                                                     List[Dict[str, Any]]]:
    table = [{"measure": "correct", **{v: _frac(views[v]["correct"]) for v in views}},
             {"measure": "geometric-mean speedup of the correct", **{v: _gm(views[v]["geomean"]) for v in views}}]
    for p in thresholds:
        table.append({"measure": f"fast_{p_key(p)}", **{v: _frac(views[v]["fast_p"][p_key(p)]) for v in views}})
    first = views["first"]["fast_p"]
    lower = [{"measure": f"fast_{p_key(p)}", "point": _frac(first[p_key(p)]), "lower": _frac(first[p_key(p)]["lower_bound"])}
             for p in thresholds]
    return table, lower


def _invalid_rows(records: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:

    out = []
    for row in invalid_counts(records):
        t = sorted(row["timed"])
        timed = (f"{len(t)} timed, median {fmt_x(t[len(t) // 2])}, {sum(x > 1 for x in t)} above 1×" if t
                 else "never timed")
        out.append({**row, "timed": timed})
    return out


def _step(attempt: Mapping[str, Any]) -> str:
    """How an attempt measured, in the table: its preset, and the processes where a retry raised them."""
    return attempt["preset"] + (f" in {attempt['processes']} processes" if attempt.get("processes") else "")


def _candidate_rows(session_dir: Path, plan: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                    attempts: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:

    by_name = {r["candidate"]: r for r in records}
    rows = []
    for c in plan.get("candidates") or []:
        r = by_name.get(c["candidate"])
        tries = [a for a in attempts if a["candidate"] == c["candidate"]]
        reason = (r or {}).get("reason") or ""
        has_report = r is not None and (session_dir / r["run_dir"] / "report.md").is_file()
        rows.append({
            "candidate": cell(c["candidate"]), "problem": cell(c["problem_name"]), "sample": c["sample"],
            "verdict": (r["verdict"] or r["status"]) if r else "not run", "measured": _speed(r),
            "category": cell((r or {}).get("category") or ""),
            "attempts": " → ".join(f"{_step(a)}: {a['verdict'] or a['status']}" for a in tries) or "none",
            "seconds": fmt_duration(sum(a["seconds"] for a in tries)) if tries else "n/a",
            "reason": cell(reason[:160] + ("…" if len(reason) > 160 else "")),
            "report": f"[report]({r['run_dir']}/report.md)" if has_report and r else "",
        })
    return rows


def _claim_rows(records: Sequence[Mapping[str, Any]], views: Mapping[str, Any],
                claims: Optional[Mapping[str, Any]]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:

    if not claims:
        return [], []
    per_problem = []
    for row in claims_against(records, claims):
        c, r = row["claim"], row["record"]
        per_problem.append({"problem": cell(c["problem"]), "sample": c["sample"], "claimed": fmt_x(c["speedup"]),
                            "measured": _speed(r), "verdict": (r["verdict"] or r["status"]) if r else "n/a",
                            "reading": cell(row["reading"])})
    summary = []
    for row in summary_against(views, claims):
        geometric = "geometric" in row["measure"]
        summary.append({"measure": row["measure"],
                        "claimed": fmt_x(row["claimed"]) if geometric else f"{row['claimed']:.2f}",
                        "measured": _gm(row["measured"]) if geometric else _frac(row["measured"]),
                        "reading": row["reading"]})
    return per_problem, summary


def _retry_facts(plan: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                 attempts: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:

    final = {r["candidate"]: r.get("verdict") for r in records}
    first = [a["candidate"] for a in attempts if a["attempt"] == 1 and a["verdict"] == "inconclusive"]
    before = {(a["candidate"], a["attempt"]): a for a in attempts}
    same = [a for a in attempts if a["attempt"] > 1
            and (before.get((a["candidate"], a["attempt"] - 1)) or {}).get("preset") == a["preset"]]
    return {"inconclusive": len(first), "retried": len({a["candidate"] for a in attempts if a["attempt"] > 1}),
            "in_processes": len(same), "up": sum(a["attempt"] > 1 for a in attempts) - len(same),
            "left": sum(final.get(c) == "inconclusive" for c in first),
            "kept": [{"candidate": cell(r["candidate"]), "measured": _speed(r),
                      "attempts": " → ".join(_step(a) for a in attempts if a["candidate"] == r["candidate"]),
                      "why": cell(r.get("kept") or "not recorded (the audit is older than the records that say why)")}
                     for r in records if r.get("verdict") == "inconclusive"],
            "retries": plan.get("retries"),
            "budget": None if plan.get("budget_seconds") is None else f"{float(plan['budget_seconds']):g}",
            "spent": fmt_duration(sum(a["seconds"] for a in attempts if a["attempt"] > 1))}


def _cost(plan: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:

    seconds = sum(a["seconds"] for a in attempts)
    wall = plan.get("wall_seconds")
    n = len({a["candidate"] for a in attempts if a["final"]})  # judged: an interrupted audit's others cost nothing yet
    return {"wall": fmt_duration(wall) if wall is not None else "n/a", "worker": fmt_duration(seconds),
            "per_candidate": fmt_duration(seconds / n) if n else "n/a",
            "per_candidate_wall": fmt_duration(wall / n) if n and wall is not None else "n/a",
            "attempts": len(attempts), "slots": plan.get("slots")}


def context(session_dir: Path) -> Dict[str, Any]:
    """Everything ``audit.md`` shows, computed from ``audit.json`` and ``candidates.jsonl`` alone."""

    session_dir = Path(session_dir)
    plan = load_audit(session_dir)
    records = final_records(session_dir)
    attempts = all_records(session_dir)
    thresholds = tuple(plan.get("thresholds") or THRESHOLDS)
    conf = float(plan.get("confidence") or 0.95)
    views = summarise(records, thresholds, conf, unjudged=len(plan.get("problems_without_candidates") or []))
    table, lower = _summary_tables(views, thresholds)
    claims, summary_claims = _claim_rows(records, views, plan.get("claims"))
    return {
        "title": cell(plan.get("name") or session_dir.name),
        "source": cell(", ".join(plan.get("inputs") or [])),
        "problems_root": cell(plan.get("problems_root") or "n/a"),
        "n_candidates": len(plan.get("candidates") or []), "n_problems": views["all"]["problems"],
        "n_unjudged": len(plan.get("problems_without_candidates") or []),
        "finished": len(records), "preset": plan.get("preset"), "device": plan.get("device"),
        "table": table, "lower": lower, "invalid": _invalid_rows(records),
        "rows": _candidate_rows(session_dir, plan, records, attempts),
        "claims": claims, "summary_claims": summary_claims, "has_claims": bool(plan.get("claims")),
        "confidence": f"{conf:.0%}", "bootstrap": BOOTSTRAP, "seed": SEED,
        "retry": _retry_facts(plan, records, attempts), "cost": _cost(plan, attempts),
        "missing_problems": plan.get("problems_without_candidates") or [],
        "orphans": plan.get("orphans") or [],
        "interrupted": bool(plan.get("interrupted")),
    }


def render(session_dir: Path) -> str:
    """``audit.md`` of an audit folder, from its stored files alone."""

    return template_env().get_template("audit.md.j2").render(**context(session_dir))


def write(session_dir: Path) -> Path:
    out = Path(session_dir) / AUDIT_REPORT
    store.atomic_write(out, render(session_dir))
    return out


def append_record(session_dir: Path, rec: Mapping[str, Any]) -> None:
    """Add one record to ``candidates.jsonl`` (one line, flushed at once, so a reader sees whole lines)."""
    with open(Path(session_dir) / RECORDS, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()


def terminal_summary(session_dir: Path) -> str:
    """What ``expkit audit`` prints: ``audit.md`` up to its table of candidates."""
    text = render(session_dir)
    return text.split("\n## Candidates", 1)[0].rstrip()
