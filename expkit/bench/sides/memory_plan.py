"""The memory plan: what the harness may hold beside the code under test.

A defended run holds more than the code under test does: each side's input sets, the
baseline's pristine copy of a trial's inputs and its expected output, the previous
trial's tensors (kept alive so that a recycled buffer cannot pass as new work), a
pristine copy of a rechecked call's inputs, and a float64 reference for the oracle.
At the sizes people run (KernelBench's level-1 inputs reach 8 GiB) holding all of it
does not fit: before this plan, a problem whose plain forward peaks at 12-18 GiB made
the harness hold 64-73 GiB and ask for more (issue #19).

So the baseline's worker first makes **one plain call** (:func:`measure_call`): the
bytes of the inputs, of the outputs, and the peak above the starting point, and the
memory free. :func:`plan` then decides, from those figures alone:

* **input sets**: one set when the inputs are much larger than the L2 cache (the
  cold-cache flush already evicts them, so rotating sets buys nothing) or when more
  would not fit; else the configured number;
* what the harness holds, dropping in this order until the projected peak of both
  workers fits the *budget*: twice the plain call's peak plus 1 GiB (one plain call a
  side, and room for the harness's own small copies), and never more than
  ``headroom`` of the free memory. The previous trial's tensors
  (``hold_previous``), room for a block's outputs, held until the parent has picked
  the calls to re-check (``keep_pristine``, named for the inputs' copy it held before:
  without it a block holds a reservoir of one output, drawn after each call; with it up
  to ``bench.defences.commit.COMMIT_BYTES`` a block, of which this plan counts one output a side
  beside the one being made), the
  baseline's own copy of the trial's inputs (``clone_for_baseline``: without it the
  inputs are digested before and after the baseline's call instead); the float64
  reference of the checks (``reference``) moves to the host, where memory is larger
  but float64 is slow, only when the device's free memory cannot hold it, and
  otherwise stays on the device even above the budget, saying so;
* whether a run fits at all: when even the plain call does not, the run ends with
  :class:`~expkit.core.errors.OutOfMemoryPlan` (exit code 5), never a traceback.

Every decision is recorded with its reason (``notes``) and goes into ``result.json``
(``memory``) and the report. The projection is arithmetic over the measured bytes,
not a measurement; the harness-cost benchmark measures the real peaks.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import torch

from ...checks.preflight import short_error

_write = os.write  # bound at import, before any code under test (.channel)
GiB = 1 << 30

#: Inputs larger than this many L2 sizes gain nothing from rotating input sets.
LARGE_INPUTS_L2 = 4
#: The share of free memory the plan may project to use.
HEADROOM = 0.85
#: Beside the two sides' plain calls, what the harness may add before it gives copies up.
ALLOWANCE = 1 * GiB


def _nbytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (tuple, list)):
        return sum(_nbytes(v) for v in values)
    if isinstance(values, dict):
        return sum(_nbytes(v) for v in values.values())
    return 0


def host_last_level_cache() -> Optional[int]:
    """The host CPU's largest cache in bytes (Linux sysfs), the CPU's counterpart of the L2
    figure the plan uses on a GPU; None where it cannot be read."""
    sizes = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        return None
    return max(sizes) if sizes else None


def _host_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class ProcFile:
    """A file of ``/proc/self`` this process keeps open: the request ledger reads the
    resident set and resets its peak around every worker request. Opened each time, the
    two took 38 and 35 us a request in a CPU worker's timed-block requests; kept open, 24
    and 8 us, the ledger's start and stop 82 against 41 us together
    (evidence/README.md).

    The descriptor is reopened in a forked child (the inherited one names the parent's
    file) and wherever it no longer is the file it was opened as (same device and inode):
    code under test may close descriptors it did not open, and a number it reuses must
    never be written to."""

    def __init__(self, path: str, flags: int) -> None:
        self.path, self.flags = path, flags
        self._fd: Optional[int] = None
        self._pid = 0
        self._id: Tuple[int, int] = (0, 0)

    def _ours(self) -> bool:
        try:
            st = os.fstat(self._fd)  # type: ignore[arg-type]
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._id

    def release_inherited(self) -> None:
        """Close a forked child's copy of its parent's descriptor (a worker does, before the
        code under test is imported: that code must find no descriptor of its parent's
        ``/proc`` files); this process's own stays."""
        if self._fd is not None and self._pid != os.getpid():
            if self._ours():
                os.close(self._fd)
            self._fd = None

    def fd(self) -> int:
        """This process's descriptor of the file, opened if need be; OSError where it cannot be."""
        self.release_inherited()
        if self._fd is not None:
            if self._ours():
                return self._fd
            self._fd = None  # closed, or its number reused, by someone else: never touched
        fd = os.open(self.path, self.flags | os.O_CLOEXEC)
        st = os.fstat(fd)
        self._fd, self._pid, self._id = fd, os.getpid(), (st.st_dev, st.st_ino)
        return fd


CLEAR_REFS = ProcFile("/proc/self/clear_refs", os.O_WRONLY)
STATUS_FILE = ProcFile("/proc/self/status", os.O_RDONLY)
#: The kept files, for a worker to release its parent's copies (:meth:`ProcFile.release_inherited`).
PROC_FILES = (CLEAR_REFS, STATUS_FILE)


def host_peak_reset() -> bool:
    """Reset this process's peak resident set (Linux: ``clear_refs`` 5); False where impossible."""
    try:
        _write(CLEAR_REFS.fd(), b"5")
        return True
    except OSError:
        return False


def host_rss() -> Tuple[Optional[int], Optional[int]]:
    """(current, peak) resident bytes of this process, from ``/proc/self/status`` (read as
    bytes and searched: the request ledger reads it around every worker request)."""
    try:
        text = os.pread(STATUS_FILE.fd(), 1 << 16, 0)
    except OSError:
        return None, None

    def field(name: bytes) -> Optional[int]:
        i = text.find(name)
        if i < 0:
            return None
        try:
            return int(text[i + len(name):text.index(b"kB", i)]) * 1024
        except ValueError:
            return None

    return field(b"VmRSS:"), field(b"VmHWM:")


def measure_call(fn: Callable[..., Any], make_inputs: Callable[[], Sequence[Any]], device: str) -> Dict[str, Any]:
    """Build one input set and make one plain call; bytes and peaks as plain data.

    On a GPU the peak is ``torch.cuda.max_memory_allocated`` above what was allocated
    before the inputs were built; on the host it is the resident set's high-water mark
    above the resident set before (Linux), which also counts memory the allocator keeps."""
    out: Dict[str, Any] = {"device": device}
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        free, total = torch.cuda.mem_get_info()
        out.update(free=int(free), total=int(total))
    else:
        base, _ = host_rss()
        host_peak_reset()
        out.update(free=_host_available(), total=None)
    try:
        args = tuple(make_inputs())
        out["input_bytes"] = _nbytes(args)
        result = fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        out["output_bytes"] = _nbytes(result)
    except torch.OutOfMemoryError as e:
        text = str(e)
        out.update(oom=True, raised=text.splitlines()[0][:300])
        tried = re.search(r"Tried to allocate ([\d.]+) ([KMGT]i?B)", text)
        held = int(torch.cuda.memory_allocated() - base) if device == "cuda" else 0
        if tried:
            scale = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}.get(tried.group(2), 1)
            out["needed_bytes"] = held + int(float(tried.group(1)) * scale)
        return out
    except Exception as e:  # the baseline's own failure: the caller says so, with the case
        out["raised"] = short_error(e)
        return out
    if device == "cuda":
        out["peak_bytes"] = int(torch.cuda.max_memory_allocated() - base)
    else:
        _, peak = host_rss()
        out["peak_bytes"] = int(peak - (base or 0)) if peak is not None and base is not None else None
    del result, args
    return out


@dataclass(frozen=True)
class MemoryPlan:
    """What the harness holds beside the code under test, and why (see the module docstring)."""

    input_sets: int
    hold_previous: bool = True
    keep_pristine: bool = True
    clone_for_baseline: bool = True
    reference: str = "device"
    plain_peak_bytes: Optional[int] = None
    projected_bytes: Optional[int] = None
    free_bytes: Optional[int] = None
    budget_bytes: Optional[int] = None
    notes: Tuple[str, ...] = field(default=())

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def _project(p: Mapping[str, int], sets: int, hold: bool, keep: bool, clone: bool, ref_on_device: bool) -> int:
    """Bytes both workers may hold at once, from one plain call's figures."""
    i, o = p["input_bytes"], p["output_bytes"]
    temp = max(0, p["peak_bytes"] - i - o)
    baseline = i * (2 if clone else 1) + o + temp + (3 * (i + o) if ref_on_device else 0)
    candidate = i + o + temp + ((i + o) if hold else 0)
    # While timed, each side holds a committed output beside the one its call is making
    # (bench/defences/commit.py: the parent picks after the reply), hence two outputs a side.
    timing = 2 * (sets * i + 2 * o + temp) + ((i + o) if keep else 0)
    return max(baseline + candidate, timing)


def plan(probe: Mapping[str, Any], *, input_sets: int, l2_bytes: Optional[int], headroom: float = HEADROOM) -> MemoryPlan:
    """The plan for a run from the baseline's plain call (:func:`measure_call`).

    ``probe`` lacking its figures (an old worker, a platform without them) gives the
    full plan with a note saying it was not sized."""
    need = ("input_bytes", "output_bytes", "peak_bytes")
    if any(probe.get(k) is None for k in need):
        return MemoryPlan(input_sets, notes=("not sized: the plain call's memory was not measured",))
    p = {k: int(probe[k]) for k in need}
    free = probe.get("free")
    notes = []
    sets = max(1, input_sets)
    if l2_bytes and p["input_bytes"] > LARGE_INPUTS_L2 * l2_bytes and sets > 1:
        sets = 1
        notes.append(f"one input set: the inputs ({p['input_bytes'] / GiB:.2f} GiB) are over {LARGE_INPUTS_L2}x "
                     "the L2 cache, which the cold-cache flush already evicts")
    knobs = {"hold": True, "keep": True, "clone": True, "ref": True}
    projected = _project(p, sets, knobs["hold"], knobs["keep"], knobs["clone"], knobs["ref"])
    budget = 2 * p["peak_bytes"] + ALLOWANCE
    if free:
        budget = min(budget, int(free * headroom))
    reasons = {"hold": "the previous trial's tensors are not held (a recycled buffer is then caught only by the "
                       "storage checks within the trial)",
               "keep": "no pristine copy of a rechecked call's inputs: the recheck takes the last call of a block, on "
                       "its inputs as they are after the call",
               "clone": "the baseline runs on the pristine inputs themselves, digested before and after its call",
               "ref": "the float64 reference is computed on the host"}
    while sets > 1 and projected > budget:
        sets -= 1
        notes.append(f"{sets} input set(s): more would not fit")
        projected = _project(p, sets, knobs["hold"], knobs["keep"], knobs["clone"], knobs["ref"])
    for knob in ("hold", "keep", "clone"):
        if projected <= budget:
            break
        knobs[knob] = False
        notes.append(reasons[knob])
        projected = _project(p, sets, knobs["hold"], knobs["keep"], knobs["clone"], knobs["ref"])
    # The float64 reference is transient (made, compared, freed) and on the host it runs
    # at the CPU's float64 speed: a matmul the GPU does in milliseconds takes minutes
    # there (the H100 audits' fp8 GEMM at 16384^3 ran out of its 175 s that way). So it
    # leaves the device only when the device's free memory cannot hold it, not to meet
    # the budget above.
    hard = int(free * headroom) if free else budget
    on_host = probe.get("device") == "cpu"  # the reference is on the host either way
    if projected > budget and not on_host:
        if projected > hard:
            knobs["ref"] = False
            notes.append(reasons["ref"])
            projected = _project(p, sets, knobs["hold"], knobs["keep"], knobs["clone"], knobs["ref"])
        else:
            notes.append("the float64 reference stays on the device for the checks (on the host it would run at the "
                         "CPU's float64 speed): the checks' peak goes over twice the plain call's peak plus 1 GiB")
    if projected > budget and (on_host or not knobs["ref"]) or projected > hard:
        where = (f"{headroom:.0%} of the {free / GiB:.1f} GiB free" if free and projected > hard
                 else "twice the plain call's peak plus 1 GiB")
        notes.append(f"projected {projected / GiB:.1f} GiB is over {where} even so; the run goes ahead and an "
                     "out-of-memory error is reported as such")
    return MemoryPlan(sets, knobs["hold"], knobs["keep"], knobs["clone"], "device" if knobs["ref"] else "host",
                      p["peak_bytes"], projected, free, budget, tuple(notes))
