"""Debug: where a run's start-up goes (fork server, the two workers' hello, the plan).

A script for the device, not a test. Prints the wall seconds of each step for one
manifest, and what a bare process pays for the imports the fork server preloads.

Usage: python scripts/debug_start.py MANIFEST
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


PROBE = """
import sys, threading, time
t = time.perf_counter()
from expkit.bench import endpoint, fork_safety
def say(when):
    print(f"{when}: fork safe {fork_safety.fork_is_safe()}, libcuda mapped {fork_safety._driver_loaded()}, "
          f"native threads {len(fork_safety.native_thread_ids())} (at torch import {len(fork_safety._TIDS_AT_IMPORT)}), "
          f"Python threads {threading.active_count()}", flush=True)
say("after importing expkit.bench")
import collections, os
names = collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
print("native threads by name:", dict(names), flush=True)
from expkit.cli import commands
from expkit import api
say("after importing the CLI and the API")
from expkit.manifest import load
from expkit.manifest.settings import load_settings
lm = load(sys.argv[1])
say("after loading the manifest")
settings = load_settings(["measure=quick"], lm.manifest.measure)
say("after composing the settings")
"""


def main() -> None:
    manifest = sys.argv[1]
    # What a CLI run's parent looks like before it starts its workers: a fork needs no
    # CUDA driver and no extra thread in it (expkit.bench.fork_safety.fork_is_safe).
    subprocess.run([sys.executable, "-c", PROBE, manifest], check=False, cwd=REPO)
    for mod in ("torch", "torch._dynamo", "torch.profiler", "torch._inductor.standalone_compile", "triton"):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {mod}"], check=False)
        print(f"import {mod} in a fresh process: {time.perf_counter() - t:.2f} s", flush=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"])
    print(f"fresh process + CUDA context: {time.perf_counter() - t:.2f} s", flush=True)
    from expkit.bench.endpoint import warm_up_forkserver
    from expkit.bench.pair import open_pair
    from expkit.manifest import load
    from expkit.manifest.settings import load_settings

    lm = load(manifest)
    settings = load_settings(["measure=quick"], lm.manifest.measure)
    t = time.perf_counter()
    warm_up_forkserver(settings.defences.start_method)
    print(f"fork server up: {time.perf_counter() - t:.2f} s", flush=True)
    t = time.perf_counter()
    pair = open_pair(lm, settings, lm.manifest.device)
    print(f"both workers said hello: {time.perf_counter() - t:.2f} s "
          f"(start method {pair.evidence.get('start_method')})", flush=True)
    t = time.perf_counter()
    pair.plan_memory(1)
    print(f"memory plan (one plain call): {time.perf_counter() - t:.2f} s", flush=True)
    t = time.perf_counter()
    pre = pair.preflight(1)
    print(f"preflight: {time.perf_counter() - t:.2f} s ({len(pre.findings)} findings)", flush=True)
    t = time.perf_counter()
    pair2 = open_pair(lm, settings, lm.manifest.device)
    print(f"a second pair (fork server warm): {time.perf_counter() - t:.2f} s", flush=True)
    pair2.close(None)
    pair.close(None)


if __name__ == "__main__":
    main()
