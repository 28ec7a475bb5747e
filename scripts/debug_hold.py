"""Debug: what the CUDA timer's hold does, block by block, for a spin of known cycles.

A script for the device, not a test. For each mode (warm, cold; events only, then with
CUPTI's recorder) it times a 200,000-cycle spin in blocks of 10, as
``tests/gpu/test_gpu_timer.py`` does, and prints, for every held block the timer ran
(attempts included): the calls, the hold asked for and what the events saw of it, the
host's queuing time, whether the hold outlasted it, the timer's estimates of queuing per
call and of the SM clock, and the per-call event time against the spin's own length timed
right after (events around 8 back-to-back spins). Then the L2-resident pair of the
adversarial suite (two passes against one over 8 MiB), each side in its own timer as the
workers time them, warm and cold: per-call kernel and event times, and the ticks.

Usage: python scripts/debug_hold.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def spin_length(cycles: int, number: int = 8) -> float:
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100_000)
    a.record()
    for _ in range(number):
        torch.cuda._sleep(cycles)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / number


def traced(timer: Any) -> List[Dict[str, Any]]:
    """Wrap the timer's held-block runner to keep what each attempt asked for and saw."""
    seen: List[Dict[str, Any]] = []
    run = timer._run_held

    def wrapped(fn: Any, n: int, hold_s: float) -> Dict[str, Any]:
        obs = run(fn, n, hold_s)
        seen.append({"n": n, "hold_asked_us": hold_s * 1e6, "held_us": obs["held_s"] * 1e6,
                     "queue_us": obs["queue_s"] * 1e6, "ok": obs["ok"], "per_call_us": obs["event_total"] / n * 1e6,
                     "q_per_call_est_us": timer._queue_per_call_s * 1e6, "cps_ghz": timer._cycles_per_s / 1e9,
                     "outruns": timer._outruns_queue, "max_calls": timer.max_calls_per_hold})
        return obs

    timer._run_held = wrapped
    return seen


def spins(rec: Any) -> None:
    from expkit.timing.cuda_timer import CudaTimer

    recorder = rec is not None
    for cold in (False, True):
        timer = CudaTimer(cold=cold, recorder=rec)
        seen = traced(timer)
        fn = lambda: torch.cuda._sleep(200_000)  # noqa: E731
        got = []
        for i in range(6):
            per = timer.sample(fn, 10)
            got.append((per, spin_length(200_000), timer.last_timing))
        print(f"\n== spin 200k, cold={cold}, recorder={recorder}")
        for s in seen:
            print("  " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
        att = timer.last_attribution
        if att is not None:
            rec_ = att["recorded"]
            t0 = min((r.start for r in rec_.records if r.start), default=0)
            print(f"  last block: kept tags {att['kept']}, event holds {[round(h * 1e6, 1) for h in att['event_holds']]} us, "
                  f"ticks/s {rec_.ticks_per_second:.6g}")
            for r in rec_.records[:40]:
                print(f"    {r.kind} tag={r.tag} stream={r.stream} start={(r.start - t0) / rec_.ticks_per_second * 1e6:.1f} us "
                      f"dur={(r.end - r.start) / rec_.ticks_per_second * 1e6:.1f} us {r.name[:40]}")
        for per, ref, lt in got:
            print(f"  sample {per * 1e6:.1f} us, spin alone {ref * 1e6:.1f} us, ratio {per / ref:.3f}, "
                  f"call {lt.call_seconds * 1e6 if lt.call_seconds else float('nan'):.1f} us, source {lt.source}, "
                  f"flags {lt.flags}")


def l2_pair(rec: Any) -> None:
    from expkit.timing.cuda_timer import CudaTimer

    x = torch.randn(1 << 21, device="cuda")
    sides = {"baseline (two passes)": lambda: (x * 1.0) * 2.0, "candidate (one pass)": lambda: x * 2.0}
    for cold in (False, True):
        print(f"\n== L2-resident pair, cold={cold}")
        for name, fn in sides.items():
            timer = CudaTimer(cold=cold, recorder=rec)
            timer.sample(fn, 64)
            ks, cs = [], []
            for _ in range(7):
                ks.append(timer.sample(fn, 64))
                cs.append(timer.last_timing.call_seconds)
            print(f"  {name}: kernel {statistics.median(ks) * 1e6:.2f} us (min {min(ks) * 1e6:.2f}, max "
                  f"{max(ks) * 1e6:.2f}), call {statistics.median(cs) * 1e6:.2f} us, ticks/s "
                  f"{rec.ticks_per_second:.6g}, flags {timer.last_timing.flags}")


def main() -> None:
    torch.cuda.init()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):
        a @ a
    torch.cuda.synchronize()
    spins(None)
    try:
        from expkit.timing.cupti_recorder import open_recorder

        rec = open_recorder()
    except Exception as e:  # cupti-python missing
        print(f"recorder: {type(e).__name__}: {e}")
        return
    spins(rec)
    l2_pair(rec)


if __name__ == "__main__":
    main()
