"""What a change costs or saves an audit: ``expkit audit`` of one run from two trees, alternating.

Each round audits the same generation run twice, once from the other tree (``OLD``, a
checkout of the snapshot before the change: ``git archive REV | tar -x -C DIR``) and once
from this one, into fresh folders; the order flips every round, so neither tree always
finds the machine's caches warmer. Each audit runs as ``python -m expkit audit`` from its
tree's root, so ``expkit`` imports from there (the table's first lines print which module
each tree imported; a relative path among the audit's arguments is read from where the
script was called). Prints a markdown table of every candidate's first attempt (its seconds,
its start, preflight and measurement stages, its verdict; from ``candidates.jsonl`` and its
``result.json``), the medians by tree, and the ratio new/old of each candidate within a round.

    python benchmarks/audit_ab.py OLD RUN --out DIR [--rounds 2] [--new DIR] -- [expkit audit arguments]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from audit_cost import _records, _stages  # noqa: E402  (beside this script)

NEW = HERE.parent
WHERE = "import expkit, expkit.suites.manifest_process as m; print(expkit.__file__, len(m.PRELOAD), 'modules preloaded')"


def order(rounds: int) -> List[Tuple[int, str]]:
    """(round, tree) in the order they run: old first in odd rounds, new first in even ones."""
    out: List[Tuple[int, str]] = []
    for i in range(1, rounds + 1):
        out += [(i, "old"), (i, "new")] if i % 2 else [(i, "new"), (i, "old")]
    return out


def rows(folder: Path, rnd: int, tree: str, wall: float, code: int) -> List[Dict[str, object]]:
    """One row per candidate's first attempt in the audit folder ``folder``."""
    found = []
    for rec in _records(folder) if (folder / "candidates.jsonl").is_file() else []:
        if int(rec.get("attempt") or 1) != 1:
            continue
        st = _stages(folder, rec)
        found.append({"round": rnd, "tree": tree, "candidate": rec["candidate"], "seconds": float(rec["seconds"]),
                      "start": st.get("start"), "preflight": st.get("preflight"), "measure": st.get("measure"),
                      "verdict": rec.get("verdict"), "wall": wall, "exit": code})
    return found


HEADER = ("| round | tree | candidate | first attempt s | start s | preflight s | measurement s | verdict |\n"
          "|---:|---|---|---:|---:|---:|---:|---|")


def row_line(r: Dict[str, object]) -> str:
    def f(x: object) -> str:
        return "-" if x is None else f"{float(x):.1f}"  # type: ignore[arg-type]
    return (f"| {r['round']} | {r['tree']} | {r['candidate']} | {f(r['seconds'])} | {f(r['start'])} | {f(r['preflight'])} | "
            f"{f(r['measure'])} | {r['verdict']} |")


def summary(found: Sequence[Dict[str, object]]) -> str:
    """The medians by tree, each candidate's ratio new/old within its round, the commands' walls."""
    lines = []
    for tree in ("old", "new"):
        xs = [float(r["seconds"]) for r in found if r["tree"] == tree]  # type: ignore[arg-type]
        if xs:
            lines.append(f"{tree}: {len(xs)} first attempts, median {statistics.median(xs):.1f} s, "
                         f"sum {sum(xs):.1f} s")
    by = {(r["round"], r["tree"], r["candidate"]): float(r["seconds"]) for r in found}  # type: ignore[arg-type]
    ratios = [f"{by[(rnd, 'new', c)] / by[(rnd, 'old', c)]:.2f}" for rnd, t, c in by
              if t == "new" and (rnd, "old", c) in by and by[(rnd, "old", c)] > 0]
    lines.append("new / old, each candidate within its round: " + (", ".join(ratios) or "none"))
    walls = {(r["round"], r["tree"]): (r["wall"], r["exit"]) for r in found}
    lines.append("whole commands (round, tree: seconds, exit): " + "; ".join(
        f"{rnd} {t}: {w:.1f} s, {code}" for (rnd, t), (w, code) in walls.items()))  # type: ignore[str-format]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    argv = list(argv or sys.argv[1:])
    extra: List[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="a checkout of the snapshot before the change")
    ap.add_argument("run", type=Path, help="the generation run both trees audit")
    ap.add_argument("--out", type=Path, required=True, help="a folder for the audits (one a round and tree)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new", type=Path, default=NEW, help="the snapshot after the change (default: this tree)")
    a = ap.parse_args(argv)
    # Each audit runs from its tree's root: a relative path among the arguments is the caller's.
    extra = [str(Path(x).resolve()) if not x.startswith("-") and Path(x).exists() else x for x in extra]
    trees = {"old": a.old.resolve(), "new": a.new.resolve()}
    for tree, root in trees.items():
        if not (root / "expkit").is_dir():
            print(f"error: {root} holds no expkit/ to audit from (give a checkout: git archive REV | tar -x -C DIR)",
                  file=sys.stderr)
            return 2
        where = subprocess.run([sys.executable, "-c", WHERE], cwd=root, capture_output=True, text=True)
        print(f"{tree}: {(where.stdout or where.stderr).strip()}")
    found: List[Dict[str, object]] = []
    print()
    print(HEADER, flush=True)  # a row as each audit ends: a call cut short keeps what it measured
    for rnd, tree in order(a.rounds):
        folder = (a.out / f"{rnd}-{tree}").resolve()
        t0 = time.monotonic()
        code = subprocess.run([sys.executable, "-m", "expkit", "audit", str(a.run.resolve()), "--out", str(folder),
                               "--quiet", *extra], cwd=trees[tree], stdout=subprocess.DEVNULL).returncode
        got = rows(folder, rnd, tree, time.monotonic() - t0, code)
        if not got:
            print(f"round {rnd}, {tree}: no candidate record in {folder} (exit {code})", file=sys.stderr)
        for r in got:
            print(row_line(r), flush=True)
        found += got
    print()
    print(summary(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
