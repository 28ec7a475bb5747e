"""The ``expkit run`` command's wall with and without the interpreter's teardown at exit.

A script that prints a table, not a test. Runs one manifest ``--repeats`` times each way,
alternating (machine noise drifts; alternation spreads it over both):

* ``entry``: ``python -m expkit run ...``, the command as shipped
  (:func:`expkit.cli.commands.entry`: exit handlers, then ``os._exit``);
* ``teardown``: the same :func:`expkit.cli.commands.main` ended by ``sys.exit``, so the
  interpreter frees every module before the process ends.

For each run: the command's wall (launch to exit, this process's monotonic clock), the
run's own clock (``result.json`` ``wall_seconds``) and the difference, the time outside
the run's clock. Prints a markdown table and the medians of each way.

Usage: python benchmarks/command_teardown.py MANIFEST [--repeats 3] [OVERRIDES...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

WAYS = {
    "entry": ["-m", "expkit"],
    "teardown": ["-c", "import sys; from expkit.cli.commands import main; sys.exit(main())"],
}


def one(way: str, manifest: str, overrides: List[str], out: Path) -> Dict[str, float]:
    cmd = [sys.executable, *WAYS[way], "run", manifest, *overrides, "--out", str(out), "--quiet"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if not (out / "result.json").is_file():
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"error: {way}: `expkit run {manifest}` wrote no result.json (exit {proc.returncode}): {tail}")
    result = json.loads((out / "result.json").read_text())
    return {"wall": wall, "own": float(result["wall_seconds"]), "exit": proc.returncode,
            "verdict": result["verdict"]}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("overrides", nargs="*", default=["measure=quick"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="teardown-"))
    rows = []
    for i in range(args.repeats):
        for way in WAYS:
            r = one(way, args.manifest, args.overrides or ["measure=quick"], work / f"{way}-{i}")
            rows.append({"way": way, "i": i, **r})
            print(f"{way:<9} {i}: command {r['wall']:.2f} s, own {r['own']:.2f} s, "
                  f"outside {r['wall'] - r['own']:.2f} s ({r['verdict']}, exit {r['exit']})",
                  file=sys.stderr, flush=True)
    print(f"`{args.manifest}` {' '.join(args.overrides)}, {args.repeats} runs each way, alternating\n")
    print("| way | run | command s | run's own s | outside s | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['way']} | {r['i'] + 1} | {r['wall']:.2f} | {r['own']:.2f} | {r['wall'] - r['own']:.2f} | "
              f"{r['verdict']} |")
    print()
    for way in WAYS:
        mine = [r for r in rows if r["way"] == way]
        print(f"- {way}: median command {statistics.median(r['wall'] for r in mine):.2f} s, outside the run's clock "
              f"{statistics.median(r['wall'] - r['own'] for r in mine):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
