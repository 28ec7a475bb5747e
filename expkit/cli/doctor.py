"""``expkit doctor``: what this machine can do, and what each missing piece costs a run.

Each :class:`Check` is one line: what was found, and, where something is missing or
looks wrong, what that costs a run. Every cost names where it was measured (a file
the evidence index lists) or the code that decides it; a cost nobody has measured is stated
as a consequence, without a number. The checks never fail the command: ``doctor``
exits 0 and says what it saw (``--json`` for a machine).

The machine is read through :class:`Machine`, a bundle of small probes (NVML, torch,
imports, ``PATH``, the load average, start methods), so the tests give a seeded fake
machine and check each line's wording without hardware.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..bench.processes.shm_files import SHM_DIR, SHM_DIR_ENV, free_bytes, left_behind
from ..core.version import __version__
from ..manifest.paths import conf_dir
from ..manifest.settings import load_settings
from ..timing.telemetry import DEFAULT_SLOW_CLOCK_THRESHOLD, NullTelemetry, open_telemetry

OK, MISSING, NOTE = "ok", "missing", "note"
#: Marks before each line of the text form.
MARKS = {OK: "ok", MISSING: "--", NOTE: "!!"}

#: Costs, each with where it was measured or decided. Kept together so that a new
#: measurement changes one place.
COST_NO_CUDA = ("`device: cuda` manifests stop before running (exit 2, see runner.run_manifest); "
                "`device: cpu` manifests run")
COST_NO_NVML = ("no GPU telemetry: runs record no clocks, and samples taken at a low SM clock cannot be "
                "left out (timing/telemetry.py)")
COST_NO_CUPTI = ("GPU runs fall back to CUDA-event timing (the result says so), which adds +3.2 to +3.6 us a call "
                 "cold and +0.9 to +1.1 us warm on an H200, pulling speedups of kernels under ~100 us towards 1 "
                 "(benchmarks/README.md, timing_fidelity); pip install cupti-python")
NOTE_CUPTI = ("importable: GPU runs judge each call by its kernels' span in the GPU's own record "
              "(measure.timer=kernel, the default; timing/cupti_recorder.py)")
COST_NO_NCU = ("nothing for `expkit run`, which does not use it; benchmarks/timing_fidelity.py compares against "
               "it (or pass --skip-ncu)")
COST_NO_FORKSERVER = ("workers start by spawn: 1.72 s a manifest against 0.03 s from the fork server on a "
                      "2-core CPU (evidence/harness-cost/suite/suite_overhead.md); set defences.start_method=spawn and "
                      "launcher.start=spawn")
COST_SHARED_CPU = ("other work shares the cores: CPU timings spread more and take longer to reach "
                   "measure.target_ci, and a GPU run's host side is delayed (see benchmarks/README.md, "
                   "'The hold works', for why launch gaps do not reach GPU timings)")
COST_NO_CONF = "no run can start: its settings do not compose (exit 2)"
COST_SHM_LEFT = ("that memory stays taken until the files are removed: `rm {dir}/expkit-*` while no expkit "
                 "process runs (a run's own crashed workers' files are removed by the run, bench/processes/shm_files.py)")


@dataclass(frozen=True)
class Check:
    """One line of the doctor: ``status`` is ok, missing or note; ``cost`` what it costs a run (or '')."""

    name: str
    status: str
    found: str
    cost: str = ""

    def __post_init__(self) -> None:
        if self.status not in MARKS:
            raise ValueError(f"Check {self.name}: status must be one of {', '.join(MARKS)}, got {self.status!r}")


def _import_ok(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _torch_probe() -> Tuple[Optional[str], bool, str]:
    """(torch version or None, CUDA available, a word on the device or why not)."""
    try:
        # lazy: the doctor reports a missing or broken torch instead of failing to start
        import torch
    except Exception as e:  # no torch at all: every run needs it
        return None, False, f"{type(e).__name__}: {e}"
    try:
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            return torch.__version__, True, f"{n} device(s), CUDA {torch.version.cuda}: {torch.cuda.get_device_name(0)}"
        why = "a CPU-only build of torch" if torch.version.cuda is None else "no CUDA device visible"
        return torch.__version__, False, why
    except Exception as e:
        return torch.__version__, False, f"{type(e).__name__}: {e}"


def _cpu_quota() -> Optional[float]:
    """CPUs the cgroup (v2) allows this process, or None where unlimited or unreadable."""
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _settings_probe() -> str:

    load_settings([])

    return str(conf_dir())


@dataclass(frozen=True)
class Machine:
    """The probes the doctor reads; :data:`REAL` reads this machine, tests pass fakes."""

    nvml: Callable[[], Any] = lambda: importlib.import_module("pynvml")
    torch: Callable[[], Tuple[Optional[str], bool, str]] = _torch_probe
    importable: Callable[[str], bool] = _import_ok
    which: Callable[[str], Optional[str]] = shutil.which
    loadavg: Callable[[], Tuple[float, float, float]] = os.getloadavg
    cpus: Callable[[], int] = _usable_cpus
    cpu_quota: Callable[[], Optional[float]] = _cpu_quota
    start_methods: Callable[[], Sequence[str]] = multiprocessing.get_all_start_methods
    settings: Callable[[], str] = _settings_probe
    shm_left: Callable[[], Sequence[Tuple[str, int]]] = left_behind
    shm_free: Callable[[], Optional[int]] = free_bytes
    python: str = field(default_factory=lambda: f"{platform.python_version()} ({sys.executable})")
    system: str = field(default_factory=lambda: f"{platform.system()} {platform.release()} {platform.machine()}")


REAL = Machine()


def _gpu_checks(m: Machine) -> List[Check]:

    try:
        nvml = m.nvml()
    except Exception as e:
        return [Check("NVML", MISSING, f"the nvidia-ml-py package does not import ({type(e).__name__})", COST_NO_NVML)]
    tel = open_telemetry(0, nvml=nvml)
    if isinstance(tel, NullTelemetry):
        return [Check("NVML", MISSING, tel.reason, COST_NO_NVML)]
    try:
        info = tel.info()
        sample = tel.read_sample()
    finally:
        tel.close()
    found = ", ".join(x for x in (info.name, info.driver_version and f"driver {info.driver_version}",
                                  info.cuda_driver_version and f"CUDA driver {info.cuda_driver_version}") if x)
    out = [Check("GPU (NVML)", OK, found or "a GPU, name unreadable")]
    sm, top = sample[1], info.max_sm_clock_mhz
    if top and sm == sm:  # not NaN
        frac = sm / top
        text = f"SM clock {sm:.0f} of {top:.0f} MHz ({frac:.0%}) now"
        rule = (f"samples taken under {DEFAULT_SLOW_CLOCK_THRESHOLD:.0%} of the maximum SM clock are left out "
                "(timing/telemetry.py)")
        if frac < DEFAULT_SLOW_CLOCK_THRESHOLD:
            out.append(Check("clocks", NOTE, text + ": low, as on an idle card (the warm-up raises it)", rule))
        else:
            out.append(Check("clocks", OK, text, ""))
    else:
        out.append(Check("clocks", MISSING, "NVML does not report the SM clock here", COST_NO_NVML))
    return out


def diagnose(m: Machine = REAL) -> Tuple[Check, ...]:
    """Every check, in the order the text prints them."""
    checks = [Check("expkit", OK, f"{__version__}, Python {m.python}, {m.system}")]
    version, cuda, word = m.torch()
    if version is None:
        checks.append(Check("torch", MISSING, f"does not import ({word})", "no run can start: expkit needs torch"))
    else:
        checks.append(Check("torch", OK if cuda else MISSING, f"{version}, CUDA: {word}" if cuda else
                            f"{version}, no CUDA ({word})", "" if cuda else COST_NO_CUDA))
    checks += _gpu_checks(m)
    gpu_only = "" if cuda else "(GPU runs only) "
    if m.importable("cupti"):
        checks.append(Check("CUPTI (cupti-python)", OK, NOTE_CUPTI))
    else:
        checks.append(Check("CUPTI (cupti-python)", MISSING, "not importable", gpu_only + COST_NO_CUPTI))
    ncu = m.which("ncu")
    checks.append(Check("ncu", OK, ncu) if ncu else Check("ncu", MISSING, "not on PATH", gpu_only + COST_NO_NCU))
    checks.append(_cpu_check(m))
    if "forkserver" in m.start_methods():
        checks.append(Check("fork server", OK, "available (workers fork from a server with torch imported)"))
    else:
        checks.append(Check("fork server", MISSING, "not available on this platform", COST_NO_FORKSERVER))
    checks.append(_shm_check(m))
    try:
        checks.append(Check("settings (conf/)", OK, f"compose from {m.settings()}"))
    except Exception as e:
        checks.append(Check("settings (conf/)", MISSING, f"{type(e).__name__}: {e}", COST_NO_CONF))
    return tuple(checks)


def _cpu_check(m: Machine) -> Check:
    """Shared when the 1-minute load average leaves less than one usable core idle."""
    cpus = m.cpus()
    quota = m.cpu_quota()
    usable = min(cpus, quota) if quota else cpus
    try:
        load = m.loadavg()[0]
    except OSError:
        return Check("CPU", NOTE, f"{cpus} usable core(s); load average unreadable", "")
    found = f"{cpus} usable core(s)" + (f", cgroup quota {quota:g} CPUs" if quota else "") + \
        f", load average {load:.2f} over the last minute"
    if load > usable - 1:
        return Check("CPU", NOTE, found + ": looks shared (less than one core idle)", COST_SHARED_CPU)
    return Check("CPU", OK, found)


def _shm_check(m: Machine) -> Check:
    """The folder the workers pass host tensors through: its free space (a run whose tensors
    do not fit stops with the fix), and files left there by expkit processes that ended
    without removing them (killed outright)."""
    free = m.shm_free()
    where = f"{SHM_DIR}: " + ("free space unreadable" if free is None else f"{free / (1 << 20):.1f} MiB free")
    where += f" (a CPU run's tensors pass through it; {SHM_DIR_ENV} picks another folder)"
    left = m.shm_left()
    if not left:
        return Check("shared memory", OK, f"{where}; no files left by ended expkit processes")
    mib = sum(size for _, size in left) / (1 << 20)
    return Check("shared memory", NOTE, f"{where}; {len(left)} file(s), {mib:.1f} MiB, left by expkit processes "
                 "that ended without removing them", COST_SHM_LEFT.format(dir=SHM_DIR))


def render(checks: Sequence[Check]) -> str:
    """The text form: one line per check, ``ok``/``--``/``!!``, then what it costs where it costs."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        line = f"{MARKS[c.status]}  {c.name.ljust(width)}  {c.found}"
        if c.cost:
            line += f"\n    {' ' * width}  costs: {c.cost}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def as_json(checks: Sequence[Check]) -> List[Dict[str, Any]]:
    return [asdict(c) for c in checks]
