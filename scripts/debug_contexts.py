"""Debug: which processes of one `expkit run` hold GPU memory, how much and when.

A script for the device, not a test. Runs ``python -m expkit run MANIFEST [override ...]``
and polls NVML every 0.2 s for the compute processes on GPU 0: for each process, when it
first and last held memory (seconds from the start), its largest figure and its command
line; the device's memory in use at its highest, less before the run; and when the
verdict was printed (the command's first line of output) against when it ended.

Usage: python scripts/debug_contexts.py MANIFEST [override ...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import pynvml

REPO = Path(__file__).resolve().parent.parent


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:110]


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = pynvml.nvmlDeviceGetMemoryInfo(h).used
    t0 = time.perf_counter()
    log = tempfile.NamedTemporaryFile("w+", suffix=".txt")
    proc = subprocess.Popen([sys.executable, "-m", "expkit", "run", "--quiet", *argv], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    seen: Dict[int, Dict[str, object]] = {}
    peak, printed = 0, None
    while proc.poll() is None:
        now = time.perf_counter() - t0
        if printed is None and Path(log.name).stat().st_size > 0:
            printed = now
        peak = max(peak, pynvml.nvmlDeviceGetMemoryInfo(h).used - before)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            rec = seen.setdefault(p.pid, {"first": now, "max": 0, "cmd": _cmdline(p.pid)})
            rec["last"] = now
            rec["max"] = max(int(rec["max"]), int(p.usedGpuMemory or 0))
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    out = Path(log.name).read_text()
    print(f"expkit run exit {proc.returncode} in {wall:.1f} s; device in use at its highest, less before: "
          f"{peak / 2**30:.2f} GiB; first output at {printed if printed is None else round(printed, 1)} s")
    print("| pid | first s | last s | max MiB | command |\n|---|---|---|---|---|")
    for pid, r in sorted(seen.items(), key=lambda kv: kv[1]["first"]):
        print(f"| {pid} | {r['first']:.1f} | {r.get('last', 0):.1f} | {int(r['max']) >> 20} | {r['cmd']} |")
    print("\n".join(out.splitlines()[-6:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
