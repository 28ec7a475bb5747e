"""``expkit`` command line: parse, translate, call the library, map to an exit code.

Exit codes of ``run``: 0 supported, 1 refuted, 2 usage/manifest/configuration error,
3 invalid, 4 inconclusive. A user's mistake is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from .errors import ExpkitError

USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="expkit", description="Hold a kernel speed claim against a measurement.")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a manifest: preflight, measure, verdict, report")
    run.add_argument("path", help="a manifest file")
    run.add_argument("overrides", nargs="*", help="runner settings as key=value (e.g. measure=quick)")
    run.add_argument("--out", type=Path, default=None, help="output folder (default: a new folder under reports/)")
    run.add_argument("--json", action="store_true", help="print result.json to stdout")
    run.add_argument("--quiet", action="store_true", help="no progress display")

    val = sub.add_parser("validate", help="check manifests without running anything")
    val.add_argument("paths", nargs="+")

    rep = sub.add_parser("report", help="re-render report.md of a run folder from its stored files")
    rep.add_argument("run_dir", type=Path)

    bis = sub.add_parser("bisect", help="git bisect with the manifest's verdict as the oracle")
    bis.add_argument("good", help="a commit where the claim holds")
    bis.add_argument("bad", help="a commit where it does not")
    bis.add_argument("manifest", help="the manifest, inside the repository being bisected")
    bis.add_argument("overrides", nargs="*", default=["measure=quick"], help="runner settings (default measure=quick)")
    return p


def cmd_run(args: argparse.Namespace) -> int:
    from .progress import Progress
    from .runner import run_manifest

    with Progress(enabled=not args.quiet and not args.json) as prog:
        outcome = run_manifest(args.path, args.overrides, args.out, progress=prog.update)
    if args.json:
        print(json.dumps(outcome.result, indent=2, default=str))
    else:
        reasons = outcome.result["reasons"]
        print(f"{outcome.verdict.upper()}: {outcome.result['name']}")
        for r in reasons[:5]:
            print(f"  - {r}")
        print(f"report: {outcome.out_dir / 'report.md'}")
    return outcome.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    from .manifest import load
    from .refs import resolve

    worst = 0
    for path in args.paths:
        try:
            lm = load(path)
            m = lm.manifest
            for key, ref in (("baseline", m.baseline), ("candidate", m.candidate), ("inputs.factory", m.inputs.factory)):
                resolve(ref, lm.folder, manifest_path=lm.path, key=key)
            print(f"ok: {path} ({m.name}, {len(m.cases)} case(s))")
        except ExpkitError as e:
            print(f"error: {e}", file=sys.stderr)
            worst = USAGE_ERROR
    return worst


def cmd_report(args: argparse.Namespace) -> int:
    from . import report

    print(report.write(args.run_dir))
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    from .bisect import bisect

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


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "report": cmd_report, "bisect": cmd_bisect}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ExpkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
