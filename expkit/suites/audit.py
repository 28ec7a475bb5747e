"""``expkit audit PATH``: judge every candidate of a kernel-generation run, then summarise it.

The input is a generation run in KernelBench's layout -- a folder of
``level_{L}_problem_{P}_sample_{S}_kernel.py`` files (what KernelBench's
``scripts/generate_samples.py`` writes into ``runs/<run_name>/``), whose problems are
``{P}_{Name}.py`` in ``<problems>/level{L}/`` (KernelBench's ``KernelBench/`` folder,
found beside the run where ``--problems`` is not given) -- or a list of manifests
(folders, globs, files; the candidates of one problem are those that name the same
``kernelbench.problem``, or else the same ``baseline``).

Every candidate is one manifest (written into ``manifests/`` of the audit folder for a
KernelBench run) run by one worker process through the suite's launchers
(:mod:`expkit.suites.launchers`: one worker per local GPU, ``--jobs N`` CPU workers,
or SLURM), so a candidate that does not compile, crashes, hangs past the time limit
or runs out of memory is a row of the table, never the end of the audit. As each
attempt ends, one JSON record is appended to ``candidates.jsonl``
(:func:`expkit.report.audit_report.record`); every attempt keeps its run folder and report.
At the end ``audit.md`` (:mod:`expkit.report.audit_report`) gives KernelBench's summary with
intervals, the not-correct candidates by reason and, with ``--claims``, the run's own
figures against the measurements.

**Inconclusive verdicts** are re-measured within the audit: a candidate whose
verdict is ``inconclusive`` with a measured speedup runs again (at most ``retries`` times),
in twice the processes where the spread between them is what is wide, else at the next
preset of :data:`~.retries.LADDER`, while the retries' worker seconds stay within
``budget`` (:mod:`.retries` says which retry and how its cost is taken). A retry keeps the
audit's overrides except ``measure=`` (and ``measure.processes`` where it raises them), so
other ``measure.*`` keys given on the command line still apply.

**What is kept between attempts.** The workers fork from one server that imported
torch and expkit once for the whole audit. Each candidate gets its own compile caches
(``TORCH_EXTENSIONS_DIR``, ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR`` under
``.cache/<candidate>/``), so its retries reuse what its first attempt compiled, and no
candidate can leave a compiled file that another one loads. The baseline's side is
not shared between the candidates of a problem: each verdict times its baseline
interleaved with its candidate, in fresh processes, and that pairing is what its
interval rests on (docs/audit.md says what sharing would take).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..core.errors import ExpkitError
from ..report import audit_report as rep
from .manifest_process import DONE, Job, Outcome
from .retries import LADDER, Retries, Step, next_preset, with_preset
from ..report import session as ses
from ..manifest.settings import load_settings
from ..manifest.spec import load
from ..report import store
from ..report.store import atomic_write, write_json
from .kernelbench_import import Pair, manifest_text
from .launchers import make_launcher, visible_gpus
from .suite import expand, resume_overrides, sigterm_as_interrupt

KERNEL_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
CACHE_VARS = (("TORCH_EXTENSIONS_DIR", "torch_extensions"), ("TRITON_CACHE_DIR", "triton"),
              ("TORCHINDUCTOR_CACHE_DIR", "inductor"))
INTERRUPTED_EXIT = 130

Log = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    """One candidate of the run: which problem and sample it is, and the manifest that judges it."""

    candidate: str
    level: Optional[int]
    problem: Any
    problem_name: str
    sample: int
    manifest: str


@dataclass(frozen=True)
class AuditOutcome:
    session_dir: Path
    records: Tuple[Dict[str, Any], ...]
    report: Path
    exit_code: int
    interrupted: bool = False


# --- finding the candidates -------------------------------------------------------------


def is_generation_run(path: Path) -> bool:
    """Whether ``path`` is a folder holding KernelBench's generated kernel files."""
    return Path(path).is_dir() and any(KERNEL_FILE.match(p.name) for p in Path(path).iterdir())


def problem_folder(run_dir: Path, level: int, problems: Optional[Path]) -> Path:
    """``<problems>/level{L}`` (or ``problems`` itself, if it is that level's folder); without
    ``problems``, a ``KernelBench/level{L}`` beside the run or up to two folders above it."""
    if problems is not None:
        for cand in (Path(problems) / f"level{level}", Path(problems) / "KernelBench" / f"level{level}",
                     Path(problems)):
            if cand.is_dir() and any(cand.glob("*.py")):
                return cand.resolve()
        raise ExpkitError(f"--problems {problems}: holds neither level{level}/ nor problem files "
                          f"(give KernelBench's KernelBench/ folder, or its level{level}/)")
    run_dir = Path(run_dir).resolve()
    for up in (run_dir, *run_dir.parents[:2]):
        cand = up / "KernelBench" / f"level{level}"
        if cand.is_dir():
            return cand
    raise ExpkitError(f"{run_dir}: no KernelBench/level{level}/ found beside the run or above it; "
                      "give the problems with --problems KERNELBENCH_DIR")


def _problems_by_id(folder: Path) -> Dict[int, Path]:
    out: Dict[int, Path] = {}
    for p in sorted(folder.glob("*.py")):
        head = p.name.split("_", 1)[0]
        if head.isdigit():
            out[int(head)] = p
    return out


def kernelbench_candidates(run_dir: Path, manifests: Path, *, problems: Optional[Path] = None,
                           device: str = "cuda", precision: str = "fp32", allow_baseline_ops: bool = False,
                           ) -> Tuple[List[Candidate], List[str], List[str], str]:
    """Write one manifest per generated kernel; returns the candidates, the kernels with no
    problem file, the problems with no kernel, and the problems' folder(s)."""

    run_dir = Path(run_dir)
    found = sorted((tuple(int(g) for g in m.groups()), p) for p in run_dir.iterdir()
                   if (m := KERNEL_FILE.match(p.name)))
    manifests.mkdir(parents=True, exist_ok=True)
    extra = "expect: {forbid_baseline: false}\n" if allow_baseline_ops else ""
    folders: Dict[int, Dict[int, Path]] = {}
    roots: List[str] = []
    cands, orphans = [], []
    for (level, pid, sample), path in found:
        if level not in folders:
            folder = problem_folder(run_dir, level, problems)
            folders[level] = _problems_by_id(folder)
            roots.append(str(folder))
        prob = folders[level].get(pid)
        if prob is None:
            orphans.append(path.name)
            continue
        name = path.name[: -len("_kernel.py")]
        target = manifests / f"{name}.yaml"
        atomic_write(target, manifest_text(Pair(prob.resolve(), path.resolve()), manifests, name, root=run_dir,
                                           device=device, precision=precision, extra=extra,
                                           command="expkit audit"))
        cands.append(Candidate(name, level, pid, prob.stem, sample, str(target)))
    used = {(c.level, c.problem) for c in cands}
    missing = [folders[lv][pid].stem for lv in sorted(folders) for pid in sorted(folders[lv])
               if (lv, pid) not in used]
    if not cands:
        raise ExpkitError(f"{run_dir}: no generated kernel found a problem file "
                          f"({len(orphans)} kernel file(s) without one)")
    return cands, orphans, missing, ", ".join(roots)


def manifest_candidates(paths: Sequence[str]) -> List[Candidate]:
    """Candidates from manifests: one problem per ``kernelbench.problem`` (else per baseline)."""

    cands: List[Candidate] = []
    per_problem: Dict[str, int] = {}
    for path in expand(paths):
        lm = load(path)
        m = lm.manifest
        if m.kernelbench is not None:
            key = str((lm.folder / m.kernelbench.problem).resolve())
            name = Path(key).stem
        else:
            key = name = str(m.baseline)
        sample = per_problem.get(key, 0)
        per_problem[key] = sample + 1
        head = name.split("_", 1)[0]
        cands.append(Candidate(path.stem, None, int(head) if head.isdigit() else name, name, sample,
                               str(path.resolve())))
    return cands


# --- running ------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _cache_env(session_dir: Path, name: str) -> Tuple[Tuple[str, str], ...]:
    base = session_dir / ".cache" / name
    out = []
    for var, sub in CACHE_VARS:
        (base / sub).mkdir(parents=True, exist_ok=True)
        out.append((var, str((base / sub).resolve())))
    return tuple(out)


def _gpus(settings: Any, launcher: Any) -> Optional[List[str]]:
    """The GPUs the launcher will use here; None where it finds them elsewhere (SLURM)."""
    if launcher is not None:
        return launcher.gpus()
    if settings.launcher.name == "local":

        return visible_gpus()
    return None


def _auto_device(device: str, gpus: Optional[List[str]]) -> str:
    """``auto``: CUDA where the launcher sees a GPU (a SLURM launcher sees none here: say ``--device``)."""
    if device == "auto":
        return "cuda" if gpus else "cpu"
    if device == "cuda" and gpus == []:
        raise ExpkitError("audit: --device cuda, and this machine's launcher sees no GPU (CUDA_VISIBLE_DEVICES); "
                          "audit on the CPU with --device cpu, or submit to a cluster with launcher=slurm")
    return device


def _slots(launch: Any, device: str) -> Optional[int]:
    if device == "cuda":
        gpus = launch.gpus()
        return len(gpus) if gpus else None
    return getattr(launch, "cpu_slots", None)


def run_audit(paths: Sequence[str] = (), *, problems: Optional[Path] = None, out: Optional[Path] = None,
              root: Path = Path("reports"), overrides: Sequence[str] = (), preset: str = "quick",
              device: str = "auto", precision: str = "fp32", jobs: Optional[int] = None,
              timeout: Optional[float] = None, retries: int = 2, budget: Optional[float] = None,
              claims: Optional[Path] = None, allow_baseline_ops: bool = False, resume: Optional[Path] = None,
              plots: bool = False, launcher: Any = None, log: Optional[Log] = None) -> AuditOutcome:
    """Judge every candidate ``paths`` name into one audit folder; see the module docstring.

    ``jobs`` CPU workers at a time (``launcher.parallel_cpu``); ``timeout`` seconds per
    attempt (``launcher.timeout_seconds``); ``launcher`` replaces the one the settings
    choose (tests pass one with a fake supervisor). ``resume`` finishes an audit folder:
    the candidates without a final record run (a retry that was due runs at its preset),
    with the settings the audit started with (only ``launcher.*`` overrides may be added).
    Returns the final record of each candidate; the exit code is 0 once every candidate
    has one (130 if interrupted). ``plots``: each candidate's report draws its figures
    (else ``expkit report`` on its run folder draws them: an audit's cost is per candidate).
    """

    say = log or (lambda line: None)
    if resume is not None:
        if paths:
            raise ExpkitError("audit: give a run to audit or --resume AUDIT_DIR, not both")
        session_dir, plan, todo, retry = _resumed(Path(resume), overrides)
    else:
        session_dir, plan, cands, retry = _planned(paths, problems=problems, out=out, root=root, overrides=overrides,
                                                  preset=preset, device=device, precision=precision, jobs=jobs,
                                                  timeout=timeout, retries=retries, budget=budget, claims=claims,
                                                  allow_baseline_ops=allow_baseline_ops, plots=plots,
                                                  launcher=launcher)
        todo = [(c, Step(plan["preset"]), 1) for c in cands]
    settings, launch = _launch(plan["overrides"], plan["preset"], session_dir, launcher)
    retry.bound_by(float(settings.launcher.timeout_seconds), getattr(launch, "max_timeout", None))
    plan["slots"] = _slots(launch, plan["device"])
    write_json(session_dir / rep.AUDIT, plan)
    say(f"audit {session_dir}: {len(todo)} of {len(plan['candidates'])} candidate(s) to judge on "
        f"{plan['device']}, first at measure={plan['preset']}")
    t0 = time.monotonic()
    interrupted = False
    restore = sigterm_as_interrupt()
    try:
        _run_rounds(todo, session_dir, plan, settings, launch, retry, say)
    except KeyboardInterrupt:
        interrupted = True
        say(f"interrupted: finished candidates are kept; finish with: expkit audit --resume {session_dir}")
    finally:
        restore()

    plan.update(wall_seconds=round(float(plan.get("wall_seconds") or 0) + time.monotonic() - t0, 3),
                finished=_now(), interrupted=interrupted)
    write_json(session_dir / rep.AUDIT, plan)
    ses.render_session(session_dir)
    report = rep.write(session_dir)
    return AuditOutcome(session_dir, tuple(rep.final_records(session_dir)), report,
                        INTERRUPTED_EXIT if interrupted else 0, interrupted)


def _launch(overrides: Sequence[str], preset: str, session_dir: Path, launcher: Any) -> Tuple[Any, Any]:

    settings = load_settings(list(with_preset(overrides, preset)))
    return settings, (launcher if launcher is not None else make_launcher(settings.launcher, session_dir))


def _planned(paths: Sequence[str], *, problems: Optional[Path], out: Optional[Path], root: Path,
             overrides: Sequence[str], preset: str, device: str, precision: str, jobs: Optional[int],
             timeout: Optional[float], retries: int, budget: Optional[float], claims: Optional[Path],
             allow_baseline_ops: bool, plots: bool, launcher: Any) -> Tuple[Path, Dict[str, Any], List[Candidate],
                                                                           Retries]:
    """A new audit folder, its manifests and its plan (``audit.json``), checked before anything runs."""

    if not paths:
        raise ExpkitError("audit: give a generation run's folder (KernelBench layout), manifests, "
                          "or --resume AUDIT_DIR")
    if preset not in LADDER:
        raise ExpkitError(f"--measure {preset!r}: one of {', '.join(LADDER)}")
    if retries < 0 or (budget is not None and budget < 0):
        raise ExpkitError("audit: --retries and --budget must be >= 0")
    extra = list(overrides)
    given = [o for o in extra if o.lstrip("+~").startswith("measure=")]
    if given:
        raise ExpkitError(f"audit: {given[0]}: give the first pass's preset as --measure "
                          f"{given[0].split('=', 1)[1]} (retries move it up one at a time)")
    if jobs is not None:
        if jobs < 1:
            raise ExpkitError(f"--jobs {jobs}: must be at least 1")
        extra += ["launcher.parallel_cpu=true", f"launcher.cpu_workers={jobs}"] if jobs > 1 else []
    if timeout is not None:
        extra.append(f"launcher.timeout_seconds={timeout:g}")
    claimed = rep.read_claims(Path(claims)) if claims is not None else None

    # Everything a user can get wrong fails here, before any folder is made.
    settings = load_settings(list(with_preset(extra, preset)))
    device = _auto_device(device, _gpus(settings, launcher))
    if out is not None and (Path(out) / rep.AUDIT).is_file():
        raise ExpkitError(f"{out}: already an audit; finish it with --resume {out}, or pick a new --out")
    session_dir = ses.open_session(Path(out)) if out is not None else \
        ses.new_session(root, name=f"audit-{Path(paths[0]).name or 'run'}")
    orphans: List[str] = []
    missing: List[str] = []
    if len(paths) == 1 and is_generation_run(Path(paths[0])):
        cands, orphans, missing, roots = kernelbench_candidates(
            Path(paths[0]), session_dir / "manifests", problems=problems, device=device, precision=precision,
            allow_baseline_ops=allow_baseline_ops)
    else:
        cands, roots = manifest_candidates(paths), "from the manifests"
    plan: Dict[str, Any] = {
        "schema_version": rep.AUDIT_SCHEMA_VERSION, "name": session_dir.name, "started": _now(),
        "inputs": [str(p) for p in paths], "problems_root": roots, "device": device, "precision": precision,
        "preset": preset, "overrides": extra, "retries": retries, "budget_seconds": budget,
        "thresholds": list(rep.THRESHOLDS), "confidence": 0.95, "slots": None,
        "candidates": [asdict(c) for c in cands], "claims": claimed, "orphans": orphans,
        "problems_without_candidates": missing, "allow_baseline_ops": allow_baseline_ops, "plots": plots,
    }
    return session_dir, plan, cands, Retries(extra, retries, budget)


def _resumed(session_dir: Path, overrides: Sequence[str]) -> Tuple[Path, Dict[str, Any],
                                                                   List[Tuple[Candidate, Step, int]], Retries]:
    """An audit folder's plan and what is left of it: no record yet, or a retry that was due."""

    plan = rep.load_audit(session_dir)
    plan["overrides"] = resume_overrides(plan.get("overrides") or [], overrides)
    retry = Retries(plan["overrides"], int(plan.get("retries") or 0), plan.get("budget_seconds"))
    last: Dict[str, Dict[str, Any]] = {}
    for r in rep.all_records(session_dir):
        last[r["candidate"]] = r
        if r["attempt"] > 1:
            retry.spent += float(r["seconds"])
    todo: List[Tuple[Candidate, Step, int]] = []
    for c in (Candidate(**d) for d in plan["candidates"]):
        r = last.get(c.candidate)
        if r is None:
            todo.append((c, Step(plan["preset"]), 1))
        elif not r["final"]:
            due = _due(r)
            if due is not None:
                todo.append((c, due, int(r["attempt"]) + 1))
                if (r.get("next") or {}).get("time_limit"):
                    retry.time_limits[c.candidate] = float(r["next"]["time_limit"])
    return session_dir, plan, todo, retry


def _run_folder(session_dir: Path, name: str, manifest: str) -> Path:
    """The attempt's run folder: registered in the session, or the one an interrupted attempt left."""


    listed = {r["run"] for r in json.loads((session_dir / ses.SESSION).read_text())["runs"]}
    if name in listed:
        return session_dir / name
    return ses.register_run(session_dir, Path(manifest), name=name)


def _due(rec: Dict[str, Any]) -> Optional[Step]:
    """The retry a record that is not final was followed by: its ``next`` (record schema 2), or
    one preset up (schema 1, where that was the only retry)."""
    if rec.get("next"):
        return Step.of(rec["next"])
    nxt = next_preset(rec["preset"])
    return Step(nxt) if nxt is not None else None


def _then(retry: Retries, name: str, nxt: Optional[Step]) -> Optional[Dict[str, Any]]:
    """A record's ``next``: the retry's step, and its time limit where it is above the audit's."""
    if nxt is None:
        return None
    limit = retry.time_limits.get(name)
    return {**nxt.record(), **({"time_limit": round(limit, 3)} if limit else {})}


def _run_rounds(todo: List[Tuple[Candidate, Step, int]], session_dir: Path, plan: Dict[str, Any], settings: Any,
                launch: Any, retry: Retries, say: Log) -> None:
    """Each round runs its attempts; the inconclusive ones go to the next round, at the step
    :meth:`Retries.decide` picks."""

    total = len(plan["candidates"])
    done_count = [total - len({c.candidate for c, _, _ in todo})]
    while todo:
        jobs: List[Job] = []
        meta: Dict[str, Tuple[Candidate, Step, int]] = {}
        for cand, at, attempt in todo:
            name = cand.candidate if attempt == 1 else f"{cand.candidate}-{at.label}"
            run_dir = _run_folder(session_dir, name, cand.manifest)
            limit = float(settings.launcher.timeout_seconds)
            if attempt > 1:
                limit = retry.time_limits.get(cand.candidate, limit)
            job = Job(cand.manifest, str(run_dir), at.overrides(plan["overrides"]), plan["device"],
                      timeout=limit, env=_cache_env(session_dir, cand.candidate), plots=bool(plan.get("plots", True)))
            jobs.append(job)
            meta[job.run_dir] = (cand, at, attempt)
        again: List[Tuple[Candidate, Step, int]] = []

        def on_start(job: Job) -> None:
            ses.mark(session_dir, Path(job.run_dir), ses.RUNNING)
            where = f"GPU {job.gpu}" if job.gpu is not None else job.device
            say(f"start  {Path(job.run_dir).name} ({where}, {meta[job.run_dir][1].words})")

        def on_done(job: Job, o: Outcome) -> None:
            cand, at, attempt = meta[job.run_dir]
            run_dir = Path(job.run_dir)
            result, note = None, o.cause
            if o.status == DONE:
                ses.mark(session_dir, run_dir, ses.CRASHED if o.crashed else ses.DONE, note=o.cause)
                try:
                    result = store.load_result(run_dir / store.RESULT)
                except ExpkitError as e:  # one unreadable result is that candidate's record, never the audit's end
                    note = str(e)
            else:
                ses.mark(session_dir, run_dir, ses.CRASHED, note=f"error: {o.cause}")
            retry.finished(cand.candidate, attempt, o.seconds)
            nxt = retry.decide(cand.candidate, result, attempt, at, o.seconds)
            rec = rep.record(asdict(cand), status=("crashed" if o.crashed else o.status), result=result,
                             attempt=attempt, step=at.record(), then=_then(retry, cand.candidate, nxt),
                             seconds=o.seconds, run_dir=run_dir.name, note=note,
                             kept=retry.kept.pop(cand.candidate, None))
            rep.append_record(session_dir, rec)
            if nxt is not None:
                again.append((cand, nxt, attempt + 1))
            else:
                done_count[0] += 1
            word = (rec["verdict"] or rec["status"]).upper()
            why = f" ({rec['category']})" if rec["category"] else ""
            then = f"; again at {nxt.words}" if nxt else ""
            say(f"done   {run_dir.name}: {word}{why} in {o.seconds:.1f} s{then} [{done_count[0]}/{total}]")

        launch.run(jobs, on_start, on_done)
        todo = again
