"""Telemetry with a seeded fake NVML: static info, the sampling thread, slow-clock flags, NullTelemetry."""

from __future__ import annotations

import math
import random
import time

import pytest

from expkit.timing.telemetry import (
    DEFAULT_SLOW_CLOCK_THRESHOLD,
    GpuInfo,
    NullTelemetry,
    NvmlTelemetry,
    Telemetry,
    TelemetryLog,
    describe_throttle,
    flag_slow_clock,
    flag_throttle_reasons,
    for_device,
    open_telemetry,
    static_info,
)


class FakeNVMLError(Exception):
    pass


class FakeNotSupported(FakeNVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class FakeLibraryNotFound(FakeNVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class FakeNvml:
    """The dozen pynvml calls NvmlTelemetry uses; readings drawn from a seeded RNG."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVMLError = FakeNVMLError

    def __init__(self, seed: int = 0, *, init_error: Exception | None = None, ecc_supported: bool = True,
                 sm_series: list[float] | None = None) -> None:
        self.rng = random.Random(seed)
        self.init_error = init_error
        self.ecc_supported = ecc_supported
        self.sm_series = list(sm_series or [])
        self.inits = self.shutdowns = 0
        self.power_fails = 0

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        if i != 0:
            raise FakeNVMLError("Invalid Argument")
        return ("handle", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("handle", uuid)

    def nvmlDeviceGetName(self, h):
        return b"Fake H100"  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, h):
        return "GPU-0000"

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetEccMode(self, h):
        if not self.ecc_supported:
            raise FakeNotSupported()
        return [1, 1]

    def nvmlDeviceGetMigMode(self, h):
        raise FakeNotSupported()

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetClockInfo(self, h, clock):
        if clock == self.NVML_CLOCK_SM:
            if self.sm_series:
                return self.sm_series.pop(0)
            return 1980 - self.rng.randrange(0, 60)
        return 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 40 + self.rng.randrange(0, 5)

    def nvmlDeviceGetPowerUsage(self, h):
        self.power_fails += 1
        if self.power_fails % 3 == 0:
            raise FakeNotSupported()
        return 300_000 + self.rng.randrange(0, 1000)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 if self.rng.random() < 0.5 else 0x0


def log_of(t, sm, period=0.01):
    n = len(t)
    return TelemetryLog(t=tuple(t), sm_clock_mhz=tuple(sm), mem_clock_mhz=(2619.0,) * n,
                        temperature_c=(40.0,) * n, power_w=(300.0,) * n, throttle_reasons=(0,) * n,
                        period_s=period)


def test_static_info_reads_what_is_there_and_says_what_is_not():
    tel = NvmlTelemetry(0, nvml=FakeNvml(ecc_supported=False))
    info = tel.info()
    assert isinstance(tel, Telemetry)
    assert info.name == "Fake H100" and info.driver_version == "580.159.04"
    assert info.cuda_driver_version == "13.0"
    assert info.power_limit_w == 700.0 and info.max_sm_clock_mhz == 1980.0
    assert info.ecc_enabled is None and info.mig_enabled is None
    assert any(m.startswith("ecc_enabled:") and "Not Supported" in m for m in info.missing)
    assert any(m.startswith("mig_enabled:") for m in info.missing)
    assert info.to_dict()["name"] == "Fake H100"


def test_sampling_thread_collects_and_stamps_with_perf_counter():
    fake = FakeNvml(seed=3)
    tel = NvmlTelemetry(0, nvml=fake, period_s=0.005)
    before = time.perf_counter()
    tel.start()
    time.sleep(0.08)
    log = tel.stop()
    after = time.perf_counter()
    assert len(log) >= 5
    assert before <= log.t[0] and log.t[-1] <= after
    assert all(1920 <= c <= 1980 for c in log.sm_clock_mhz)
    # every third power read fails: nan in the series, the reason once in errors
    assert any(math.isnan(p) for p in log.power_w)
    assert any(e.startswith("power:") and "Not Supported" in e for e in log.errors)
    s = log.summary()
    assert s["samples"] == len(log) and s["sm_clock_mhz"]["max"] <= 1980
    assert "sw_power_cap" in s["throttle_reasons"]
    tel.close()
    assert fake.shutdowns == 1


def test_start_twice_is_an_error():
    tel = NvmlTelemetry(0, nvml=FakeNvml(), period_s=0.005)
    tel.start()
    with pytest.raises(RuntimeError):
        tel.start()
    tel.stop()
    with pytest.raises(RuntimeError):
        tel.stop()


def test_flag_slow_clock_on_a_synthetic_ramp():
    rng = random.Random(7)
    # 10 ms samples: idle clock for 50 ms, a ramp, then ~1980 MHz with noise
    t = [i * 0.01 for i in range(40)]
    sm = [345.0] * 5 + [800.0, 1300.0, 1700.0] + [1980.0 - rng.uniform(0, 40) for _ in range(32)]
    log = log_of(t, sm)
    windows = [(0.0, 0.045), (0.049, 0.058), (0.10, 0.30), (0.305, 0.306), (0.2, 0.2)]
    flags = flag_slow_clock(windows, log, max_sm_clock_mhz=1980.0)
    assert flags == (True, True, False, False, False)
    # the default lets a power-capped 1300 MHz (66%) through; a stricter threshold does not
    assert flag_slow_clock([(0.06, 0.06)], log, 1980.0) == (False,)
    assert flag_slow_clock([(0.06, 0.06)], log, 1980.0, threshold=0.75) == (True,)
    assert flag_slow_clock([(0.07, 0.075)], log, 1980.0, threshold=0.9) == (True,)
    assert flag_slow_clock([(0.07, 0.075)], log, 1980.0, threshold=DEFAULT_SLOW_CLOCK_THRESHOLD) == (False,)


def test_flag_throttle_reasons_ignores_the_power_cap():
    t = [i * 0.01 for i in range(6)]
    log = TelemetryLog(t=tuple(t), sm_clock_mhz=(1900.0,) * 6, mem_clock_mhz=(2619.0,) * 6,
                       temperature_c=(80.0,) * 6, power_w=(700.0,) * 6,
                       throttle_reasons=(0x4, 0x4, 0x4 | 0x40, 0x4, -1, 0x1))
    flags = flag_throttle_reasons([(0.0, 0.015), (0.015, 0.025), (0.035, 0.055)], log)
    assert flags == (False, True, False)


def test_windows_the_log_does_not_cover_are_not_flagged():
    log = log_of([0.0, 0.01], [300.0, 300.0])
    assert flag_slow_clock([(5.0, 6.0)], log, 1980.0) == (False,)
    assert flag_slow_clock([(0.0, 1.0)], TelemetryLog(missing="no NVML"), 1980.0) == (False,)
    assert log.indices_in(5.0, 6.0) == ()


def test_short_window_uses_the_bracketing_samples():
    log = log_of([0.0, 0.01, 0.02], [1980.0, 500.0, 1980.0])
    assert log.indices_in(0.012, 0.013) == (1, 2)
    assert flag_slow_clock([(0.012, 0.013)], log, 1980.0) == (True,)


def test_flag_slow_clock_validates_arguments():
    log = log_of([0.0], [1980.0])
    with pytest.raises(ValueError):
        flag_slow_clock([(0, 1)], log, 0.0)
    with pytest.raises(ValueError):
        flag_slow_clock([(0, 1)], log, 1980.0, threshold=1.5)
    with pytest.raises(ValueError):
        log.indices_in(1.0, 0.0)


def test_log_validates_lengths_and_order():
    with pytest.raises(ValueError):
        TelemetryLog(t=(0.0, 1.0), sm_clock_mhz=(1.0,), mem_clock_mhz=(1.0, 1.0), temperature_c=(1.0, 1.0),
                     power_w=(1.0, 1.0), throttle_reasons=(0, 0))
    with pytest.raises(ValueError):
        log_of([1.0, 0.0], [1.0, 1.0])


def test_null_telemetry_records_why():
    tel = open_telemetry(0, nvml=FakeNvml(init_error=FakeLibraryNotFound()))
    assert isinstance(tel, NullTelemetry) and not tel.available
    assert "no NVIDIA driver" in tel.reason
    info = tel.info()
    assert isinstance(info, GpuInfo) and info.source == "none" and info.name is None
    assert info.missing == (tel.reason,)
    tel.start()
    log = tel.stop()
    assert len(log) == 0 and log.missing == tel.reason


def test_open_telemetry_reports_a_missing_device():
    tel = open_telemetry(3, nvml=FakeNvml())
    assert isinstance(tel, NullTelemetry) and "Invalid Argument" in tel.reason


def test_open_telemetry_without_pynvml(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    tel = open_telemetry(0)
    assert isinstance(tel, NullTelemetry) and "nvidia-ml-py" in tel.reason


def test_real_pynvml_on_this_machine_never_raises():
    tel = open_telemetry(0)
    info = tel.info()
    assert isinstance(info, GpuInfo)
    if isinstance(tel, NullTelemetry):
        assert tel.reason.startswith("NVML not available")
    tel.close()


def test_describe_throttle():
    assert describe_throttle(0) == ()
    assert describe_throttle(-1) == ()
    assert describe_throttle(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert describe_throttle(0x4000) == ("0x4000",)


def test_flag_combines_slow_clock_and_severe_reasons():
    tel = NvmlTelemetry(0, nvml=FakeNvml())
    t = [i * 0.01 for i in range(6)]
    log = TelemetryLog(t=tuple(t), sm_clock_mhz=(1900.0, 400.0, 1900.0, 1900.0, 1900.0, 1900.0),
                       mem_clock_mhz=(2619.0,) * 6, temperature_c=(60.0,) * 6, power_w=(500.0,) * 6,
                       throttle_reasons=(0x4, 0x4, 0x4, 0x40, 0x4, 0x4))
    flags = tel.flag(log, [(0.0, 0.005), (0.008, 0.012), (0.028, 0.032), (0.04, 0.05)])
    assert flags == (False, True, True, False)
    text = tel.describe(log, flags)
    assert "6 readings" in text and "2 of 4 samples flagged" in text and "60% of 1980 MHz" in text
    assert "hw_thermal_slowdown" in text


def test_null_telemetry_flags_nothing_and_says_so():
    tel = NullTelemetry("NVML not available: no NVIDIA driver")
    log = tel.stop()
    assert tel.flag(log, [(0.0, 1.0), (1.0, 2.0)]) == (False, False)
    assert "unavailable" in tel.describe(log, (False, False)) and "no NVIDIA driver" in tel.describe(log, ())


def test_for_device_and_static_info():
    assert isinstance(for_device("cpu"), NullTelemetry)
    tel = for_device("cuda:0", nvml=FakeNvml())
    assert isinstance(tel, NvmlTelemetry)
    info = static_info(0, nvml=FakeNvml())
    assert info["nvml"] == "ok" and info["nvml_name"] == "Fake H100" and info["driver_version"] == "580.159.04"
    missing = static_info(0, nvml=FakeNvml(init_error=FakeLibraryNotFound()))
    assert "no NVIDIA driver" in missing["nvml"] and missing["driver_version"] is None
