"""Debug: which CUPTI records of a timed block belong to no call and no harness tag ("foreign")?

A script for the device, not a test. Times an op the way a side's worker does (cold,
the bench's per-call hook salting one input element on the GPU) with the kernel-time
timer, and prints, for the last block, every record that carries no tag of the block,
with its kind, name, stream and position, so that a false "foreign" can be traced.

Usage: python scripts/debug_kernel_records.py [--op add|decode]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "manifests" / "examples" / "gpu"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="add")
    args = ap.parse_args()
    from expkit.bench.fresh import FreshInputs
    from expkit.manifest.settings import MeasureSettings
    from expkit.timing.cupti_recorder import open_recorder
    from expkit.timing.factory import make_timer

    if args.op == "decode":
        import decode_attention as da  # noqa: E402

        q = torch.randn(1, 8, 1, 128, device="cuda")
        k = torch.randn(1, 8, 2048, 128, device="cuda")
        v = torch.randn(1, 8, 2048, 128, device="cuda")
        n = torch.tensor([1040], device="cuda", dtype=torch.int32)
        sets = [(q.clone(), k.clone(), v.clone(), n.clone()) for _ in range(2)]
        fn = da.decode_attention
    else:
        sets = [(torch.randn(1 << 20, device="cuda"),) for _ in range(2)]
        fn = lambda x: x + 1  # noqa: E731
    fresh = FreshInputs(sets, "salt", random.Random(1))
    state = {"args": sets[0]}

    def before() -> None:
        state["args"], _ = fresh.take(False)

    def call() -> None:
        fn(*state["args"])

    rec = {"r": None}

    def recorder():
        rec["r"] = open_recorder(names=True)
        return rec["r"]

    timer = make_timer("cuda", MeasureSettings(), before=before, recorder=recorder)
    for _ in range(3):
        per = timer.sample(call, 32)
    t = timer.last_timing
    print("method:", timer.method)
    print("last timing:", t.to_dict() if t is not None else None, "per call", per)
    att = timer.last_attribution
    if att is None or att.get("recorded") is None:
        print("no attribution recorded", getattr(timer, "info", None))
        return
    recorded = att["recorded"]
    ours = set()
    for tags in list(att["kept"]) + list(att.get("attempted", ())):
        ours.update(tags.tags())
    print("records:", len(recorded.records), "ticks/s", recorded.ticks_per_second)
    strangers = [r for r in recorded.records if r.tag is None or r.tag not in ours]
    print("strangers:", len(strangers))
    base = min((r.start for r in recorded.records if r.timed), default=0)
    for r in strangers[:40]:
        print(f"  {r.kind:8s} tag={r.tag} stream={r.stream} dev={r.device} start+{(r.start - base) / 1e3:.1f}us "
              f"dur={(r.end - r.start) / 1e3:.2f}us {r.name[:90]}")
    print("tagged kinds:", sorted({(r.kind, r.name[:40]) for r in recorded.records if r.tag in ours})[:20])


if __name__ == "__main__":
    main()
