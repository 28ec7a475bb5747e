"""Timing fidelity: how close expkit's CudaTimer comes to the GPU's own clock, and how repeatable it is.

A script, not a test. On a CUDA machine it prints tables and writes
``timing_fidelity.md`` and ``timing_fidelity.json`` to ``--out`` (default ``$OUT``
when set, else ``benchmarks/results``), and copies them to ``benchmarks/results/``.

What it measures
----------------
A ladder of kernels from about 2 us to about 10 ms (fp32 elementwise adds of several
sizes, an fp32 sum, bf16 matrix products), each called through a function that
rotates between input sets, as expkit's measurement loop does. Each is timed by:

* expkit ``CudaTimer`` cold (L2 flushed by writing, and by reading) and warm;
* CUPTI: the kernel durations torch.profiler records for the *same calls* of the
  cold and warm timers (same process, same conditions). This is the reference;
* Nsight Compute in a child process: ``gpu__time_duration.sum`` with
  ``--cache-control all`` (compare with cold) and ``--cache-control none`` (warm),
  always ``--clock-control none`` so the clocks are left as they are;
* ``triton.testing.do_bench`` (median; it flushes a 256 MB buffer before each call);
* ``torch.utils.benchmark.Timer.blocked_autorange`` (median; host clock + sync);
* a naive CUDA event pair around one call (median of repeats).

NVML samples the SM clock all along; each method's cell records the clock seen
while it ran. Then:

* reproducibility: one pair's speedup (fp32 vs bf16 add of 2^22 elements) measured in
  5 fresh processes; spread = (max - min) / median;
* cost of precision: GPU-seconds of measurement until the 95% bootstrap interval of
  the ratio of medians of a pair of ~10 us kernels is within +-1%.

Targets (expkit issue): median within 2% of CUPTI for kernels >= 5 us and within 5%
below; cold within 5% of ncu --cache-control all where clocks match; speedup spread
<= 1% over 5 processes; +-1% on the ~10 us pair within 3 GPU-seconds.

Usage: ``python benchmarks/timing_fidelity.py [--quick] [--out DIR] [--skip-ncu]``.
Child modes (used by the script itself): ``--child ncu`` and ``--child repro``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RESULTS = REPO / "benchmarks" / "results"


def _import_expkit_leaf_modules() -> None:
    """Make ``expkit.cuda_timer`` / ``expkit.telemetry`` / ``expkit.stats`` importable.

    They need nothing but torch, pynvml and numpy. If the package's ``__init__`` pulls
    in something this machine lacks (the device image has no Hydra), register a bare
    package so the leaf modules still import.
    """
    try:
        import expkit  # noqa: F401
    except ImportError as e:
        import types

        print(f"note: `import expkit` failed ({e}); importing its timing modules directly", file=sys.stderr)
        for name in [m for m in sys.modules if m == "expkit" or m.startswith("expkit.")]:
            del sys.modules[name]
        pkg = types.ModuleType("expkit")
        pkg.__path__ = [str(REPO / "expkit")]
        sys.modules["expkit"] = pkg


_import_expkit_leaf_modules()
SPIN = "spin_kernel"  # torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu)


# ----------------------------------------------------------------------------- ladder
@dataclass
class Op:
    name: str
    build: Callable[[Any], Callable[[], Any]]  # torch -> rotating fn
    approx_us: float  # rough expectation, used only to size blocks before measuring


def _rotating(call: Callable[..., Any], sets: list[tuple[Any, ...]]) -> Callable[[], Any]:
    state = {"i": 0}

    def fn() -> Any:
        i = state["i"]
        state["i"] = (i + 1) % len(sets)
        return call(*sets[i])

    return fn


def _add(n: int, dtype: str, sets: int = 2):
    def build(torch):
        dt = getattr(torch, dtype)
        g = torch.Generator(device="cuda").manual_seed(n)
        s = [
            (
                torch.randn(n, device="cuda", dtype=dt, generator=g),
                torch.randn(n, device="cuda", dtype=dt, generator=g),
                torch.empty(n, device="cuda", dtype=dt),
            )
            for _ in range(sets)
        ]
        return _rotating(lambda x, y, o: torch.add(x, y, out=o), s)

    return build


def _sum(n: int, sets: int = 2):
    def build(torch):
        g = torch.Generator(device="cuda").manual_seed(n + 1)
        s = [(torch.randn(n, device="cuda", generator=g), torch.empty((), device="cuda")) for _ in range(sets)]
        return _rotating(lambda x, o: torch.sum(x, dim=0, out=o), s)

    return build


def _mm(m: int, k: int, n: int, sets: int = 2):
    def build(torch):
        g = torch.Generator(device="cuda").manual_seed(m * 7 + n)
        s = [
            (
                torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g),
                torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g),
                torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
            )
            for _ in range(sets)
        ]
        return _rotating(lambda a, b, c: torch.mm(a, b, out=c), s)

    return build


def ladder() -> list[Op]:
    return [
        Op("add_f32_2^12", _add(1 << 12, "float32"), 2),
        Op("add_f32_2^18", _add(1 << 18, "float32"), 3),
        Op("add_f32_2^21", _add(1 << 21, "float32"), 10),
        Op("add_f32_2^23", _add(1 << 23, "float32"), 35),
        Op("add_f32_2^25", _add(1 << 25, "float32"), 140),
        Op("add_f32_2^27", _add(1 << 27, "float32"), 550),
        Op("sum_f32_2^24", _sum(1 << 24), 25),
        Op("mm_bf16_512", _mm(512, 512, 512), 5),
        Op("mm_bf16_1024", _mm(1024, 1024, 1024), 10),
        Op("mm_bf16_4096", _mm(4096, 4096, 4096), 200),
        Op("mm_bf16_8192", _mm(8192, 8192, 8192), 1400),
        Op("mm_bf16_16384", _mm(16384, 16384, 16384), 11000),
    ]


PAIR_REPRO = ("add_f32_2^22", _add(1 << 22, "float32")), ("add_bf16_2^22", _add(1 << 22, "bfloat16"))
PAIR_10US = ("add_f32_2^21", _add(1 << 21, "float32")), ("add_bf16_2^22", _add(1 << 22, "bfloat16"))


# ----------------------------------------------------------------------------- helpers
def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def bootstrap_ratio_ci(a: list[float], b: list[float], *, n_boot: int = 2000, conf: float = 0.95, seed: int = 0):
    """Percentile bootstrap of median(a) / median(b): expkit.stats.estimate when it imports.

    The fallback resamples a and b independently, as expkit.stats does: it treats the
    block means as exchangeable, which the alternating A/B schedule makes reasonable,
    and says nothing about drift over longer times.
    """
    try:
        from expkit.stats import estimate

        est = estimate(a, b, confidence=conf, resamples=n_boot, seed=seed)
        return float(est.speedup), float(est.ci_low), float(est.ci_high)
    except ImportError:
        pass
    import numpy as np

    rng = np.random.default_rng(seed)
    a_, b_ = np.asarray(a), np.asarray(b)
    ma = np.median(a_[rng.integers(0, len(a_), (n_boot, len(a_)))], axis=1)
    mb = np.median(b_[rng.integers(0, len(b_), (n_boot, len(b_)))], axis=1)
    r = ma / mb
    lo, hi = np.quantile(r, [(1 - conf) / 2, 1 - (1 - conf) / 2])
    return float(np.median(a_) / np.median(b_)), float(lo), float(hi)


def kernel_events(prof) -> list[tuple[str, int, int, int]]:
    """(name, start_ns, duration_ns, stream) of every GPU kernel in a torch.profiler run, by start."""
    out = []
    try:
        for e in prof.profiler.kineto_results.events():
            if str(e.device_type()).endswith("CUDA"):
                out.append((e.name(), int(e.start_ns()), int(e.duration_ns()), int(e.device_resource_id())))
    except AttributeError:  # older/newer API: fall back to FunctionEvents (us resolution)
        for e in prof.events():
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                out.append((e.name, int(e.time_range.start * 1e3), int(e.time_range.elapsed_us() * 1e3), -1))
    out.sort(key=lambda r: r[1])
    return out


def per_call_sums(durations_ns: list[int], calls: int) -> list[float]:
    """Group consecutive kernels into ``calls`` equal groups; seconds per call. [] if they do not divide."""
    if calls <= 0 or not durations_ns or len(durations_ns) % calls:
        return []
    k = len(durations_ns) // calls
    return [sum(durations_ns[i * k : (i + 1) * k]) * 1e-9 for i in range(calls)]


def parse_ncu_csv(text: str) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration seconds) per profiled kernel, in ID order, from ``--csv --page raw``."""
    rows = list(csv.reader(io.StringIO(text)))
    header_i = next((i for i, r in enumerate(rows) if "ID" in r and any("gpu__time_duration" in c for c in r)), None)
    if header_i is None:
        return []
    header = rows[header_i]
    name_col = next((header.index(c) for c in ("Kernel Name", "Function Name", "Demangled Name") if c in header), None)
    dur_col = header.index("gpu__time_duration.sum") if "gpu__time_duration.sum" in header else next(
        i for i, c in enumerate(header) if "gpu__time_duration" in c)
    id_col = header.index("ID")
    scale = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "second": 1.0, "s": 1.0}
    unit = 1e-9
    out = []
    for r in rows[header_i + 1 :]:
        if len(r) <= max(dur_col, id_col):
            continue
        if not r[id_col].strip().isdigit():  # the units row
            unit = scale.get(r[dur_col].strip(), unit)
            continue
        try:
            value = float(r[dur_col].replace(",", ""))
        except ValueError:
            continue
        out.append((r[name_col] if name_col is not None else "?", value * unit))
    return out


def split_on_delimiter(kernels: list[tuple[str, float]], n_groups: int) -> list[list[float]]:
    """Kernel durations between spin-kernel delimiters: one list per op, in order."""
    groups: list[list[float]] = []
    for name, dur in kernels:
        if SPIN in name:
            groups.append([])
        elif groups:
            groups[-1].append(dur)
    return groups[:n_groups]


# ----------------------------------------------------------------------------- child: ncu
def child_ncu(args) -> None:
    import torch

    ops = {o.name: o for o in ladder()}
    names = args.ops.split(",")
    fns = [ops[n].build(torch) for n in names]
    for fn in fns:  # warm-up outside the profiled range: cuBLAS handles, algorithm choice
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    windows = {}
    for name, fn in zip(names, fns):
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        torch.cuda.synchronize()
        windows[name] = (t0, time.perf_counter())
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    # time.perf_counter is CLOCK_MONOTONIC on Linux: the parent can map these windows
    # onto its NVML log.
    print("NCU_WINDOWS " + json.dumps(windows), flush=True)


def run_ncu(names: list[str], cache: str, calls: int, out_dir: Path, timeout: float) -> dict[str, Any]:
    ncu = shutil.which("ncu")
    if ncu is None:
        for cand in sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) + sorted(Path("/usr/local").glob("cuda*/bin/ncu")):
            ncu = str(cand)
            break
    if ncu is None:
        return {"error": "ncu not found on PATH"}
    log = out_dir / f"ncu_{cache}.csv"
    cmd = [
        ncu, "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum",
        "--cache-control", cache, "--clock-control", "none", "--csv", "--page", "raw",
        "--log-file", str(log),
        sys.executable, str(Path(__file__).resolve()), "--child", "ncu", "--ops", ",".join(names), "--calls", str(calls),
    ]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu timed out after {timeout:.0f} s", "t0": t0, "t1": time.perf_counter()}
    t1 = time.perf_counter()
    text = log.read_text() if log.exists() else ""
    kernels = parse_ncu_csv(text)
    res: dict[str, Any] = {"cmd": " ".join(cmd[:14]), "rc": p.returncode, "t0": t0, "t1": t1, "kernels": len(kernels)}
    if p.returncode != 0 or not kernels:
        res["error"] = f"ncu rc={p.returncode}, {len(kernels)} kernels parsed"
        res["stderr_tail"] = (p.stderr or "")[-1500:] + (p.stdout or "")[-1500:] + text[:1500]
        return res
    groups = split_on_delimiter(kernels, len(names))
    wline = next((ln for ln in (p.stdout or "").splitlines() if ln.startswith("NCU_WINDOWS ")), None)
    windows = json.loads(wline[len("NCU_WINDOWS "):]) if wline else {}
    per_op = {}
    for name, durs in zip(names, groups):
        sums = per_call_sums([int(d * 1e9) for d in durs], calls)
        per_op[name] = {"median_s": median(sums) if sums else (sum(durs) / calls if durs else math.nan),
                        "kernels_per_call": len(durs) / calls if calls else math.nan,
                        "window": windows.get(name)}
    res["per_op"] = per_op
    return res


# ----------------------------------------------------------------------------- child: repro
def _pair_schedule(timer, fa, fb, number: int, rounds: int, clock=time.perf_counter):
    """ABBA-alternating samples of two fns; returns (a, b, gpu_seconds)."""
    a, b, spent = [], [], 0.0
    for r in range(rounds):
        order = ((fa, a), (fb, b)) if r % 2 == 0 else ((fb, b), (fa, a))
        for fn, sink in order:
            t0 = clock()
            sink.append(timer.sample(fn, number))
            spent += clock() - t0
    return a, b, spent


def child_repro(args) -> None:
    import torch

    from expkit.cuda_timer import CudaTimer

    (na, ba), (nb, bb) = PAIR_REPRO
    fa, fb = ba(torch), bb(torch)
    timer = CudaTimer(cold=True, flush=args.flush)
    for fn in (fa, fb):
        timer.sample(fn, 8)
    a, b, spent = _pair_schedule(timer, fa, fb, 32, args.rounds)
    print(json.dumps({"a": na, "b": nb, "a_s": median(a), "b_s": median(b),
                      "speedup": median(a) / median(b), "gpu_s": spent, "pid": os.getpid()}))


# ----------------------------------------------------------------------------- main
@dataclass
class Cell:
    seconds: float
    t0: float
    t1: float
    extra: dict[str, Any] = field(default_factory=dict)


def measure_op(torch, op: Op, q: bool, flush_default: str) -> tuple[dict[str, Cell], dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    from expkit.cuda_timer import CudaTimer

    fn = op.build(torch)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    # rough per-call time, to size blocks (10 back-to-back calls between two events)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        fn()
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e) / 10 / 1e3, 1e-6)
    cold_n = int(min(64, max(3, 2e-3 / (est + 40e-6))))
    warm_n = int(min(256, max(3, 2e-3 / est)))
    samples = 8 if q else 20
    cells: dict[str, Cell] = {}
    info: dict[str, Any] = {"est_s": est, "cold_number": cold_n, "warm_number": warm_n, "samples": samples}

    def timed(label: str, timer, number: int, n: int = samples) -> None:
        timer.sample(fn, number)  # warm the timer's estimates (queue time, clock)
        vals, slack, ok, foreign, attempts, per_call = [], [], [], 0, [], []
        t0 = time.perf_counter()
        for _ in range(n):
            vals.append(timer.sample(fn, number))
            lb = timer.last_block
            slack.append(lb.max_slack_s)
            ok.append(lb.hold_ok)
            foreign += lb.foreign_work
            attempts.append(lb.attempts)
            per_call.extend(timer.last_call_times)
        t1 = time.perf_counter()
        cells[label] = Cell(median(vals), t0, t1, {
            "all": vals, "slack_median_s": median(slack), "slack_max_s": max(slack),
            "hold_ok_fraction": sum(ok) / len(ok), "foreign_blocks": foreign,
            "max_calls_per_hold": timer.max_calls_per_hold, "attempts": attempts,
            "per_call_median_s": median(per_call) if per_call else None,
            "per_call_p90_s": sorted(per_call)[int(0.9 * len(per_call))] if per_call else None,
        })

    timers = {
        "expkit_cold_write": CudaTimer(cold=True, flush="write"),
        "expkit_cold_read": CudaTimer(cold=True, flush="read"),
        "expkit_warm": CudaTimer(cold=False),
    }
    timed("expkit_cold_write", timers["expkit_cold_write"], cold_n)
    timed("expkit_cold_read", timers["expkit_cold_read"], cold_n)
    timed("expkit_warm", timers["expkit_warm"], warm_n)

    # CUPTI: kernel durations of the same timer calls, under torch.profiler.
    flush_names: set[str] = set()
    for label, timer, number in (("cold", timers[f"expkit_cold_{flush_default}"], cold_n), ("warm", timers["expkit_warm"], warm_n)):
        with profile(activities=[ProfilerActivity.CUDA]) as p_op:
            fn()
            torch.cuda.synchronize()
        op_names = {k[0] for k in kernel_events(p_op)}
        if label == "cold":
            with profile(activities=[ProfilerActivity.CUDA]) as p_fl:
                timer._device.flush_l2()
                torch.cuda.synchronize()
            flush_names = {k[0] for k in kernel_events(p_fl)}
        clash = op_names & (flush_names | {n for n in op_names if SPIN in n})
        n_samples = 3 if q else 5
        vals = []
        # Count the calls really made: a retried hold re-runs its block.
        count = [0]

        def counted() -> Any:
            count[0] += 1
            return fn()

        timer.sample(counted, number)  # the profiler slows launches; let the hold adapt first
        count[0] = 0
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n_samples):
                vals.append(timer.sample(counted, number))
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        ks = [k for k in kernel_events(prof) if k[0] in op_names and k[0] not in flush_names and SPIN not in k[0]]
        streams = sorted({k[3] for k in ks})
        sums = per_call_sums([k[2] for k in ks], count[0])
        ref = median(sums) if sums else math.nan
        cells[f"cupti_{label}"] = Cell(ref, t0, t1, {
            "kernels": len(ks), "calls": count[0], "kernel_names": sorted(op_names)[:4],
            "name_clash": sorted(clash), "streams": streams,
            "mean_s": (sum(sums) / len(sums)) if sums else None,
        })
        cells[f"expkit_{label}_profiled"] = Cell(median(vals), t0, t1)

    # triton.testing.do_bench (median). Flushes 256 MB before each call.
    try:
        import triton.testing

        t0 = time.perf_counter()
        ms = triton.testing.do_bench(fn, warmup=25 if not q else 10, rep=100 if not q else 40, return_mode="median")
        cells["do_bench"] = Cell(ms / 1e3, t0, time.perf_counter())
    except Exception as ex:  # keep the row, mark the failure
        info["do_bench_error"] = repr(ex)[:200]

    # torch.utils.benchmark blocked_autorange (median)
    from torch.utils import benchmark as tub

    t0 = time.perf_counter()
    m = tub.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.05 if q else 0.2)
    cells["blocked_autorange"] = Cell(m.median, t0, time.perf_counter())

    # naive: one event pair around one call, repeated
    vals = []
    t0 = time.perf_counter()
    for _ in range(10 if q else 30):
        s.record()
        fn()
        e.record()
        e.synchronize()
        vals.append(s.elapsed_time(e) / 1e3)
    cells["naive_event_pair"] = Cell(median(vals), t0, time.perf_counter())
    return cells, info


def queue_depth_probe(torch, hold_s: float = 0.02) -> list[dict[str, float]]:
    """Host time to queue N tiny kernels behind a 20 ms spin: a stall shows as ~hold_s."""
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    out = []
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(1_000_000)
    e.record()
    torch.cuda.synchronize()
    cps = 1_000_000 / (s.elapsed_time(e) / 1e3)
    for n in (128, 256, 512, 1024, 2048, 4096):
        torch.cuda._sleep(int(hold_s * cps))
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append({"kernels": n, "queue_s": t1 - t0, "hold_s": hold_s})
    return out


def nvml_interference(torch, flush: str, q: bool) -> dict[str, Any]:
    """Does NVML polling disturb the timings? Cold samples with the sampler on, off, on again."""
    from expkit.cuda_timer import CudaTimer
    from expkit.telemetry import open_telemetry

    out: dict[str, Any] = {}
    for name, build in (("add_f32_2^21", _add(1 << 21, "float32")), ("mm_bf16_1024", _mm(1024, 1024, 1024))):
        fn = build(torch)
        for cold in (True, False):
            timer = CudaTimer(cold=cold, flush=flush)
            number = 40 if cold else 200
            for _ in range(3):
                timer.sample(fn, number)
            phases = {}
            for phase, period in (("nvml_10ms", 0.01), ("no_nvml", None), ("nvml_10ms_again", 0.01), ("no_nvml_again", None)):
                tel = open_telemetry(0, period_s=period) if period else None
                if tel is not None:
                    tel.start()
                vals, per_call, attempts = [], [], []
                for _ in range(8 if q else 16):
                    vals.append(timer.sample(fn, number))
                    per_call.extend(timer.last_call_times)
                    attempts.append(timer.last_block.attempts)
                if tel is not None:
                    tel.stop()
                    tel.close()
                srt = sorted(vals)
                phases[phase] = {"median_s": median(vals), "min_s": srt[0], "max_s": srt[-1],
                                 "spread": (srt[-1] - srt[0]) / median(vals), "values": vals,
                                 "per_call_median_s": median(per_call) if per_call else None,
                                 "per_call_max_s": max(per_call) if per_call else None, "attempts": attempts}
            out[f"{name} {'cold' if cold else 'warm'}"] = phases
            print("interference", name, "cold" if cold else "warm",
                  {k: (round(v["median_s"] * 1e6, 3), round(v["spread"] * 100, 2)) for k, v in phases.items()}, flush=True)
    return out


def overhead_probe(torch, flush: str) -> dict[str, Any]:
    """What an event pair costs with nothing (or a near-empty kernel) inside it."""
    from torch.profiler import ProfilerActivity, profile

    from expkit.cuda_timer import CudaTimer

    res: dict[str, Any] = {}
    x = torch.zeros(1, device="cuda")
    for label, fn in (("empty_fn", lambda: None), ("one_element_add", lambda: x.add_(1))):
        for cold in (True, False):
            timer = CudaTimer(cold=cold, flush=flush)
            number = 40 if cold else 200
            timer.sample(fn, number)
            vals = [timer.sample(fn, number) for _ in range(10)]
            res[f"{label} {'cold' if cold else 'warm'}"] = median(vals)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            x.add_(1)
        torch.cuda.synchronize()
    durs = [k[2] * 1e-9 for k in kernel_events(prof)]
    res["one_element_add cupti"] = median(durs) if durs else None
    print("overhead probe (us):", {k: (round(v * 1e6, 3) if v else v) for k, v in res.items()}, flush=True)
    return res


def precision_cost(torch, cold: bool, flush: str, target: float, max_gpu_s: float, q: bool) -> dict[str, Any]:
    """GPU-seconds until the bootstrap 95% CI of the ~10 us pair's ratio is within +-target."""
    from expkit.cuda_timer import CudaTimer

    (na, ba), (nb, bb) = PAIR_10US
    fa, fb = ba(torch), bb(torch)
    timer = CudaTimer(cold=cold, flush=flush)
    number = 32 if cold else 128
    for fn in (fa, fb):
        timer.sample(fn, number)
    a, b, spent = [], [], 0.0
    hist = []
    t_start = time.perf_counter()
    reached = None
    rounds = 0
    next_check = 20  # expkit.stats warns below 20 samples a side: the interval is too narrow
    while spent < max_gpu_s:
        aa, bb_, s = _pair_schedule(timer, fa, fb, number, 4)
        a += aa
        b += bb_
        spent += s
        rounds += 4
        if len(a) >= next_check:
            # Checking every 10% more samples keeps the bootstrap's host time small
            # beside the GPU time, at the price of overshooting the point by <= 10%.
            next_check = max(len(a) + 4, int(len(a) * 1.1))
            r, lo, hi = bootstrap_ratio_ci(a, b, n_boot=1000 if q else 2000, seed=len(a))
            half = (hi - lo) / 2 / r
            hist.append((spent, half))
            if half <= target:
                reached = {"gpu_s": spent, "ratio": r, "ci": [lo, hi], "half_width": half, "samples_each": len(a)}
                break
    return {"pair": [na, nb], "cold": cold, "number_per_sample": number, "reached": reached,
            "gpu_s_spent": spent, "wall_s": time.perf_counter() - t_start,
            "a_median_s": median(a), "b_median_s": median(b), "history": hist[-20:]}


def fmt_us(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e6:,.2f}"


def fmt_ratio(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else f"{x:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, for a debug run")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(RESULTS))
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--ops", default="", help="comma-separated subset of the ladder")
    ap.add_argument("--flush", default="read", choices=("write", "read"), help="expkit's default flush, for the targets")
    ap.add_argument("--child", choices=("ncu", "repro"))
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--procs", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget; late phases shrink to fit")
    ap.add_argument("--render", metavar="JSON", help="re-render the markdown from a stored results JSON and exit")
    args = ap.parse_args()
    if args.render:
        res = json.loads(Path(args.render).read_text())
        md = render(res, res["env"].get("default_flush", args.flush))
        Path(args.render).with_suffix(".md").write_text(md)
        print(md)
        return 0
    if args.child == "ncu":
        child_ncu(args)
        return 0
    if args.child == "repro":
        child_repro(args)
        return 0

    import torch

    from expkit.telemetry import flag_slow_clock, open_telemetry

    if not torch.cuda.is_available():
        print("timing_fidelity: needs a CUDA GPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    q = args.quick
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    tel = open_telemetry(0, uuid=f"GPU-{uuid}" if uuid is not None else None, period_s=0.01)
    if not tel.available:
        tel = open_telemetry(0, period_s=0.01)
    gpu = tel.info()
    t_begin = time.perf_counter()
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name, "nvml": gpu.to_dict(), "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "python": platform.python_version(),
        "l2_bytes": int(props.L2_cache_size), "sms": props.multi_processor_count,
        "quick": q, "default_flush": args.flush,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    print(f"# {props.name}  torch {torch.__version__}  driver {gpu.driver_version}  {env['date']}", flush=True)

    ops = ladder()
    if args.ops:
        keep = set(args.ops.split(","))
        ops = [o for o in ops if o.name in keep]
    results: dict[str, Any] = {"env": env, "ops": {}}

    results["queue_depth_probe"] = queue_depth_probe(torch)
    print("queue probe:", [(r["kernels"], round(r["queue_s"] * 1e3, 2)) for r in results["queue_depth_probe"]], flush=True)
    results["nvml_interference"] = nvml_interference(torch, args.flush, q)
    results["overhead_probe"] = overhead_probe(torch, args.flush)

    tel.start()

    all_cells: dict[str, dict[str, Cell]] = {}
    for op in ops:
        t0 = time.perf_counter()
        cells, info = measure_op(torch, op, q, args.flush)
        all_cells[op.name] = cells
        results["ops"][op.name] = {"info": info}
        short = {k: round(v.seconds * 1e6, 2) for k, v in cells.items()}
        print(f"{op.name}: {short}  ({time.perf_counter() - t0:.1f} s)", flush=True)
        torch.cuda.empty_cache()

    # Nsight Compute, in child processes (one per cache mode)
    ncu_res: dict[str, Any] = {}
    deadline = t_begin + args.budget_s

    def left() -> float:
        return deadline - time.perf_counter()

    if not args.skip_ncu:
        for cache in ("all", "none"):
            if left() < 90:
                ncu_res[cache] = {"error": "skipped: out of the run's time budget"}
                continue
            r = run_ncu([o.name for o in ops], cache, 5 if q else 20, out, timeout=min(90.0, left() - 60))
            ncu_res[cache] = r
            print(f"ncu {cache}: rc={r.get('rc')} kernels={r.get('kernels')} error={r.get('error')}", flush=True)
            if r.get("stderr_tail"):
                print(r["stderr_tail"][-2000:], flush=True)
    results["ncu"] = {k: {kk: vv for kk, vv in v.items() if kk != "per_op"} for k, v in ncu_res.items()}
    log = tel.stop()
    tel.close()
    results["telemetry_summary"] = log.summary()

    # reproducibility across fresh processes
    repro = []
    t_r0 = time.perf_counter()
    for i in range(2 if q else args.procs):
        if left() < 45:
            repro.append({"error": "skipped: out of the run's time budget"})
            continue
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "repro",
                            "--rounds", str(10 if q else args.rounds), "--flush", args.flush],
                           capture_output=True, text=True, timeout=60)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
        repro.append(json.loads(line) if line else {"error": (p.stderr or "")[-800:]})
        print("repro", i, repro[-1], flush=True)
    t_r1 = time.perf_counter()
    speeds = [r["speedup"] for r in repro if "speedup" in r]
    results["repro"] = {"runs": repro, "spread": (max(speeds) - min(speeds)) / median(speeds) if len(speeds) > 1 else None,
                        "t0": t_r0, "t1": t_r1}

    # GPU-seconds to +-1% on a ~10 us pair: without telemetry, then cold again with NVML polling
    cap = max(1.0, min(8.0, (left() - 10) / 4))
    results["precision"] = [
        precision_cost(torch, True, args.flush, 0.01, 4.0 if q else cap, q),
        precision_cost(torch, False, args.flush, 0.01, 2.0 if q else cap / 2, q),
    ]
    from expkit.telemetry import open_telemetry as _ot

    t2 = _ot(0, period_s=0.01)
    t2.start()
    pc = precision_cost(torch, True, args.flush, 0.01, 4.0 if q else cap, q)
    t2.stop()
    t2.close()
    pc["with_nvml_polling"] = True
    results["precision"].append(pc)
    for pc in results["precision"]:
        print("precision", pc["cold"], pc.get("with_nvml_polling", False), pc["reached"], round(pc["gpu_s_spent"], 2), flush=True)

    # clocks per cell, slow-clock flags
    max_sm = gpu.max_sm_clock_mhz
    def clock_of(t0: float, t1: float) -> dict[str, Any] | None:
        w = log.window(t0, t1)
        sm = [c for c in w.sm_clock_mhz if not math.isnan(c)]
        if not sm:
            return None
        slow = flag_slow_clock([(t0, t1)], log, max_sm)[0] if max_sm else None
        return {"mean": sum(sm) / len(sm), "min": min(sm), "max": max(sm), "slow": slow,
                "throttle": sorted({r for r in w.throttle_reasons if r > 0})}

    for name, cells in all_cells.items():
        rec = results["ops"][name]
        rec["cells"] = {k: {"seconds": c.seconds, "clock": clock_of(c.t0, c.t1), **c.extra} for k, c in cells.items()}
        for cache in ncu_res:
            per = ncu_res[cache].get("per_op", {}).get(name)
            if per:
                w = per.get("window") or (ncu_res[cache]["t0"], ncu_res[cache]["t1"])
                rec["cells"][f"ncu_{cache}"] = {"seconds": per["median_s"], "kernels_per_call": per["kernels_per_call"],
                                                "clock": clock_of(w[0], w[1])}
    results["repro"]["clock"] = clock_of(t_r0, t_r1)

    md = render(results, args.flush)
    (out / "timing_fidelity.md").write_text(md)
    (out / "timing_fidelity.json").write_text(json.dumps(results, indent=1, default=str))
    if out.resolve() != RESULTS.resolve():
        RESULTS.mkdir(parents=True, exist_ok=True)
        for f in ("timing_fidelity.md", "timing_fidelity.json"):
            shutil.copy(out / f, RESULTS / f)
    print(md)
    print(f"total {time.perf_counter() - t_begin:.0f} s")
    return 0


def render(results: dict[str, Any], flush: str) -> str:
    env = results["env"]
    nv = env["nvml"]
    lines = [
        "# Timing fidelity of expkit's CudaTimer",
        "",
        f"GPU **{env['gpu']}** (driver {nv.get('driver_version')}, CUDA driver {nv.get('cuda_driver_version')}, "
        f"max SM clock {nv.get('max_sm_clock_mhz')} MHz, power limit {nv.get('power_limit_w')} W, ECC {nv.get('ecc_enabled')}, "
        f"MIG {nv.get('mig_enabled')}), torch {env['torch']} (CUDA {env['cuda_runtime']}), triton {env.get('triton')}, "
        f"{env['date']}. L2 {env['l2_bytes'] / 2**20:.0f} MiB, {env['sms']} SMs. "
        f"{'QUICK (debug) run. ' if env['quick'] else ''}expkit default flush for the targets: **{flush}**.",
        "",
        "## Times per call (us, medians)",
        "",
        "CUPTI = torch.profiler kernel durations of the same calls of expkit's cold / warm timer. "
        "ncu = Nsight Compute `gpu__time_duration.sum`, `--clock-control none`, child process.",
        "",
    ]
    cols = ["cupti_cold", "cupti_warm", "ncu_all", "ncu_none", "expkit_cold_write", "expkit_cold_read", "expkit_warm",
            "do_bench", "blocked_autorange", "naive_event_pair"]
    ek = f"expkit_cold_{flush}"
    lines.append("| op | " + " | ".join(cols) + " | ek cold per-call median |")
    lines.append("|---" * (len(cols) + 2) + "|")
    for name, rec in results["ops"].items():
        c = rec.get("cells", {})
        lines.append(f"| {name} | " + " | ".join(fmt_us(c.get(k, {}).get("seconds")) for k in cols)
                     + f" | {fmt_us(c.get(ek, {}).get('per_call_median_s'))} |")

    def ratio(c, a, b):
        x, y = c.get(a, {}).get("seconds"), c.get(b, {}).get("seconds")
        return None if x is None or y is None or not y else x / y

    rcols = [
        ("ek cold/CUPTI (same calls)", "expkit_cold_profiled", "cupti_cold"),
        ("ek warm/CUPTI warm (same calls)", "expkit_warm_profiled", "cupti_warm"),
        ("ek cold/CUPTI (separate run)", ek, "cupti_cold"),
        ("ek warm/CUPTI warm (separate run)", "expkit_warm", "cupti_warm"),
        ("ek cold write/ncu all", "expkit_cold_write", "ncu_all"),
        ("ek cold read/ncu all", "expkit_cold_read", "ncu_all"),
        ("ek warm/ncu none", "expkit_warm", "ncu_none"),
        ("CUPTI cold/ncu all", "cupti_cold", "ncu_all"),
        ("do_bench/CUPTI cold", "do_bench", "cupti_cold"),
        ("autorange/CUPTI warm", "blocked_autorange", "cupti_warm"),
        ("naive/CUPTI warm", "naive_event_pair", "cupti_warm"),
    ]
    lines += ["", "## Ratios", "", "| op | " + " | ".join(r[0] for r in rcols) + " |", "|---" * (len(rcols) + 1) + "|"]
    for name, rec in results["ops"].items():
        c = rec.get("cells", {})
        lines.append(f"| {name} | " + " | ".join(fmt_ratio(ratio(c, a, b)) for _, a, b in rcols) + " |")

    ccols = ["expkit_cold_write", "expkit_cold_read", "expkit_warm", "cupti_cold", "ncu_all", "ncu_none", "do_bench",
             "blocked_autorange"]
    lines += ["", "## SM clock seen by NVML while each method ran (MHz: mean [min]; * = slow-clock flag)", "",
              "| op | " + " | ".join(ccols) + " |", "|---" * (len(ccols) + 1) + "|"]
    for name, rec in results["ops"].items():
        c = rec.get("cells", {})
        row = []
        for k in ccols:
            ck = (c.get(k) or {}).get("clock")
            row.append("—" if not ck else f"{ck['mean']:.0f} [{ck['min']:.0f}]{'*' if ck.get('slow') else ''}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")

    lines += ["", "## Timer diagnostics", "",
              "| op | cold n | warm n | hold ok (cold/warm) | slack median / max, us (cold) | foreign-work blocks | CUPTI streams | kernels/call (ncu) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, rec in results["ops"].items():
        c, info = rec.get("cells", {}), rec["info"]
        ck, wk = c.get(ek, {}), c.get("expkit_warm", {})
        lines.append(
            f"| {name} | {info['cold_number']} | {info['warm_number']} | {ck.get('hold_ok_fraction')}/{wk.get('hold_ok_fraction')} | "
            f"{fmt_us(ck.get('slack_median_s'))} / {fmt_us(ck.get('slack_max_s'))} | "
            f"{ck.get('foreign_blocks', 0) + wk.get('foreign_blocks', 0) + c.get('expkit_cold_read', {}).get('foreign_blocks', 0)} | "
            f"{c.get('cupti_cold', {}).get('streams')} | {c.get('ncu_all', {}).get('kernels_per_call')} |")

    # targets
    lines += ["", "## Targets", ""]
    miss_small, miss_big, ncu_miss, ncu_skipped = [], [], [], []
    for name, rec in results["ops"].items():
        c = rec.get("cells", {})
        # Same calls: the profiled timer samples and the kernels CUPTI recorded in them.
        # The separate-run ratios also carry clock changes between the two windows.
        for label, a, b in (("cold", "expkit_cold_profiled", "cupti_cold"), ("warm", "expkit_warm_profiled", "cupti_warm")):
            r = ratio(c, a, b)
            refb = c.get(b, {}).get("seconds")
            if r is None or refb is None:
                continue
            tol = 0.02 if refb >= 5e-6 else 0.05
            if abs(r - 1) > tol:
                (miss_big if refb >= 5e-6 else miss_small).append(f"{name} {label} {r:.3f}")
        r = ratio(c, ek, "ncu_all")
        ce, cn = (c.get(ek) or {}).get("clock"), (c.get("ncu_all") or {}).get("clock")
        max_sm = nv.get("max_sm_clock_mhz") or 1.0
        if ce and cn and abs(ce["mean"] - cn["mean"]) / max_sm > 0.03:
            ncu_skipped.append(f"{name} ({ce['mean']:.0f} vs {cn['mean']:.0f} MHz)")
        elif r is not None and abs(r - 1) > 0.05:
            ncu_miss.append(f"{name} {r:.3f}")
    lines.append(f"* expkit within 2% of CUPTI (same calls) for kernels >= 5 us: {'MET' if not miss_big else 'MISSED: ' + ', '.join(miss_big)}")
    lines.append(f"* within 5% below 5 us: {'MET' if not miss_small else 'MISSED: ' + ', '.join(miss_small)}")
    n_cmp = sum(1 for rec in results["ops"].values() if "ncu_all" in rec.get("cells", {})) - len(ncu_skipped)
    lines.append(f"* cold within 5% of ncu --cache-control all where clocks match ({n_cmp} ops compared): "
                 f"{('MET' if n_cmp > 0 else '—') if not ncu_miss else 'MISSED: ' + ', '.join(ncu_miss)}"
                 + ("" if results.get("ncu") else " (ncu not run)")
                 + (f"; not compared, clocks differ by more than 3% of max: {', '.join(ncu_skipped)}" if ncu_skipped else ""))
    rp = results.get("repro", {})
    sp = rp.get("spread")
    runs = [r.get("speedup") for r in rp.get("runs", []) if "speedup" in r]
    lines.append(f"* speedup spread over {len(runs)} fresh processes <= 1%: "
                 f"{'—' if sp is None else ('MET' if sp <= 0.01 else 'MISSED')} (spread {'—' if sp is None else f'{sp * 100:.2f}%'}; "
                 f"speedups {', '.join(f'{x:.4f}' for x in runs)})")
    for pc in results.get("precision", []):
        re = pc.get("reached")
        mode = ("cold" if pc["cold"] else "warm") + (", NVML polling every 10 ms" if pc.get("with_nvml_polling") else ", no NVML polling")
        if re:
            ok = re["gpu_s"] <= 3.0
            lines.append(f"* +-1% on the ~10 us pair ({mode}, {pc['pair'][0]} vs {pc['pair'][1]}): "
                         f"{'MET' if ok else 'MISSED'} in {re['gpu_s']:.2f} GPU-s ({re['samples_each']} samples of "
                         f"{pc['number_per_sample']} calls each; ratio {re['ratio']:.4f} [{re['ci'][0]:.4f}, {re['ci'][1]:.4f}])")
        else:
            lines.append(f"* +-1% on the ~10 us pair ({mode}): MISSED, not reached in {pc['gpu_s_spent']:.1f} GPU-s")
    inter = results.get("nvml_interference")
    if inter:
        lines += ["", "## Does NVML polling disturb the timings?", "",
                  "Median per call (us) and (max-min)/median of 8-16 samples, per phase, same timer, same process.", "",
                  "| case | " + " | ".join(next(iter(inter.values())).keys()) + " |",
                  "|---" * (len(next(iter(inter.values()))) + 1) + "|"]
        for case, phases in inter.items():
            lines.append(f"| {case} | " + " | ".join(
                f"{v['median_s'] * 1e6:.3f} ({v['spread'] * 100:.1f}%)" for v in phases.values()) + " |")
    op_ = results.get("overhead_probe")
    if op_:
        lines += ["", "Event-pair overhead probe (us, median of 10 samples): "
                  + ", ".join(f"{k}: {'—' if v is None else f'{v * 1e6:.3f}'}" for k, v in op_.items())]
    qp = results.get("queue_depth_probe")
    if qp:
        lines += ["", "Queue probe (host ms to queue N tiny kernels behind a 20 ms spin; ~20 means the host stalled): "
                  + ", ".join(f"{r['kernels']}: {r['queue_s'] * 1e3:.2f}" for r in qp)]
    ts = results.get("telemetry_summary", {})
    lines += ["", f"NVML over the whole run: SM clock {ts.get('sm_clock_mhz')}, power W {ts.get('power_w')}, "
              f"temperature C {ts.get('temperature_c')}, throttle reasons seen {ts.get('throttle_reasons')}."]
    for cache, r in (results.get("ncu") or {}).items():
        if r.get("error"):
            lines.append(f"\nncu {cache}: {r['error']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
