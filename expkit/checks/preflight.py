"""Preflight: seconds of checks before minutes of measurement -- the parts that run inside one side.

The protocol between the two sides, each in its own process, is
:class:`expkit.bench.sides.pair.Pair`; the judging in the baseline's process is
:mod:`expkit.bench.sides.judge`. What they share is here:

* the cases the preflight runs (:func:`expand_cases`): the declared ones and awkward
  sizes for the manifest's free dimensions (:func:`edge_sizes`);
* inputs built from the per-run secret seed (:func:`derive_seed`,
  :func:`build_inputs`, where they are used: on the device for a GPU run);
* poisoned allocations while the candidate runs (:func:`poisoned_allocations`: new
  memory is NaN-filled, so an output element the candidate never wrote cannot pass),
  and the ``uninitialised`` diagnosis of a failure made only of that NaN
  (:func:`poison_only`);
* the storage checks on outputs (:func:`output_defects`: plain tensors only, sharing no
  storage with the inputs or with anything the harness holds).

Oracle calibration (outputs that do no work put through each oracle) and the identity
check (one profiled call per side held against ``expect:``) are run by the bench with
:mod:`.oracles` and :mod:`.expectations`. A failure in any of these makes the run
``invalid`` and measurement is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.utils.deterministic as det

from . import oracles
from .activity import wide_work_ended
from ..core.errors import ManifestError
from ..core.findings import Finding
from ..manifest.spec import Case, LoadedManifest, Oracle

Fn = Callable[..., Any]

#: The diagnosis of an oracle failure made of NaN from the poisoned allocations (see the module docstring).
UNINITIALISED = "uninitialised"


@dataclass(frozen=True)
class CaseRun:
    """A case as the preflight runs it: the declared case or an added edge case."""

    name: str
    params: Mapping[str, Any]
    declared: bool


@dataclass(frozen=True)
class IdentitySummary:
    case: str
    candidate_ops: Tuple[str, ...]
    baseline_ops: Tuple[str, ...]
    candidate_kernels: Tuple[Mapping[str, Any], ...] = ()
    baseline_kernels: Tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PreflightResult:
    findings: Tuple[Finding, ...]
    cases_checked: Tuple[str, ...]
    identity: Tuple[IdentitySummary, ...] = ()
    stdout: str = ""

    @property
    def invalid(self) -> bool:
        return any(f.invalidates for f in self.findings)


def derive_seed(run_seed: int, *parts: object) -> int:
    """A per-(case, trial) seed from the run's secret seed; replayable from the result."""
    h = hashlib.sha256(repr((run_seed,) + parts).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def make_generator(seed: int, device: str) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def build_inputs(factory: Fn, params: Mapping[str, Any], seed: int, device: str, lm: LoadedManifest,
                 threads: Optional[int] = None) -> Tuple[Any, ...]:
    """Call the manifest's input factory where the inputs are used; its failure is the user's to fix (exit 2).

    The factory runs with ``device`` as torch's default device (a factory, or a
    KernelBench ``get_inputs``, that calls ``torch.rand(...)`` without a device builds
    on the GPU directly: 6 GiB takes seconds on the host's CPU and milliseconds there)
    and with every host core torch has, or ``threads`` of them (the timed blocks'
    ``measure.cpu_threads`` is restored after). A tensor the factory still makes on the host is moved; the seconds
    that took are counted in :data:`MOVED`, which the memory plan's evidence reports."""
    before, wide = torch.get_num_threads(), threads or max(1, os.cpu_count() or 1)
    torch.set_num_threads(wide)
    try:
        with (torch.device(device) if device != "cpu" else contextlib.nullcontext()):
            got = factory(dict(params), make_generator(seed, device), device)
    except Exception as e:
        raise ManifestError(lm.path, "inputs.factory", f"{lm.manifest.inputs.factory} raised "
                            f"{type(e).__name__}: {e} for params {dict(params)}",
                            "make the factory accept (params: dict, generator, device) and return a tuple") from None
    finally:
        torch.set_num_threads(before)
        if wide > 1:  # on one thread no pool woke: nothing for a timed block to wait out
            wide_work_ended()
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    if device == "cpu":
        return got
    t0 = time.perf_counter()
    moved = tuple(v.to(device) if isinstance(v, torch.Tensor) and v.device.type != device else v for v in got)
    if any(a is not b for a, b in zip(moved, got)):
        MOVED["seconds"] += time.perf_counter() - t0
        MOVED["tensors"] += sum(1 for a, b in zip(moved, got) if a is not b)
    return moved


@contextlib.contextmanager
def harness_threads(wide: bool = True) -> Iterator[None]:
    """Every host core for the harness's own work (digests, oracles, calibration), then
    back to the timed blocks' ``measure.cpu_threads``. Never around a call of the code
    under test: its numerics may depend on its thread count. ``wide=False``: the work is
    too small to gain from more cores than the pool's spin after it costs the next timed
    block (:func:`~expkit.checks.activity.settle` waits it out); it runs on the timed
    blocks' threads and marks nothing."""
    if not wide:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        wide_work_ended()


#: Host tensors a factory made that :func:`build_inputs` moved to the device, and the time it took.
MOVED: dict = {"tensors": 0, "seconds": 0.0}


def edge_sizes(value: int) -> Tuple[int, ...]:
    """Awkward sizes for a free dimension declared at ``value``.

    1 (degenerate), 13 (a prime, divisible by nothing), 130 (divisible by 2 but not
    by 4), ``value + 1`` and one past the next power of two (4097 for 4096): together
    they miss every divisor a vectorised or tiled kernel likes (2, 4, 8, 16, 128).
    """
    p2 = 1 << max(0, math.ceil(math.log2(max(value, 1))))
    return tuple(sorted({1, 13, 130, value + 1, p2 + 1} - {value}))


def expand_cases(cases: Sequence[Case], free: Sequence[str], edge: bool) -> Tuple[CaseRun, ...]:
    runs = [CaseRun(c.name, dict(c.params), True) for c in cases]
    if edge and free:
        seen = {tuple(sorted(r.params.items())) for r in runs}
        base = cases[0]
        for dim in free:
            value = base.params.get(dim)
            if not isinstance(value, int):
                continue
            for size in edge_sizes(value):
                params = {**base.params, dim: size}
                key = tuple(sorted(params.items()))
                if key not in seen:
                    seen.add(key)
                    runs.append(CaseRun(f"{base.name}/{dim}={size}", params, False))
    return tuple(runs)


#: The check that names the value probe's findings (:func:`signed_probe`).
VALUE_PROBE = "value-probe"


def signed_probe(values: Sequence[Any]) -> Tuple[int, ...]:
    """The value probe: shift, in place, every floating input the factory drew all >= 0 so
    that it takes both signs (``x -> 2x - max(x)``: ``torch.rand``'s [0, 1) becomes [-1, 1)).

    An op checked only on non-negative inputs cannot tell ReLU from a copy, ``abs`` from
    nothing, or a clamp at zero from none; KernelBench's level-1 problems all draw their
    inputs with ``torch.rand``, so a solution that returns its input passes ReLU there
    (manifests/kernelbench-wrong/passthrough_relu.yaml). Returns the positions shifted
    (none when every floating input already has a negative value, or is constant). A
    storage is shifted at most once, through the first input on it, so an input passed
    twice (or as a view) is not shifted twice."""
    shifted: List[int] = []
    seen: set = set()
    with torch.no_grad():
        for i, v in enumerate(values):
            if not (isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 1):
                continue
            key = v.untyped_storage().data_ptr()
            lo, hi = torch.aminmax(v)
            if key in seen or not (bool(lo >= 0) and bool(hi > lo) and bool(torch.isfinite(hi))):
                continue
            seen.add(key)
            v.mul_(2).sub_(hi)
            shifted.append(i)
    return tuple(shifted)


def clone_inputs(values: Sequence[Any]) -> Tuple[Any, ...]:
    return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in values)


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Fill newly allocated tensors with NaN (integers with their max) while active."""

    was_det = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        det.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_det, warn_only=was_warn)


def _storages(values: Sequence[Any]) -> set:
    out = set()
    for v in values:
        if isinstance(v, torch.Tensor) and v.numel():
            out.add(v.untyped_storage().data_ptr())
    return out


def output_defects(actual: Any, inputs: Sequence[Any], expected: Any, *, harness: Sequence[Any] = ()) -> Optional[str]:
    """Why the candidate's outputs cannot be trusted as its own work, or None.

    ``harness``: further tensors the harness holds (copies, earlier expected outputs,
    input sets); an output that is one of them, or a view of one, is not the
    candidate's work whatever its values."""
    try:
        outs = oracles.flatten(actual)
    except TypeError as e:
        return str(e)
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            return f"output {i} is a {type(o).__name__}, not a plain torch.Tensor (subclasses can compute lazily)"
    mine = _storages(outs)
    if mine & _storages(inputs):
        return "an output shares storage with an input"
    if mine & _storages(oracles.flatten(expected)):
        return "an output shares storage with the baseline's output"
    if mine & _storages([t for t in harness if isinstance(t, torch.Tensor)]):
        return ("an output shares storage with a tensor the harness holds (an input set, a pristine copy or an "
                "earlier expected output): it is not the candidate's own work")
    return None


def call_synced(fn: Fn, args: Sequence[Any]) -> Any:
    """``fn(*args)``, with the device drained after it where this process uses CUDA.

    Asked of ``torch.cuda.is_initialized()``, not ``is_available()``: on a GPU host a CPU
    run's workers created a CUDA context here for nothing, and ``is_available()`` asks
    the driver every time (about 10 ms a call on an H200 host: a CPU manifest's rechecks
    there took 58 ms each against 6 ms on a 2-core CPU machine,
    evidence/README.md).
    Code that put work on the GPU has initialised CUDA, so its work is still drained."""
    out = fn(*args)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out


def short_error(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def poison_only(spec: Oracle, expected: Any, actual: Any, inputs: Sequence[Any], custom: Optional[Fn]) -> bool:
    """True if the outputs fail only by NaN where the baseline is finite.

    Those elements are put back to the baseline's values and the oracle asked again:
    if it passes, the NaN (the poison of fresh allocations) was the whole failure."""
    try:
        exp, act = oracles.flatten(expected), oracles.flatten(actual)
    except TypeError:
        return False
    if len(exp) != len(act):
        return False
    patched, poisoned = [], False
    for e, a in zip(exp, act):
        if e.shape == a.shape and e.dtype == a.dtype and (a.is_floating_point() or a.is_complex()):
            mask = torch.isnan(a) & ~torch.isnan(e)
            if bool(mask.any()):
                poisoned = True
                a = torch.where(mask, e, a)
        patched.append(a)
    if not poisoned:
        return False
    try:
        return oracles.check_outputs(spec, expected, tuple(patched), case="", inputs=inputs, custom=custom).ok
    except Exception:
        return False


def upcast(values: Sequence[Any]) -> Tuple[Any, ...]:
    """The floating tensors among ``values`` in float64, for an oracle's reference run."""
    return tuple(v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values)
