"""What in torch.compile's stack touches CUDA on import, and where a warm first call's time goes.

A probe that prints, not a test. In a fresh process that imported what a GPU run's worker
server imports (``preload_for("cuda")``) and set Inductor to compile in-process, it:

1. ``--imports``: imports each of MODULES with torch's CUDA entry points wrapped (after
   ``--preload``'s modules instead of the server's, to find which of them matters), and prints
   every call of one of them, the process's native threads before and after, and the Python
   frames that made it (the last few): which import makes the process unfit to fork from;
2. ``--profile``: compiles a square matmul into a fresh cache in one process, then in a fresh
   warm process profiles its first call, and prints the functions with the most cumulative
   seconds (those above ``--min`` seconds).

    python3 benchmarks/probes/compile_stack_cuda.py --imports --profile
    PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 benchmarks/probes/compile_stack_cuda.py --imports --preload cupti.cupti
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = "torch._inductor.compile_fx,torch._inductor.runtime.triton_heuristics"

IMPORTS = r"""
import functools, importlib, os, sys, traceback
from pathlib import Path
from expkit.bench.sides.preload import preload_for
first = preload_for("cuda") if sys.argv[2] == "-" else [m for m in sys.argv[2].split(",") if m]
for name in first:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
from expkit.bench.processes.inductor import compile_in_process
compile_in_process()
import torch
print(f"imported first: {'the worker server preload' if sys.argv[2] == '-' else (sys.argv[2] or 'nothing')}; "
      f"native threads {len(os.listdir('/proc/self/task'))}")
threads = lambda: len(os.listdir("/proc/self/task"))
def wrap(owner, attr):
    fn = getattr(owner, attr, None)
    if fn is None:
        return
    @functools.wraps(fn)
    def watched(*a, **k):
        before = threads()
        out = fn(*a, **k)
        frames = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack()[:-1]][-8:]
        print(f"  {attr}{a!r:.40}: threads {before} -> {threads()}; " + " < ".join(reversed(frames)))
        return out
    setattr(owner, attr, watched)
for owner, attr in [(torch.cuda, "is_available"), (torch.cuda, "device_count"), (torch.cuda, "_lazy_init"),
                    (torch.cuda, "get_device_properties"), (torch.cuda, "get_device_capability"),
                    (torch.cuda, "current_device"), (torch._C, "_cuda_getDeviceCount")]:
    wrap(owner, attr)
for name in sys.argv[1].split(","):
    t = threads()
    try:
        importlib.import_module(name)
    except ImportError as e:
        print(f"{name}: cannot be imported here ({type(e).__name__}: {e}); check --modules")
        continue
    print(f"{name}: native threads {t} -> {threads()}")
"""

FIRST_CALL = r"""
import cProfile, importlib, pstats, sys, time
from pathlib import Path
from expkit.bench.sides.preload import preload_for
warm = sys.argv[2] == "warm"
if warm:
    for name in preload_for("cuda"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    from expkit.bench.processes.inductor import compile_in_process
    compile_in_process()
import torch
n = 4096
a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
torch.cuda.synchronize()
prof = cProfile.Profile()
t0 = time.perf_counter()
prof.enable()
torch.compile(lambda x, y: torch.matmul(x, y))(a, b)
torch.cuda.synchronize()
prof.disable()
print(f"first call {time.perf_counter() - t0:.2f} s ({sys.argv[2]} process)")
if warm:
    rows = [(row[3], f"{Path(path).name}:{line} {name}") for (path, line, name), row in pstats.Stats(prof).stats.items()]
    for cum, where in sorted(rows, reverse=True):
        if cum >= float(sys.argv[1]):
            print(f"  {cum:7.3f} s  {where}")
"""


def _run(code: str, *args: str, env: dict) -> None:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    print(out.stdout.rstrip())
    if out.returncode != 0:
        print(out.stderr[-3000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imports", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--modules", default=MODULES)
    ap.add_argument("--preload", default="-", help="modules imported before the stack, comma-separated "
                    "('-': what a GPU run's worker server imports; '': nothing)")
    ap.add_argument("--min", type=float, default=0.2, help="the least cumulative seconds a profiled function shown has")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if a.imports:
        for name in a.modules.split(","):  # each module in a process of its own
            print(f"## importing {name}")
            _run(IMPORTS, name, a.preload, env=env)
    if a.profile:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(env, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor", TRITON_CACHE_DIR=f"{tmp}/triton")
            print("## a warm process's first call of a compiled matmul")
            _run(FIRST_CALL, str(a.min), "cold", env=env)
            _run(FIRST_CALL, str(a.min), "warm", env=env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
