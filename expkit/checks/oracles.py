"""Correctness oracles: is the candidate's output the baseline's, within what tolerance?

Each oracle compares the candidate's output with the baseline's on the same inputs
and returns a :class:`~expkit.core.findings.Finding` carrying its measured error and its
threshold, so a failure says by how much it failed and not only that it did.

Kinds: ``rounding`` (the default: the candidate may round no worse than the baseline
does, against a float64 reference; the rule is in :mod:`.rounding`), ``allclose``
(elementwise, with ``torch.testing.assert_close``'s per-dtype tolerances unless the
manifest states them; fp8 and TF32 have none there, and claims in them must state
theirs), ``relative_error`` (norm-wise, against the float64 reference), ``exact``
(bitwise) and ``custom`` (the manifest's function).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Tuple

import torch

from ..core.findings import Finding
from ..manifest.spec import Oracle
from . import rounding
from .chunks import flat_chunks

# (rtol, atol) per dtype, as torch.testing.assert_close defaults them.
DEFAULT_TOLERANCE: Mapping[torch.dtype, Tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
# Relative error ||cand - ref|| / ||ref|| against a float64 reference, per output dtype.
DEFAULT_MAX_RELATIVE_ERROR: Mapping[torch.dtype, float] = {
    torch.float16: 1e-2,
    torch.bfloat16: 3e-2,
    torch.float32: 1e-5,
    torch.float64: 1e-12,
}


def flatten(out: Any) -> Tuple[torch.Tensor, ...]:
    """Outputs as a flat tuple of tensors (a tensor, or a tuple/list/dict of them)."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)):
        return tuple(t for o in out for t in flatten(o))
    if isinstance(out, dict):
        return tuple(t for k in sorted(out) for t in flatten(out[k]))
    raise TypeError(f"outputs must be tensors (or tuples/lists/dicts of tensors), got {type(out).__name__}")


def tolerance(spec: Oracle, dtype: torch.dtype) -> Tuple[float, float]:
    if spec.rtol is not None and spec.atol is not None:
        return spec.rtol, spec.atol
    if dtype not in DEFAULT_TOLERANCE:
        raise ValueError(f"no default tolerance for {dtype}; state rtol and atol in the manifest's oracle")
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    return (spec.rtol if spec.rtol is not None else rtol), (spec.atol if spec.atol is not None else atol)


def _allclose(spec: Oracle, expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor],
              first_failure: bool = False) -> Tuple[bool, float, float, str]:
    """Worst element's excess over ``atol + rtol*|expected|``; NaN never passes. Computed in
    float64 chunk by chunk (:func:`.chunks.chunk_for`), so its memory does not grow with the output."""
    worst_ratio, worst_err, detail = 0.0, 0.0, ""
    ok = True
    for i, (e, a) in enumerate(zip(expected, actual)):
        rtol, atol = tolerance(spec, e.dtype)
        ratio = max_err = 0.0
        n_bad = n_nan = 0
        first: Optional[int] = None
        for start, (ec, ac) in flat_chunks(e, a):
            e64, a64 = ec.to(torch.float64), ac.to(device=ec.device, dtype=torch.float64)
            err = (a64 - e64).abs()
            nan = torch.isnan(a64) & ~torch.isnan(e64)
            allowed = atol + rtol * e64.abs()
            bad = (err > allowed) | nan
            ratio = max(ratio, float(torch.nan_to_num((err / allowed).max(), nan=float("inf"))))
            max_err = max(max_err, float(torch.nan_to_num(err.max(), nan=float("inf"))))
            nb = int(bad.sum())
            if nb:
                n_bad += nb
                n_nan += int(nan.sum())
                if first is None:
                    first = start + int(bad.nonzero()[0, 0])
            del e64, a64, err, nan, allowed, bad
            if n_bad and first_failure:
                break
        if n_bad:
            ok = False
            where = [int(v) for v in torch.unravel_index(torch.tensor(first), tuple(e.shape))] if e.dim() else []
            detail = (f"output {i}: {n_bad} of {e.numel()} elements outside rtol={rtol:g}, atol={atol:g}"
                      f" (first at index {where}" + (f"; {n_nan} NaN" if n_nan else "") + ")")
        if ratio > worst_ratio:
            worst_ratio, worst_err = ratio, max_err
    return ok, worst_err, worst_ratio, detail


def within_tolerance(spec: Oracle, expected: Any, actual: Any) -> bool:
    """Whether every element of ``actual`` is within ``allclose``'s ``atol + rtol*|expected|``
    of ``expected``, at ``expected``'s dtype's tolerance, whatever ``actual``'s dtype and
    device (a float64 reference on the host, held against the baseline's own output)."""
    return _allclose(spec, flatten(expected), flatten(actual), first_failure=True)[0]


def _bitwise_equal(e: torch.Tensor, a: torch.Tensor) -> bool:
    """Bit-for-bit equality: NaN equals the same NaN, -0.0 differs from 0.0."""
    if e.numel() == 0:
        return True
    if e.is_floating_point() or e.is_complex():
        e, a = e.reshape(-1).contiguous().view(torch.uint8), a.reshape(-1).contiguous().view(torch.uint8)
    return torch.equal(e, a)


#: Oracles that every output bit for bit equal to the baseline's own passes, by their
#: definitions: ``exact``; ``allclose`` (a zero difference, NaN where the baseline has
#: NaN); ``rounding``, which allows at least the baseline's own error (``factor`` >= 1;
#: a baseline whose output holds NaN fails the rule in the first trial, which the
#: judge always checks in full).
PASSED_BY_THE_BASELINES_OWN_BITS = ("exact", "allclose", "rounding")


def same_bits(expected: Any, actual: Any) -> bool:
    """Whether every output is bit for bit the baseline's (same shapes, dtypes and bits),
    compared a chunk at a time (:func:`.chunks.flat_chunks`): no float64 and no
    reference. A recheck whose output is the baseline's own needs no reference for the
    oracles in :data:`PASSED_BY_THE_BASELINES_OWN_BITS`."""
    exp, act = flatten(expected), flatten(actual)
    if len(exp) != len(act):
        return False
    for e, a in zip(exp, act):
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
            return False
        if e.shape != a.shape or e.dtype != a.dtype or e.device != a.device:
            return False
        for _, (ec, ac) in flat_chunks(e, a):
            if not _bitwise_equal(ec.contiguous(), ac.contiguous()):
                return False
    return True


def check_outputs(
    spec: Oracle,
    expected: Any,
    actual: Any,
    *,
    case: str,
    reference64: Optional[Callable[[], Any]] = None,
    inputs: Any = None,
    custom: Optional[Callable[..., Any]] = None,
    first_failure: bool = False,
) -> Finding:
    """Apply one oracle to one pair of outputs.

    ``first_failure``: the caller needs only pass or fail (the calibration's do-nothing
    outputs): the ``rounding`` and ``allclose`` oracles may stop at the first chunk that
    fails, and their figures are then lower bounds."""
    check = f"oracle:{spec.kind}"
    exp, act = flatten(expected), flatten(actual)
    if len(exp) != len(act):
        return Finding(check, False, f"baseline returned {len(exp)} outputs, candidate {len(act)}", case)
    for i, (e, a) in enumerate(zip(exp, act)):
        if e.shape != a.shape or e.dtype != a.dtype:
            return Finding(check, False, f"output {i}: expected {tuple(e.shape)} {e.dtype}, "
                           f"got {tuple(a.shape)} {a.dtype}", case)
    if spec.kind == "rounding":
        return _rounding(spec, exp, act, case, reference64, inputs, custom, first_failure)
    if spec.kind == "allclose":
        ok, err, ratio, detail = _allclose(spec, exp, act, first_failure)
        msg = (f"max abs error {err:.3g}, {ratio:.3g}x the allowed bound" if ok
               else f"max abs error {err:.3g} ({ratio:.3g}x the allowed bound); {detail}")
        return Finding(check, ok, msg, case, figure=err, threshold=None)
    if spec.kind == "exact":
        for i, (e, a) in enumerate(zip(exp, act)):
            if not _bitwise_equal(e, a):
                n = int((e != a).sum())
                return Finding(check, False, f"output {i}: {n} of {e.numel()} elements differ bitwise", case,
                               figure=float(n), threshold=0.0)
        return Finding(check, True, "bitwise identical", case, figure=0.0, threshold=0.0)
    if spec.kind == "relative_error":
        ref = flatten(reference64()) if reference64 is not None else tuple(e.to(torch.float64) for e in exp)
        worst = 0.0
        limit = 0.0
        for a, r, e in zip(act, ref, exp):
            limit = spec.max_error if spec.max_error is not None else DEFAULT_MAX_RELATIVE_ERROR.get(e.dtype, 1e-5)
            rel = _relative_error(a, r)
            if rel != rel:  # NaN
                rel = float("inf")
            worst = max(worst, rel)
        ok = worst <= limit
        return Finding(check, ok, f"relative error {worst:.3g} (limit {limit:.3g}) against a float64 reference",
                       case, figure=worst, threshold=limit)
    if spec.kind == "custom":
        assert custom is not None
        got = custom(expected, actual, inputs)
        ok, figure = (bool(got[0]), float(got[1])) if isinstance(got, tuple) else (bool(got), None)
        return Finding(check, ok, f"{spec.function} returned {'pass' if ok else 'fail'}"
                       + (f" with figure {figure:.4g}" if figure is not None else ""), case,
                       figure=figure, threshold=spec.max_error)
    raise ValueError(f"oracle kind {spec.kind!r} is not a per-call oracle")


def _relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """``||actual - reference|| / ||reference||`` in float64, chunk by chunk on the
    candidate's device: the reference may live elsewhere (on the host, where the
    baseline's float64 run had no room or no kernel on the GPU), and only one chunk of it
    at a time is moved."""
    dev = actual.device
    num = torch.zeros((), dtype=torch.float64, device=dev)  # sums of squares
    den = torch.zeros((), dtype=torch.float64, device=dev)
    for _, (a, r) in flat_chunks(actual, reference):
        r64 = r.to(device=dev, dtype=torch.float64)
        num += torch.linalg.vector_norm(a.to(torch.float64) - r64).square()
        den += torch.linalg.vector_norm(r64).square()
    return float(num.sqrt()) / (float(den.sqrt()) or 1.0)


def _rounding(spec: Oracle, exp: Sequence[torch.Tensor], act: Sequence[torch.Tensor], case: str,
              reference64: Optional[Callable[[], Any]], inputs: Any, custom: Optional[Callable[..., Any]],
              first_failure: bool = False) -> Finding:
    """The ``rounding`` rule (:mod:`.rounding`) over every output; the worst one is reported.

    The reference: the oracle's ``function`` where the manifest names one (``custom``
    here), else ``reference64`` (a :class:`~.rounding.ReferenceLadder` or a plain
    callable); where neither gives one output per output, the baseline's output stands
    in for it and the message says so."""
    check = "oracle:rounding"
    factor = spec.factor if spec.factor is not None else rounding.FACTOR
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else ()
    source: Optional[Callable[[], Any]] = reference64
    if custom is not None:
        source = rounding.ReferenceLadder(None, args, named=custom)
    refs: Optional[Tuple[torch.Tensor, ...]] = None
    why = "no reference function was given"
    if source is not None:
        try:
            refs = flatten(source())
            if len(refs) != len(exp) or any(r.shape != e.shape for r, e in zip(refs, exp)):
                why, refs = "the reference's outputs do not match the baseline's in number or shape", None
        except Exception as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if refs is None:
        how, refs, stand_in = f"no reference ({why}); the candidate against the baseline's output", exp, True
    else:
        how = getattr(source, "how", "") or "float64 reference (the baseline on float64 inputs)"
        stand_in = False
    errors = []
    mags: Any = None  # the reference on the inputs' absolute values: made once, where an output needs it
    for i, (e, a, r) in enumerate(zip(exp, act, refs)):
        try:
            k, k_how = rounding.reduction_length(args, a, spec.reduction)
        except ValueError as err:
            return Finding(check, False, f"oracle's `reduction`: {err}; fix `oracles[].reduction` in the manifest",
                           case)
        bound = spec.bound if spec.bound is not None else rounding.BOUND
        got = rounding.output_error(i, r, e, a, k, k_how, factor, reference_is_baseline=stand_in, bound=bound,
                                    first_failure=first_failure)
        if not got.ok and not got.nonfinite and got.k_how != "exact" and not stand_in and not first_failure:
            # Over the allowance on the output's size: was it cancellation? The term for the
            # size of what was combined (rounding.combined_magnitude) is looked for only now,
            # so a run that passes pays nothing for it. Not for the calibration's do-nothing
            # outputs (``first_failure``): they miss by far more than the term (zeros miss a
            # zero-mean sum of K terms by ~sqrt(K), the term is ~u K), and it costs two float64 runs.
            mags = _magnitudes(source, len(exp)) if mags is None else mags
            top, why = rounding.combined_magnitude(r, *mags[i]) if isinstance(mags, list) else (0.0, mags)
            got = (rounding.output_error(i, r, e, a, k, k_how, factor, bound=bound, first_failure=first_failure,
                                         combined=top) if top else replace(got, combined_why=why))
        errors.append(got)
        if first_failure and not errors[-1].ok:
            break
    if not errors:
        return Finding(check, True, "no outputs to compare", case, figure=0.0, threshold=0.0)
    worst = max(errors, key=lambda e: e.ratio)
    ok = all(e.ok for e in errors)
    return Finding(check, ok, rounding.describe(worst, len(errors), how, factor), case,
                   figure=worst.err_c, threshold=worst.allowed)


def _magnitudes(source: Any, n: int) -> Any:
    """Per output, the reference on the inputs' absolute values and on twice them (a list);
    or why there is none (a string)."""
    make = getattr(source, "magnitude", None)
    if make is None:
        return "no reference on the inputs' absolute values (a plain reference function)"
    try:
        m1, m2 = make()
        m1, m2 = flatten(m1), flatten(m2)
    except Exception as e:
        return f"the reference on the inputs' absolute values raised {type(e).__name__}"
    if len(m1) != n or len(m2) != n:
        return "the reference on the inputs' absolute values has another number of outputs"
    return list(zip(m1, m2))


def null_candidates(expected: Any, inputs: Sequence[Any]) -> Mapping[str, Any]:
    """Outputs that do no work: an oracle any of them passes cannot tell right from wrong."""
    return {label: make() for label, make in iter_null_candidates(expected, inputs)}


def _constant(like: torch.Tensor, value: int) -> torch.Tensor:
    return torch.full((), value, dtype=like.dtype, device=like.device).expand(like.shape)


def iter_null_candidates(expected: Any, inputs: Sequence[Any]) -> Iterator[Tuple[str, Callable[[], Any]]]:
    """:func:`null_candidates` one at a time, each made when asked for: at the sizes people
    run, three do-nothing copies of a gigabytes output at once would not fit beside it."""
    exp = flatten(expected)
    # Constants as one element broadcast to the output's shape (stride 0): no memory,
    # whatever the output's size; every oracle reads them like any tensor.
    yield "zeros", lambda: tuple(_constant(e, 0) for e in exp)
    yield "a constant", lambda: tuple(_constant(e, 1) for e in exp)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if len(exp) == 1 and tensors:
        same = [x for x in tensors if x.shape == exp[0].shape and x.dtype == exp[0].dtype]
        if same:
            # The input itself, not a copy: the oracle only reads it.
            yield "an input passed through", lambda: (same[0],)
