"""Join ``defence_overhead.py --json`` files of two snapshots of the code into one table.

Usage::

    python benchmarks/ab_overhead_table.py FOLDER

Each ``*.json`` in FOLDER is one run of ``defence_overhead.py``; its snapshot is the name's
first part (``old-1.json``, ``new-2.json``) or, for the device step ``overhead:LIST``, its
second (``overhead-new-1.json``). Prints, per manifest, snapshot and way (defences on or
off), the runs' median measurement phase and whole-run wall with their speedups, then
each snapshot's overhead of "on" over "off" from those medians. Run the snapshots
alternating on one machine; compare them only there.
"""

from __future__ import annotations

import glob
import json
import statistics as st
import sys
from pathlib import Path
from typing import Dict, List, Tuple


def snapshot(path: str) -> str:
    parts = Path(path).name.split("-")
    return parts[1] if parts[0] == "overhead" else parts[0]


def main(folder: str) -> None:
    rows: Dict[Tuple[str, str, str], List[dict]] = {}
    for f in sorted(glob.glob(str(Path(folder) / "*.json"))):
        for manifest, ways in json.loads(Path(f).read_text()).items():
            for way in ("on", "off"):
                rows.setdefault((Path(manifest).name, snapshot(f), way), []).extend(ways[way])
    if not rows:
        sys.exit(f"{folder}: no defence_overhead.py --json files (*.json) there")
    print("| manifest | code | defences | runs | measure phase s (median, min-max) | whole run s (median) | speedups |")
    print("|---|---|---|---|---|---|---|")
    med = {}
    for (m, tree, way), runs in sorted(rows.items()):
        ph, wl = [r["measure_wall"] for r in runs], [r["wall"] for r in runs]
        med[(m, tree, way)] = (st.median(ph), st.median(wl))
        sp = "; ".join(",".join(f"{v:.2f}" for v in r["speedups"].values()) for r in runs)
        print(f"| {m} | {tree} | {way} | {len(runs)} | {st.median(ph):.2f} ({min(ph):.2f}-{max(ph):.2f}) "
              f"| {st.median(wl):.2f} | {sp} |")
    print()
    print("| manifest | code | overhead: measure phase | overhead: whole run |")
    print("|---|---|---|---|")
    for (m, tree, way), (ph, wl) in sorted(med.items()):
        if way == "on" and (m, tree, "off") in med:
            off = med[(m, tree, "off")]
            print(f"| {m} | {tree} | {100 * (ph / off[0] - 1):+.1f}% | {100 * (wl / off[1] - 1):+.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
