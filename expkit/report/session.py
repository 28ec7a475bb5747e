"""Sessions: one folder that every run of one invocation writes into, and its report.

Layout (the contract between ``expkit run`` on many manifests and ``expkit session``)::

    SESSION_DIR/
      session.json        # the plan and each run's status (below)
      session.md          # rendered by render_session() from the run folders alone
      <run>/              # one folder per run: what a single ``expkit run --out <run>`` writes
        result.json  samples.csv  env.json  report.md  speedup.png  timings.png

``session.json`` (``schema_version`` 1)::

    {"schema_version": 1, "started": "<ISO time>",
     "runs": [{"manifest": "<path>", "run": "<folder name>", "status": "queued",
               "started": null, "finished": null, "note": ""}, ...]}

``status`` is one of ``queued``, ``running``, ``done``, ``crashed``; ``started`` and
``finished`` are ISO times set by :func:`mark`; ``note`` says why a run crashed.

How a suite uses it::

    session = new_session(Path("reports"))            # reports/<stamp>-session/
    for path in manifests:
        run_dir = register_run(session, path)         # queued, folder created
    for ...:
        mark(session, run_dir, "running")
        try: run_manifest(path, out_dir=run_dir); mark(session, run_dir, "done")
        except Exception as e: mark(session, run_dir, "crashed", note=str(e))
    render_session(session)                           # session.md

Every write of ``session.json`` is atomic (temporary file, then rename) and made under an
advisory lock (POSIX ``flock`` on the session folder) so that runs in parallel processes do
not lose each other's updates. A session killed at any point still renders: the report is made
from the run folders, and a folder without ``result.json`` is listed as unfinished (with its
recorded status), not treated as an error. A run folder that has ``result.json`` counts as
finished whatever its recorded status says (the process may have died between writing its
result and marking it). Folders with a ``result.json`` that ``session.json`` does not list are
included too, and a folder that is itself a run (``DIR/result.json``, what a single
``expkit run`` writes) reads as a one-run session.

session.json history (``schema_version``):
  1 -- first version: started, runs (manifest, run, status, started, finished, note).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from . import store
from ..core.errors import ExpkitError
from ..verdict.rules import EXIT_CODES, INCONCLUSIVE, INVALID, VERDICTS, worst
from ..verdict.wording import fmt_x
from .formatting import cell, fmt_duration, fmt_usd, settle_hint, template_env

SESSION = "session.json"
SESSION_REPORT = "session.md"
SESSION_SCHEMA_VERSION = 1
QUEUED, RUNNING, DONE, CRASHED = "queued", "running", "done", "crashed"
STATUSES = (QUEUED, RUNNING, DONE, CRASHED)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name).strip(".") or "run"


@contextlib.contextmanager
def _locked(session_dir: Path) -> Iterator[None]:
    try:
        # lazy: POSIX only
        import fcntl
    except ImportError:  # not POSIX: no lock, a parallel suite may lose a status update
        yield
        return
    # Lock the folder itself: no lock file left behind in the session.
    fd = os.open(session_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read(session_dir: Path) -> Dict[str, Any]:
    path = session_dir / SESSION
    data = json.loads(path.read_text())
    version = int(data.get("schema_version", 0))
    if version != SESSION_SCHEMA_VERSION:
        raise ExpkitError(f"{path}: schema_version {version} is not one this expkit reads "
                          f"({SESSION_SCHEMA_VERSION})")
    return data


def _write(session_dir: Path, data: Mapping[str, Any]) -> None:
    store.write_json(session_dir / SESSION, data)


def open_session(session_dir: Path) -> Path:
    """Use ``session_dir`` as a session, creating it and its ``session.json`` where missing."""
    session_dir = store.make_folder(Path(session_dir), "session folder")
    with _locked(session_dir):
        if not (session_dir / SESSION).is_file():
            _write(session_dir, {"schema_version": SESSION_SCHEMA_VERSION, "started": _now(), "runs": []})
    return session_dir


def new_session(root: Path = Path("reports"), name: str = "session") -> Path:
    """A new, empty session folder under ``root`` (``<root>/<YYYYmmdd-HHMMSS>-<name>``)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{stamp}-{_safe(name)}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return open_session(out)


def register_run(session_dir: Path, manifest_path: Path, name: Optional[str] = None) -> Path:
    """Add a queued run of ``manifest_path``; returns its (new, empty) run folder.

    The folder is named after ``name`` or the manifest's file name, with ``-2``, ``-3`` ...
    where a session runs the same manifest more than once.
    """
    session_dir = Path(session_dir)
    base = _safe(name or Path(manifest_path).stem)
    with _locked(session_dir):
        data = _read(session_dir)
        taken = {r["run"] for r in data["runs"]}
        run, n = base, 1
        while run in taken or (session_dir / run).exists():
            n += 1
            run = f"{base}-{n}"
        (session_dir / run).mkdir(parents=True)
        data["runs"].append({"manifest": str(manifest_path), "run": run, "status": QUEUED,
                             "started": None, "finished": None, "note": ""})
        _write(session_dir, data)
    return session_dir / run


def mark(session_dir: Path, run_dir: Path, status: str, note: str = "") -> None:
    """Record a run's status: ``running`` stamps its start, ``done``/``crashed`` its end."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    session_dir = Path(session_dir)
    name = Path(run_dir).name
    with _locked(session_dir):
        data = _read(session_dir)
        for r in data["runs"]:
            if r["run"] == name:
                break
        else:
            raise ExpkitError(f"{session_dir / SESSION}: no run named {name!r} (register it first)")
        r["status"] = status
        if status == RUNNING:
            r["started"] = _now()
        elif status in (DONE, CRASHED):
            r["finished"] = _now()
        if note:
            r["note"] = note
        _write(session_dir, data)


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEntry:
    """One run of a session as read back: its folder, what session.json says, its result if any."""

    name: str
    folder: Path
    manifest: Optional[str] = None
    status: str = DONE
    started: Optional[str] = None
    finished: Optional[str] = None
    note: str = ""
    result: Optional[Mapping[str, Any]] = None
    error: Optional[str] = None

    @property
    def finished_ok(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class Session:
    folder: Path
    started: Optional[str]
    runs: Tuple[RunEntry, ...] = field(default_factory=tuple)
    listed: bool = True  # False: no session.json (a plain run folder or a folder of runs)


def _entry(folder: Path, name: str, rec: Mapping[str, Any]) -> RunEntry:
    result, error = None, None
    if store.is_run_dir(folder):
        try:
            result = store.load_result(folder / store.RESULT)
        except (ExpkitError, ValueError, OSError) as e:
            error = f"result.json could not be read: {e}"
    status = DONE if result is not None else rec.get("status", QUEUED)
    return RunEntry(name, folder, rec.get("manifest") or (result or {}).get("manifest", {}).get("path"),
                    status, rec.get("started") or (result or {}).get("started"), rec.get("finished"),
                    rec.get("note") or "", result, error)


def load_session(folder: Path) -> Session:
    """Read a session folder, a folder of run folders, or one run folder (a one-run session)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ExpkitError(f"{folder}: no such folder")
    if store.is_run_dir(folder) and not (folder / SESSION).is_file():
        e = _entry(folder, folder.name, {})
        return Session(folder, e.started, (e,), listed=False)
    listed = (folder / SESSION).is_file()
    data = _read(folder) if listed else {"started": None, "runs": []}
    runs: List[RunEntry] = []
    seen = set()
    for rec in data["runs"]:
        runs.append(_entry(folder / rec["run"], rec["run"], rec))
        seen.add(rec["run"])
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in seen):
        if store.is_run_dir(sub):
            runs.append(_entry(sub, sub.name, {}))
    if not runs and not listed:
        raise ExpkitError(f"{folder}: neither a session (no {SESSION}) nor a run folder (no {store.RESULT}), "
                          "and no run folders inside it")
    started = data.get("started") or min((r.started for r in runs if r.started), default=None)
    return Session(folder, started, tuple(runs), listed)


# --- the report ------------------------------------------------------------------------------


def _parse(ts: Optional[str]) -> Optional[_dt.datetime]:
    try:
        return _dt.datetime.fromisoformat(ts) if ts else None
    except ValueError:
        return None


def summary(s: Session) -> Dict[str, Any]:
    """Machine-readable totals of a session (what ``expkit session --json`` prints)."""
    done = [r for r in s.runs if r.result is not None]
    verdicts = [r.result["verdict"] for r in done]
    seconds = sum(float((r.result.get("cost") or {}).get("seconds") or 0) for r in done)
    priced = [r for r in done if (r.result.get("cost") or {}).get("usd") is not None]
    usd = sum(float(r.result["cost"]["usd"]) for r in priced)
    return {
        "session": str(s.folder),
        "started": s.started,
        "runs": len(s.runs),
        "finished": len(done),
        "unfinished": len(s.runs) - len(done),
        "verdicts": {v: verdicts.count(v) for v in VERDICTS if v in verdicts},
        "worst": worst(verdicts) if verdicts else None,
        "exit_code": EXIT_CODES[worst(verdicts)] if verdicts else None,
        "device_seconds": seconds,
        "usd": usd,
        "unpriced_runs": len(done) - len(priced),
        "results": [{"run": r.name, "status": r.status, "verdict": (r.result or {}).get("verdict"),
                     "name": (r.result or {}).get("name"), "reasons": list((r.result or {}).get("reasons") or [])}
                    for r in s.runs],
    }


def context(s: Session) -> Dict[str, Any]:

    tot = summary(s)
    timeline, claims, findings = [], [], []
    ends = []
    for i, r in enumerate(s.runs, 1):
        res = r.result
        link = f"[{cell(r.name)}]({r.name}/report.md)" if res is not None and (r.folder / store.REPORT).is_file() \
            else cell(r.name)
        if s.folder == r.folder:
            link = "[report](report.md)" if (r.folder / store.REPORT).is_file() else cell(r.name)
        if res is None:
            state = "unfinished: " + {QUEUED: "queued, never started", RUNNING: "started, no result (killed?)",
                                      CRASHED: "crashed", DONE: "marked done, but no result.json"}.get(r.status, r.status)
            timeline.append({"n": i, "run": link, "manifest": cell(Path(r.manifest).name if r.manifest else "?"),
                             "started": r.started or "not started", "duration": "n/a", "verdict": state})
            findings.append({"kind": "unfinished", "run": cell(r.name),
                             "text": cell(state.split(": ", 1)[1] + (f": {r.note}" if r.note else "") +
                                          (f"; {r.error}" if r.error else ""))})
            continue
        wall = float(res.get("wall_seconds") or 0)
        start = _parse(res.get("started"))
        if start is not None:
            ends.append(start + _dt.timedelta(seconds=wall))
        timeline.append({"n": i, "run": link, "manifest": cell(Path(res.get("manifest", {}).get("path", "?")).name),
                         "started": res.get("started", "n/a"), "duration": fmt_duration(wall),
                         "verdict": f"`{res['verdict']}`"})
        claim = res.get("claim") or {}
        claimed_on = claim.get("claimed_on") or "not stated"
        where = (res.get("environment") or {}).get("where", "n/a")
        cases = (res.get("measured") or {}).get("cases") or {}
        if not cases:
            claims.append({"run": cell(res["name"]), "case": "all", "claimed": fmt_x(claim.get("speedup")),
                           "claimed_on": cell(claimed_on), "measured_on": cell(where),
                           "measured": "not measured", "bar": "n/a", "verdict": res["verdict"]})
        for name, c in cases.items():
            claims.append({"run": cell(res["name"]), "case": cell(name), "claimed": fmt_x(c.get("claimed")),
                           "claimed_on": cell(claimed_on), "measured_on": cell(where),
                           "measured": f"{fmt_x(c['speedup'])} [{fmt_x(c['ci_low'])}, {fmt_x(c['ci_high'])}]",
                           "bar": fmt_x(c.get("threshold")), "verdict": c.get("verdict") or "n/a"})
            if res["verdict"] == INCONCLUSIVE and c.get("verdict") == INCONCLUSIVE:
                hint = settle_hint(c)
                if hint:
                    findings.append({"kind": "inconclusive", "run": cell(res["name"]),
                                     "text": cell(f"case `{name}`: {hint}")})
        if res["verdict"] == INVALID:
            reasons = list(res.get("reasons") or ["no reason recorded"])
            more = f" (and {len(reasons) - 3} more in its report)" if len(reasons) > 3 else ""
            findings.append({"kind": "invalid", "run": cell(res["name"]),
                             "text": cell("; ".join(reasons[:3]) + more)})
        elif res["verdict"] == INCONCLUSIVE and not any(c.get("verdict") == INCONCLUSIVE for c in cases.values()):
            findings.append({"kind": "inconclusive", "run": cell(res["name"]),
                             "text": cell("; ".join(res.get("reasons") or ["no reason recorded"]))})
        mismatch = res.get("claim_mismatch")
        if mismatch:
            findings.append({"kind": "claimed elsewhere", "run": cell(res["name"]),
                             "text": cell(f"claimed on {mismatch['claimed_on']}, measured on "
                                          f"{mismatch['measured_on']}: {mismatch['note']}")})
    start = _parse(s.started)
    span = (max(ends) - start).total_seconds() if ends and start else None
    counts = ", ".join(f"{n} {v}" for v, n in tot["verdicts"].items()) or "no finished run"
    zero = sum(1 for r in s.runs if r.result is not None and (r.result.get("cost") or {}).get("usd_per_hour") == 0)
    if tot["unpriced_runs"]:
        cost = (f"at least {fmt_usd(tot['usd'])} ({tot['unpriced_runs']} of {tot['finished']} finished runs "
                "have no price; set cost.usd_per_hour=... to price them)")
    else:
        cost = fmt_usd(tot["usd"])
    if zero:
        cost += (f"; {zero} run{'s' if zero != 1 else ''} priced at zero (CPU runs are not priced unless "
                 "cost.usd_per_hour=... says so)")
    order = {"invalid": 0, "claimed elsewhere": 1, "inconclusive": 2, "unfinished": 3}
    findings.sort(key=lambda f: order.get(f["kind"], 9))
    return {
        "title": cell(s.folder.name),
        "started": s.started or "n/a",
        "span": fmt_duration(span) if span is not None else "n/a",
        "runs": tot["runs"],
        "finished": tot["finished"],
        "counts": counts,
        "worst": tot["worst"],
        "device_time": fmt_duration(tot["device_seconds"]),
        "cost": cell(cost),
        "timeline": timeline,
        "claims": claims,
        "findings": findings,
        "listed": s.listed,
    }


def render(folder: Path) -> str:
    """``session.md`` of ``folder`` (a session, a folder of runs, or one run), from stored files alone."""

    return template_env().get_template("session.md.j2").render(**context(load_session(folder)))


def render_session(session_dir: Path) -> Path:
    """Write ``session_dir/session.md``; returns its path."""
    out = Path(session_dir) / SESSION_REPORT
    store.atomic_write(out, render(session_dir))
    return out


def record_run(session_dir: Path, manifest_path: Path, run: Any, *, render: bool = True) -> Any:
    """Register ``manifest_path`` in the session, call ``run(run_dir)`` and record how it ended.

    ``run`` is e.g. ``lambda out: run_manifest(path, overrides, out)``; its return value is
    returned. The run is marked ``running`` before the call and ``done`` or ``crashed`` after
    (a crash is re-raised once recorded); with ``render``, ``session.md`` is re-rendered after
    each run, so a session killed later still has a report of everything before.
    """
    session_dir = open_session(Path(session_dir))
    run_dir = register_run(session_dir, Path(manifest_path))
    mark(session_dir, run_dir, RUNNING)
    try:
        out = run(run_dir)
    except BaseException as e:
        mark(session_dir, run_dir, CRASHED, note=f"{type(e).__name__}: {e}")
        if render:
            render_session(session_dir)
        raise
    mark(session_dir, run_dir, DONE)
    if render:
        render_session(session_dir)
    return out
