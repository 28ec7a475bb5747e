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

A failure in any of these makes the run ``invalid`` and measurement is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from . import oracles
from .errors import ManifestError
from .findings import WARNING, Finding
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


def output_defects(actual: Any, inputs: Sequence[Any], expected: Any) -> Optional[str]:
    """Why the candidate's outputs cannot be trusted as its own work, or None."""
    try:
        outs = oracles.flatten(actual)
    except TypeError as e:
        return str(e)
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            return f"output {i} is a {type(o).__name__}, not a plain torch.Tensor (subclasses can compute lazily)"
    if _storages(outs) & _storages(inputs):
        return "an output shares storage with an input"
    if _storages(outs) & _storages(oracles.flatten(expected)):
        return "an output shares storage with the baseline's output"
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
) -> PreflightResult:
    """Run every correctness and identity check; see the module docstring."""
    m = lm.manifest
    findings: List[Finding] = []
    identities: List[IdentitySummary] = []
    runs = expand_cases(m.cases, m.inputs.free, settings.edge_cases)
    per_call = [(i, o) for i, o in enumerate(m.oracles) if o.kind in ("allclose", "relative_error", "exact", "custom")]
    for run in runs:
        trials = settings.trials if run.declared else 1
        case_failed = False
        for trial in range(trials):
            seed = derive_seed(run_seed, run.name, trial)
            inputs = build_inputs(factory, run.params, seed, device, lm)
            pristine = clone_inputs(inputs)
            try:
                expected = _call(baseline, clone_inputs(inputs))
            except Exception as e:
                findings.append(Finding("baseline", False, f"baseline raised {_short_error(e)}", run.name))
                case_failed = True
                break
            digest_before = tensor_digest(inputs)
            try:
                with poisoned_allocations():
                    actual = _call(candidate, inputs)
            except Exception as e:
                findings.append(Finding("crash", False, f"candidate raised {_short_error(e)} "
                                        f"on params {dict(run.params)}", run.name))
                case_failed = True
                break
            if tensor_digest(inputs) != digest_before:
                findings.append(Finding("inputs", False, "candidate modified its inputs in place", run.name))
                case_failed = True
            defect = output_defects(actual, inputs, expected)
            if defect:
                findings.append(Finding("output", False, defect, run.name))
                case_failed = True
                break
            for idx, spec in per_call:
                f = oracles.check_outputs(
                    spec, expected, actual, case=run.name, inputs=pristine,
                    reference64=lambda: baseline(*_upcast(pristine)),
                    custom=(custom_oracles or {}).get(idx),
                )
                if not f.ok:
                    f = Finding(f.check, False, f"{f.message} (trial {trial}, params {dict(run.params)})",
                                run.name, figure=f.figure, threshold=f.threshold)
                    findings.append(f)
                    case_failed = True
                elif trial == 0 and run.declared:
                    findings.append(f)
                if trial == 0 and run.declared and settings.calibrate and f.ok:
                    findings.extend(_calibrate(spec, expected, pristine, run.name, lm, custom_oracles, idx))
            if case_failed:
                break
        if identity is not None and not case_failed:
            inputs = build_inputs(factory, run.params, derive_seed(run_seed, run.name, "identity"), device, lm)
            id_findings, summary = identity(run, inputs)
            findings.extend(id_findings)
            if summary is not None:
                identities.append(summary)
    return PreflightResult(tuple(findings), tuple(r.name for r in runs), tuple(identities))


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
