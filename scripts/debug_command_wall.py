"""Debug: where an ``expkit run`` command's wall goes outside the run's own clock.

A script for the device, not a test. Runs ``python -X importtime -m expkit run MANIFEST
measure=quick --json`` and stamps, on this process's monotonic clock: the launch, the first
line of result.json on stdout (the verdict is out) and the exit. From result.json: the
run's own wall (``wall_seconds``, from just before the manifest is loaded to the verdict).
From ``-X importtime``: the seconds of each top-level import of the command's process,
largest first (they run before the run's clock starts, or inside ``load``).

Usage: python scripts/debug_command_wall.py MANIFEST [OVERRIDES...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="cmdwall-"))
    cmd = [sys.executable, "-X", "importtime", "-m", "expkit", "run", argv[0], "measure=quick", *argv[1:],
           "--out", str(out / "run"), "--json"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    imports: Dict[str, int] = {}

    def read_err() -> None:
        for line in proc.stderr:  # import time: self [us] | cumulative | imported package
            parts = line.rstrip("\n").split("|")
            if len(parts) == 3 and parts[0].startswith("import time:") and parts[1].strip().isdigit():
                name = parts[2]
                if name.startswith(" ") and not name.startswith("   "):  # nesting adds two spaces a level
                    imports[name.strip()] = imports.get(name.strip(), 0) + int(parts[1])

    err = threading.Thread(target=read_err, daemon=True)
    err.start()
    first_out = None
    for _ in proc.stdout:
        if first_out is None:
            first_out = time.monotonic() - t0
    proc.wait()
    err.join(5)
    total = time.monotonic() - t0
    result = json.loads((out / "run" / "result.json").read_text())
    own = float(result["wall_seconds"])
    print(f"command wall {total:.2f} s, exit {proc.returncode}; verdict on stdout at {first_out:.2f} s; "
          f"the run's own clock {own:.2f} s ({result['verdict']})")
    print(f"outside the run's clock: {first_out - own:.2f} s before the verdict is out (Python's start, imports), "
          f"{total - first_out:.2f} s after it (the report's figures, exit)")
    print("stages: " + ", ".join(f"{k} {v:.2f}" for k, v in result.get("stages", {}).items()))
    print("top-level imports of the command's process (cumulative s):")
    for name, us in sorted(imports.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {us / 1e6:7.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
