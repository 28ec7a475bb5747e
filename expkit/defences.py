"""Defences against faked and fooled speedups, and the bench that applies them.

A speed claim is only as good as the harness that timed it. This module holds the
checks that keep a candidate from faking a speedup (deliberately or by accident) and
the :class:`Bench` that runs the code under test with them, in a worker process
(``channel.py``) or in-process. ``docs/threat-model.md`` says what each one stops and
what none of them can; the check names below are the ones a verdict's reasons carry.

Mechanisms (each named by the check that reports it):

``tamper``
    The functions the harness relies on -- its clocks (``time.perf_counter``, CUDA
    events, ``torch.cuda.synchronize``), every function and method of expkit's own
    modules (the oracles, the timers, this module) and a few torch methods the
    oracles use -- are snapshotted, object and code, before the candidate's module is
    imported, and compared after the import, after the preflight, after each case and
    (the clocks and oracles) after every timed block. The harness's own clock is bound
    at import of this module, so a later patch of ``time.perf_counter`` cannot reach
    it anyway; the check says that somebody tried.
``global-state``
    Settings that change numerics or speed (TF32 and cuDNN flags, float32 matmul
    precision, deterministic mode, default dtype, thread counts, grad mode, ...) are
    snapshotted before the import and compared after it and around every candidate
    call of the preflight and every timed block: a candidate that slows the baseline
    down (``torch.set_num_threads(1)``) or loosens precision for both sides is caught.
``threads``
    Python threads and child processes are counted before and after each preflight
    call and around every timed call (threads) or block (processes): work that goes
    on after the call has returned escapes any timer.
fresh inputs
    Every timed call gets inputs that no earlier call has seen, made before its timed
    span starts (:class:`FreshInputs`). The default, ``salt``, copies one element of
    one floating input over another at a position drawn from a secret RNG: it costs a
    few microseconds whatever the input size, bumps the tensor's version counter and
    changes its content, so a cache keyed on a pointer, a version or a content hash
    either misses (and the candidate pays for the work) or returns a stale answer
    (which the recheck catches). Full regeneration by the factory (``regenerate``)
    costs about as much as a memory-bound op itself, which is why it is not the default.
``recheck``
    In a sample of the timed blocks (at least ``min_rechecks`` a case, then as many as
    ``recheck_budget`` of the timed seconds pays for) one call, chosen by the parent at
    random, keeps a pristine copy of its inputs and its output; after the block the
    output is held against the baseline on that copy with the manifest's oracles, and
    against the storage checks of the preflight. Batch-then-skip, replay caches and
    correct-then-drift fail here.
``timer``
    The parent times every block on its own clock (the *envelope*) while the worker
    reports its own: the timed seconds, the untimed harness work and its wall time. A
    block whose worker wall time falls short of the envelope by more than
    ``max(envelope_abs_s, envelope_rel x envelope)`` is flagged and its sample
    replaced by the envelope (an upper bound no in-worker trick can shorten); a side
    with more than half its blocks flagged makes the run invalid.
``plausibility``
    A supported speedup above ``max_plausible_speedup`` (10x unless the manifest's
    ``expect.max_plausible_speedup`` says more) or a candidate time below what the
    declared ``flops``/``bytes`` allow on the device (``roofline.py``) turns the
    verdict into ``inconclusive``: nobody should believe that without a second look.
``uninitialised`` / ``fallback``
    Diagnoses of the preflight (``preflight.py``): an oracle failure made only of NaN
    where the baseline is finite means an element was never written or was computed
    from memory nobody initialised (new allocations are NaN-filled); an identity
    failure on a case where the candidate caught an exception of its own means it
    fell back to another implementation.

All of this is in-process defence in the worker: code that runs in the same process
can, in principle, defeat any of it (walk ``gc`` to the harness's objects, rebind
them, read the channel key). What it cannot defeat is the parent's clock and the
parent's own judgement of the raw samples; see docs/threat-model.md.
"""

from __future__ import annotations

import importlib
import inspect
import os
import random
import secrets
import sys
import threading
import time
import types
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from .findings import WARNING, Finding
from .settings import DefenceSettings, Settings

# Bound when this module is imported, before any candidate code: the harness's clock.
_CLOCK = time.perf_counter

TAMPER = "tamper"
GLOBAL_STATE = "global-state"
THREADS = "threads"
RECHECK = "recheck"
TIMER = "timer"
CHANNEL = "channel"
WORKER = "worker"
PLAUSIBILITY = "plausibility"
UNINITIALISED = "uninitialised"
FALLBACK = "fallback"

FRESH_MODES = ("salt", "regenerate", "off")


# --- global state ----------------------------------------------------------------


def _state_probes() -> Dict[str, Callable[[], Any]]:
    import torch

    b = torch.backends
    return {
        "torch.get_default_dtype()": lambda: str(torch.get_default_dtype()),
        "torch.get_num_threads()": torch.get_num_threads,
        "torch.get_num_interop_threads()": torch.get_num_interop_threads,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled,
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled,
        "torch.is_deterministic_algorithms_warn_only_enabled()": torch.is_deterministic_algorithms_warn_only_enabled,
        "torch.utils.deterministic.fill_uninitialized_memory": lambda: torch.utils.deterministic.fill_uninitialized_memory,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled,
        "torch.backends.mkldnn.enabled": lambda: b.mkldnn.enabled,
        "torch.backends.cudnn.enabled": lambda: b.cudnn.enabled,
        "torch.backends.cudnn.benchmark": lambda: b.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": lambda: b.cudnn.deterministic,
        "torch.backends.cudnn.allow_tf32": lambda: b.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": lambda: b.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


_PROBES: Optional[Dict[str, Callable[[], Any]]] = None


def snapshot_state() -> Dict[str, Any]:
    """The process-wide settings that change numerics or speed, by name.

    A probe that raises (an attribute missing from this torch build) is recorded as
    the exception's type name, so that it compares equal to itself."""
    global _PROBES
    if _PROBES is None:
        _PROBES = _state_probes()
    out: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, probe in _PROBES.items():
            try:
                out[name] = probe()
            except Exception as e:  # a build without the attribute
                out[name] = f"<{type(e).__name__}>"
    return out


def state_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[str]:
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)]


# --- function identity -------------------------------------------------------------

#: Functions outside expkit that the harness's timing and checking rely on.
WATCHED: Tuple[str, ...] = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
    "time.time_ns", "time.process_time", "time.sleep", "threading.active_count", "threading.enumerate",
    "gc.disable", "gc.enable", "gc.isenabled", "os.write", "os.read",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.query", "torch.cuda.Event.synchronize", "torch.cuda.current_stream", "torch.cuda._sleep",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.to", "torch.Tensor.abs", "torch.Tensor.max",
    "torch.Tensor.__getitem__", "torch.Tensor.__setitem__", "torch.Tensor.untyped_storage",
    "torch.Tensor.detach", "torch.equal", "torch.isnan", "torch.where", "torch.linalg.vector_norm",
)

#: The subset checked after every timed block: the clocks and what the recheck calls.
_HOT_PREFIXES = ("time.", "torch.cuda.", "gc.", "threading.", "expkit.timing.", "expkit.cuda_timer.",
                 "expkit.oracles.", "expkit.defences.PerCallTimer", "expkit.defences.FreshInputs",
                 "expkit.defences._CaseBench")


def _resolve_dotted(name: str) -> Tuple[Any, str, Any]:
    """(container, attribute, current object) for ``a.b.C.m``; raises if absent."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        obj: Any = mod
        for p in parts[i:-1]:
            obj = getattr(obj, p)
        return obj, parts[-1], getattr(obj, parts[-1])
    raise LookupError(name)


def _code_of(obj: Any) -> Any:
    fn = getattr(obj, "__func__", obj)
    if isinstance(fn, property):
        fn = fn.fget
    return getattr(fn, "__code__", None)


@dataclass
class FunctionSnapshot:
    """Objects (and their code) the harness relies on, to be found unchanged later.

    Holding the objects themselves (not their ``id``) keeps an id from being reused
    by a replacement. A function whose ``__code__`` was swapped in place keeps its
    identity, so the code object is compared too."""

    entries: Dict[str, Tuple[Any, str, Any, Any]] = field(default_factory=dict)

    @classmethod
    def take(cls) -> "FunctionSnapshot":
        snap = cls()
        for name in WATCHED:
            try:
                container, attr, obj = _resolve_dotted(name)
            except Exception:
                continue
            snap.entries[name] = (container, attr, obj, _code_of(obj))
        for modname, mod in list(sys.modules.items()):
            if mod is None or not (modname == "expkit" or modname.startswith("expkit.")):
                continue
            for attr, obj in list(vars(mod).items()):
                if isinstance(obj, types.FunctionType) and obj.__module__ == modname:
                    snap.entries[f"{modname}.{attr}"] = (mod, attr, obj, obj.__code__)
                elif isinstance(obj, type) and obj.__module__ == modname:
                    for a, v in list(vars(obj).items()):
                        if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                            snap.entries[f"{modname}.{attr}.{a}"] = (obj, a, v, _code_of(v))
        return snap

    def changed(self, *, hot_only: bool = False) -> List[str]:
        out = []
        if hot_only:
            hot = self.__dict__.get("_hot")
            if hot is None:
                hot = self.__dict__["_hot"] = {n: e for n, e in self.entries.items() if n.startswith(_HOT_PREFIXES)}
            entries = hot
        else:
            entries = self.entries
        for name, (container, attr, obj, code) in entries.items():
            try:
                now = vars(container).get(attr) if isinstance(container, (type, types.ModuleType)) else None
                if now is None:
                    now = getattr(container, attr)
            except Exception:
                out.append(f"{name} (removed)")
                continue
            if now is not obj:
                out.append(f"{name} (replaced)")
            elif code is not None and _code_of(now) is not code:
                out.append(f"{name} (code swapped)")
        return out


# --- threads and child processes ---------------------------------------------------


@dataclass(frozen=True)
class Activity:
    """Live Python threads (ident -> name) and child process ids of this process."""

    threads: Mapping[int, str]
    children: FrozenSet[int]


def child_pids() -> FrozenSet[int]:
    """Children of every thread of this process (Linux ``/proc``; empty elsewhere)."""
    out: set = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/children") as f:
                    out.update(int(p) for p in f.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return frozenset(out)


def activity() -> Activity:
    return Activity({t.ident or 0: t.name for t in threading.enumerate() if t.is_alive()}, child_pids())


_STDLIB = os.path.dirname(os.__file__)


def _os_state(native_id: Optional[int]) -> Optional[str]:
    """The kernel's scheduling state of a thread ('R' running, 'S' sleeping, ...)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, TypeError):
        return None


def parked(thread: threading.Thread) -> bool:
    """A thread waiting for work: asleep (where the kernel says), with its innermost
    Python frame in the standard library (a pool worker blocked on its queue), not in
    anybody's code and not on a CPU. A thread that sleeps inside the candidate's own
    code (``time.sleep`` before deferred work) is not parked."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None or not os.path.realpath(frame.f_code.co_filename).startswith(_STDLIB):
        return False
    return _os_state(getattr(thread, "native_id", None)) in (None, "S", "D")


def new_activity(before: Activity, after: Activity, *, grace_s: float = 0.01) -> Optional[str]:
    """What was started and is still running (not parked), or None.

    A pool that starts its workers on first use leaves new threads behind that wait
    for the next task; those are parked and not counted. A thread that was just
    finishing gets ``grace_s`` to finish or park before it counts."""
    def busy() -> List[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.is_alive() and t.ident in after.threads and t.ident not in before.threads and not parked(t)]

    running = busy()
    if running and grace_s > 0:
        time.sleep(grace_s)
        running = busy()
    threads = [t.name for t in running]
    children = sorted(after.children - before.children)
    bits = []
    if threads:
        bits.append(f"{len(threads)} new thread(s) still running ({', '.join(threads[:3])})")
    if children:
        bits.append(f"{len(children)} new child process(es) still running (pid {', '.join(map(str, children[:3]))})")
    if not bits:
        return None
    return " and ".join(bits) + " after the call returned: work that goes on after a call escapes its timer"


def parked_new_threads(before: Activity) -> int:
    return sum(1 for t in threading.enumerate() if t.is_alive() and t.ident not in before.threads and parked(t))


# --- silent fallbacks ------------------------------------------------------------


class ExceptionWitness:
    """Wraps a callable; records exceptions raised in ``files`` that the call swallowed.

    ``sys.settrace`` is installed only for the wrapped call and only traces frames of
    the candidate's own files, so torch's internals run untraced. Used for the one
    profiled identity call per case, never for a timed one. If the call returns
    normally, every exception seen in those frames was handled somewhere inside it."""

    def __init__(self, fn: Callable[..., Any], files: Sequence[str]) -> None:
        self.fn = fn
        self.files = frozenset(os.path.realpath(f) for f in files)
        self._seen: List[Tuple[str, str, str, int]] = []
        self.swallowed: Tuple[Tuple[str, str, str, int], ...] = ()
        self._real: Dict[str, bool] = {}

    def _ours(self, filename: str) -> bool:
        hit = self._real.get(filename)
        if hit is None:
            hit = self._real[filename] = os.path.realpath(filename) in self.files
        return hit

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._seen = []
        self.swallowed = ()

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "exception":
                exc_type, exc, _ = arg
                self._seen.append((exc_type.__name__, str(exc)[:160], Path(frame.f_code.co_filename).name,
                                   frame.f_lineno))
            return local

        def outer(frame: Any, event: str, arg: Any) -> Any:
            return local if self._ours(frame.f_code.co_filename) else None

        previous = sys.gettrace()
        sys.settrace(outer)
        try:
            out = self.fn(*args, **kwargs)
        finally:
            sys.settrace(previous)
        # Each raise is reported once per frame it passes through; keep the first.
        self.swallowed = tuple(dict.fromkeys(self._seen))
        return out


def candidate_files(fn: Callable[..., Any], folder: Path) -> List[str]:
    """The candidate's own source files: its defining file and the manifest's folder."""
    files = [str(p) for p in Path(folder).glob("*.py")]
    try:
        src = inspect.getsourcefile(inspect.unwrap(fn))
        if src:
            files.append(src)
    except (TypeError, OSError):
        pass
    return files


# --- fresh inputs ------------------------------------------------------------------


def _unravel(flat: int, shape: Sequence[int]) -> Tuple[int, ...]:
    out = []
    for d in reversed(shape):
        flat, r = divmod(flat, d)
        out.append(r)
    return tuple(reversed(out))


class FreshInputs:
    """The input sets of one case, made new before every timed call.

    ``sets`` rotate as in the undefended loop (so the working set is the same); before
    each call the set about to be used is refreshed according to ``mode``:

    * ``salt``: one floating tensor of the set (drawn at random) gets one element
      overwritten by another of its own elements, both positions from ``rng``. The
      value stays in the input's own distribution (no out-of-range value for a
      kernel that assumes, say, positive inputs) and integer tensors, which may hold
      indices, are never touched. A set without a floating tensor of two or more
      elements cannot be salted (``salted`` stays False).
    * ``regenerate``: the set is rebuilt by ``rebuild(seed)`` with a fresh seed.
    * ``off``: nothing (the undefended behaviour).

    ``take(keep)`` returns the arguments for the next call, and with ``keep`` a
    pristine copy of them for the recheck.
    """

    def __init__(self, sets: List[Tuple[Any, ...]], mode: str, rng: random.Random,
                 rebuild: Optional[Callable[[int], Tuple[Any, ...]]] = None) -> None:
        if mode not in FRESH_MODES:
            raise ValueError(f"fresh must be one of {FRESH_MODES}, got {mode!r}")
        if not sets:
            raise ValueError("at least one input set is needed")
        from torch.autograd.graph import increment_version

        from .preflight import clone_inputs

        self._clone = clone_inputs
        self._bump = increment_version
        self.sets = list(sets)
        self.mode = mode
        self.rng = rng
        self._rand = rng.random
        self.rebuild = rebuild
        self._next = 0
        self.index = 0
        self._targets = [self._floating(s) for s in self.sets]
        self.salted = mode != "salt" or any(self._targets)

    @staticmethod
    def _floating(args: Sequence[Any]) -> List[Tuple[Any, Any, int]]:
        """(tensor, a NumPy view of its elements or None, element count) per salt target.

        On the CPU the element is written through a NumPy view of the same memory and
        the tensor's version counter bumped by hand: 0.4 us a call where torch's own
        indexing takes about 6 (both measured on the 2-core CI machine), which matters
        for ops of a few microseconds."""
        import torch

        out = []
        for t in args:
            if not (isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() >= 2):
                continue
            flat = None
            if t.device.type == "cpu" and t.is_contiguous() and t.dtype not in (torch.bfloat16, torch.float8_e4m3fn,
                                                                                 torch.float8_e5m2):
                try:
                    flat = t.detach().numpy().reshape(-1)
                except (TypeError, RuntimeError):
                    flat = None
            out.append((t, flat, t.numel()))
        return out

    def refresh(self, j: int) -> None:
        if self.mode == "salt":
            targets = self._targets[j]
            if not targets:
                return
            rand = self._rand
            t, flat, n = targets[int(rand() * len(targets))] if len(targets) > 1 else targets[0]
            p = int(rand() * n)
            q = int(rand() * (n - 1))
            q += q >= p
            if flat is not None:
                flat[p] = flat[q]
                self._bump(t)
            else:
                import torch

                with torch.no_grad():
                    t[_unravel(p, t.shape)] = t[_unravel(q, t.shape)]
        elif self.mode == "regenerate" and self.rebuild is not None:
            self.sets[j] = self.rebuild(self.rng.getrandbits(62))
            self._targets[j] = self._floating(self.sets[j])

    def take(self, keep: bool = False) -> Tuple[Tuple[Any, ...], Optional[Tuple[Any, ...]]]:
        j = self._next % len(self.sets)
        self._next += 1
        self.index = j
        self.refresh(j)
        args = self.sets[j]
        return args, (self._clone(args) if keep else None)


# --- the per-call CPU timer --------------------------------------------------------


class PerCallTimer:
    """Host clock around each call; the harness's per-call work runs between the spans.

    The undefended CPU timer (``timing.PerfCounterTimer``) reads the clock once around
    a block, which is cheaper for ops of a few microseconds but leaves no gap between
    calls for fresh inputs. Here ``before()`` (fresh inputs, the recheck's copy) and
    ``after()`` (thread count) run outside the timed spans and their time is added up
    in ``last_untimed`` for the parent's envelope check. Two clock reads per call
    (tens of nanoseconds each on Linux) are the price; they fall inside the span.
    """

    method = ("cpu: time.perf_counter around each call; inputs made fresh before each call "
              "outside the timed span (defended)")

    def __init__(self, before: Callable[[], None], after: Callable[[], None],
                 clock: Callable[[], float] = _CLOCK) -> None:
        self._before, self._after, self._clock = before, after, clock
        self.last_untimed = 0.0

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        clock, before, after = self._clock, self._before, self._after
        timed = untimed = 0.0
        for _ in range(number):
            u0 = clock()
            before()
            t0 = clock()
            fn()
            t1 = clock()
            after()
            untimed += (t0 - u0) + (clock() - t1)
            timed += t1 - t0
        self.last_untimed = untimed
        return timed / number


class HookedDevice:
    """A ``cuda_timer.Device`` whose L2 flush first runs the harness's per-call hook.

    In cold mode ``CudaTimer`` flushes the L2 right before recording each call's start
    event, so this is the one seam where per-call work stays outside the events
    without editing the timer. The hook queues its GPU work (the salt, the recheck's
    copy) before the flush, which then evicts whatever that work brought into L2."""

    def __init__(self, inner: Any, hook: Callable[[], None]) -> None:
        self._inner, self._hook = inner, hook
        self.l2_bytes = inner.l2_bytes

    def new_event(self) -> Any:
        return self._inner.new_event()

    def hold(self, cycles: int) -> None:
        self._inner.hold(cycles)

    def flush_l2(self) -> None:
        self._hook()
        self._inner.flush_l2()

    def synchronize(self) -> None:
        self._inner.synchronize()

    def describe_flush(self) -> str:
        return self._inner.describe_flush()


# --- the envelope check (parent side) ---------------------------------------------


@dataclass(frozen=True)
class BlockAccount:
    """One timed block as the parent saw it (``envelope``) and the worker reported it."""

    side: str
    number: int
    envelope: float
    wall: float
    timed: float
    untimed: float
    recheck: float
    checks: float

    def shortfall(self) -> float:
        """Seconds the worker cannot account for: envelope minus its wall time, or its
        wall time minus the parts it measured, whichever is larger."""
        return max(self.envelope - self.wall, self.wall - (self.timed + self.untimed + self.recheck + self.checks))


def flagged(acc: BlockAccount, d: DefenceSettings) -> bool:
    return acc.shortfall() > max(d.envelope_abs_s, d.envelope_rel * acc.envelope)


def envelope_findings(case: str, accounts: Sequence[BlockAccount], d: DefenceSettings) -> List[Finding]:
    """The parent's verdict on the worker's clock over one case's batches.

    One flagged batch means little: on a loaded machine the parent's wake-up after a
    reply can lag by several milliseconds (4-12 ms were measured on a loaded 2-core
    machine while the worker's OpenMP threads spun), so flagged batches are only
    counted (``envelope_counts``). More than half of them flagged is ``invalid``: the
    worker's account of its own time is not to be trusted."""
    bad = [a for a in accounts if flagged(a, d)]
    if not bad or len(bad) * 2 <= len(accounts):
        return []
    worst = max(bad, key=lambda a: a.shortfall() / max(a.envelope, 1e-12))
    accounted = worst.timed + worst.untimed + worst.recheck + worst.checks
    msg = (f"{len(bad)} of {len(accounts)} batches of timed blocks disagree with the harness's clock (worst: the "
           f"worker accounted for {accounted:.4g} s and its wall clock for {worst.wall:.4g} s of a "
           f"{worst.envelope:.4g} s request): something in the worker is changing what the harness's clock reads")
    return [Finding(TIMER, False, msg, case, figure=float(len(bad)), threshold=len(accounts) / 2)]


def envelope_counts(accounts: Sequence[BlockAccount], d: DefenceSettings) -> Dict[str, Any]:
    bad = [a for a in accounts if flagged(a, d)]
    return {"batches": len(accounts), "flagged": len(bad),
            "worst_shortfall_s": max((a.shortfall() for a in accounts), default=0.0)}


class RecheckPolicy:
    """Which timed blocks re-check one of their calls, and which call.

    The first ``min_rechecks`` candidate blocks of a case, then any block while the
    re-checks (those done, plus those planned at the average cost so far) have cost
    less than ``budget`` of the timed seconds. The call index is drawn from a secret
    RNG, so the candidate cannot tell a checked call from an unchecked one (short of
    reading the harness's memory)."""

    def __init__(self, d: DefenceSettings, rng: Optional[random.Random] = None) -> None:
        self.min = d.min_rechecks
        self.budget = d.recheck_budget
        self.rng = rng or random.Random(secrets.randbits(64))
        self.picked = 0
        self.pending = 0
        self.recheck_s = 0.0
        self.timed_s = 0.0

    def pick(self, side: str, number: int) -> Optional[int]:
        if side != "candidate":
            return None
        done = self.picked - self.pending
        each = self.recheck_s / done if done > 0 else 0.0
        if self.picked < self.min or self.recheck_s + self.pending * each < self.budget * self.timed_s:
            self.picked += 1
            self.pending += 1
            return self.rng.randrange(number)
        return None

    def spent(self, timed: float, recheck: float, rechecked: bool) -> None:
        self.timed_s += timed
        self.recheck_s += recheck
        self.pending -= bool(rechecked)


class SideFn:
    """Stands for one side in ``measure.measure_case``: timers see ``side``, warm-up
    goes to ``warm_up`` and a plain call runs one untimed call."""

    def __init__(self, side: str, warm: Callable[[str, float], None], call: Callable[[str], None]) -> None:
        self.side, self._warm, self._call = side, warm, call

    def warm_up(self, seconds: float) -> None:
        self._warm(self.side, seconds)

    def __call__(self) -> None:
        self._call(self.side)


Request = Tuple[str, int, Optional[int]]


class SessionTimer:
    """The parent's timer: asks the bench for blocks, times each request, checks it.

    ``run_blocks([(side, number, recheck_index), ...]) -> {"blocks": [...], "wall": s}``
    is one request to the bench (over the channel, or a direct call). The
    measurement loop hands it whole batches of rounds (``sample_batch``), so a worker
    in another process costs one round trip per batch, not per block. With
    ``envelope`` the parent's own time of each request is held against the worker's
    account of it (:func:`flagged`, :func:`envelope_findings`)."""

    def __init__(self, run_blocks: Callable[[List[Request]], Mapping[str, Any]], d: DefenceSettings,
                 *, envelope: bool, clock: Callable[[], float] = _CLOCK,
                 policy: Optional[RecheckPolicy] = None) -> None:
        self._run, self._d, self._envelope, self._clock = run_blocks, d, envelope, clock
        self.policy = policy or RecheckPolicy(d)
        self.accounts: List[BlockAccount] = []
        self.findings: List[Finding] = []
        self.method = "defended"

    def sample(self, fn: Any, number: int) -> float:
        return self.sample_batch([(fn, number)], judged=False)[0]

    def sample_batch(self, plan: Sequence[Tuple[Any, int]], judged: bool = True) -> List[float]:
        reqs: List[Request] = [(fn.side, number, self.policy.pick(fn.side, number)) for fn, number in plan]
        t0 = self._clock()
        rep = self._run(reqs)
        envelope = self._clock() - t0
        out = []
        for (side, number, k), r in zip(reqs, rep["blocks"]):
            self.method = r.get("method", self.method)
            self.policy.spent(r["timed"], r["recheck"], k is not None)
            self.findings.extend(finding_from(f) for f in r.get("findings", ()))
            out.append(float(r["seconds"]))
        blocks = rep["blocks"]
        # Single blocks (the block-size calibration) are too short for the parent's
        # clock to judge against its own wake-up latency; batches are judged.
        if self._envelope and judged:
            self.accounts.append(BlockAccount(
                "batch", sum(n for _, n, _ in reqs), envelope, rep["wall"], sum(b["timed"] for b in blocks),
                sum(b["untimed"] for b in blocks), sum(b["recheck"] for b in blocks),
                rep["wall"] - sum(b["wall"] for b in blocks) + sum(b["checks"] for b in blocks)))
        return out


def finding_from(d: Mapping[str, Any]) -> Finding:
    keys = ("check", "ok", "message", "case", "severity", "figure", "threshold")
    return Finding(**{k: d[k] for k in keys if k in d})


# --- plausibility -------------------------------------------------------------------


def plausibility(manifest: Any, estimates: Mapping[str, Any], gpu_name: Optional[str],
                 d: DefenceSettings) -> List[Finding]:
    """Speedups nobody should believe without a second look (``WARNING`` findings).

    Two rules, each named in its message: the point estimate above the plausible
    factor (the manifest's ``expect.max_plausible_speedup``, else ``d``'s), and, where
    the case declares ``flops``/``bytes``, a candidate median time that would put it
    above the device's catalog peak (compute, DRAM bandwidth or the roofline of the
    two; ``roofline.side_rates``). The factor can be acknowledged in the manifest;
    the roofline cannot (fix the declared work or the catalog instead)."""
    out: List[Finding] = []
    limit = getattr(manifest.expect, "max_plausible_speedup", None)
    source = "expect.max_plausible_speedup" if limit else "defences.max_plausible_speedup"
    limit = limit or d.max_plausible_speedup
    for case in manifest.cases:
        est = estimates.get(case.name)
        if est is None:
            continue
        if est.speedup > limit:
            out.append(Finding(PLAUSIBILITY, False,
                               f"measured {est.speedup:.3g}x is above the plausible factor {limit:g}x ({source}): "
                               "look for a replayed result, skipped work or an unfair baseline before believing it; "
                               "if the factor is expected, say so with expect.max_plausible_speedup",
                               case.name, severity=WARNING, figure=est.speedup, threshold=limit))
        flops, nbytes = getattr(case, "flops", None), getattr(case, "bytes", None)
        if flops is None and nbytes is None:
            continue
        try:
            from . import roofline

            work = roofline.Work(flops, nbytes, getattr(case, "precision", None))
            peaks = roofline.peaks_for(gpu_name, work.precision)
            rates = roofline.side_rates(work, est.candidate.median, peaks)
        except Exception:  # a broken catalog never fails a run; the factor rule still applies
            continue
        over = {k: rates[k] for k in ("compute_fraction", "memory_fraction", "roofline_fraction")
                if rates.get(k) is not None and rates[k] > 1}
        if over:
            what = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in over.items())
            out.append(Finding(PLAUSIBILITY, False,
                               f"the candidate's {est.candidate.median:.3g} s per call would beat the device's peak "
                               f"for the declared work ({what}): the declared flops/bytes or the timing is wrong",
                               case.name, severity=WARNING, figure=max(over.values()), threshold=1.0))
    return out


def apply_plausibility(v: Any, found: Sequence[Finding]) -> Any:
    """``supported`` becomes ``inconclusive`` when any plausibility check fired."""
    from .verdict import INCONCLUSIVE, SUPPORTED, Verdict

    fired = [f for f in found if f.check == PLAUSIBILITY and not f.ok]
    if v.verdict != SUPPORTED or not fired:
        return v
    return Verdict(INCONCLUSIVE, tuple(f.reason() for f in fired) + tuple(v.reasons), v.cases)


# --- the bench: the code under test and the defended loop --------------------------


def resolve_sides(lm: Any) -> Tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], Dict[int, Any]]:
    """Baseline, candidate, input factory and custom oracles of a manifest (imports them)."""
    from .refs import resolve

    m = lm.manifest
    if getattr(m, "kernelbench", None) is not None:  # a KernelBench-style pair brings all three
        from . import kernelbench

        baseline, candidate, factory = kernelbench.sides(lm)
    else:
        baseline = resolve(m.baseline, lm.folder, manifest_path=lm.path, key="baseline")
        candidate = resolve(m.candidate, lm.folder, manifest_path=lm.path, key="candidate")
        factory = resolve(m.inputs.factory, lm.folder, manifest_path=lm.path, key="inputs.factory")
    custom = {i: resolve(o.function, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].function")
              for i, o in enumerate(m.oracles) if o.function}
    return baseline, candidate, factory, custom


def _harness_modules() -> None:
    """Import every expkit module the bench may use, so the snapshot covers them."""
    for name in ("preflight", "measure", "oracles", "timing", "cuda_timer", "stats", "expectations", "trace",
                 "runner", "channel", "environment", "refs", "end_to_end"):
        try:
            importlib.import_module(f"expkit.{name}")
        except Exception:
            pass


class _CaseBench:
    """One case's timing state inside the bench: input sets, timer, recheck slot."""

    def __init__(self, bench: "Bench", case: Any, run_seed: int, salt_seed: int) -> None:
        from . import preflight

        self.bench, self.name = bench, case.name
        lm, device, s = bench.lm, bench.device, bench.settings
        sets = [preflight.build_inputs(bench.factory, case.params,
                                       preflight.derive_seed(run_seed, case.name, "time", k), device, lm)
                for k in range(s.measure.input_sets)]
        rebuild = lambda seed: preflight.build_inputs(bench.factory, case.params, seed, device, lm)  # noqa: E731
        self.fresh = FreshInputs(sets, s.defences.fresh, random.Random(salt_seed), rebuild)
        self.fns = {"baseline": bench.baseline, "candidate": bench.candidate}
        self.side = "baseline"
        self.args: Tuple[Any, ...] = ()
        self.keep_at: Optional[int] = None
        self.calls = 0
        self.kept: Optional[Tuple[Any, Any, Tuple[Any, ...]]] = None  # (output, pristine, args)
        self._pristine: Optional[Tuple[Any, ...]] = None
        self._threads = 0
        self.leaked_threads = 0
        self.reported: set = set()
        if device == "cuda":
            from .cuda_timer import CudaTimer, TorchCudaDevice

            if s.measure.cold:
                self.timer: Any = CudaTimer(cold=True, device=HookedDevice(TorchCudaDevice(), self._before))
                self.per_call_hook = True
            else:
                # A warm block has no gap between calls: inputs are refreshed once per block.
                self.timer = CudaTimer(cold=False)
                self.per_call_hook = False
        else:
            self.timer = PerCallTimer(self._before, self._after)
            self.per_call_hook = True
        self._call = self._make_call()

    def _before(self) -> None:
        # On the GPU there is no hook after a call: a thread the previous call left
        # running shows up here, before the next one.
        n = threading.active_count()
        if n > self._threads:
            self.leaked_threads += 1
        self._threads = n
        self.args, self._pristine = self.fresh.take(self.calls == self.keep_at)

    def _after(self) -> None:
        if threading.active_count() > self._threads:
            self.leaked_threads += 1

    def _make_call(self) -> Callable[[], None]:
        def call() -> None:
            out = self.fns[self.side](*self.args)
            if self.calls == self.keep_at:
                self.kept = (out, self._pristine, self.args)
            self.calls += 1
        return call

    def begin(self, side: str, keep_at: Optional[int]) -> None:
        self.side, self.keep_at, self.calls, self.kept = side, keep_at, 0, None
        self._threads = threading.active_count()
        if not self.per_call_hook:
            self.args, self._pristine = self.fresh.take(keep_at is not None)

    def warm_up(self, side: str, seconds: float) -> None:
        self.begin(side, None)
        end = _CLOCK() + seconds
        while True:
            self._before()
            self._call()
            self._after()
            if _CLOCK() >= end:
                break

    def recheck(self) -> List[Finding]:
        """The kept call's output against the baseline on its pristine inputs."""
        from . import oracles, preflight

        if self.kept is None:
            return []
        out, pristine, args = self.kept
        self.kept = None
        b = self.bench
        if b.device == "cuda":
            import torch

            torch.cuda.synchronize()
        found: List[Finding] = []
        expected = preflight._call(b.baseline, preflight.clone_inputs(pristine))
        owned = [t for s in self.fresh.sets for t in s] + list(pristine) + [expected]
        defect = preflight.output_defects(out, args, expected, harness=owned)
        if defect:
            found.append(Finding(RECHECK, False, f"a timed call's output: {defect}", self.name))
            return found
        for idx, spec in b.per_call_oracles:
            f = oracles.check_outputs(spec, expected, out, case=self.name, inputs=pristine,
                                      reference64=lambda: b.baseline(*preflight._upcast(pristine)),
                                      custom=b.custom.get(idx))
            if not f.ok:
                found.append(Finding(RECHECK, False,
                                     f"a timed call's output fails {f.check} after timing (it passed the preflight: "
                                     f"a replay, a skipped computation or drift?): {f.message}", self.name,
                                     figure=f.figure, threshold=f.threshold))
        return found


def set_cpu_threads(threads: Optional[int]) -> None:
    """Pin torch's intra-op threads for a run (``measure.cpu_threads``; null leaves torch's own).

    On a shared machine with more runnable threads than cores, torch's OpenMP workers spin
    and wait on each other, and a multi-threaded op can slow by an order of magnitude while
    a single-threaded one barely moves (seen on this project's 2-core CI kind under load:
    a row-wise GEMV 16 ms with 2 threads, 0.16 ms with 1). A ratio of two such ops then
    measures the machine's load, not the code; one thread per run keeps it about the code.
    """
    if threads is not None:
        import torch

        torch.set_num_threads(int(threads))


class Bench:
    """The code under test and the defences around it, on the side that runs it.

    Built in the worker process (``channel.py``) or in-process. Construction takes
    the snapshots, then imports the manifest's code (the first point where a candidate
    can act), then compares. Every method returns plain data (findings, numbers) so
    that the same answers can cross the channel as JSON.
    """

    def __init__(self, lm: Any, settings: Settings, device: str) -> None:
        from .manifest import Oracle  # noqa: F401  (imported before the candidate)

        _harness_modules()
        self.lm, self.settings, self.device = lm, settings, device
        self.defended = settings.defences.enabled
        set_cpu_threads(settings.measure.cpu_threads)  # before the snapshot: the harness's own choice
        self.state0 = snapshot_state()
        self.funcs0 = FunctionSnapshot.take()
        self._told: set = set()
        self.activity0 = activity()
        self.baseline, self.candidate, self.factory, self.custom = resolve_sides(lm)
        self.per_call_oracles = [(i, o) for i, o in enumerate(lm.manifest.oracles)
                                 if o.kind in ("allclose", "relative_error", "exact", "custom")]
        self.session_findings: List[Finding] = []
        if self.defended:
            self.session_findings += self.tamper_findings("once the candidate's code was imported", None)
        self.case: Optional[_CaseBench] = None

    # -- checks shared by every phase ------------------------------------------------
    def tamper_findings(self, when: str, case: Optional[str], *, hot_only: bool = False) -> List[Finding]:
        """Changes since the snapshot that no earlier call has reported (each is
        reported once, at the first checkpoint that sees it)."""
        out = []
        replaced = [r for r in self.funcs0.changed(hot_only=hot_only) if r not in self._told]
        self._told.update(replaced)
        if replaced:
            out.append(Finding(TAMPER, False, f"functions the harness relies on were changed {when}: "
                               + ", ".join(replaced[:6]) + (f" and {len(replaced) - 6} more" if len(replaced) > 6
                                                            else ""), case))
        changes = [c for c in state_changes(self.state0, snapshot_state()) if c not in self._told]
        self._told.update(changes)
        if changes:
            out.append(Finding(GLOBAL_STATE, False, f"settings that change numerics or speed were changed {when}: "
                               + "; ".join(changes[:6]), case))
        return out

    # -- phases ----------------------------------------------------------------------
    def sources(self) -> Dict[str, str]:
        from .environment import source_hashes

        return source_hashes([self.baseline, self.candidate, self.factory])

    def preflight(self, run_seed: int) -> Any:
        from . import preflight
        from .runner import _identity_check

        witness: Any = self.candidate
        if self.defended:
            witness = ExceptionWitness(self.candidate, candidate_files(self.candidate, self.lm.folder))
        check = _identity_check(self.lm, self.baseline, witness, self.device)

        def identity(run: Any, inputs: Sequence[Any]) -> Any:
            found, summary = check(run, inputs)
            swallowed = getattr(witness, "swallowed", ())
            if swallowed and any(not f.ok and f.check in ("identity", "forbidden") for f in found):
                name, msg, fname, line = swallowed[0]
                found = list(found) + [Finding(
                    FALLBACK, False, f"the candidate caught {name}({msg!r}) raised at {fname}:{line} and went on "
                    "without the intended kernel: a silent fallback", run.name)]
            return found, summary

        pre = preflight.run_preflight(self.lm, self.baseline, self.candidate, self.factory, run_seed=run_seed,
                                      settings=self.settings.oracle, device=self.device,
                                      custom_oracles=self.custom, identity=identity, defended=self.defended)
        if self.defended:
            extra = self.tamper_findings("during the preflight", None)
            if extra:
                pre = preflight.PreflightResult(pre.findings + tuple(extra), pre.cases_checked, pre.identity,
                                                pre.stdout)
        return pre

    def model_oracles(self) -> List[Finding]:
        from .runner import _model_oracles

        return list(_model_oracles(self.lm, self.baseline, self.candidate, self.device))

    def end_to_end(self, run_seed: int) -> Dict[str, Any]:
        """The manifest's workload, both sides, as plain data (``end_to_end.collect``), timed
        on the harness's own clock; the defences' tamper check runs after it."""
        from . import end_to_end

        got = end_to_end.collect(self.lm, self.baseline, self.candidate, device=self.device,
                                 settings=self.settings, run_seed=run_seed, clock=_CLOCK)
        if self.defended:
            got["findings"] = list(got["findings"]) + [
                asdict(f) for f in self.tamper_findings("during the end-to-end workload", None)]
        return got

    def prepare(self, case_name: str, run_seed: int, salt_seed: int) -> None:
        case = next(c for c in self.lm.manifest.cases if c.name == case_name)
        self.case = _CaseBench(self, case, run_seed, salt_seed)

    def warm_up(self, side: str, seconds: float) -> None:
        assert self.case is not None
        self.case.warm_up(side, seconds)

    def call(self, side: str) -> None:
        assert self.case is not None
        self.case.begin(side, None)
        self.case._before()
        self.case._call()

    def block(self, side: str, number: int, recheck: Optional[int] = None) -> Dict[str, Any]:
        """Time ``number`` calls of ``side`` and check them; plain data for the parent.

        The reply accounts for the worker's wall time of the block in parts, each on
        the harness's clock: ``timed`` (the calls), ``untimed`` (fresh inputs and
        per-call checks between the calls), ``checks`` (before and after the calls)
        and ``recheck``. The parent holds their sum and ``wall`` against its own clock."""
        cb = self.case
        assert cb is not None
        w0 = _CLOCK()
        before = Activity({t.ident or 0: t.name for t in threading.enumerate()}, frozenset())
        cb.begin(side, recheck)
        s0 = _CLOCK()
        per_call = cb.timer.sample(cb._call, number)
        s1 = _CLOCK()
        timed = per_call * number
        untimed = getattr(cb.timer, "last_untimed", None)
        if untimed is None:  # the GPU timer: host and device overlap, so the rest of the span is untimed
            untimed = max(0.0, (s1 - s0) - timed)
        found: List[Finding] = []
        grown = new_activity(before, Activity({t.ident or 0: t.name for t in threading.enumerate()}, frozenset()))
        # Calls that returned with more threads alive than they started with, beyond
        # the workers a lazily started pool keeps parked: threads that did the work
        # after the call and were gone by the end of the block.
        leaked = cb.leaked_threads - parked_new_threads(before)
        cb.leaked_threads = 0
        if grown or leaked > 0:
            found.append(Finding(THREADS, False, f"{side}: " + (grown or f"{leaked} call(s) left a new thread "
                                                                "running when they returned"), cb.name))
        c1 = _CLOCK()
        found += cb.recheck() if recheck is not None else []
        r1 = _CLOCK()
        fresh = [f for f in found if (f.check, f.message.split(":")[0]) not in cb.reported]
        cb.reported.update((f.check, f.message.split(":")[0]) for f in found)
        return {"seconds": per_call, "number": number, "timed": timed, "untimed": untimed, "recheck": r1 - c1,
                "checks": (s0 - w0) + (c1 - s1), "wall": r1 - w0, "method": cb.timer.method,
                "findings": [asdict(f) for f in fresh]}

    def blocks(self, requests: Sequence[Request]) -> Dict[str, Any]:
        """Several blocks in one request, in the parent's order. Child processes are
        counted around the whole request (reading ``/proc`` costs more than a thread
        count, so once a batch, not once a block); the time that takes is part of the
        last block's checks."""
        w0 = _CLOCK()
        children = child_pids()
        out = [self.block(side, int(n), k) for side, n, k in requests]
        c0 = _CLOCK()
        new = sorted(child_pids() - children)
        if new and out and self.case is not None:
            f = Finding(THREADS, False, f"{len(new)} new child process(es) still running (pid "
                        f"{', '.join(map(str, new[:3]))}) after timed calls returned: work that goes on after a call "
                        "escapes its timer", self.case.name)
            out[-1]["findings"].append(asdict(f))
        # The clocks, the oracles' functions and the process-wide settings, after each
        # batch of timed blocks (a check per block would cost more than the recheck).
        if out and self.case is not None:
            sides = sorted({side for side, _, _ in requests})
            out[-1]["findings"].extend(asdict(f) for f in self.tamper_findings(
                f"while {' and '.join(sides)} were timed", self.case.name, hot_only=True))
        if out:
            out[-1]["checks"] += _CLOCK() - c0
        return {"blocks": out, "wall": _CLOCK() - w0}

    def finish_case(self) -> List[Finding]:
        cb, self.case = self.case, None
        name = cb.name if cb is not None else None
        out = self.tamper_findings("while the case was measured", name)
        if cb is not None and not cb.fresh.salted:
            out.append(Finding("fresh-inputs", False, "no floating-point input with two or more elements to salt: "
                               "timed calls repeat their inputs (use defences.fresh=regenerate)", name,
                               severity=WARNING))
        return out


# --- sessions: where the bench runs ------------------------------------------------


class LocalSession:
    """The bench in this process: the undefended harness (``defences.enabled=false``)
    or the defences without a worker (``defences.isolate=false``)."""

    isolated = False

    def __init__(self, lm: Any, settings: Settings, device: str) -> None:
        self.lm, self.settings, self.device = lm, settings, device
        self.bench = Bench(lm, settings, device)
        self.evidence: Dict[str, Any] = {"isolated": False}

    def sources(self) -> Dict[str, str]:
        return self.bench.sources()

    def findings(self) -> List[Finding]:
        return list(self.bench.session_findings)

    def preflight(self, run_seed: int) -> Any:
        return self.bench.preflight(run_seed)

    def model_oracles(self) -> List[Finding]:
        return self.bench.model_oracles()

    def end_to_end(self, run_seed: int) -> Dict[str, Any]:
        return self.bench.end_to_end(run_seed)

    def measure_case(self, case: Any, run_seed: int, *, rng: random.Random,
                     progress: Any = None) -> Tuple[Any, List[Finding]]:
        from . import measure, preflight
        from .runner import _rotating, _timer

        b, s = self.bench, self.settings
        if not b.defended:
            sets = [preflight.build_inputs(b.factory, case.params,
                                           preflight.derive_seed(run_seed, case.name, "time", k), self.device, self.lm)
                    for k in range(s.measure.input_sets)]
            cs = measure.measure_case(case.name, _rotating(b.baseline, sets), _rotating(b.candidate, sets),
                                      _timer(self.device, s), s.measure, rng=rng, progress=progress)
            return cs, []
        b.prepare(case.name, run_seed, secrets.randbits(62))
        timer = SessionTimer(b.blocks, s.defences, envelope=False)
        cs = measure.measure_case(case.name, SideFn("baseline", b.warm_up, b.call),
                                  SideFn("candidate", b.warm_up, b.call), timer, s.measure, rng=rng,
                                  progress=progress)
        return cs, timer.findings + b.finish_case()

    def close(self, out_dir: Optional[Path] = None) -> List[Finding]:
        return []


def open_session(lm: Any, settings: Settings, device: str) -> Any:
    """The bench for this run: a worker process when the defences isolate, else in-process."""
    d = settings.defences
    if d.fresh not in FRESH_MODES:
        from .errors import ConfigError

        raise ConfigError(f"defences.fresh: expected one of {', '.join(FRESH_MODES)}, got {d.fresh!r}")
    if d.enabled and d.isolate:
        from .channel import WorkerSession

        return WorkerSession(lm, settings, device)
    return LocalSession(lm, settings, device)
