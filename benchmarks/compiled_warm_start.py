"""Where a fresh worker's first call of a compiled candidate goes, its compile cache already warm.

A script that prints a table, not a test. In an audit, a ``torch.compile`` candidate
compiles once in its preflight, then loads that compilation again from its own cache in each
fresh measurement process, before its first timed call. This script times that load the way a
worker meets it, for two models of KernelBench level 1's kinds (a square matmul, which
Inductor hands to cuBLAS, and a LayerNorm, for which it writes Triton kernels):

1. one process compiles the model into a fresh cache folder (the cold compile);
2. ``--warm`` fresh processes each import what expkit's worker server imports first
   (``expkit.bench.sides.preload.preload_for``), every second one also ``--stack``'s modules
   (what a compiled first call imports even on a cache hit: Inductor's compiler, Triton's
   launcher), a candidate for a suite's or an audit's server to import once; say whether the
   process is still fit to fork workers from (:mod:`expkit.bench.processes.fork_safety`), set Inductor to compile in-process
   as a worker does, create the CUDA context, then ``torch.compile`` the model and make its first call under cProfile,
   then a second call.

Each warm process reports the seconds of each step and the cumulative seconds of the first
call's main parts (Dynamo's trace, the AOTAutograd cache's load, Inductor's module load, Triton's
kernel load, imports made during the call). The table is printed and written to ``--out`` as JSON.
With ``--top SECONDS``, each warm process's first call also lists every function whose
cumulative time reached SECONDS, for a part the table does not name.

    python3 benchmarks/compiled_warm_start.py --device cuda --warm 3 --out warm.json
    python3 benchmarks/compiled_warm_start.py --device cuda --warm 1 --sizes matmul=4096 --top 0.2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent

#: Parts of a first call, by the function whose cumulative time stands for it (file suffix, name).
PARTS = {
    "dynamo": ("_dynamo/convert_frame.py", "_compile"),
    "aot cache load": ("_aot_autograd/autograd_cache.py", "try_load"),
    "inductor load": ("_inductor/codecache.py", "load_by_key_path"),
    "triton load": ("_inductor/runtime/triton_heuristics.py", "precompile"),
    "imports in the call": ("<frozen importlib._bootstrap>", "_find_and_load"),
    "the whole call": ("_dynamo/eval_frame.py", "compile_wrapper"),
}

CHILD = r"""
import cProfile, importlib, json, os, pstats, sys, time
t0 = time.perf_counter()
device, kind, n, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "warm"
unsafe = None
if warm:
    from expkit.bench.sides.preload import preload_for
    for name in preload_for(device) + (sys.argv[6].split(",") if sys.argv[6] else []):
        try:
            importlib.import_module(name)
        except ImportError:  # as a fork server's preload: a missing module only costs time
            pass
    from expkit.bench.processes.inductor import compile_in_process
    compile_in_process()
    from expkit.bench.processes.fork_safety import fork_unsafe_reason
    unsafe = fork_unsafe_reason()
import torch
t1 = time.perf_counter()
torch.manual_seed(0)
if kind == "matmul":
    model, args = (lambda a, b: torch.matmul(a, b)), (torch.randn(n, n, device=device), torch.randn(n, n, device=device))
else:
    ln = torch.nn.LayerNorm((64, n, n)).to(device)
    model, args = ln, (torch.randn(16, 64, n, n, device=device),)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
sync()
t2 = time.perf_counter()
prof = cProfile.Profile()
prof.enable()
compiled = torch.compile(model)
compiled(*args)
sync()
prof.disable()
t3 = time.perf_counter()
compiled(*args)
sync()
t4 = time.perf_counter()
parts, top, least = {}, [], float(sys.argv[7])
for (path, line, name), row in pstats.Stats(prof).stats.items():
    for part, (suffix, fn) in json.loads(sys.argv[5]).items():
        if name == fn and path.endswith(suffix):
            parts[part] = max(parts.get(part, 0.0), row[3])
    if least > 0 and row[3] >= least:
        top.append((row[3], f"{os.path.basename(path)}:{line} {name}"))
print(json.dumps({"imports": t1 - t0, "context and inputs": t2 - t1, "first call": t3 - t2,
                  "second call": t4 - t3, "parts": parts, "fork unsafe": unsafe, "top": sorted(top, reverse=True)}))
"""


def child(device: str, kind: str, n: int, cache: Path, warm: bool, stack: str = "", top: float = 0.0) -> Dict[str, Any]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", CHILD, device, kind, str(n), "warm" if warm else "cold",
                          json.dumps(PARTS), stack, str(top)], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"error: the {kind} process failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warm", type=int, default=3, help="fresh processes per model after the cold compile")
    ap.add_argument("--sizes", default="matmul=4096,layernorm=256", help="model=size pairs")
    ap.add_argument("--stack", default="expkit.bench.processes.compile_stack",
                    help="modules every second warm process imports first, comma-separated")
    ap.add_argument("--top", type=float, default=0.0, metavar="SECONDS",
                    help="also list each warm first call's functions of at least SECONDS cumulative (0: none)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sizes = [pair.split("=") for pair in args.sizes.split(",")]
    for got in sizes:
        if len(got) != 2 or got[0] not in ("matmul", "layernorm") or not got[1].isdigit():
            ap.error(f"--sizes {args.sizes!r}: give model=size pairs, the models matmul and layernorm "
                     "(for example matmul=4096,layernorm=256)")
    rows: List[Dict[str, Any]] = []
    for kind, n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp)
            rows.append({"model": kind, "process": "cold", **child(args.device, kind, int(n), cache, False)})
            for i in range(args.warm):  # alternately without and with the suite server's compile stack
                stack = args.stack if i % 2 == 1 else ""
                rows.append({"model": kind, "process": f"warm {i + 1}, {'with' if stack else 'without'} the stack",
                             **child(args.device, kind, int(n), cache, True, stack, args.top)})
    cols = ["imports", "context and inputs", "first call", "second call"]
    print("| model | process | " + " | ".join(cols) + " | " + " | ".join(PARTS) + " | fit to fork |")
    print("|---|---|" + "---:|" * (len(cols) + len(PARTS)) + "---|")
    for r in rows:
        fit = "-" if r["process"] == "cold" else ("yes" if not r.get("fork unsafe") else str(r["fork unsafe"]))
        print(f"| {r['model']} | {r['process']} | " + " | ".join(f"{r[c]:.2f}" for c in cols) + " | "
              + " | ".join(f"{r['parts'][p]:.2f}" if p in r["parts"] else "-" for p in PARTS) + f" | {fit} |")
    for r in rows:
        if r.get("top"):
            print(f"\n{r['model']}, {r['process']}: the first call's functions of at least {args.top} s cumulative")
            for cum, where in r["top"]:
                print(f"  {cum:7.3f} s  {where}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
