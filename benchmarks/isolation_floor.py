"""What isolating the two sides costs by itself, with every check of the defences made free.

Issue 13 asks both for worker processes (the candidate never shares an interpreter with
the baseline) and for the defences to cost at most 5% (honest-win) and 10% (a
few-microsecond op) of the wall time. This measures the first alone: each manifest at a
pinned budget (``measure=quick measure.max_seconds=S measure.target_ci=0``), the
measurement phase (``result.json``'s ``measure`` stage) in three variants, alternating:

* ``defended``: as shipped (workers started by ``fork``, as the other two);
* ``isolation only``: the same workers and replicates, with the per-block checks replaced
  by no-ops in the workers (threads, child processes, tamper and settings, the CPU
  account and its wait for the harness's pool), no fresh inputs
  (``defences.fresh=off``) and no rechecks (``defences.recheck_budget=0
  defences.min_rechecks=0``): what is left is the hand-over between processes each round,
  the workers' own case set-up and, with ``measure.processes`` over 1, a fresh pair of
  workers per replicate;
* ``undefended``: both sides in this process, no checks (``defences.enabled=false``).

The checks are replaced in this script's own process before the CLI runs, and reach the
workers because they are forked from it (``defences.start_method=fork``). Prints, per
manifest, the median and range of each variant's measurement phase, its excess over the
undefended median and, for the defended runs, over the isolation-only median: what the
checks, fresh inputs and rechecks cost beyond isolation; beside each excess, its range
when taken round by round. Each round starts one variant later than the round before.

    python benchmarks/isolation_floor.py [MANIFEST ...] [--rounds 3] [--max-seconds 2] [-- k=v ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "manifests/examples/cpu/honest-win.yaml", ROOT / "tests/adversarial/cpu/honest_gemv.yaml"]
FLAG = "EXPKIT_ISOLATION_ONLY"
VARIANTS = {
    "defended": ([], {}),
    "isolation only": (["defences.fresh=off", "defences.recheck_budget=0", "defences.min_rechecks=0"], {FLAG: "1"}),
    "undefended": (["defences.enabled=false"], {}),
}


def free_checks() -> None:
    """Replace the per-block checks with no-ops in this process (and in workers it forks)."""
    from expkit.bench.sides import serve, side
    from expkit.checks import activity

    side.settle = lambda reader, **k: 0.0
    side.after_block = lambda *a, **k: []
    side.opening = serve.opening = lambda defended: None
    activity.ResourceAccount.begin = lambda self: None
    activity.ResourceAccount.end = lambda self: None


def cli(argv: Sequence[str]) -> int:
    """``expkit`` itself, after :func:`free_checks` where the environment asks for it."""
    sys.path.insert(0, str(ROOT))
    if os.environ.get(FLAG):
        free_checks()
    from expkit.cli.commands import main

    return main(list(argv))


def run_once(manifest: Path, variant: str, max_seconds: float, extra: List[str], out: Path) -> float:
    """One run of ``manifest`` in ``variant``: its measurement phase, seconds."""
    overrides, env = VARIANTS[variant]
    args = [sys.executable, __file__, "--cli", "run", str(manifest), "measure=quick",
            f"measure.max_seconds={max_seconds}", "measure.target_ci=0.0", *overrides, *extra, "--out", str(out),
            "--quiet"]
    if variant != "undefended":
        args.insert(-3, "defences.start_method=fork")
    subprocess.run(args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return float(json.loads((out / "result.json").read_text())["stages"]["measure"])


def _by_round(xs: Sequence[float], ys: Sequence[float]) -> str:
    """The excess of ``xs`` over ``ys`` round by round (runs of one round are neighbours in
    time), as the range over the rounds: how far one three-round median can move."""
    r = [x / y - 1 for x, y in zip(xs, ys)]
    return f" ({min(r):+.1%} to {max(r):+.1%} by round)" if len(r) > 1 else ""


def table(rows: Dict[str, Dict[str, List[float]]]) -> List[str]:
    out = ["| manifest | variant | runs | measurement phase s (median, min-max) | over the undefended "
           "| over isolation only |", "|---|---|---|---|---|---|"]
    for m, got in rows.items():
        base, floor = statistics.median(got["undefended"]), statistics.median(got["isolation only"])
        for v in VARIANTS:
            xs = got[v]
            med = statistics.median(xs)
            over = "" if v == "undefended" else f"{med / base - 1:+.1%}" + _by_round(xs, got["undefended"])
            checks = f"{med / floor - 1:+.1%}" + _by_round(xs, got["isolation only"]) if v == "defended" else ""
            out.append(f"| {m} | {v} | {len(xs)} | {med:.2f} ({min(xs):.2f}-{max(xs):.2f}) | {over} | {checks} |")
    return out


def main(argv: List[str]) -> int:
    if argv[:1] == ["--cli"]:
        return cli(argv[1:])
    extra: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("manifests", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=2.0)
    args = p.parse_args(argv)
    rows: Dict[str, Dict[str, List[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.manifests:
            got: Dict[str, List[float]] = {v: [] for v in VARIANTS}
            names = list(VARIANTS)
            for r in range(args.rounds):
                # Each round starts one variant later, so no variant always runs first (or right
                # after the same other one) in a round.
                for k, v in enumerate(names[r % len(names):] + names[:r % len(names)]):
                    got[v].append(run_once(m, v, args.max_seconds, extra, Path(tmp) / f"{m.stem}-{r}-{k}"))
            rows[m.name] = got
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
