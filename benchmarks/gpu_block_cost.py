"""Where a defended GPU run's per-block time goes: one manifest run under several settings,
each at a pinned budget, the case's measurement wall against its timed calls.

    python benchmarks/gpu_block_cost.py [MANIFEST] [--rounds 1] [--max-seconds 2] [-- VARIANT ...]

A VARIANT is a ``;``-separated list of overrides (default: the defences as shipped,
``defences.fresh=off``, ``measure.timer=events``, ``defences.enabled=false``, and the
last two together). Runs go round-robin over the variants, ``--rounds`` times, in this one
process (so the first defended run may start the fork server: its whole-run column then
carries that; the case's wall does not). Prints one table row per run: the case's wall
and timed seconds, the blocks a side, the wall beyond the timed calls per block, the
speedup and the verdict. A script, not a test: read rows of one table against each other.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = ROOT / "manifests/examples/gpu/honest.yaml"
VARIANTS = ["", "defences.fresh=off", "measure.timer=events", "defences.enabled=false",
            "defences.enabled=false;measure.timer=events"]


def main(argv: list) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = argv[:argv.index("--")] if "--" in argv else argv
    rounds, budget, manifest = 1, 2.0, DEFAULT_MANIFEST
    it = iter(args)
    for a in it:
        if a == "--rounds":
            rounds = int(next(it))
        elif a == "--max-seconds":
            budget = float(next(it))
        else:
            manifest = Path(a)
    sys.path.insert(0, str(ROOT))
    from expkit.runner import run_manifest

    print(f"{manifest.name}, measure=quick, {budget} s of timed calls a case\n")
    print("| round | variant | case | whole run s | case wall s | timed s | blocks a side | beyond timed, ms a block "
          "| speedup | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in range(rounds):
        for variant in extra or VARIANTS:
            overrides = ["measure=quick", f"measure.max_seconds={budget}", "measure.target_ci=0.0",
                         *[o for o in variant.split(";") if o]]
            t0 = time.perf_counter()
            r = run_manifest(manifest, overrides, out_dir=Path(tempfile.mkdtemp(prefix="expkit-gbc-"))).result
            whole = time.perf_counter() - t0
            for name, c in r["measured"]["cases"].items():
                n = c["baseline"]["n"]
                beyond = (c["wall_seconds"] - c["timed_seconds"]) / max(1, 2 * n) * 1e3
                print(f"| {k + 1} | {variant or '(as shipped)'} | {name} | {whole:.2f} | {c['wall_seconds']:.2f} | "
                      f"{c['timed_seconds']:.2f} | {n} | {beyond:.1f} | {c['speedup']:.3f} | {r['verdict']} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
