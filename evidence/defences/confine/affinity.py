"""The affinity guard's figures: ``tests/adversarial/cpu/sibling_affinity.yaml``, before and after.

Usage: python affinity.py before|after REPEATS   (from the repository's root)

Runs the manifest at the adversarial suite's settings with ``measure.cpu_threads=2``.
``before`` turns the baseline's ``bench.affinity_guard.AffinityGuard`` off (the workers
fork from this process and inherit the patch; the parent's watch already allows an idle
worker's pool its spin). Prints a markdown row a run: the verdict, the speedup and its
interval, each side's busiest span in cores, the first reason.
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "tests/adversarial"))
from test_adversarial import run  # noqa: E402

import expkit.bench.affinity_guard as G  # noqa: E402

mode = sys.argv[1]
if mode == "before":
    _init = G.AffinityGuard.__init__

    def _off(self, *a, **k):
        _init(self, *a, **k)
        self.on = False

    G.AffinityGuard.__init__ = _off
for i in range(int(sys.argv[2])):
    out = run("sibling_affinity", Path(tempfile.mkdtemp()))
    c = out.result["measured"]["cases"].get("c") or {}
    cores = {k: v.get("peak_cores") for k, v in (out.result["defences"].get("resources", {}).get("c") or {}).items()}
    speed = f"{c['speedup']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c.get("speedup") else "-"
    reason = (out.result["reasons"] or ["-"])[0][:140].replace("|", "/")
    print(f"| {mode} | {out.verdict} | {speed} | {cores} | {reason} |", flush=True)
