"""Preflight: seconds of checks before minutes of measurement.

For every case (and the awkward sizes added for the manifest's free dimensions):

1. **Correctness trials.** Fresh inputs per trial from the per-run secret seed; the
   baseline runs on pristine clones, the candidate on the originals with freshly
   allocated memory filled with NaN (torch's deterministic fill of uninitialised
   memory), so an output element the candidate never wrote cannot pass. The inputs
   are hashed before and after the candidate runs: a candidate that writes to its
   inputs is invalid. Outputs must be plain tensors that share no storage with the
   inputs or with the baseline's outputs.
2. **Oracle calibration.** On the first trial, outputs that do no work (zeros, a
   constant, an input passed through) are put through each oracle; one that passes
   any of them is vacuous and cannot support a claim.
3. **Identity.** One call of each side under the profiler; the candidate's trace is
   held against the manifest's ``expect:`` (see ``expectations.py``).

With the defences on (``defended``, the default; see ``defences.py``):

* the trials alternate the order of the two sides: odd trials run the candidate
  *first*, so a candidate that hands back the baseline's freshly freed result (the
  caching allocator's gift) or finds it in memory has nothing to find;
* outputs may share no storage with any tensor the harness holds (this trial's and
  the previous trial's inputs, copies and expected outputs, kept alive on purpose);
* threads and child processes still running after a candidate call, and process-wide
  settings it changed (``defences.snapshot_state``), are failures;
* an oracle failure made only of NaN where the baseline is finite, NaN that goes
  away when the candidate runs again without the poison, is reported as
  ``uninitialised``: those elements came from the NaN-filled allocations;
* identity failures come with ``fallback`` when the candidate swallowed an exception
  on the way (``defences.ExceptionWitness``, installed by the bench).

A failure in any of these makes the run ``invalid`` and measurement is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from . import defences, oracles
from .errors import ManifestError
from .findings import Finding
from .manifest import Case, LoadedManifest, Oracle
from .settings import OracleSettings

Fn = Callable[..., Any]


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


def build_inputs(factory: Fn, params: Mapping[str, Any], seed: int, device: str, lm: LoadedManifest) -> Tuple[Any, ...]:
    """Call the manifest's input factory; its failure is the user's to fix (exit 2)."""
    try:
        got = factory(dict(params), make_generator(seed, device), device)
    except Exception as e:
        raise ManifestError(lm.path, "inputs.factory", f"{lm.manifest.inputs.factory} raised "
                            f"{type(e).__name__}: {e} for params {dict(params)}",
                            "make the factory accept (params: dict, generator, device) and return a tuple") from None
    return tuple(got) if isinstance(got, (tuple, list)) else (got,)


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


def tensor_digest(values: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for v in values:
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            h.update(str((tuple(t.shape), t.dtype)).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


def clone_inputs(values: Sequence[Any]) -> Tuple[Any, ...]:
    return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in values)


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Fill newly allocated tensors with NaN (integers with their max) while active."""
    import torch.utils.deterministic as det

    was_det = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        import warnings

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


def _call(fn: Fn, args: Sequence[Any]) -> Any:
    out = fn(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def _short_error(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def run_preflight(
    lm: LoadedManifest,
    baseline: Fn,
    candidate: Fn,
    factory: Fn,
    *,
    run_seed: int,
    settings: OracleSettings,
    device: str,
    custom_oracles: Mapping[int, Fn] | None = None,
    identity: Optional[Callable[[CaseRun, Sequence[Any]], Tuple[Sequence[Finding], Optional[IdentitySummary]]]] = None,
    defended: bool = True,
) -> PreflightResult:
    """Run every correctness and identity check; see the module docstring.

    ``defended=False`` leaves out the defences this module added for
    ``defences.enabled=false`` (the undefended harness, for measuring their cost)."""
    m = lm.manifest
    findings: List[Finding] = []
    identities: List[IdentitySummary] = []
    runs = expand_cases(m.cases, m.inputs.free, settings.edge_cases)
    per_call = [(i, o) for i, o in enumerate(m.oracles) if o.kind in ("allclose", "relative_error", "exact", "custom")]
    # The previous trial's tensors stay alive on purpose: a candidate that hands one
    # back is caught by the storage check, and its memory cannot be recycled into
    # an honest candidate's output (which would make the check a false alarm).
    held: Tuple[Any, ...] = ()
    for run in runs:
        trials = settings.trials if run.declared else 1
        case_failed = False
        for trial in range(trials):
            seed = derive_seed(run_seed, run.name, trial)
            inputs = build_inputs(factory, run.params, seed, device, lm)
            pristine = clone_inputs(inputs)
            candidate_first = defended and trial % 2 == 1
            order = ", candidate ran first" if candidate_first else ""
            expected: Any = None
            if not candidate_first:
                expected, err = _baseline(baseline, pristine)
                if err:
                    findings.append(Finding("baseline", False, f"baseline raised {err}", run.name))
                    case_failed = True
                    break
            digest_before = tensor_digest(inputs)
            state_before = defences.snapshot_state() if defended else None
            active_before = defences.activity() if defended else None
            try:
                with poisoned_allocations():
                    actual = _call(candidate, inputs)
            except Exception as e:
                findings.append(Finding("crash", False, f"candidate raised {_short_error(e)} "
                                        f"on params {dict(run.params)}", run.name))
                case_failed = True
                break
            if defended:
                grown = defences.new_activity(active_before, defences.activity())
                if grown:
                    findings.append(Finding(defences.THREADS, False, grown, run.name))
                    case_failed = True
                changed = defences.state_changes(state_before, defences.snapshot_state())
                if changed:
                    findings.append(Finding(defences.GLOBAL_STATE, False, "the candidate changed settings that "
                                            "change numerics or speed: " + "; ".join(changed[:6]), run.name))
                    case_failed = True
            if candidate_first:
                expected, err = _baseline(baseline, pristine)
                if err:
                    findings.append(Finding("baseline", False, f"baseline raised {err}", run.name))
                    case_failed = True
                    break
            if tensor_digest(inputs) != digest_before:
                findings.append(Finding("inputs", False, "candidate modified its inputs in place", run.name))
                case_failed = True
            defect = output_defects(actual, inputs, expected, harness=held + pristine)
            if defect:
                findings.append(Finding("output", False, defect, run.name))
                case_failed = True
                break
            for idx, spec in per_call:
                custom = (custom_oracles or {}).get(idx)
                f = oracles.check_outputs(
                    spec, expected, actual, case=run.name, inputs=pristine,
                    reference64=lambda: baseline(*_upcast(pristine)),
                    custom=custom,
                )
                if not f.ok:
                    where = f"(trial {trial}{order}, params {dict(run.params)})"
                    if defended and _poison_only(spec, expected, actual, pristine, custom) and \
                            _memory_dependent(candidate, actual, expected, pristine):
                        f = Finding(defences.UNINITIALISED, False,
                                    "NaN where the baseline is finite, within the oracle everywhere else, and "
                                    "not NaN when run again without poison: new allocations are NaN-filled while "
                                    "the candidate runs, so these elements were never written or were computed "
                                    f"from uninitialised memory {where}; {f.message}", run.name, figure=f.figure,
                                    threshold=f.threshold)
                    else:
                        f = Finding(f.check, False, f"{f.message} {where}", run.name, figure=f.figure,
                                    threshold=f.threshold)
                    findings.append(f)
                    case_failed = True
                elif trial == 0 and run.declared:
                    findings.append(f)
                if trial == 0 and run.declared and settings.calibrate and f.ok:
                    findings.extend(_calibrate(spec, expected, pristine, run.name, lm, custom_oracles, idx))
            held = tuple(t for t in inputs if isinstance(t, torch.Tensor)) + pristine + tuple(oracles.flatten(expected))
            if case_failed:
                break
        if identity is not None and not case_failed:
            inputs = build_inputs(factory, run.params, derive_seed(run_seed, run.name, "identity"), device, lm)
            id_findings, summary = identity(run, inputs)
            findings.extend(id_findings)
            if summary is not None:
                identities.append(summary)
    return PreflightResult(tuple(findings), tuple(r.name for r in runs), tuple(identities))


def _baseline(baseline: Fn, pristine: Sequence[Any]) -> Tuple[Any, Optional[str]]:
    """The baseline's output on a copy of the pristine inputs, or the error it raised."""
    try:
        return _call(baseline, clone_inputs(pristine)), None
    except Exception as e:
        return None, _short_error(e)


def _memory_dependent(candidate: Fn, actual: Any, expected: Any, pristine: Sequence[Any]) -> bool:
    """Whether NaN the candidate returned under poisoned allocations goes away without it.

    The candidate runs again on the same inputs with new memory *not* poisoned, after
    the allocator has been handed back zero-filled blocks of the sizes in play (so that
    the poison left in freed memory is less likely to be what it reads). If some of
    the elements that were NaN are finite now, they came from memory nobody wrote: a
    NaN the candidate computes is NaN both times. A reader of uninitialised memory that
    happens to get poison-filled blocks back again is not recognised (its failure
    stays an oracle failure, which is still invalid)."""
    sizes = {(tuple(t.shape), t.dtype, t.device) for t in list(oracles.flatten(expected))
             + [v for v in pristine if isinstance(v, torch.Tensor)]}
    scrub = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in sizes for _ in range(8)]
    del scrub
    try:
        again = oracles.flatten(_call(candidate, clone_inputs(pristine)))
        before, exp = oracles.flatten(actual), oracles.flatten(expected)
    except Exception:
        return False
    for a, b, e in zip(before, again, exp):
        if a.shape != b.shape or not (a.is_floating_point() or a.is_complex()):
            continue
        poisoned = torch.isnan(a) & ~torch.isnan(e)
        if bool((poisoned & ~torch.isnan(b)).any()):
            return True
    return False


def _poison_only(spec: Oracle, expected: Any, actual: Any, inputs: Sequence[Any], custom: Optional[Fn]) -> bool:
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


def _upcast(values: Sequence[Any]) -> Tuple[Any, ...]:
    return tuple(v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values)


def _calibrate(spec: Oracle, expected: Any, inputs: Sequence[Any], case: str, lm: LoadedManifest,
               custom_oracles: Mapping[int, Fn] | None, idx: int) -> List[Finding]:
    passed = []
    for label, null in oracles.null_candidates(expected, inputs).items():
        f = oracles.check_outputs(spec, expected, null, case=case, inputs=inputs,
                                  custom=(custom_oracles or {}).get(idx))
        if f.ok:
            passed.append(label)
    if passed:
        return [Finding(f"calibration:{spec.kind}", False,
                        f"oracle is vacuous: a candidate returning {' / '.join(passed)} passes it "
                        f"(outputs too small for its tolerance?); tighten the tolerance or change the inputs", case)]
    return []
