"""The confinement's figures: adversarial manifests run with ``defences.confine`` on and off.

Usage: python confine.py REPEATS NAME...   (from the repository's root)

Runs each named manifest of ``tests/adversarial/cpu`` REPEATS times at the suite's own
settings (``test_adversarial.run``), each time with ``defences.confine=false`` (as before
bench/confine.py) and ``true``, alternating, and prints a markdown row per run: the verdict,
the speedup and its interval per case, what the candidate's worker was confined to
(``defences.confinement``), what the cheat told on its stderr (``adv_siblings``: its first
stop and its first refusal) and the first reason.
"""
import sys
import tempfile
from pathlib import Path

root = Path.cwd()
sys.path.insert(0, str(root / "tests/adversarial"))
from test_adversarial import run  # noqa: E402

repeats = int(sys.argv[1])
print("| confine | manifest | run | verdict | speedup [interval] | confinement | the cheat's stderr | first reason |")
print("|---|---|---|---|---|---|---|---|")
for name in sys.argv[2:]:
    for i in range(repeats):
        for confine in ("false", "true"):
            out_dir = Path(tempfile.mkdtemp())
            out = run(name, out_dir, f"defences.confine={confine}")
            cases = out.result.get("measured", {}).get("cases", {})
            speed = "; ".join(f"{c['speedup']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}]" for c in cases.values()
                              if c.get("speedup") is not None) or "-"
            conf = (out.result.get("defences") or {}).get("confinement")
            conf = "-" if not conf else f"ABI {conf['landlock_abi']}, trace {conf['trace']}, signals {conf['signals']}"
            err = out_dir / "worker-stderr.txt"
            told = [ln.split(": ", 1)[1] for ln in (err.read_text().splitlines() if err.exists() else [])
                    if ln.startswith("adv_siblings: ")]
            reason = (out.result["reasons"] or ["-"])[0][:100].replace("|", "/")
            print(f"| {confine} | {name} | {i + 1} | {out.verdict} | {speed} | {conf} | {'; '.join(told) or '-'} "
                  f"| {reason} |", flush=True)
