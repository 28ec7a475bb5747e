"""Record real CUPTI activity buffers for tests/test_kernel_time.py (``recorded_*.json``).

Usage (on a CUDA machine with cupti-python installed)::

    python scripts/record_cupti_fixtures.py OUT_DIR

Each scenario times one block with expkit's ``CudaTimer`` and its CUPTI recorder, and
writes what the recorder's buffer callback was handed -- kernel, memcpy and memset
records and every external-correlation record (ours on ``CUSTOM2`` and any other
tool's), the runtime/driver API records left out to keep the files small -- with the
chunk tags the timer pushed, the hold's CUDA-event durations, the recorder's measured
ticks per second, and the properties the scenario must show (``expect``): the flags of
``kernel_time.block_kernel_time`` and bounds on each call's span from the spin's
cycles over the SM clock measured here with CUDA events. The format is that of the
synthesised fixtures beside them (see ``tests/test_kernel_time.py``).

Scenarios: ``recorded_spin_add`` (a spin of 2000 cycles then a small add, cold),
``recorded_multi_kernel`` (naive softmax: five kernels, warm), ``recorded_side_stream``
(a spin on a side stream never joined), ``recorded_foreign`` (another thread's kernels
during the block), ``recorded_after_profiler`` (after a torch.profiler session, whose
timestamp callback may change CUPTI's ticks). A log of what ran goes to
``OUT_DIR/record_cupti_log.txt``. Copy the JSON files to ``tests/fixtures/cupti/``.
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from expkit.timing.cuda_timer import CudaTimer  # noqa: E402
from expkit.timing.cupti_recorder import CuptiRecorder  # noqa: E402

MAX_ACTIVITY = 400


class DumpingRecorder(CuptiRecorder):
    """The real recorder, also keeping the records it was handed, as plain dicts."""

    def __init__(self) -> None:
        super().__init__(names=True)
        self.dump: List[Dict[str, Any]] = []
        from cupti import cupti

        ak = cupti.ActivityKind
        self._names_of = {int(ak.CONCURRENT_KERNEL): "CONCURRENT_KERNEL", int(ak.MEMCPY): "MEMCPY",
                          int(ak.MEMSET): "MEMSET", int(ak.EXTERNAL_CORRELATION): "EXTERNAL_CORRELATION"}
        self._ext_names = {int(v): k for k, v in cupti.ExternalCorrelationKind.__members__.items()}

    def start(self) -> None:
        self.dump = []
        super().start()

    def _completed(self, activities: Any) -> None:
        keep = []
        for a in activities:
            name = self._names_of.get(int(a.kind))
            if name == "EXTERNAL_CORRELATION":
                keep.append({"kind": name, "correlation_id": a.correlation_id,
                             "external_kind": self._ext_names.get(int(a.external_kind), str(a.external_kind)),
                             "external_id": a.external_id})
            elif name is not None:
                d = {"kind": name, "correlation_id": a.correlation_id, "start": a.start, "end": a.end,
                     "stream_id": a.stream_id, "device_id": a.device_id}
                if name == "CONCURRENT_KERNEL":
                    d["name"] = a.name[:80]
                keep.append(d)
        self.dump.extend(keep)
        super()._completed(activities)


def spin_hz() -> float:
    out = []
    for _ in range(3):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        a.record()
        torch.cuda._sleep(20_000_000)
        b.record()
        torch.cuda.synchronize()
        out.append(20_000_000 / (a.elapsed_time(b) / 1e3))
    return statistics.median(out)


def fixture(timer: CudaTimer, rec: DumpingRecorder, about: str, expect: Dict[str, Any]) -> Dict[str, Any]:
    att = timer.last_attribution
    assert att is not None, "the timer kept no attribution: was the recorder used?"
    acts = rec.dump
    if len(acts) > MAX_ACTIVITY:
        raise SystemExit(f"{len(acts)} records: make the scenario's block smaller")
    return {
        "about": about,
        "provenance": (f"recorded by scripts/record_cupti_fixtures.py on {torch.cuda.get_device_name(0)}, torch "
                       f"{torch.__version__}, {datetime.date.today().isoformat()}"),
        "ticks_per_second": att["recorded"].ticks_per_second,
        "base": rec._base,
        "chunks": [c.__dict__ for c in att["kept"]],
        "attempted": [c.__dict__ for c in att["attempted"]],
        "event_holds_s": att["event_holds"],
        "activity": acts,
        "expect": expect,
        "timer_flags": list(timer.last_timing.flags),
        "timer_source": timer.last_timing.source,
    }


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    log = []
    hz = spin_hz()
    log.append(f"{torch.cuda.get_device_name(0)} torch {torch.__version__} spin clock {hz / 1e6:.1f} MHz")
    x, y = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")

    def spin_add() -> Any:
        torch.cuda._sleep(2000)
        return x + y

    m = torch.randn(256, 1024, device="cuda")

    def naive_softmax() -> Any:
        e = torch.exp(m - m.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)

    side = torch.cuda.Stream()

    def side_spin() -> None:
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000)

    scenarios = []

    def run(name: str, fn: Any, cold: bool, n: int, about: str, expect: Dict[str, Any], before: Any = None,
            attempts: int = 1, want_flag: str = "") -> None:
        try:
            if before is not None:
                before()
            rec = DumpingRecorder()
            timer = CudaTimer(cold=cold, recorder=rec)
            timer.sample(fn, n)  # warm the hold's sizing
            for _ in range(attempts):
                timer.sample(fn, n)
                if not want_flag or want_flag in timer.last_timing.flags:
                    break
            fx = fixture(timer, rec, about, expect)
            (out / f"{name}.json").write_text(json.dumps(fx, indent=1) + "\n")
            log.append(f"{name}: {len(fx['activity'])} records, source {fx['timer_source']}, flags "
                       f"{fx['timer_flags']}, ticks/s {fx['ticks_per_second']:.6g}, kernel times (us) "
                       f"{[round(c * 1e6, 3) if c is not None else None for c in timer.last_kernel_times]}")
            scenarios.append(name)
        except Exception:
            log.append(f"{name}: FAILED\n{traceback.format_exc()}")

    run("recorded_spin_add", spin_add, True, 6, "cold block of 6 calls: a spin of 2000 cycles then a 1024-element add",
        {"flags": [], "min_call_us": 2000 / hz * 1e6, "max_call_us": 20.0})
    run("recorded_multi_kernel", naive_softmax, False, 4, "warm block of 4 calls of a naive softmax (five kernels each)",
        {"flags": [], "min_call_us": 1.0, "max_call_us": 200.0})
    run("recorded_side_stream", side_spin, True, 4, "cold block of 4 calls each spinning 100000 cycles on a side "
        "stream never joined", {"flags": ["other-stream"], "min_call_us": 0.98 * 100_000 / hz * 1e6})

    stop = threading.Event()

    def stranger() -> None:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while not stop.is_set():
                torch.cuda._sleep(200_000)
                time.sleep(50e-6)

    th = threading.Thread(target=stranger, daemon=True)
    th.start()
    time.sleep(0.05)
    run("recorded_foreign", lambda: torch.cuda._sleep(20_000), True, 6, "cold block of 6 spins while another thread "
        "launches 200000-cycle spins on its own stream", {"flags": ["foreign"], "foreign": 1}, attempts=5,
        want_flag="foreign")
    stop.set()
    th.join()
    torch.cuda.synchronize()

    def profile_first() -> None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            for _ in range(10):
                x.add_(1)
            torch.cuda.synchronize()

    run("recorded_after_profiler", lambda: torch.cuda._sleep(400_000), True, 4, "cold block of 4 spins of 400000 "
        "cycles after a torch.profiler session in the same process", {"flags": [], "min_call_us":
        0.99 * 400_000 / hz * 1e6, "max_call_us": 1.01 * 400_000 / hz * 1e6 + 1.0}, before=profile_first)
    (out / "record_cupti_log.txt").write_text("\n".join(log) + "\n")
    print("\n".join(log))
    return 0 if len(scenarios) == 5 else 1


if __name__ == "__main__":
    sys.exit(main())
