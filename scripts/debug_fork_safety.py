"""Debug: which of a GPU run's parent-side steps leaves the parent unfit to fork.

A script for the device, not a test. In a fresh process (as the CLI's parent), runs
MANIFEST at ``measure=quick`` and prints how each replicate's pair started and why, then
``expkit.bench.fork_safety.fork_unsafe_reason()`` after each GPU-only step the parent takes
(NVML's process list, the NVML sampler started and stopped).

Usage: python scripts/debug_fork_safety.py MANIFEST [--watch]

``--watch``: also print the Python stack where the parent's native threads first grow
by id (a profile hook on every C call's return: the run is slower).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from expkit.bench import fork_safety  # noqa: E402


def say(when: str) -> None:
    names = ", ".join(f"{k} x{n}" for k, n in sorted(fork_safety.native_thread_names().items()))
    print(f"{when}: {fork_safety.fork_unsafe_reason() or 'fit to fork'} | threads: {names}", flush=True)


def watch_threads() -> None:
    """Print where this process's native threads first grow beyond those it has now: the
    Python stack at the return of the C call that started one (a profile hook, so slow)."""
    import os
    import traceback

    start = fork_safety.native_thread_ids()

    def hook(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "c_return" and fork_safety.native_thread_ids() - start:
            sys.setprofile(None)
            print(f"a native thread started (there were {len(start)}): {fork_safety.native_thread_names()} after {arg!r}, at:", flush=True)
            print("".join(traceback.format_stack(frame)[-25:]), flush=True)

    sys.setprofile(hook)


def main() -> None:
    say("after importing expkit.bench")
    if "--watch" in sys.argv:
        watch_threads()
    from expkit import api

    say("after importing expkit.api")
    api.prepare(sys.argv[1])
    say("after preparing the manifest")

    out = Path(tempfile.mkdtemp(prefix="expkit-fork-"))
    api.run(sys.argv[1], out=out, overrides=["measure=quick"], plots=False)
    d = json.loads((out / "result.json").read_text())["defences"]
    print("first pair:", d.get("start_method"), "| replicates:", d.get("replicate_start_methods"), flush=True)
    say("after the run")
    # The parent's GPU-only steps one by one, in a process that has run them all once
    # already: a step that leaves a thread or the driver behind shows where it starts.
    from expkit.checks.gpu_processes import nvml_compute_processes
    from expkit.timing import telemetry

    nvml_compute_processes(0)
    say("after NVML's process list")
    tel = telemetry.open_telemetry(0)
    say("after opening NVML telemetry")
    tel.start()
    tel.stop()
    say("after the sampler's start and stop")
    tel.close()
    say("after closing it")


if __name__ == "__main__":
    main()
