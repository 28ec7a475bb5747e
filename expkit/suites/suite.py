"""Suites: many manifests, one session, one summary, one exit code.

``expkit run PATH`` with a folder (its ``*.yaml``/``*.yml`` files, not its
subfolders), a glob (``'manifests/**/*.yaml'``, quoted so that expkit expands it,
``**`` included) or several paths runs each manifest in its own worker process
(:mod:`expkit.suites.manifest_process`), placed by a launcher (:mod:`expkit.suites.launchers`: this
machine's GPUs, or SLURM), into one session folder (:mod:`expkit.report.session`):
``session.json``, ``session.md`` and one run folder per manifest, each what a single
``expkit run --out`` writes plus the worker's ``job.json``, ``worker.stdout`` and
``worker.stderr``. The session also holds ``suite.json``: the overrides the suite
was started with, so that a resumed suite measures the same way.

What a suite does with each kind of failure, so that none loses another's result:

* A manifest that cannot be loaded or cannot run here (bad YAML, a reference that
  does not import, a GPU manifest with no GPU visible) is an **error**: it gets its
  run folder and a line in ``session.json`` (status ``crashed``, the message as its
  note), no result.json, and the others go on.
* A worker that crashes, hangs past ``launcher.timeout_seconds`` or is killed gets
  an **invalid** result written for it, naming the cause (see ``manifest_process.py``).
* A suite interrupted (Ctrl-C, SIGTERM) kills its running workers and keeps every
  finished run; ``expkit run --resume SESSION_DIR`` runs only the runs that have no
  result.json -- unfinished, interrupted or errored (fix the manifest, then resume).
  A suite killed outright (SIGKILL) leaves the same state; its workers die with it.

Exit code: the worst outcome across the session, worst first: ``invalid`` (3),
``refuted`` (1), a manifest **error** (2), ``inconclusive`` (4), ``supported`` (0);
130 if interrupted. An invalid or refuted claim is the strongest news a gate can
carry and stays true however many other manifests are broken, so it outranks the
usage error; a broken manifest outranks inconclusive, because it left a claim
untested and needs a fix, where inconclusive needs only more measurement. So a
suite exits 2 exactly when no claim was found invalid or refuted and at least one
manifest could not run; the summary lists each one.
"""

from __future__ import annotations

import datetime as _dt
import glob as _glob
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.errors import ConfigError, ExpkitError
from .manifest_process import DONE, RESULT, Job, Outcome
from ..manifest.spec import load as load_manifest
from ..report import session as ses
from ..manifest.settings import load_settings
from ..report import store
from ..report.store import write_json
from ..verdict.wording import fmt_x
from .launchers import make_launcher

SUITE = "suite.json"
SUITE_SCHEMA_VERSION = 1
ERROR = "error"
INTERRUPTED_EXIT = 130
#: Worst first; ``error`` is a manifest that could not run (exit 2). See the module docstring.
SUITE_SEVERITY = ("invalid", "refuted", ERROR, "inconclusive", "supported")
EXIT = {"supported": 0, "refuted": 1, ERROR: 2, "invalid": 3, "inconclusive": 4}
_GLOB_CHARS = set("*?[")

Log = Callable[[str], None]


@dataclass(frozen=True)
class Row:
    """One run of a suite as the summary shows it.

    ``status``: ``done`` (a result), ``crashed`` (a result the supervisor wrote for
    a worker that died), ``error`` (no result: the manifest could not run) or
    ``unfinished`` (interrupted before it ended)."""

    run: str
    manifest: str
    status: str
    verdict: Optional[str] = None
    note: str = ""
    result: Optional[Mapping[str, Any]] = None

    @property
    def outcome(self) -> Optional[str]:
        """The word this row contributes to the exit code."""
        if self.verdict is not None:
            return self.verdict
        return ERROR if self.status == ERROR else None


@dataclass(frozen=True)
class SuiteOutcome:
    session_dir: Path
    rows: Tuple[Row, ...]
    exit_code: int
    report: Optional[Path]
    interrupted: bool = False


def is_suite(paths: Sequence[str]) -> bool:
    """Whether ``expkit run`` should treat its paths as a suite (else: one manifest in-process)."""
    return len(paths) != 1 or Path(paths[0]).is_dir() or bool(_GLOB_CHARS & set(paths[0]))


def expand(paths: Sequence[str]) -> List[Path]:
    """The manifests that ``paths`` name, in order, each once; ExpkitError if none."""
    out: List[Path] = []
    for p in paths:
        if _GLOB_CHARS & set(p):
            found = [Path(x) for x in sorted(_glob.glob(p, recursive=True)) if Path(x).is_file()]
            if not found:
                raise ExpkitError(f"{p}: the pattern matches no file")
        elif Path(p).is_dir():
            found = sorted(x for x in Path(p).iterdir() if x.is_file() and x.suffix in (".yaml", ".yml"))
            if not found:
                raise ExpkitError(f"{p}: the folder holds no manifest (*.yaml, *.yml)")
        elif Path(p).is_file():
            found = [Path(p)]
        else:
            raise ExpkitError(f"{p}: no such file or folder")
        out.extend(found)
    seen, unique = set(), []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def exit_code(rows: Sequence[Row]) -> int:
    """The worst outcome's exit code (see the module docstring); 0 for no outcome."""
    words = {r.outcome for r in rows}
    for w in SUITE_SEVERITY:
        if w in words:
            return EXIT[w]
    return 0


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _read_suite(session_dir: Path) -> Dict[str, Any]:
    path = session_dir / SUITE
    if not path.is_file():
        return {"schema_version": SUITE_SCHEMA_VERSION, "overrides": []}
    return json.loads(path.read_text())


def resume_overrides(recorded: Sequence[str], given: Sequence[str]) -> List[str]:
    """A resumed suite keeps its measurement settings; only ``launcher.*`` may change."""
    bad = [o for o in given if not o.lstrip("+~").startswith("launcher")]
    if bad:
        raise ConfigError(f"--resume keeps the settings the suite started with ({list(recorded) or 'none'}); "
                          f"only launcher settings may change, got {bad}")
    return list(recorded) + list(given)


def _row_from_result(run_dir: Path, manifest: str, rec: Mapping[str, Any]) -> Row:

    try:
        res = store.load_result(run_dir / store.RESULT)
    except Exception as e:  # an unreadable result is reported, never fatal to the suite
        return Row(run_dir.name, manifest, ERROR, None, f"result.json could not be read: {e}")
    crashed = rec.get("status") == "crashed"
    return Row(run_dir.name, manifest, "crashed" if crashed else DONE, res["verdict"],
               rec.get("note", "") if crashed else "", res)


def run_suite(paths: Sequence[str] = (), overrides: Sequence[str] = (), *, out: Optional[Path] = None,
              root: Path = Path("reports"), resume: Optional[Path] = None, append: bool = False,
              launcher: Any = None, log: Optional[Log] = None) -> SuiteOutcome:
    """Run the manifests ``paths`` name (or finish the session ``resume``); see the module docstring.

    ``out`` is the session folder (default: a new one under ``root``); with ``append``
    it may already be a session, and the suite's runs are added to it. ``launcher``
    replaces the one the settings choose. ``log`` receives one line per run started
    and ended.
    """

    say = log or (lambda line: None)
    if resume is not None:
        session_dir = Path(resume)
        if not (session_dir / ses.SESSION).is_file():
            raise ExpkitError(f"{session_dir}: not a session folder (no {ses.SESSION}); "
                              "--resume takes the folder a suite printed")
        overrides = resume_overrides(_read_suite(session_dir).get("overrides", []), overrides)
    settings = load_settings(overrides)
    todo: List[Tuple[Path, str]] = []  # (run folder, manifest path)
    rows: Dict[str, Row] = {}
    order: List[str] = []
    if resume is not None:
        data = json.loads((session_dir / ses.SESSION).read_text())
        for rec in data["runs"]:
            run_dir = session_dir / rec["run"]
            order.append(rec["run"])
            if (run_dir / RESULT).is_file():
                rows[rec["run"]] = _row_from_result(run_dir, rec["manifest"], rec)
            else:
                todo.append((run_dir, rec["manifest"]))
        say(f"resuming {session_dir}: {len(rows)} run(s) finished, {len(todo)} to run")
    else:
        if not paths:
            raise ExpkitError("run: give a manifest, a folder or a glob of them (or --resume SESSION_DIR)")
        manifests = expand(paths)
        if out is not None:
            if (Path(out) / ses.SESSION).is_file() and not append:
                raise ExpkitError(f"{out}: already a session; resume it with --resume {out}, or pick a new --out")
            session_dir = ses.open_session(Path(out))
        else:
            first = paths[0] if len(paths) == 1 else "suite"
            session_dir = ses.new_session(root, name=Path(first.split("*")[0].rstrip("/") or "suite").name)

        write_json(session_dir / SUITE, {"schema_version": SUITE_SCHEMA_VERSION, "started": _now(),
                                         "paths": list(paths), "overrides": list(overrides),
                                         "launcher": settings.launcher.name})
        for m in manifests:
            run_dir = ses.register_run(session_dir, m.resolve())
            order.append(run_dir.name)
            todo.append((run_dir, str(m.resolve())))
        say(f"session {session_dir}: {len(todo)} manifest(s)")

    launch = launcher if launcher is not None else make_launcher(settings.launcher, session_dir)
    gpus = launch.gpus()
    jobs: List[Job] = []
    for run_dir, manifest in todo:
        try:
            device = load_manifest(manifest).manifest.device
            if device == "cuda" and gpus is not None and not gpus:
                raise ExpkitError(f"{manifest}: device: the manifest needs a CUDA GPU and this machine's launcher "
                                  "sees none (CUDA_VISIBLE_DEVICES, or run it with launcher=slurm)")
        except ExpkitError as e:
            rows[run_dir.name] = Row(run_dir.name, manifest, ERROR, None, str(e))
            ses.mark(session_dir, run_dir, ses.CRASHED, note=f"error: {e}")
            say(f"error  {run_dir.name}: {e}")
            continue
        jobs.append(Job(manifest, str(run_dir), tuple(overrides), device,
                        timeout=float(settings.launcher.timeout_seconds)))

    started: Dict[str, float] = {}
    total = len(jobs)

    def on_start(job: Job) -> None:
        name = Path(job.run_dir).name
        started[name] = time.monotonic()
        ses.mark(session_dir, Path(job.run_dir), ses.RUNNING)
        where = f" on GPU {job.gpu}" if job.gpu is not None else f" ({job.device})"
        say(f"start  {name}{where}")

    def on_done(job: Job, o: Outcome) -> None:
        run_dir = Path(job.run_dir)
        name = run_dir.name
        if o.status == DONE:
            ses.mark(session_dir, run_dir, ses.CRASHED if o.crashed else ses.DONE, note=o.cause)
            row = _row_from_result(run_dir, job.manifest, {"status": "crashed" if o.crashed else DONE,
                                                            "note": o.cause})
        else:
            ses.mark(session_dir, run_dir, ses.CRASHED, note=f"error: {o.cause}")
            row = Row(name, job.manifest, ERROR, None, o.cause)
        rows[name] = row
        ses.render_session(session_dir)
        finished = sum(1 for j in jobs if Path(j.run_dir).name in rows)
        say(f"done   {name}: {(row.verdict or row.status).upper()} in {o.seconds:.1f} s"
            + (f" ({row.note})" if row.note else "") + f" [{finished}/{total}]")

    interrupted = False
    restore = sigterm_as_interrupt()
    try:
        launch.run(jobs, on_start, on_done)
    except KeyboardInterrupt:
        interrupted = True
        for job in jobs:
            name = Path(job.run_dir).name
            if name not in rows:
                ses.mark(session_dir, Path(job.run_dir), ses.QUEUED,
                         note=f"interrupted; `expkit run --resume {session_dir}` runs it again")
                rows[name] = Row(name, job.manifest, "unfinished", None, "interrupted")
        say(f"interrupted: finished runs are kept; resume with: expkit run --resume {session_dir}")
    finally:
        restore()
    report = ses.render_session(session_dir)
    ordered = tuple(rows[n] for n in order if n in rows)
    code = INTERRUPTED_EXIT if interrupted else exit_code(ordered)
    return SuiteOutcome(session_dir, ordered, code, report, interrupted)


def sigterm_as_interrupt() -> Callable[[], None]:
    """While a suite runs, SIGTERM stops it the way Ctrl-C does (workers killed, runs kept)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous)


# --- the summary -----------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_summary(outcome: SuiteOutcome) -> str:
    """The table ``expkit run`` prints after a suite: one row per run, failures included."""

    lines = ["| Run | Verdict | Measured speedup [interval] | Claimed | Time | Note |",
             "|---|---|---|---|---|---|"]
    for r in outcome.rows:
        res = r.result or {}
        overall = (res.get("measured") or {}).get("overall")
        measured = (f"{fmt_x(overall['speedup'])} [{fmt_x(overall['ci_low'])}, {fmt_x(overall['ci_high'])}]"
                    if overall else "not measured")
        claimed = fmt_x((res.get("claim") or {}).get("speedup")) if res else "n/a"
        seconds = f"{res['wall_seconds']:.1f} s" if res.get("wall_seconds") is not None else "n/a"
        word = r.verdict or r.status
        note = r.note or (res.get("reasons") or [""])[0] if word != "supported" else r.note
        if r.status == "crashed":
            word += " (worker died)"
        lines.append(f"| {_cell(r.run)} | {_cell(word)} | {measured} | {claimed} | {seconds} | "
                     f"{_cell(note[:160] + ('…' if len(note) > 160 else ''))} |")
    counts: Dict[str, int] = {}
    for r in outcome.rows:
        w = r.verdict or r.status
        counts[w] = counts.get(w, 0) + 1
    tail = ", ".join(f"{n} {w}" for w, n in counts.items())
    lines.append("")
    lines.append(f"{len(outcome.rows)} run(s): {tail}. Exit code {outcome.exit_code}.")
    lines.append(f"session: {outcome.session_dir}")
    if outcome.report is not None:
        lines.append(f"report: {outcome.report}")
    if outcome.interrupted or any(r.status in (ERROR, "unfinished") for r in outcome.rows):
        lines.append(f"to run what is missing: expkit run --resume {outcome.session_dir}")
    return "\n".join(lines)


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
