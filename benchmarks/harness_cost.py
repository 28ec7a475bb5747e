"""Harness cost: what one ``expkit run`` holds and takes, against one plain call (issue #19).

A script, not a test. For each manifest given (any kind: a factory and two callables,
or KernelBench's ``Model``/``ModelNew`` written by ``kernelbench_sweep.py``) it

1. **plain call**, in a fresh process of its own: resolves the baseline exactly as
   expkit's worker does (``expkit.bench.sides.side.resolve_side``), builds the first case's
   inputs on the device with the manifest's factory, and calls the baseline three times,
   synchronising after each: the first call's seconds (lazy initialisation, compilation)
   and the fastest of the next two. Its memory: torch's ``max_memory_allocated`` in that
   process, and, polled from this process, the device's memory in use (NVML) at its
   highest less before, and the highest resident set of that process;
2. **expkit run** ``MANIFEST measure=PRESET --out RUN --json`` as a child process, the
   same two polls over its whole process tree (the parent and both workers), its wall
   time, and the seconds of each stage from ``result.json`` (``stages``: load, start,
   plan, preflight, model_oracles, measure, end_to_end, judge) with the memory plan.

The table puts them side by side: ``harness/plain`` for memory is expkit's device peak
over the plain process's device peak (both NVML, both with their CUDA contexts: expkit has
two processes on the GPU, so two contexts); on the CPU both are resident sets of the
process trees. The time columns are seconds; ``overhead`` is expkit's wall less its
``measure`` stage (the time the preset asks for) less the plain process's wall: what
the defences, the two workers and the report add to a script that calls the code once.

Usage::

    python benchmarks/harness_cost.py MANIFEST... [--preset quick] [--device cpu|cuda] \\
        [--out DIR] [--timeout 300]
    python benchmarks/harness_cost.py --builtin-cpu --out DIR     # the shipped CPU workloads

``--builtin-cpu`` writes two CPU workloads into ``--out``: an elementwise op on 0.5 GiB
(``x * 2`` against ``x + x``, 2**27 float32) and a 2048x2048 matmul; the first is what
this issue's CPU target (a whole run under 30 s) is stated for. Writes
``harness_cost.json`` and ``harness_cost.md`` to ``--out`` (default
``evidence/harness-cost/cpu``) and prints the table.

Our own code; the pollers are ``kernelbench_common.MemPoller``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from kernelbench_common import GIB, MemPoller  # noqa: E402

STAGES = ("load", "start", "plan", "preflight", "model_oracles", "measure", "end_to_end", "judge")

BUILTIN_KERNELS = textwrap.dedent('''
    import torch
    def vector(params, gen, device):
        return (torch.randn(int(params["n"]), generator=gen, device=device),)
    def square(params, gen, device):
        n = int(params["n"])
        return (torch.randn(n, n, generator=gen, device=device), torch.randn(n, n, generator=gen, device=device))
    def mul2(x):
        return x * 2
    def add_self(x):
        return x + x
    def mm(a, b):
        return a @ b
    def matmul(a, b):
        return torch.matmul(a, b)
''')

BUILTIN = {
    "elementwise-0.5GiB": textwrap.dedent('''
        name: elementwise-half-gib
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: cost_kernels:mul2
        candidate: cost_kernels:add_self
        inputs: {factory: cost_kernels:vector}
        cases: [{name: n2e27, params: {n: 134217728}}]
        expect: {forbid_baseline: false}
    '''),
    "matmul-2048": textwrap.dedent('''
        name: matmul-2048
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: cost_kernels:mm
        candidate: cost_kernels:matmul
        inputs: {factory: cost_kernels:square}
        cases: [{name: n2048, params: {n: 2048}}]
        expect: {forbid_baseline: false}
    '''),
}


# --- the plain call (runs in a child process: --plain-call) -------------------------


def plain_call(manifest: str, device: str) -> Dict[str, Any]:
    """One plain call's seconds and torch's peak, in this process (see the docstring)."""
    sys.path.insert(0, str(REPO))
    import torch

    from expkit.bench.sides.side import resolve_side
    from expkit.checks import preflight
    from expkit.manifest.spec import load

    lm = load(manifest)
    fn, factory, _ = resolve_side(lm, "baseline")
    case = lm.manifest.cases[0]

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    args = preflight.build_inputs(factory, dict(case.params), 0, device, lm)
    sync()
    inputs_s = time.perf_counter() - t0
    times = []
    with torch.no_grad():
        for _ in range(3):
            t0 = time.perf_counter()
            out = fn(*args)
            sync()
            times.append(time.perf_counter() - t0)
            del out
    rec: Dict[str, Any] = {"case": case.name, "inputs_s": inputs_s, "first_call_s": times[0],
                           "call_s": min(times[1:])}
    if device == "cuda":
        rec["torch_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return rec


def _poll_child(cmd: List[str], timeout: float, cwd: Optional[Path] = None) -> Dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            start_new_session=True)
    with MemPoller(proc.pid) as poll:
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            timed_out = True
    return {"rc": proc.returncode, "timed_out": timed_out, "wall_s": time.monotonic() - t0, "stdout": out,
            "stderr": err, "gpu_peak_bytes": poll.gpu_peak, "host_peak_bytes": poll.host_peak}


def measure(manifest: Path, device: str, preset: str, out: Path, timeout: float) -> Dict[str, Any]:
    rec: Dict[str, Any] = {"manifest": str(manifest)}
    plain = _poll_child([sys.executable, __file__, "--plain-call", str(manifest), "--device", device], timeout)
    rec["plain"] = {k: plain[k] for k in ("rc", "timed_out", "wall_s", "gpu_peak_bytes", "host_peak_bytes")}
    try:
        rec["plain"].update(json.loads(plain["stdout"].strip().splitlines()[-1]))
    except (ValueError, IndexError):
        rec["plain"]["error"] = (plain["stderr"].strip().splitlines() or ["no output"])[-1][:300]
    run_dir = out / "runs" / manifest.stem
    # The run's device is the manifest's own (``device:``); --device must name the same one.
    run = _poll_child([sys.executable, "-m", "expkit", "run", str(manifest.resolve()), f"measure={preset}",
                       "--out", str(run_dir), "--json"], timeout, cwd=run_dir.parent.parent)
    rec["expkit"] = {k: run[k] for k in ("rc", "timed_out", "wall_s", "gpu_peak_bytes", "host_peak_bytes")}
    result = run_dir / "result.json"
    if result.is_file():
        d = json.loads(result.read_text())
        rec["expkit"].update(verdict=d.get("verdict"), stages=d.get("stages") or {}, memory=d.get("memory"))
    else:
        rec["expkit"]["error"] = (run["stderr"].strip().splitlines() or ["no result.json"])[-1][:300]
    return rec


# --- the table ----------------------------------------------------------------------


def _gib(b: Optional[float]) -> str:
    return "—" if b is None else f"{b / GIB:.2f}"


def _s(x: Optional[float]) -> str:
    if x is None:
        return "—"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.1f}"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return "—" if not a or not b else f"{a / b:.2f}x"


def render(data: Dict[str, Any]) -> str:
    dev = data["device"]
    mem = "device memory in use (NVML)" if dev == "cuda" else "resident set of the process tree"
    lines = [
        f"# Harness cost: one `expkit run` against one plain call ({dev})",
        "",
        f"Written by `benchmarks/harness_cost.py` on {data['date']}. Machine: {data['machine']}. "
        f"expkit commit `{data['commit']}`, `measure={data['preset']}`.",
        "",
        f"Memory columns are the peak {mem} above the start, in GiB: the plain call's process, "
        "and expkit's whole process tree (parent and both workers). Time columns are wall seconds "
        "(ms where under a second). `overhead` = expkit's wall - its `measure` stage - the plain "
        "process's wall.",
        "",
        "| workload | plain call (first / warm) | plain process wall | plain peak | expkit wall | start | plan "
        "| preflight | measure | other | overhead | expkit peak | peak harness/plain | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    key = "gpu_peak_bytes" if dev == "cuda" else "host_peak_bytes"
    for r in data["records"]:
        p, e = r["plain"], r["expkit"]
        st = e.get("stages") or {}
        other = sum(v for k, v in st.items() if k not in ("start", "plan", "preflight", "measure")) if st else None
        overhead = (e["wall_s"] - st.get("measure", 0.0) - p["wall_s"]) if st else None
        lines.append(
            f"| {Path(r['manifest']).stem} | {_s(p.get('first_call_s'))} / {_s(p.get('call_s'))} | {_s(p['wall_s'])} "
            f"| {_gib(p.get(key))} | {_s(e['wall_s'])} | {_s(st.get('start'))} | {_s(st.get('plan'))} "
            f"| {_s(st.get('preflight'))} | {_s(st.get('measure'))} | {_s(other)} | {_s(overhead)} "
            f"| {_gib(e.get(key))} | {_ratio(e.get(key), p.get(key))} | {e.get('verdict') or e.get('error', '—')} |")
    lines.append("")
    for r in data["records"]:
        m = (r["expkit"].get("memory") or {})
        if m.get("notes"):
            lines.append(f"- `{Path(r['manifest']).stem}` memory plan: " + "; ".join(m["notes"]))
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The snapshot's COMMIT file where there is one (scripts/device_session.sh runs an
    archive of HEAD inside another checkout, whose git would name the wrong commit)."""
    f = REPO / "COMMIT"
    if f.is_file():
        return f.read_text().strip()[:7]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _machine(device: str) -> str:
    if device == "cuda":
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(h)
            return f"{name if isinstance(name, str) else name.decode()}, driver {pynvml.nvmlSystemGetDriverVersion()}"
        except Exception:
            return "cuda (NVML unavailable)"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifests", nargs="*", type=Path)
    ap.add_argument("--builtin-cpu", action="store_true", help="the shipped CPU workloads (see the docstring)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--out", type=Path, default=REPO / "evidence" / "harness-cost" / "cpu")
    ap.add_argument("--timeout", type=float, default=300.0, help="limit of each child process, s")
    ap.add_argument("--plain-call", metavar="MANIFEST", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_call:
        print(json.dumps(plain_call(args.plain_call, args.device or "cpu")))
        return 0
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out = args.out.resolve()  # the run is a child process in another folder: paths must not be relative
    args.out.mkdir(parents=True, exist_ok=True)
    manifests = list(args.manifests)
    if args.builtin_cpu:
        work = args.out / "workloads"
        work.mkdir(exist_ok=True)
        (work / "cost_kernels.py").write_text(BUILTIN_KERNELS)
        for name, text in BUILTIN.items():
            (work / f"{name}.yaml").write_text(text)
            manifests.append(work / f"{name}.yaml")
    if not manifests:
        ap.error("no manifest given (or --builtin-cpu)")
    records = []
    for m in manifests:
        print(f"[harness_cost] {m}", flush=True)
        records.append(measure(m, args.device, args.preset, args.out, args.timeout))
    data = {"format": 1, "date": _dt.date.today().isoformat(), "device": args.device, "preset": args.preset,
            "machine": _machine(args.device), "commit": _commit(), "records": records}
    (args.out / "harness_cost.json").write_text(json.dumps(data, indent=1) + "\n")
    table = render(data)
    (args.out / "harness_cost.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
