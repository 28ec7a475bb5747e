"""Debug: which of a GPU run's parent-side steps leaves the parent unfit to fork.

A script for the device, not a test. In a fresh process (as the CLI's parent), runs
MANIFEST at ``measure=quick`` and prints how each replicate's pair started and why, then
``expkit.bench.endpoint.fork_unsafe_reason()`` after each GPU-only step the parent takes
(NVML's process list, the NVML sampler started and stopped).

Usage: python scripts/debug_fork_safety.py MANIFEST
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from expkit.bench import endpoint  # noqa: E402


def say(when: str) -> None:
    names = ", ".join(f"{k} x{n}" for k, n in sorted(endpoint.native_thread_names().items()))
    print(f"{when}: {endpoint.fork_unsafe_reason() or 'fit to fork'} | threads: {names}", flush=True)


def main() -> None:
    say("after importing expkit.bench")
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
    from expkit.checks.activity import nvml_compute_processes
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
