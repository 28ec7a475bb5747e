"""Probe: which GPU record should expkit's kernel-time timer read, and at what cost?

A script, not a test; run once on a CUDA machine to choose between two ways of getting
each call's kernel span from the GPU's own timestamps:

* ``cupti-python`` (NVIDIA's bindings): the Activity API with CONCURRENT_KERNEL, MEMCPY
  and MEMSET records, and an external correlation id pushed around each call, so that
  every record is attributed to the call that launched it (the harness's own kernels
  launched outside a push are attributed to nobody);
* ``torch.profiler`` (Kineto, which also sits on CUPTI): a ``record_function`` range
  around each call, kernels attributed through the profiler's correlation of launches
  to the enclosing range.

It prints, for spin kernels of known cycle counts followed by a small add (the
"known-ratio pairs" of issue #14): the per-call span each method reports against
cycles / SM clock, the host cost per call of collecting it, and whether collection
changes a long kernel's own duration (CUDA events with and without collection on).
It also checks that torch.profiler and cupti-python can be used one after the other in
one process (the preflight profiles with torch.profiler; timing would use CUPTI).

Writes ``kernel_time_probe.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

import torch

KINETO_DEBUG = None
API = "--api" in sys.argv
CYCLES = (2_000, 6_000, 12_000, 24_000, 80_000, 400_000)


def sm_clock_hz() -> float:
    """Cycles per second of the spin kernel, measured with events around a long spin."""
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 20_000_000
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(n)
    b.record()
    torch.cuda.synchronize()
    return n / (a.elapsed_time(b) / 1e3)


def make_op(cycles: int):
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")

    def op() -> Any:
        torch.cuda._sleep(cycles)
        return x + y

    return op


def events_per_call(op, n: int = 200) -> List[float]:
    """Per-call event time, calls held back to back behind a spin (the existing method's core)."""
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    torch.cuda.synchronize()
    torch.cuda._sleep(int(n * 60e-6 * 2e9))
    for i in range(n):
        ev[2 * i].record()
        op()
        ev[2 * i + 1].record()
    torch.cuda.synchronize()
    return [ev[2 * i].elapsed_time(ev[2 * i + 1]) * 1e3 for i in range(n)]


class CuptiCollector:
    """cupti-python activity records with an external id per call."""

    def __init__(self, api: bool = False) -> None:
        from cupti import cupti

        self.c = cupti
        self.records: List[Any] = []
        self.kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET,
                      cupti.ActivityKind.EXTERNAL_CORRELATION]
        if api:
            self.kinds += [cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER]
        self.counts: Dict[str, int] = {}

        def requested():
            return 8 * 1024 * 1024, 0

        def completed(activities):
            # Keep plain tuples: the record objects point into a buffer CUPTI reuses.
            for a in activities:
                k = a.kind
                self.counts[str(k)] = self.counts.get(str(k), 0) + 1
                if k == cupti.ActivityKind.EXTERNAL_CORRELATION:
                    self.records.append(("ext", a.correlation_id, a.external_id))
                elif k == cupti.ActivityKind.CONCURRENT_KERNEL:
                    self.records.append(("kernel", a.correlation_id, a.start, a.end, a.stream_id, a.device_id, a.name))
                elif k in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
                    continue
                else:
                    self.records.append(("copy", a.correlation_id, a.start, a.end, a.stream_id, a.device_id, str(k)))

        cupti.activity_register_callbacks(requested, completed)

    def enable(self) -> None:
        for k in self.kinds:
            self.c.activity_enable(k)

    def disable(self) -> None:
        self.c.activity_flush_all(1)
        for k in self.kinds:
            self.c.activity_disable(k)

    def push(self, i: int) -> None:
        self.c.activity_push_external_correlation_id(self.c.ExternalCorrelationKind.CUSTOM0, i)

    def pop(self) -> None:
        self.c.activity_pop_external_correlation_id(self.c.ExternalCorrelationKind.CUSTOM0)

    def flush(self) -> None:
        self.c.activity_flush_all(1)

    def spans(self) -> Dict[int, Dict[str, Any]]:
        ext = {r[1]: r[2] for r in self.records if r[0] == "ext"}
        out: Dict[int, Dict[str, Any]] = {}
        unclaimed = 0
        for r in self.records:
            if r[0] == "ext":
                continue
            call = ext.get(r[1])
            if call is None:
                unclaimed += 1
                continue
            s = out.setdefault(call, {"start": r[2], "end": r[3], "n": 0, "streams": set()})
            s["start"] = min(s["start"], r[2])
            s["end"] = max(s["end"], r[3])
            s["n"] += 1
            s["streams"].add(r[4])
        self.unclaimed = unclaimed
        return out


def cupti_block(col: CuptiCollector, op, n: int, flush=None) -> Dict[str, Any]:
    col.records.clear()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(n * 60e-6 * 2e9))
    t0 = time.perf_counter()
    for i in range(n):
        if flush is not None:
            flush()
        col.push(i + 1)
        op()
        col.pop()
    t_queue = time.perf_counter() - t0
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    col.flush()
    t_flush = time.perf_counter() - t1
    t2 = time.perf_counter()
    sp = col.spans()
    t_parse = time.perf_counter() - t2
    per = [(sp[i + 1]["end"] - sp[i + 1]["start"]) / 1e3 for i in range(n) if (i + 1) in sp]
    return {"per_call_us": per, "kernels_per_call": statistics.median(s["n"] for s in sp.values()) if sp else 0,
            "queue_us_per_call": t_queue / n * 1e6, "flush_ms": t_flush * 1e3, "parse_ms": t_parse * 1e3,
            "unclaimed": col.unclaimed, "claimed_calls": len(sp)}


def queue_cost_plain(op, n: int) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e6))
    t0 = time.perf_counter()
    for _ in range(n):
        op()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t / n * 1e6


def kineto_block(op, n: int) -> Dict[str, Any]:
    """torch.profiler around a block; each call in a record_function range.

    Attribution uses Kineto's raw events: a kernel's ``linked_correlation_id`` names
    the runtime launch (a CPU event) that queued it, and that launch lies inside the
    CPU time range of the call's ``record_function``."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(int(n * 300e-6 * 2e9))
        for i in range(n):
            with record_function(f"expkit-call-{i}"):
                op()
        torch.cuda.synchronize()
    t_prof = time.perf_counter() - t0
    t1 = time.perf_counter()
    raw = prof.profiler.kineto_results.events()
    ranges = []
    launches = []
    kernels = []
    for e in raw:
        name = e.name()
        dev = str(e.device_type())
        if name.startswith("expkit-call-") and dev.endswith("CPU"):
            ranges.append((e.start_ns(), e.start_ns() + e.duration_ns(), int(name.rsplit("-", 1)[1])))
        elif dev.endswith("CPU"):
            launches.append((e.start_ns(), e.correlation_id()))
        else:
            kernels.append((e.linked_correlation_id() or e.correlation_id(), e.start_ns(), e.start_ns() + e.duration_ns(),
                            name))
    global KINETO_DEBUG
    if KINETO_DEBUG is None:
        KINETO_DEBUG = [(e.name()[:40], str(e.device_type()), e.start_ns(), e.duration_ns(), e.correlation_id(),
                         e.linked_correlation_id()) for e in list(raw)[:40]]
    ranges.sort()
    corr_to_call = {}
    for ts, corr in launches:
        for a, b, i in ranges:
            if a <= ts <= b:
                corr_to_call[corr] = i
                break
    spans: Dict[int, List[int]] = {}
    for corr, s0, s1, name in kernels:
        i = corr_to_call.get(corr)
        if i is None:
            continue
        sp = spans.setdefault(i, [s0, s1])
        sp[0], sp[1] = min(sp[0], s0), max(sp[1], s1)
    per = [(b - a) / 1e3 for a, b in spans.values()]
    t_parse = time.perf_counter() - t1
    return {"per_call_us": per, "profile_ms": t_prof * 1e3, "parse_ms": t_parse * 1e3, "calls": len(ranges),
            "calls_with_kernels": len(per)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--api", action="store_true")
    ap.add_argument("--cupti-first", action="store_true")
    args = ap.parse_args()
    out: Dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlDeviceGetHandleByIndex(0)  # raises where NVML sees no GPU
        out["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as e:
        out["driver"] = f"unavailable: {e}"
    hz = sm_clock_hz()
    out["spin_hz"] = hz
    print(f"device {out['device']} driver {out['driver']} spin clock {hz / 1e6:.0f} MHz", flush=True)

    # Kineto first, the way the preflight uses torch.profiler before timing.
    rows = []
    for cyc in (() if args.cupti_first else CYCLES):
        op = make_op(cyc)
        for _ in range(3):
            op()
        ev = events_per_call(op)
        kin = kineto_block(op, 64)
        rows.append({"cycles": cyc, "expected_us": cyc / hz * 1e6, "events_med_us": statistics.median(ev),
                     "kineto_med_us": statistics.median(kin["per_call_us"]) if kin["per_call_us"] else None,
                     "kineto_profile_ms_per_64": kin["profile_ms"], "kineto_parse_ms_per_64": kin["parse_ms"],
                     "kineto_calls_with_kernels": kin["calls_with_kernels"],
                     "plain_queue_us": queue_cost_plain(op, 200)})
        print(rows[-1], flush=True)
    out["kineto"] = rows
    out["kineto_debug"] = KINETO_DEBUG

    try:
        from cupti import cupti  # noqa: F401

        col = CuptiCollector(api=API)
        crow = []
        for cyc in CYCLES:
            op = make_op(cyc)
            ev_off = events_per_call(op)
            col.enable()
            res = [cupti_block(col, op, 64) for _ in range(3)]
            ev_on = events_per_call(op)  # events while CUPTI collects: does collection change durations?
            col.disable()
            per = [p for r in res for p in r["per_call_us"]]
            crow.append({"cycles": cyc, "expected_us": cyc / hz * 1e6, "cupti_med_us": statistics.median(per) if per else None,
                         "cupti_min_us": min(per, default=None), "cupti_max_us": max(per, default=None),
                         "events_off_med_us": statistics.median(ev_off), "events_on_med_us": statistics.median(ev_on),
                         "queue_us_per_call": statistics.median(r["queue_us_per_call"] for r in res),
                         "flush_ms": statistics.median(r["flush_ms"] for r in res),
                         "parse_ms": statistics.median(r["parse_ms"] for r in res),
                         "kernels_per_call": res[0]["kernels_per_call"], "unclaimed": res[0]["unclaimed"],
                         "claimed_calls": res[0]["claimed_calls"], "counts": dict(col.counts)})
            print(crow[-1], flush=True)
        # Cold: a flush kernel before each call, outside the push: must be unclaimed.
        buf = torch.zeros(int(2 * torch.cuda.get_device_properties(0).L2_cache_size) // 4, device="cuda")
        o = torch.empty((), device="cuda")
        flush = lambda: torch.amax(buf, dim=0, out=o)  # noqa: E731
        op = make_op(12_000)
        col.enable()
        cold = cupti_block(col, op, 64, flush=flush)
        col.disable()
        out["cold_flush_check"] = {k: (v if k != "per_call_us" else statistics.median(v)) for k, v in cold.items()}
        print("cold", out["cold_flush_check"], flush=True)
        out["cupti"] = crow
        # And torch.profiler again after cupti-python: do they coexist?
        try:
            kin = kineto_block(make_op(12_000), 16)
            out["kineto_after_cupti"] = {"calls_with_kernels": kin["calls_with_kernels"]}
        except Exception as e:
            out["kineto_after_cupti"] = f"{type(e).__name__}: {e}"
        print("kineto after cupti:", out["kineto_after_cupti"], flush=True)
    except Exception as e:
        out["cupti_error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        print(out["cupti_error"], flush=True)

    try:
        import cuda.bench as cb

        out["cuda_bench"] = {"version": cb.__version__, "has_Benchmark": hasattr(cb, "Benchmark")}
    except Exception as e:
        out["cuda_bench"] = f"{type(e).__name__}: {e}"
    print("cuda.bench:", out["cuda_bench"], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "kernel_time_probe.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
