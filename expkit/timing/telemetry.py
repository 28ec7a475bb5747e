"""GPU telemetry: what the card was, and what its clocks did while we measured.

A speed claim is only as good as the conditions it was measured under. This module
answers two questions for the measurement loop and the report:

* **Which card, which software?** :meth:`Telemetry.info` returns a frozen
  :class:`GpuInfo` (name, driver, CUDA driver version, ECC and MIG modes, power limit,
  maximum SM and memory clocks). Fields NVML cannot read stay ``None`` and the reason
  is kept in ``GpuInfo.missing``: a report says "ECC: unknown (Not Supported)" rather
  than guessing.
* **Was the GPU at speed?** :meth:`Telemetry.start` starts a background thread that
  samples SM clock, memory clock, temperature, power and the clock-event ("throttle")
  reasons every ``period_s``; :meth:`Telemetry.stop` returns the series as a frozen
  :class:`TelemetryLog` stamped with ``time.perf_counter``, the clock the measurement
  loop uses for its sample windows. :func:`flag_slow_clock` then marks the samples
  taken while the SM clock was well under its maximum.

Seams. :class:`NvmlTelemetry` never imports ``pynvml`` itself when given an ``nvml``
object: anything with the dozen functions and constants listed in :class:`NvmlLike`
will do, which is how the tests drive it with a seeded fake. :func:`open_telemetry`
is the one entry point the rest of expkit should use: it returns an
:class:`NvmlTelemetry` when NVML works, otherwise a :class:`NullTelemetry` that
records *why* there is no telemetry ("NVML not available: no NVIDIA driver ...")
instead of failing, so the same code runs on a laptop and in CI.

Approximations, stated once:

* NVML's clock reading is instantaneous, so a sample period of 10 ms sees changes
  that last longer than that; a throttle episode shorter than one period can be
  missed. Power is whatever NVML reports (on many boards a ~1 s running average).
* NVML's clock reading is not an exact clock. On an H200 right after a power-capped
  load it read a steady 1590-1605 MHz while a spin kernel's cycle count, timed by
  both CUDA events and CUPTI, implied 1866 MHz. Use it to flag gross slowdowns, not
  to convert cycles to seconds.
* Polling did not disturb the timings: on the same H200, 10 ms NVML polling on or off
  changed the median of cold and warm samples by less than their spread.
* The sampler is a Python thread. Each NVML call is a ctypes call, which releases the
  GIL, so the thread costs the timing loop little; its timestamps carry the jitter of
  thread scheduling (sub-millisecond on an idle host).

Size: about 590 lines, over the 500 this project aims for, on purpose. The module must
load on its own, by file path, with torch unimportable (``tests/test_cuda_timer.py``
checks this, as it does for ``cuda_timer.py``), so it imports no sibling module. Its two
halves -- the frozen values with the flagging rules over them, and the NVML sampler
that produces them -- would otherwise be two files.
"""

from __future__ import annotations

import importlib
import math
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

# NVML's clock-event reason bits (nvml.h, ``nvmlClocksEventReason*``; the same values as
# the older ``nvmlClocksThrottleReason*`` names). Kept here so that a log can be
# explained without importing pynvml.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

#: Fraction of the maximum SM clock under which a sample counts as "slow".
#: nvbench discards samples under 75% of the default clock (``--throttle-threshold``,
#: shared/reference/anchors-harnesses.md), and its users report benchmarks left with
#: no samples at all (nvbench#231). Measured here on an H200: bf16 matrix products of 8192^3 and 16384^3 ran at 1410 to
#: 1560 MHz, 71-79% of the 1980 MHz maximum, with NVML naming only the software power
#: cap (``sw_power_cap``). That is the card's steady operating point under heavy load, and a claim about
#: such a kernel must be measured there, so the threshold sits below it: 0.6. What it
#: catches is a card still ramping up from idle (345 MHz, 17%, on the same H200) or
#: slowed far beyond its power cap. Hardware and thermal slowdowns are flagged by
#: reason, whatever the clock, by :func:`flag_throttle_reasons`.
DEFAULT_SLOW_CLOCK_THRESHOLD = 0.6

#: Reasons that mean the card was slowed by something other than its normal power
#: management: HW slowdown, SW/HW thermal slowdown, HW power brake.
SEVERE_THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80

DEFAULT_PERIOD_S = 0.01


def describe_throttle(mask: int) -> tuple[str, ...]:
    """Names of the reason bits set in ``mask`` (unknown bits as hex); () for none or unknown (<0)."""
    if mask is None or mask < 0:
        return ()
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        names.append(hex(rest))
    return tuple(names)


@dataclass(frozen=True)
class GpuInfo:
    """Static facts about one GPU. ``None`` means "could not read"; ``missing`` says why."""

    index: int
    name: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    power_limit_w: float | None = None
    max_sm_clock_mhz: float | None = None
    max_mem_clock_mhz: float | None = None
    source: str = "nvml"
    missing: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["missing"] = list(self.missing)
        return d


@dataclass(frozen=True)
class TelemetryLog:
    """Time series sampled during a measurement.

    All series have one entry per sample. ``t`` is ``time.perf_counter()`` seconds (the
    host clock of the timing loop's windows). A value NVML could not read is ``nan``
    (``-1`` for ``throttle_reasons``), and the error text is kept once in ``errors``.
    ``missing`` is set when there was no telemetry at all, and says why.
    """

    t: tuple[float, ...] = ()
    sm_clock_mhz: tuple[float, ...] = ()
    mem_clock_mhz: tuple[float, ...] = ()
    temperature_c: tuple[float, ...] = ()
    power_w: tuple[float, ...] = ()
    throttle_reasons: tuple[int, ...] = ()
    period_s: float = DEFAULT_PERIOD_S
    missing: str | None = None
    errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.t)
        for name in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "throttle_reasons"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"TelemetryLog.{name} has {len(getattr(self, name))} samples, t has {n}")
        if any(b < a for a, b in zip(self.t, self.t[1:])):
            raise ValueError("TelemetryLog.t must be non-decreasing")

    def __len__(self) -> int:
        return len(self.t)

    def indices_in(self, t0: float, t1: float, max_gap_s: float | None = None) -> tuple[int, ...]:
        """Samples that describe the window [t0, t1].

        The samples inside the window; if none fall inside (a window shorter than the
        sample period), the last sample before it and the first after it, each only if
        it lies within ``max_gap_s`` (default 3 periods) of the window. Empty when the
        log does not cover the window: the caller cannot judge it.
        """
        if t1 < t0:
            raise ValueError(f"window ends before it starts: ({t0}, {t1})")
        inside = tuple(i for i, ti in enumerate(self.t) if t0 <= ti <= t1)
        if inside:
            return inside
        gap = 3 * self.period_s if max_gap_s is None else max_gap_s
        before = [i for i, ti in enumerate(self.t) if ti < t0 and t0 - ti <= gap]
        after = [i for i, ti in enumerate(self.t) if ti > t1 and ti - t1 <= gap]
        return tuple(([before[-1]] if before else []) + ([after[0]] if after else []))

    def window(self, t0: float, t1: float) -> "TelemetryLog":
        """The sub-log describing [t0, t1] (see :meth:`indices_in`)."""
        idx = self.indices_in(t0, t1)
        return TelemetryLog(
            t=tuple(self.t[i] for i in idx),
            sm_clock_mhz=tuple(self.sm_clock_mhz[i] for i in idx),
            mem_clock_mhz=tuple(self.mem_clock_mhz[i] for i in idx),
            temperature_c=tuple(self.temperature_c[i] for i in idx),
            power_w=tuple(self.power_w[i] for i in idx),
            throttle_reasons=tuple(self.throttle_reasons[i] for i in idx),
            period_s=self.period_s,
            missing=self.missing,
            errors=self.errors,
        )

    def summary(self) -> dict[str, Any]:
        """Min / mean / max of each series (nan-free), and the union of throttle reasons."""

        def stats(xs: Sequence[float]) -> dict[str, float] | None:
            good = [x for x in xs if not math.isnan(x)]
            if not good:
                return None
            return {"min": min(good), "mean": sum(good) / len(good), "max": max(good)}

        mask = 0
        for m in self.throttle_reasons:
            if m > 0:
                mask |= m
        return {
            "samples": len(self),
            "sm_clock_mhz": stats(self.sm_clock_mhz),
            "mem_clock_mhz": stats(self.mem_clock_mhz),
            "temperature_c": stats(self.temperature_c),
            "power_w": stats(self.power_w),
            "throttle_reasons": list(describe_throttle(mask)),
            "missing": self.missing,
            "errors": list(self.errors),
        }

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def flag_slow_clock(
    windows: Sequence[tuple[float, float]],
    log: TelemetryLog,
    max_sm_clock_mhz: float,
    threshold: float = DEFAULT_SLOW_CLOCK_THRESHOLD,
) -> tuple[bool, ...]:
    """For each host-time window (``time.perf_counter`` seconds), was the SM clock slow?

    A window is flagged when any sample describing it (:meth:`TelemetryLog.indices_in`)
    reads an SM clock under ``threshold * max_sm_clock_mhz``. Using *any* sample rather
    than the mean is deliberate: a sample that straddles a clock ramp is exactly the
    one to distrust. A window the log does not cover (no telemetry, or no sample near
    it) is not flagged: the caller learns that from ``log.missing`` / an empty log, not
    from a False that pretends the clock was checked.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if not max_sm_clock_mhz or max_sm_clock_mhz <= 0:
        raise ValueError(f"max_sm_clock_mhz must be positive, got {max_sm_clock_mhz}")
    limit = threshold * max_sm_clock_mhz
    flags = []
    for t0, t1 in windows:
        clocks = [log.sm_clock_mhz[i] for i in log.indices_in(t0, t1)]
        flags.append(any(c < limit for c in clocks if not math.isnan(c)))
    return tuple(flags)


def flag_throttle_reasons(
    windows: Sequence[tuple[float, float]],
    log: TelemetryLog,
    mask: int = SEVERE_THROTTLE_MASK,
) -> tuple[bool, ...]:
    """For each window, did any sample describing it report a clock-event reason in ``mask``?

    The companion of :func:`flag_slow_clock`: a thermal or hardware slowdown can leave
    the clock above the slow threshold and still change the result. Same coverage
    rule: a window without samples is not flagged.
    """
    flags = []
    for t0, t1 in windows:
        reasons = [log.throttle_reasons[i] for i in log.indices_in(t0, t1)]
        flags.append(any(r > 0 and r & mask for r in reasons))
    return tuple(flags)


@runtime_checkable
class NvmlLike(Protocol):
    """The part of ``pynvml`` this module uses (a fake implements just these)."""

    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_TEMPERATURE_GPU: int
    NVMLError: type

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlSystemGetDriverVersion(self) -> Any: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetEccMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...


@runtime_checkable
class Telemetry(Protocol):
    """What the measurement loop needs from a telemetry source."""

    available: bool

    def info(self) -> GpuInfo: ...
    def start(self) -> None: ...
    def stop(self) -> TelemetryLog: ...
    def close(self) -> None: ...
    def flag(self, log: TelemetryLog, windows: Sequence[tuple[float, float]]) -> tuple[bool, ...]: ...
    def describe(self, log: TelemetryLog, flags: Sequence[bool]) -> str: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NullTelemetry:
    """No telemetry, and the reason why (kept in every GpuInfo and log it returns)."""

    available = False

    def __init__(self, reason: str, device_index: int = 0) -> None:
        self.reason = reason
        self.device_index = device_index

    def info(self) -> GpuInfo:
        return GpuInfo(index=self.device_index, source="none", missing=(self.reason,))

    def start(self) -> None:
        pass

    def stop(self) -> TelemetryLog:
        return TelemetryLog(missing=self.reason)

    def close(self) -> None:
        pass

    def flag(self, log: TelemetryLog, windows: Sequence[tuple[float, float]]) -> tuple[bool, ...]:
        """Nothing can be flagged without telemetry (and ``describe`` says so)."""
        return (False,) * len(windows)

    def describe(self, log: TelemetryLog, flags: Sequence[bool]) -> str:
        return f"unavailable ({self.reason}): no sample was checked for clocks or throttling"


class NvmlTelemetry:
    """NVML static info plus a background sampler (see the module docstring).

    ``nvml``: a pynvml-like object (default: ``import pynvml``); ``nvmlInit`` is called
    here and ``nvmlShutdown`` in :meth:`close`. ``clock`` stamps the samples and must
    be the clock of the windows later given to :func:`flag_slow_clock`.
    """

    available = True

    def __init__(
        self,
        device_index: int = 0,
        *,
        nvml: Any = None,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], float] = time.perf_counter,
        uuid: str | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self._nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        self._nvml.nvmlInit()
        self.device_index = device_index
        try:
            if uuid is not None:
                self._handle = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
            else:
                self._handle = self._nvml.nvmlDeviceGetHandleByIndex(device_index)
        except self._nvml.NVMLError:
            self._nvml.nvmlShutdown()
            raise
        self.period_s = period_s
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._stop_flag = threading.Event()
        self._rows: list[tuple[float, float, float, float, float, int]] = []
        self._errors: dict[str, None] = {}
        self._reasons_fn = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self._nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        self._info: GpuInfo | None = None

    # -- static info ---------------------------------------------------------------
    def info(self) -> GpuInfo:
        if self._info is None:
            self._info = self._read_info()
        return self._info

    def _read_info(self) -> GpuInfo:
        nv, h = self._nvml, self._handle
        missing: list[str] = []

        def read(label: str, f: Callable[[], Any]) -> Any:
            try:
                return f()
            except nv.NVMLError as e:  # NotSupported on consumer boards, NoPermission in containers...
                missing.append(f"{label}: NVML: {_text(e) or type(e).__name__}")
                return None

        def cuda_version() -> str:
            v = int(nv.nvmlSystemGetCudaDriverVersion())
            return f"{v // 1000}.{(v % 1000) // 10}"

        def mode(f: Callable[[Any], Any]) -> bool:
            current = f(h)
            current = current[0] if isinstance(current, (tuple, list)) else current
            return bool(current)

        power_mw = read("power_limit_w", lambda: nv.nvmlDeviceGetPowerManagementLimit(h))
        sm_max = read("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        mem_max = read("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
        name = read("name", lambda: _text(nv.nvmlDeviceGetName(h)))
        uuid = read("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h)))
        return GpuInfo(
            index=self.device_index,
            name=name,
            uuid=uuid,
            driver_version=read("driver_version", lambda: _text(nv.nvmlSystemGetDriverVersion())),
            cuda_driver_version=read("cuda_driver_version", cuda_version),
            ecc_enabled=read("ecc_enabled", lambda: mode(nv.nvmlDeviceGetEccMode)),
            mig_enabled=read("mig_enabled", lambda: mode(nv.nvmlDeviceGetMigMode)),
            power_limit_w=None if power_mw is None else power_mw / 1000.0,
            max_sm_clock_mhz=None if sm_max is None else float(sm_max),
            max_mem_clock_mhz=None if mem_max is None else float(mem_max),
            source="nvml",
            missing=tuple(missing),
        )

    # -- sampling ------------------------------------------------------------------
    def read_sample(self) -> tuple[float, float, float, float, float, int]:
        """One row: (t, sm MHz, mem MHz, temperature C, power W, throttle mask)."""
        nv, h = self._nvml, self._handle

        def get(label: str, f: Callable[[], Any], bad: Any) -> Any:
            try:
                return f()
            except nv.NVMLError as e:
                self._errors.setdefault(f"{label}: NVML: {_text(e) or type(e).__name__}")
                return bad

        t = self._clock()
        sm = get("sm_clock", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)), math.nan)
        mem = get("mem_clock", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)), math.nan)
        temp = get("temperature", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)), math.nan)
        power = get("power", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0, math.nan)
        reasons = get("throttle_reasons", lambda: int(self._reasons_fn(h)), -1)
        return (t, sm, mem, temp, power, reasons)

    def _run(self) -> None:
        self._rows.append(self.read_sample())
        # Event.wait releases the GIL while sleeping; the sampler costs the timed loop
        # a few ctypes calls per period.
        while not self._stop_flag.wait(self.period_s):
            self._rows.append(self.read_sample())

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("NvmlTelemetry.start() called twice without stop()")
        self._rows = []
        self._errors = {}
        self._stop_flag.clear()
        self._thread = threading.Thread(target=self._run, name="expkit-nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> TelemetryLog:
        if self._thread is None:
            raise RuntimeError("NvmlTelemetry.stop() called before start()")
        self._stop_flag.set()
        self._thread.join()
        self._thread = None
        # A last sample closes the series, so a window that ends at stop() is covered.
        self._rows.append(self.read_sample())
        rows = sorted(self._rows)
        cols = list(zip(*rows)) if rows else [()] * 6
        return TelemetryLog(
            t=tuple(cols[0]),
            sm_clock_mhz=tuple(cols[1]),
            mem_clock_mhz=tuple(cols[2]),
            temperature_c=tuple(cols[3]),
            power_w=tuple(cols[4]),
            throttle_reasons=tuple(int(x) for x in cols[5]),
            period_s=self.period_s,
            errors=tuple(self._errors),
        )

    def flag(self, log: TelemetryLog, windows: Sequence[tuple[float, float]]) -> tuple[bool, ...]:
        """Per window: SM clock under the slow threshold, or a severe throttle reason.

        Without a known maximum SM clock only the throttle reasons are checked.
        """
        by_reason = flag_throttle_reasons(windows, log)
        max_sm = self.info().max_sm_clock_mhz
        if not max_sm:
            return by_reason
        by_clock = flag_slow_clock(windows, log, max_sm)
        return tuple(a or b for a, b in zip(by_clock, by_reason))

    def describe(self, log: TelemetryLog, flags: Sequence[bool]) -> str:
        """One line for the report: what was sampled, the clock range, what was flagged and why."""
        s = log.summary()
        sm = s["sm_clock_mhz"]
        max_sm = self.info().max_sm_clock_mhz
        clock = "no SM clock readings" if sm is None else (
            f"SM clock {sm['min']:.0f}-{sm['max']:.0f} MHz (mean {sm['mean']:.0f}"
            + (f", max {max_sm:.0f})" if max_sm else ")"))
        reasons = ", ".join(s["throttle_reasons"]) or "none"
        rule = (f"SM clock under {DEFAULT_SLOW_CLOCK_THRESHOLD:.0%} of {max_sm:.0f} MHz" if max_sm
                else "maximum SM clock unknown, clock not checked") + " or a thermal/hardware slowdown"
        errors = f"; read errors: {'; '.join(s['errors'])}" if s["errors"] else ""
        return (f"NVML every {self.period_s * 1e3:.0f} ms: {len(log)} readings, {clock}, clock-event reasons seen: "
                f"{reasons}; {sum(bool(f) for f in flags)} of {len(flags)} samples flagged ({rule}){errors}")

    def close(self) -> None:
        if self._thread is not None:
            self.stop()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_telemetry(
    device_index: int = 0,
    *,
    nvml: Any = None,
    period_s: float = DEFAULT_PERIOD_S,
    uuid: str | None = None,
) -> NvmlTelemetry | NullTelemetry:
    """NVML telemetry for ``device_index`` (an NVML index, or ``uuid``), or a NullTelemetry saying why not.

    NVML numbers GPUs by PCI order while CUDA may not (``CUDA_DEVICE_ORDER``,
    ``CUDA_VISIBLE_DEVICES``): pass the CUDA device's UUID
    (``"GPU-" + str(torch.cuda.get_device_properties(i).uuid)``) to be sure.
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return NullTelemetry(
                "NVML not available: the nvidia-ml-py package (module pynvml) is not installed", device_index
            )
    try:
        return NvmlTelemetry(device_index, nvml=nvml, period_s=period_s, uuid=uuid)
    except nvml.NVMLError as e:
        text = _text(e) or type(e).__name__
        if "LibraryNotFound" in type(e).__name__ or "Library Not Found" in text:
            return NullTelemetry(f"NVML not available: no NVIDIA driver ({text})", device_index)
        if "DriverNotLoaded" in type(e).__name__ or "Driver Not Loaded" in text:
            return NullTelemetry(f"NVML not available: the NVIDIA driver is not loaded ({text})", device_index)
        return NullTelemetry(f"NVML not available: {text}", device_index)


def _cuda_uuid(cuda_index: int) -> str | None:
    """NVML's UUID string for a CUDA device index, when torch can tell (else None)."""
    try:
        # lazy: the timing modules import without torch (tests/test_cuda_timer.py)
        import torch

        uuid = getattr(torch.cuda.get_device_properties(cuda_index), "uuid", None)
    except Exception:  # no torch, no CUDA: fall back to the index
        return None
    return None if uuid is None else f"GPU-{uuid}"


def for_device(device: str = "cuda", index: int | None = None, *, period_s: float = DEFAULT_PERIOD_S,
               nvml: Any = None) -> NvmlTelemetry | NullTelemetry:
    """Telemetry for a device string as the runner names it ("cuda", "cuda:1", "cpu").

    CUDA devices are matched to NVML by UUID when torch reports one (NVML and CUDA may
    number GPUs differently), else by index. Never raises: a NullTelemetry says why.
    """
    if not device.startswith("cuda"):
        return NullTelemetry(f"no GPU telemetry for device {device!r}")
    if index is None:
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if ":" not in device:
            try:
                # lazy: the timing modules import without torch (tests/test_cuda_timer.py)
                import torch

                index = torch.cuda.current_device()
            except Exception:
                pass
    return for_gpu(index, _cuda_uuid(index), period_s=period_s, nvml=nvml)


def for_gpu(index: int, uuid: str | None, *, period_s: float = DEFAULT_PERIOD_S,
            nvml: Any = None) -> NvmlTelemetry | NullTelemetry:
    """Telemetry for the GPU with NVML's ``uuid``, else (no UUID, or none that NVML knows) the
    one at ``index``. Asks nothing of torch: the runner's process, which must not initialise
    CUDA, opens the GPU its baseline's worker reported this way. Never raises."""
    tel = open_telemetry(index, nvml=nvml, period_s=period_s, uuid=uuid)
    if isinstance(tel, NullTelemetry) and uuid is not None:
        tel = open_telemetry(index, nvml=nvml, period_s=period_s)
    return tel


def static_info(cuda_index: int = 0, *, nvml: Any = None) -> dict[str, Any]:
    """GpuInfo of a CUDA device as a plain dict for environment.json (``nvml`` says ok or why not)."""
    tel = for_device(f"cuda:{cuda_index}", cuda_index, nvml=nvml)
    try:
        info = tel.info().to_dict()
    finally:
        tel.close()
    info["nvml"] = "ok" if isinstance(tel, NvmlTelemetry) else tel.reason
    return {f"nvml_{k}" if k in ("index", "name", "missing", "source") else k: v for k, v in info.items()}
