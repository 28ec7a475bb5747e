"""What in torch.compile's stack touches CUDA on import.

A probe that prints, not a test. In a fresh process per module of ``--modules``, it imports
what a GPU run's worker server imports (``preload_for("cuda")``; ``--preload``'s modules
instead, to find which of them matters), sets Inductor to compile in-process, then imports the
module with torch's CUDA entry points wrapped. It prints every call of one of them, the
process's native threads before and after (a new one by name), and the Python frames that made
it (the last few): which import makes the process unfit to fork from. Where a warm first call's
time goes is ``benchmarks/compiled_warm_start.py --top``.

    python3 benchmarks/probes/compile_stack_cuda.py
    PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 benchmarks/probes/compile_stack_cuda.py --preload cupti.cupti
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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
def names():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[tid] = open(f"/proc/self/task/{tid}/comm").read().strip()
        except OSError:
            pass
    return out
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
    t, before = threads(), names()
    try:
        importlib.import_module(name)
    except ImportError as e:
        print(f"{name}: cannot be imported here ({type(e).__name__}: {e}); check --modules")
        continue
    new = sorted(v for k, v in names().items() if k not in before)
    print(f"{name}: native threads {t} -> {threads()}" + (f" (new: {', '.join(new)})" if new else ""))
"""

def _run(code: str, *args: str, env: dict) -> None:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    print(out.stdout.rstrip())
    if out.returncode != 0:
        print(out.stderr[-3000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imports", action="store_true", help="the probe's one mode, the default (kept so that the "
                    "commands its evidence names still run)")
    ap.add_argument("--modules", default=MODULES)
    ap.add_argument("--preload", default="-", help="modules imported before the stack, comma-separated "
                    "('-': what a GPU run's worker server imports; '': nothing)")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in a.modules.split(","):  # each module in a process of its own
        print(f"## importing {name}")
        _run(IMPORTS, name, a.preload, env=env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
