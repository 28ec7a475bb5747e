"""Each block reply's parts, in both workers of one `expkit run`: where a side's request time goes.

    PYTHONPATH=. python block_parts.py MANIFEST OUT_DIR

Patches ``SideBench.block`` in this process before the run starts; the workers fork from it
and inherit the patch. Each worker appends one line a block to ``OUT_DIR/parts-<pid>.jsonl``:
its role, the block's calls, and the reply's ``timed``, ``untimed``, ``checks``, ``commit``
and ``wall`` seconds. Prints each role's medians, a request's and a call's. Where the sides ran
different calls a request, it also splits the harness's work (``untimed`` + ``commit``, medians) into
a part a call and a part a request, assuming both sides' harness work is that same line, and prints
what the parent's clock (``result.json``) credited the candidate against what its harness took.
"""

import json
import os
import statistics
import sys
from pathlib import Path

from expkit.bench.sides import side as side_mod
from expkit.runner import run_manifest

OUT = Path(sys.argv[2]).resolve()
OUT.mkdir(parents=True, exist_ok=True)
_block = side_mod.SideBench.block


def block(self, number, seed=None, **kw):
    reply = _block(self, number, seed, **kw)
    with open(OUT / f"parts-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps({"role": self.role, "number": number,
                            **{k: reply.get(k) for k in ("timed", "untimed", "checks", "commit", "wall")}}) + "\n")
    return reply


side_mod.SideBench.block = block
print(run_manifest(Path(sys.argv[1]), ["measure=quick"], out_dir=OUT / "run").verdict)
rows = [json.loads(line) for p in OUT.glob("parts-*.jsonl") for line in p.read_text().splitlines()]
for role in ("baseline", "candidate"):
    rs = [r for r in rows if r["role"] == role]
    if not rs:
        continue
    med = {k: statistics.median(r[k] or 0.0 for r in rs) * 1e3 for k in ("timed", "untimed", "checks", "commit", "wall")}
    per = {k: statistics.median((r[k] or 0.0) / r["number"] for r in rs) * 1e6 for k in ("untimed", "commit")}
    print(f"{role}: {len(rs)} blocks; ms a request: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
          + "; us a call: " + ", ".join(f"{k} {v:.1f}" for k, v in per.items()))

med = {}
for role in ("baseline", "candidate"):
    rs = [r for r in rows if r["role"] == role]
    med[role] = (statistics.median(r["number"] for r in rs),
                 statistics.median((r["untimed"] or 0.0) + (r["commit"] or 0.0) for r in rs))
(nb, hb), (nc, hc) = med["baseline"], med["candidate"]
clock = json.loads((OUT / "run" / "result.json").read_text())["defences"]["outside_clock"]["default"]
line = (f"calls a request {nb:g} (baseline) and {nc:g} (candidate); harness ms a request {hb * 1e3:.3f} and "
        f"{hc * 1e3:.3f}; the clock's floor {clock['floor_per_call_s'] * 1e6:.1f} us a call; quartile excess "
        f"{clock['excess_s'] * 1e3:.3f} ms, median excess {clock['median_excess_s'] * 1e3:.3f} ms, allowed "
        f"{clock['allowed_s'] * 1e3:.3f} ms")
if nb != nc:
    per = (hb - hc) / (nb - nc)
    line += (f"; split: {per * 1e6:.1f} us a call + {(hb - nb * per) * 1e3:.3f} ms a request; the candidate's "
             f"harness less the floor's credit: {(hc - nc * clock['floor_per_call_s']) * 1e3:.3f} ms")
print(line)
