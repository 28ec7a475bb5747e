"""The GPU's own record of each call: CUPTI activity records through ``cupti-python``.

:class:`CuptiRecorder` implements :class:`~.kernel_time.Recorder` with NVIDIA's official Python
bindings (``pip install 'expkit[gpu]'``). It is optional: without it :func:`open_recorder`
raises :class:`~.kernel_time.RecorderUnavailable` with the reason, and the timer falls back to
CUDA events and says so in the result.

* It enables the records of GPU work (``CONCURRENT_KERNEL``, ``MEMCPY``, ``MEMSET``), the
  external correlation of our tags, and ``RUNTIME`` and ``DRIVER`` (without which CUPTI
  emitted no external correlation records); of API calls it reads only the host start, to place
  a launch another thread made among the calls.
* External ids are ``base + tag`` with a random 32-bit ``base``, on kind ``CUSTOM2`` (Kineto uses
  ``CUSTOM0`` and ``CUSTOM1``), so an id another tool pushed never passes for ours.
* By default collection is on between :meth:`~CuptiRecorder.start` and
  :meth:`~CuptiRecorder.stop` (one timed block), so nothing is collected while torch.profiler
  or the bench's checks run. With ``keep_enabled`` the kinds stay on until
  :meth:`~CuptiRecorder.close` (enabling them anew costs host time every block); what runs
  between blocks then arrives untagged, outside every chunk's window on the harness stream, and
  foreign on another stream, as it should be. A flush with no record at all makes the next
  ``start`` enable the kinds again.
* Ticks: :meth:`~CuptiRecorder.recalibrate` reads CUPTI's clock against ``perf_counter_ns`` and
  snaps to 1 ns a tick when within 0.2% of it; else it keeps the measured rate.

What collection costs a block: docs/decisions.md and the evidence index.
"""

from __future__ import annotations

import os
import secrets
import time
import types
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from .kernel_time import KINDS, GpuRecord, Recorded, RecorderUnavailable

#: Runtime APIs that never launch GPU work but are called on every torch op; with
#: ``quiet=True`` CUPTI is told not to record them (``activity_enable_runtime_api``),
#: so fewer records need parsing. Off by default until the fidelity benchmark has
#: measured what it saves and shown that no call loses its records.
QUIET_RUNTIME_APIS = (
    "cudaGetDevice_v3020", "cudaGetLastError_v3020", "cudaPeekAtLastError_v3020",
    "cudaStreamIsCapturing_v10000", "cudaStreamIsCapturing_ptsz_v10000", "cudaGetDeviceCount_v3020",
    "cudaSetDevice_v3020", "cudaDeviceGetAttribute_v5000", "cudaStreamGetCaptureInfo_v12030",
    "cudaStreamGetCaptureInfo_ptsz_v12030", "cudaPointerGetAttributes_v4000", "cudaEventQuery_v3020",
)

TAG_SPAN = 1 << 32

#: The host's clocks, bound when the harness is imported (before any code under test).
_perf_counter, _perf_counter_ns = time.perf_counter, time.perf_counter_ns
SNAP = 0.002

#: The process whose CUPTI activity kinds a recorder of this module left enabled (None: none).
#: The kinds are the process's, not a recorder's: two recorders in one process (both sides,
#: ``defences.isolate=false``) share them, and one's ``close`` disables them for the other,
#: whose next ``start`` then enables them again. Keyed by pid, so that a forked child never
#: takes its parent's kinds for its own.
_ENABLED_IN: List[Optional[int]] = [None]


@dataclass(frozen=True)
class KindCodes:
    """The integer codes of the record kinds read, and of our external-correlation kind."""

    kernel: int
    memcpy: int
    memset: int
    external: int
    ours: int
    runtime: int = -1
    driver: int = -1


#: (kind index into KINDS, correlation, start, end, stream, device, name[, grid, block]): a kernel's
#: launch dimensions follow where they were read.
Raw = Tuple[Any, ...]


def parse(activities: Iterable[Any], codes: KindCodes, raw: List[Raw], ext: Dict[int, int], names: bool,
          api: Optional[Dict[int, int]] = None) -> None:
    """Copy what the span logic needs out of a buffer of CUPTI records (the buffer is
    reused once the callback returns): GPU work into ``raw``, our kind's external
    correlations into ``ext`` (correlation id -> external id) and, given ``api``, each
    runtime or driver API call's start on the host (correlation id -> ticks: where
    another thread's launch falls among a call's own API calls). Other tools' external
    ids are skipped."""
    kk, km, ks, ke, ours = codes.kernel, codes.memcpy, codes.memset, codes.external, codes.ours
    kr, kd = (codes.runtime, codes.driver) if api is not None else (-2, -2)
    for a in activities:
        k = a.kind
        if k == kr or k == kd:
            api[a.correlation_id] = getattr(a, "start", 0) or 0  # type: ignore[index]
        elif k == ke:
            if a.external_kind == ours:
                ext[a.correlation_id] = a.external_id
        elif k == kk:
            raw.append((0, a.correlation_id, a.start, a.end, a.stream_id, a.device_id, a.name if names else "",
                        (getattr(a, "grid_x", 0), getattr(a, "grid_y", 0), getattr(a, "grid_z", 0)),
                        (getattr(a, "block_x", 0), getattr(a, "block_y", 0), getattr(a, "block_z", 0))))
        elif k == km:
            raw.append((1, a.correlation_id, a.start, a.end, a.stream_id, a.device_id, ""))
        elif k == ks:
            raw.append((2, a.correlation_id, a.start, a.end, a.stream_id, a.device_id, ""))


def join(raw: Iterable[Raw], ext: Mapping[int, int], base: int,
         api: Optional[Mapping[int, int]] = None) -> Tuple[GpuRecord, ...]:
    """GPU records with their tags: ``external id - base`` for ids pushed by this
    recorder (``base <= id < base + 2**32``), None for everything else; with the
    correlation id and, from ``api``, the host time of the API call that launched each."""
    api = api or {}
    out = []
    for kind, corr, start, end, stream, device, name, *dims in raw:
        x = ext.get(corr)
        tag = x - base if x is not None and base <= x < base + TAG_SPAN else None
        grid, block = (tuple(int(v) for v in dims[0]), tuple(int(v) for v in dims[1])) if len(dims) == 2 else ((), ())
        out.append(GpuRecord(KINDS[kind], tag, int(start), int(end), int(stream), int(device), name, int(corr),
                             int(api.get(corr, 0)), grid, block))
    return tuple(out)


def tagged_calls(ext: Mapping[int, int], base: int,
                 api: Optional[Mapping[int, int]] = None) -> Tuple[Tuple[int, int, int], ...]:
    """``(correlation, tag, host start)`` of every API call made under this recorder's
    tags (the brackets :func:`~.kernel_time.attribute` places other threads' launches
    by; host start 0 where no API record was read)."""
    api = api or {}
    return tuple(sorted((int(corr), x - base, int(api.get(corr, 0)))
                        for corr, x in ext.items() if base <= x < base + TAG_SPAN))


def _callbacks(size: int, codes: KindCodes, raw: List[Raw], ext: Dict[int, int], names: bool,
               api: Dict[int, int], _parse: Any = parse) -> Tuple[Any, Any]:
    """CUPTI's buffer-request and buffer-completed callbacks, bound to these containers."""

    def requested() -> Tuple[int, int]:
        return size, 0

    def completed(activities: Any) -> None:
        _parse(activities, codes, raw, ext, names, api)

    return requested, completed


#: Instance attributes of a recorder whose identity is sealed: callables and the containers
#: its records land in (numbers and flags change as it runs).
def _sealed(v: Any) -> bool:
    return callable(v) or isinstance(v, (list, dict, tuple))


def _seal_of(obj: Any) -> Dict[str, Any]:
    """The objects (not ids: a replacement cannot reuse one) of ``obj``'s sealed attributes
    and its class's functions, by name."""
    seal = {k: v for k, v in vars(obj).items() if _sealed(v)}
    for cls in type(obj).__mro__[:-1]:
        for k, v in vars(cls).items():
            seal.setdefault(f"{cls.__name__}.{k}", v)
    return seal


def _altered(obj: Any, seal: Optional[Dict[str, Any]]) -> str:
    if not isinstance(seal, dict):
        return "its seal was removed"
    now = _seal_of(obj)
    now.pop("_seal", None)
    changed = sorted(k for k in set(seal) | set(now) if k != "_seal" and seal.get(k, None) is not now.get(k, None))
    return "" if not changed else "replaced or added: " + ", ".join(changed[:6])


def _is_python_function(f: Any) -> bool:
    return isinstance(f, (types.FunctionType, types.MethodType))


class CuptiRecorder:
    """:class:`~.kernel_time.Recorder` over ``cupti-python`` (see the module docstring).

    Construction imports the bindings, binds the functions it uses (a later patch of
    the module cannot reach them) and measures the ticks. Raises
    :class:`RecorderUnavailable` with the reason when any of that fails."""

    def __init__(self, *, buffer_bytes: int = 8 << 20, quiet: bool = False, names: bool = False,
                 calibrate_s: float = 0.02, keep_enabled: bool = False) -> None:
        try:
            # lazy: cupti-python is optional (the gpu extra)
            from cupti import cupti
        except Exception as e:  # ImportError, or a libcupti that does not load
            raise RecorderUnavailable(f"{type(e).__name__}: {e}") from None
        self._c = cupti
        fns = {}
        for name in ("activity_register_callbacks", "activity_enable", "activity_disable", "activity_flush_all",
                     "activity_push_external_correlation_id", "activity_pop_external_correlation_id",
                     "get_timestamp"):
            f = getattr(cupti, name, None)
            if f is None:
                raise RecorderUnavailable(f"cupti-python has no {name} (version too old?)")
            if _is_python_function(f):
                raise RecorderUnavailable(f"cupti.{name} was replaced by a Python function")
            fns[name] = f
        self._register = fns["activity_register_callbacks"]
        self._enable, self._disable = fns["activity_enable"], fns["activity_disable"]
        self._flush = fns["activity_flush_all"]
        self._push_fn = fns["activity_push_external_correlation_id"]
        self._pop_fn = fns["activity_pop_external_correlation_id"]
        self._timestamp = fns["get_timestamp"]
        ak = cupti.ActivityKind
        self._kinds = [ak.CONCURRENT_KERNEL, ak.MEMCPY, ak.MEMSET, ak.EXTERNAL_CORRELATION, ak.RUNTIME, ak.DRIVER]
        self._ext_kind = cupti.ExternalCorrelationKind.CUSTOM2
        self._codes = KindCodes(int(ak.CONCURRENT_KERNEL), int(ak.MEMCPY), int(ak.MEMSET),
                                int(ak.EXTERNAL_CORRELATION), int(self._ext_kind), int(ak.RUNTIME), int(ak.DRIVER))
        self._base = secrets.randbits(31) * TAG_SPAN
        self._buffer_bytes = int(buffer_bytes)
        self._quiet = quiet
        self._names = names
        self._calibrate_s = calibrate_s
        self._ext: Dict[int, int] = {}
        self._api: Dict[int, int] = {}
        self._raw: List[Raw] = []
        self._collecting = False
        self._registered = False
        #: Leave the kinds enabled from one block to the next, until :meth:`close` (module docstring).
        self.keep_enabled = keep_enabled
        self._depth = 0
        self.ticks_per_second = 1e9
        #: The two callbacks CUPTI is given, closures over this recorder's containers made
        #: now: a later replacement of ``parse`` or of an attribute cannot reach them.
        self._callbacks = _callbacks(self._buffer_bytes, self._codes, self._raw, self._ext, self._names, self._api)
        try:
            self.recalibrate()
        except Exception as e:
            raise RecorderUnavailable(f"cupti.get_timestamp failed: {type(e).__name__}: {e}") from None
        self._seal = _seal_of(self)

    def altered(self) -> str:
        """What of this recorder is not what it was built with (empty: nothing): a callback,
        a container of its records or a method replaced, on the instance or its class.
        The timer asks through the class (``CuptiRecorder.altered(rec)``), so that an
        instance's own replacement of this method is not what answers."""
        return _altered(self, vars(self).get("_seal"))

    # -- the Recorder seam ------------------------------------------------------------------
    def start(self) -> None:
        if self._collecting:
            self.stop()
        self._ext.clear()
        self._api.clear()
        self._raw.clear()
        try:
            self._register(*self._callbacks)
        except Exception:
            if not self._registered:  # never registered: this recorder cannot run
                raise
            # Registered before and refused now: go on. Were our callbacks no longer
            # the ones CUPTI calls, the block would have no record of its hold and fall
            # back to events (three such blocks and the timer drops the recorder).
        self._registered = True
        if _ENABLED_IN[0] != os.getpid():
            for k in self._kinds:
                self._enable(k)
            if self._quiet:
                self._quiet_runtime()
            _ENABLED_IN[0] = os.getpid()
        self._collecting = True

    def push(self, tag: int) -> None:
        self._push_fn(self._ext_kind, self._base + tag)
        self._depth += 1

    def pop(self) -> None:
        self._pop_fn(self._ext_kind)
        self._depth -= 1

    def stop(self) -> Recorded:
        t0 = _perf_counter()
        while self._depth > 0:  # a call that raised between push and pop
            self.pop()
        try:
            self._flush(1)
        finally:
            if not self.keep_enabled:
                self._disable_kinds()
            self._collecting = False
        if not (self._raw or self._ext or self._api):
            _ENABLED_IN[0] = None  # nothing came: the kinds may have been disabled behind our back
        records = join(self._raw, self._ext, self._base, self._api)
        tagged = tagged_calls(self._ext, self._base, self._api)
        self._raw.clear()
        self._ext.clear()
        self._api.clear()
        return Recorded(records, self.ticks_per_second, _perf_counter() - t0, tagged=tagged)

    def close(self) -> None:
        """Stop collecting, flush and disable the kinds (a recorder that keeps them enabled
        between blocks must be closed once its blocks are done); a later ``start`` enables
        them again. The flush matters: a buffer of records made since the last block, left
        in CUPTI, went to the next tool to register (torch.profiler in the next run's
        preflight, which then saw no kernel at all, on an H200)."""
        if self._collecting:
            self.stop()
        if _ENABLED_IN[0] == os.getpid():
            try:
                self._flush(1)
            finally:
                self._disable_kinds()
        self._raw.clear()
        self._ext.clear()
        self._api.clear()

    def _disable_kinds(self) -> None:
        for k in self._kinds:
            try:
                self._disable(k)
            except Exception:
                pass
        _ENABLED_IN[0] = None

    def recalibrate(self) -> float:
        """Ticks of CUPTI's clock per second of the host's, measured over ``calibrate_s``."""
        a_ts, a_ns = self._bracket()
        end = _perf_counter() + self._calibrate_s
        while _perf_counter() < end:
            pass
        b_ts, b_ns = self._bracket()
        per_ns = (b_ts - a_ts) / max(b_ns - a_ns, 1)
        if abs(per_ns - 1.0) <= SNAP:
            per_ns = 1.0
        self.ticks_per_second = per_ns * 1e9
        return self.ticks_per_second

    def _bracket(self) -> Tuple[int, float]:
        """(CUPTI timestamp, host ns at the same instant): the tightest of five brackets."""
        best: Optional[Tuple[int, int, float]] = None
        for _ in range(5):
            t1 = _perf_counter_ns()
            ts = int(self._timestamp())
            t2 = _perf_counter_ns()
            if best is None or t2 - t1 < best[0]:
                best = (t2 - t1, ts, (t1 + t2) / 2)
        assert best is not None
        return best[1], best[2]

    def _quiet_runtime(self) -> None:
        enable_api = getattr(self._c, "activity_enable_runtime_api", None)
        cbids = getattr(self._c, "RuntimeApiTraceCbid", None)
        if enable_api is None or cbids is None:
            return
        for name in QUIET_RUNTIME_APIS:
            cbid = getattr(cbids, name, None)
            if cbid is not None:
                try:
                    enable_api(cbid, 0)
                except Exception:
                    pass

    def describe(self) -> str:
        tick = "1 ns" if self.ticks_per_second == 1e9 else f"{1e9 / self.ticks_per_second:.4g} ns"
        return (f"CUPTI activity records (cupti-python; kernels, copies and sets of each call attributed by external "
                f"correlation; tick {tick})")


def open_recorder(**kwargs: Any) -> CuptiRecorder:
    """A :class:`CuptiRecorder`, or :class:`RecorderUnavailable` saying why not."""
    return CuptiRecorder(**kwargs)
