"""Debug: where a run's parent process spends its own time (cProfile), by function.

A script, not a test. Runs ``expkit run MANIFEST [override ...]`` twice in this process
through the CLI's ``main``: the first to start what a run starts once (the fork server or
the preload, lazy imports), the second under cProfile. Prints the functions with the most
time of their own in the parent, and with ``--calls NAME`` the callers and cumulative
time of each function whose name holds NAME, and with ``--focus REGEX`` the cumulative time
of the functions whose file and name match REGEX. The workers are other processes: their time
shows here only as the parent's waits (``select``, ``write`` to a worker that preempts
it); ``scripts/debug_request_profile.py`` profiles inside them.

    python scripts/debug_parent_profile.py MANIFEST OUT_DIR [--top N] [--calls NAME] [--focus REGEX] [override ...]

Overrides default to ``measure=quick``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest")
    ap.add_argument("out_dir")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--calls", default=None, help="also print the callers of functions whose name holds this")
    ap.add_argument("--focus", default=None, help="also print the cumulative time of functions matching this")
    args, overrides = ap.parse_known_args(argv)
    sys.path.insert(0, str(REPO))
    from expkit.cli.commands import main as cli

    run = ["run", args.manifest, *(overrides or ["measure=quick"]), "--quiet"]
    cli(run + ["--out", str(Path(args.out_dir) / "warm")])
    prof = cProfile.Profile()
    prof.enable()
    cli(run + ["--out", str(Path(args.out_dir) / "profiled")])
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(args.top)
    if args.focus:
        stats.sort_stats("cumulative").print_stats(args.focus)
    if args.calls:
        stats.sort_stats("cumulative").print_callers(args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
