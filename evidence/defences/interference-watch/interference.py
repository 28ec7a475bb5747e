"""The interference watch's figures: adversarial manifests run through expkit at ROOT.

Usage: python interference.py ROOT LABEL REPEATS NAME...

Runs each named manifest of ``ROOT/tests/adversarial/cpu`` REPEATS times at the suite's own
settings (``test_adversarial.run``) with the expkit at ROOT, and prints a markdown row per
run: its verdict, the largest share of a core the other worker spent
while a side was timed (``defences.interference``, where ROOT's expkit records it) and the
first reason.
"""
import sys
import tempfile
from pathlib import Path

root = Path(sys.argv[1])
sys.path.insert(0, str(root))
sys.path.insert(0, str(root / "tests/adversarial"))
from test_adversarial import run  # noqa: E402

import expkit  # noqa: E402

assert str(root) in expkit.__file__, expkit.__file__
label, repeats = sys.argv[2], int(sys.argv[3])
for name in sys.argv[4:]:
    for i in range(repeats):
        out = run(name, Path(tempfile.mkdtemp()))
        watch = (out.result.get("defences") or {}).get("interference") or {}
        shares = [(v["other_cpu_ms"] / v["timed_ms"], side) for per in watch.values() for side, v in per.items()
                  if v["timed_ms"]]
        worst = max(shares, default=None)
        share = f"{worst[0]:.4f} (while the {worst[1]} was timed)" if worst else "not recorded"
        reason = (out.result["reasons"] or ["-"])[0][:110].replace("|", "/")
        print(f"| {label} | {name} | {i + 1} | {out.verdict} | {share} | {reason} |",
              flush=True)
