"""``expkit`` command line: parse, translate, call the library, map to an exit code.

Options and ``key=value`` overrides go in any order (``expkit run M --out D
measure=quick``): each command's arguments are parsed with argparse's intermixed parsing.
Exit codes: 0 supported, 1 refuted, 2 usage/manifest/configuration error, 3 invalid,
4 inconclusive, 5 the code under test cannot fit in memory even once, 6 expkit itself
failed (details in a file the message names), 130 interrupted, 141 the reader of its
output went away (``| head``), as a shell says of a process SIGPIPE ended. Every error is one line
on stderr, never a traceback (:mod:`.boundary`).
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from ..core.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE, ExpkitError
from ..core.version import __version__

USAGE_ERROR = EXIT_USAGE


class UsageError(Exception):
    """A command line argparse cannot read; printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _parsers() -> Tuple[_Parser, Dict[str, _Parser]]:
    """The top-level parser (``--version``, ``--help``, the list of commands) and one parser per command."""
    p = _Parser(prog="expkit", description="Hold a kernel speed claim against a measurement.")
    p.add_argument("--version", action="version", version=f"expkit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a manifest: preflight, measure, verdict, report")
    run.add_argument("path", nargs="?", help="a manifest file; or a folder, a quoted glob, or several paths: a suite")
    run.add_argument("overrides", nargs="*", help="runner settings as key=value (e.g. measure=quick); "
                     "further manifest paths (no `=`) join the suite")
    run.add_argument("--resume", type=Path, default=None, metavar="SESSION_DIR",
                     help="finish a suite: run only the runs of SESSION_DIR that have no result.json")
    run.add_argument("--out", type=Path, default=None,
                     help="output folder, for a suite its session folder (default: a new folder under reports/)")
    run.add_argument("--json", action="store_true", help="print result.json (a suite: its summary) to stdout")
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--session", type=Path, default=None,
                     help="add this run to a session folder (created if missing) and re-render its session.md")

    val = sub.add_parser("validate", help="check manifests without running anything")
    val.add_argument("paths", nargs="+", help="manifests, folders of them or quoted globs, as for run")

    rep = sub.add_parser("report", help="re-render report.md of a run folder from its stored files")
    rep.add_argument("run_dir", type=Path)

    ses = sub.add_parser("session", help="render session.md of a session (or run) folder from its stored results")
    ses.add_argument("dir", type=Path)
    ses.add_argument("--json", action="store_true", help="print the session's totals to stdout")

    cmp_ = sub.add_parser("compare", help="compare two runs or sessions case by case; exit 1 on a regression")
    cmp_.add_argument("a", type=Path, help="run or session folder: before")
    cmp_.add_argument("b", type=Path, help="run or session folder: after")
    cmp_.add_argument("--confidence", type=float, default=0.99, help="bootstrap interval level (default 0.99)")
    cmp_.add_argument("--min-effect", type=float, default=0.05,
                      help="smallest relative change marked as one (default 0.05)")
    cmp_.add_argument("--gate", choices=("time", "speedup", "either"), default="time",
                      help="which change fails the comparison (default: candidate time)")
    cmp_.add_argument("--out", type=Path, default=None, help="also write the markdown table to this file")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")

    imp = sub.add_parser("import", help="write manifests for problems in another format (kernelbench)")
    imp.add_argument("format", choices=("kernelbench",))
    imp.add_argument("dir", type=Path, help="folder of KernelBench-style problem and solution files")
    imp.add_argument("--out", type=Path, default=None, help="where to write the manifests (default: DIR)")
    imp.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    imp.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    imp.add_argument("--speedup", type=float, default=1.0, help="the claim written into each manifest (default 1.0)")
    imp.add_argument("--tolerance", type=float, default=0.05)
    imp.add_argument("--free", action="append", default=[], metavar="GLOBAL",
                     help="an integer global of the problems (e.g. batch_size) to vary in the preflight")
    imp.add_argument("--overwrite", action="store_true", help="replace manifests that already exist")

    aud = sub.add_parser("audit", help="judge every candidate of a generation run: fast_p, geometric mean, "
                         "correctness, each with its interval; cheats counted by reason")
    aud.add_argument("paths", nargs="*", help="a generation run's folder in KernelBench's layout "
                     "(level_L_problem_P_sample_S_kernel.py files), or manifests, folders or quoted globs of them; "
                     "key=value words are runner settings")
    aud.add_argument("--problems", type=Path, default=None, metavar="DIR",
                     help="KernelBench's KernelBench/ folder (or a levelN/ folder); default: found beside the run")
    aud.add_argument("--out", type=Path, default=None, help="the audit folder (default: a new one under reports/)")
    aud.add_argument("--measure", default="quick", choices=("quick", "default", "rigorous"),
                     help="the first pass's preset (default quick); a retry runs in twice the processes where "
                          "their spread is what is wide, else one preset up")
    aud.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                     help="for a KernelBench run (default: cuda where the launcher sees a GPU)")
    aud.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    aud.add_argument("--jobs", type=int, default=None, help="CPU workers at a time (GPU: one per GPU)")
    aud.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="per attempt, after which it is killed and recorded as hanging (launcher.timeout_seconds); "
                          "a retry gets twice its predicted cost where that is longer")
    aud.add_argument("--retries", type=int, default=2, help="re-measurements of an inconclusive candidate (default 2)")
    aud.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                     help="worker seconds all retries together may spend (default: no limit but --retries)")
    aud.add_argument("--claims", type=Path, default=None, metavar="FILE",
                     help="the run's own figures: per-problem speedups (CSV/JSON) or a summary (JSON)")
    aud.add_argument("--allow-baseline-ops", action="store_true",
                     help="do not count a candidate that runs the reference's own ops as a cheat (identity sweeps)")
    aud.add_argument("--resume", type=Path, default=None, metavar="AUDIT_DIR",
                     help="finish an audit: judge the candidates that have no final record yet")
    aud.add_argument("--plots", action="store_true",
                     help="draw each candidate's figures with its report (default: `expkit report RUN_DIR` draws them)")
    aud.add_argument("--json", action="store_true", help="print the final records as JSON")
    aud.add_argument("--quiet", action="store_true", help="no line per candidate")

    bis = sub.add_parser("bisect", help="git bisect with the manifest's verdict as the oracle")
    bis.add_argument("good", help="a commit where the claim holds")
    bis.add_argument("bad", help="a commit where it does not")
    bis.add_argument("manifest", help="the manifest, inside the repository being bisected")
    bis.add_argument("overrides", nargs="*", default=["measure=quick"], help="runner settings (default measure=quick)")

    sch = sub.add_parser("schema", help="print the manifest's JSON Schema (for editors)")
    sch.add_argument("--out", type=Path, default=None, help="write it to this file instead")

    doc = sub.add_parser("doctor", help="what this machine can do, and what each missing piece costs a run")
    doc.add_argument("--json", action="store_true", help="print the checks as JSON")
    return p, dict(sub.choices)  # type: ignore[arg-type]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command and its arguments; options and positionals in any order (intermixed parsing).

    Raises :class:`UsageError` (one line) on anything argparse cannot read, and
    ``SystemExit(0)`` after printing ``--help`` or ``--version``.
    """
    top, commands = _parsers()
    argv = list(argv)
    i = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if i is None:
        top.parse_args(argv)  # --help, --version, or an unknown option
        raise UsageError(f"expkit: give a command: {', '.join(commands)} (see `expkit --help`)")
    if i:
        top.parse_args(argv[:i])
    name = argv[i]
    if name not in commands:
        near = difflib.get_close_matches(name, list(commands), n=1)
        hint = f"did you mean `{near[0]}`?" if near else "one of " + ", ".join(commands)
        raise UsageError(f"expkit: unknown command {name!r} ({hint})")
    args = commands[name].parse_intermixed_args(argv[i + 1:])
    args.command = name
    return args


def cmd_run(args: argparse.Namespace) -> int:
    """One manifest through :func:`expkit.api.run`; several (or ``--resume``) through the suite runner."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from .. import api
    from ..suites.suite import is_suite
    from .progress import Progress

    if args.session is not None and args.out is not None:
        raise ExpkitError("run: give --out or --session, not both (a session names its run folders)")
    words = ([args.path] if args.path else []) + list(args.overrides)
    paths, overrides = [w for w in words if "=" not in w], [w for w in words if "=" in w]
    if args.resume is not None or is_suite(paths):
        return cmd_suite(args, paths, overrides)
    if not paths:
        raise ExpkitError("run: give a manifest, a folder of manifests or --resume SESSION_DIR "
                          "(see `expkit run --help`)")
    with Progress(enabled=not args.quiet and not args.json) as prog:
        _plan_progress(prog, paths[0])
        result = api.run(paths[0], out=args.out, session=args.session, overrides=overrides, progress=prog.update,
                         plots=False)
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report.ci_summary import publish

    publish([result.record], [str(result.report)])
    if args.json:
        print(json.dumps(result.record.to_json(), indent=2, default=str))
    else:
        print("\n".join(result.summary_lines()), flush=True)
    _draw_plots(result.run_dir, result.record)
    return result.exit_code


def _draw_plots(run_dir: Path, record: Any) -> None:
    """The report's figures, after the verdict is out (matplotlib's import, and on a fresh
    machine its font cache, cost seconds nobody should wait on for a verdict): the report
    is rendered again, from the same result, with them."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report import run_report

    try:
        run_report.write(run_dir, result=record)
    except Exception as e:  # the verdict and report stand; say the figures are missing
        print(f"note: the report's figures could not be drawn ({type(e).__name__}: {e})", file=sys.stderr)


def cmd_suite(args: argparse.Namespace, paths: List[str], overrides: List[str]) -> int:
    """Several manifests (a folder, a glob, a list) or ``--resume``: see ``suites/suite.py``."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..suites.suite import format_summary, run_suite, stderr_log

    if args.resume is not None and paths:
        raise ExpkitError("run: give manifests or --resume SESSION_DIR, not both")
    out = args.session if args.session is not None else args.out
    outcome = run_suite(paths, overrides, out=out, append=args.session is not None, resume=args.resume,
                        log=None if args.quiet or args.json else stderr_log)
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report.ci_summary import publish_session

    publish_session(outcome.session_dir)
    if args.json:
        print(json.dumps({"session": str(outcome.session_dir), "exit_code": outcome.exit_code,
                          "interrupted": outcome.interrupted,
                          "runs": [{"run": r.run, "manifest": r.manifest, "status": r.status, "verdict": r.verdict,
                                    "note": r.note} for r in outcome.rows]}, indent=2))
    else:
        print(format_summary(outcome))
    return outcome.exit_code


def cmd_import(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..suites.kernelbench_import import write_manifests

    written, orphans = write_manifests(args.dir, args.out, device=args.device, precision=args.precision,
                                       speedup=args.speedup, tolerance=args.tolerance, free=args.free,
                                       overwrite=args.overwrite)
    for path in written:
        print(f"wrote {path}")
    for sol in orphans:
        print(f"warning: {sol}: a solution (defines ModelNew) with no problem to pair with", file=sys.stderr)
    if not written:
        print(f"error: {args.dir}: no problem/solution pair found", file=sys.stderr)
        return USAGE_ERROR
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """A whole generation run: see ``suites/audit.py``; exit 0 once every candidate has a record."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..suites.audit import run_audit
    from ..suites.suite import stderr_log
    from ..report.audit_report import terminal_summary

    paths = [w for w in args.paths if "=" not in w]
    overrides = [w for w in args.paths if "=" in w]
    out = run_audit(paths, problems=args.problems, out=args.out, overrides=overrides, preset=args.measure,
                    device=args.device, precision=args.precision, jobs=args.jobs, timeout=args.timeout,
                    retries=args.retries, budget=args.budget, claims=args.claims,
                    allow_baseline_ops=args.allow_baseline_ops, resume=args.resume, plots=args.plots,
                    log=None if args.quiet or args.json else stderr_log)
    if args.json:
        print(json.dumps({"audit": str(out.session_dir), "exit_code": out.exit_code,
                          "interrupted": out.interrupted, "records": list(out.records)}, indent=2))
    else:
        print(terminal_summary(out.session_dir))
        print(f"audit: {out.session_dir}\nreport: {out.report}")
    return out.exit_code


def _plan_progress(prog: object, path: str) -> None:
    """Tell the progress line the run's name and cases (a bad manifest fails later, properly)."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..manifest.spec import load

    if not getattr(prog, "enabled", False) or not Path(path).is_file():
        return
    try:
        m = load(path).manifest
    except ExpkitError:
        return
    prog.plan(m.name, [c.name for c in m.cases])  # type: ignore[attr-defined]


def cmd_session(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report.ci_summary import publish_session
    from ..report.session import load_session, render_session, summary

    out = render_session(args.dir)
    if args.json:
        print(json.dumps(summary(load_session(args.dir)), indent=2, default=str))
    else:
        print(out)
    publish_session(args.dir)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report.ci_summary import append
    from ..report.compare import compare, render

    c = compare(args.a, args.b, confidence=args.confidence, min_effect=args.min_effect, gate=args.gate)
    text = render(c)
    if args.out is not None:
        # lazy: each command loads only what it runs; `expkit --help` loads none of it
        from ..report.store import atomic_write

        atomic_write(args.out, text)
    print(json.dumps(c.to_dict(), indent=2, default=str) if args.json else text.rstrip("\n"))
    append(text)
    return c.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..manifest.spec import load
    from ..manifest.refs import resolve
    from ..suites.suite import expand

    try:
        paths = expand(args.paths)
    except ExpkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    worst = 0
    for path in paths:
        try:
            lm = load(path)
            m = lm.manifest
            if m.kernelbench is not None:
                # lazy: each command loads only what it runs; `expkit --help` loads none of it
                from ..manifest.kernelbench import sides

                candidate = sides(lm)[1]
                if candidate.error:  # a solution that does not import fails as a candidate, at run time
                    print(f"warning: {path}: {candidate.error}", file=sys.stderr)
            else:
                for key, ref in (("baseline", m.baseline), ("candidate", m.candidate),
                                 ("inputs.factory", m.inputs.factory)):
                    resolve(ref, lm.folder, manifest_path=lm.path, key=key)
            print(f"ok: {path} ({m.name}, {len(m.cases)} case(s))")
        except ExpkitError as e:
            print(f"error: {e}", file=sys.stderr)
            worst = USAGE_ERROR
    return worst


def cmd_report(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report import run_report

    print(run_report.write(args.run_dir))
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..suites.bisect import bisect

    res = bisect(args.good, args.bad, args.manifest, args.overrides)
    for st in res.steps:
        print(f"  {st.commit[:12]}  {st.verdict}")
    if res.first_bad is None:
        print("no first bad commit found (every step skipped, or the range is wrong)")
        return 1
    print(f"first bad commit: {res.first_bad} ({res.verdict})")
    for r in res.reasons[:3]:
        print(f"  - {r}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..manifest.json_schema import render

    text = render()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from ..report.store import atomic_write

    atomic_write(args.out, text)
    print(f"wrote {args.out}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from . import doctor

    checks = doctor.diagnose()
    if args.json:
        print(json.dumps(doctor.as_json(checks), indent=2))
    else:
        sys.stdout.write(doctor.render(checks))
    return 0


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "report": cmd_report, "session": cmd_session,
            "compare": cmd_compare, "bisect": cmd_bisect, "audit": cmd_audit, "import": cmd_import,
            "schema": cmd_schema, "doctor": cmd_doctor}


def _details_folder(args: argparse.Namespace) -> Optional[Path]:
    """Where a command keeps its files, for ``error.txt`` (None: a new temporary file). A
    command that reads a folder (``report``, ``session``) names it only where it exists: the
    details of a failure never create a folder the user did not ask for."""
    if args.command == "run":
        return args.out or args.session or args.resume
    if args.command == "audit":
        return args.out or args.resume
    folder = {"report": getattr(args, "run_dir", None), "session": getattr(args, "dir", None)}.get(args.command)
    return folder if folder is not None and Path(folder).is_dir() else None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone, so that the flush at exit does not
    fail again; as the Python documentation advises for SIGPIPE."""

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout with no file behind it (a test's capture)
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``expkit ARGS``: the exit code (see the module docstring); never raises, never prints a traceback."""
    # lazy: each command loads only what it runs; `expkit --help` loads none of it
    from . import boundary

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    try:
        return COMMANDS[args.command](args)
    except ExpkitError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `expkit run M | head`: the reader left; not a failure of expkit
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except BaseException as e:  # the one boundary: a line here, the traceback in a file
        # lazy: each command loads only what it runs; `expkit --help` loads none of it
        from ..api import RUN_DIR_ATTR

        folder = getattr(e, RUN_DIR_ATTR, None) or _details_folder(args)
        return boundary.crash(e, args.command, argv, folder)


def entry() -> NoReturn:
    """The ``expkit`` command's process: :func:`main`, then an end without the interpreter's
    teardown. A run's process has imported torch, scipy, pandas and matplotlib, and freeing
    their modules one by one at exit took about 1.3 s of each README first command on this
    project's 2-core machine (evidence/README.md). By then every file the
    command wrote is closed and every worker ended; the exit handlers (multiprocessing's,
    any a side's code registered in-process) still run, then the process ends."""

    code = main()
    try:
        atexit._run_exitfuncs()  # what a normal exit runs first
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    entry()
