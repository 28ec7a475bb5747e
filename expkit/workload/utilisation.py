"""GPU utilisation through NVML, sampled while one side of a workload runs alone.

NVML's utilisation is the fraction of its own sample period (1/6 s to 1 s depending
on the product, per NVML's documentation of ``nvmlDeviceGetUtilizationRates``) in
which at least one kernel ran; it says nothing about how full the GPU was. The
profile's busy fraction (:mod:`.profile`) is the finer figure; NVML's is the one a
user's dashboard shows.
"""

from __future__ import annotations

import importlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import torch


@dataclass(frozen=True)
class Utilisation:
    """NVML's GPU utilisation (percent) while one side ran alone; ``missing`` says why not."""

    mean: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    samples: int = 0
    runs: int = 0
    seconds: float = 0.0
    missing: Optional[str] = None


class NvmlUtilisation:
    """Samples ``nvmlDeviceGetUtilizationRates(handle).gpu`` on a background thread.

    The same seam as :class:`expkit.timing.telemetry.NvmlTelemetry`: ``nvml`` is any object
    with ``nvmlInit``, ``nvmlShutdown``, ``nvmlDeviceGetHandleByIndex`` (or
    ``...ByUUID``), ``nvmlDeviceGetUtilizationRates`` and ``NVMLError``; tests pass a
    seeded fake. The counter is NVML's own running figure over its sample period, so
    reading it more often than every few tens of milliseconds only repeats values."""

    available = True

    def __init__(self, device_index: int = 0, *, nvml: Any = None, uuid: Optional[str] = None,
                 period_s: float = 0.05, clock: Callable[[], float] = time.perf_counter) -> None:
        self._nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        self._nvml.nvmlInit()
        try:
            self._handle = (self._nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None
                            else self._nvml.nvmlDeviceGetHandleByIndex(device_index))
        except self._nvml.NVMLError:
            self._nvml.nvmlShutdown()
            raise
        self.period_s = period_s
        self._clock = clock
        self._rows: List[Tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def read(self) -> float:
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except self._nvml.NVMLError:
            return math.nan

    def _loop(self) -> None:
        self._rows.append((self._clock(), self.read()))
        while not self._stop.wait(self.period_s):
            self._rows.append((self._clock(), self.read()))

    def start(self) -> None:
        self._rows = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="expkit-nvml-utilisation", daemon=True)
        self._thread.start()

    def stop(self) -> Tuple[Tuple[float, float], ...]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._rows.append((self._clock(), self.read()))
        return tuple(self._rows)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_utilisation(device_index: int = 0, *, nvml: Any = None, uuid: Optional[str] = None,
                     period_s: float = 0.05) -> "NvmlUtilisation | str":
    """An :class:`NvmlUtilisation`, or the reason there is none (a sentence)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return "NVML not available: the nvidia-ml-py package (module pynvml) is not installed"
    try:
        return NvmlUtilisation(device_index, nvml=nvml, uuid=uuid, period_s=period_s)
    except Exception as e:  # NVMLError subclasses: no driver, not loaded, no permission
        return f"NVML not available: {e or type(e).__name__}"


def observe_utilisation(run: Callable[[], Any], seconds: float, sampler: "NvmlUtilisation | str", *,
                        sync: Optional[Callable[[], None]] = None,
                        clock: Callable[[], float] = time.perf_counter) -> Utilisation:
    """Run ``run`` back to back for about ``seconds`` while ``sampler`` reads NVML."""
    if isinstance(sampler, str):
        return Utilisation(missing=sampler)
    if seconds <= 0:
        return Utilisation(missing="not sampled (end_to_end.utilisation_seconds is 0)")
    if sync is not None:
        sync()
    sampler.start()
    t0, n = clock(), 0
    try:
        while clock() - t0 < seconds or n == 0:
            run()
            n += 1
        if sync is not None:
            sync()
    finally:
        rows = sampler.stop()
    values = [v for _, v in rows if not math.isnan(v)]
    if not values:
        return Utilisation(runs=n, seconds=clock() - t0, missing="NVML returned no utilisation reading")
    return Utilisation(sum(values) / len(values), min(values), max(values), len(values), n, clock() - t0)


def cuda_index() -> int:
    """The current CUDA device's index, as CUDA numbers it."""

    return torch.cuda.current_device()


def cuda_uuid() -> Optional[str]:
    """The current CUDA device's NVML UUID: NVML and CUDA may number GPUs differently."""
    try:
        uuid = torch.cuda.get_device_properties(torch.cuda.current_device()).uuid
        return f"GPU-{uuid}"
    except Exception:
        return None
