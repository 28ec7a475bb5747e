"""Correctness oracles: is the candidate's output the baseline's, within what tolerance?

Each oracle compares the candidate's output with the baseline's on the same inputs
and returns a :class:`~expkit.findings.Finding` carrying its measured error and its
threshold, so a failure says by how much it failed and not only that it did.

Default tolerances follow ``torch.testing.assert_close``'s per-dtype table. fp8 and
TF32 have no default there, and claims in them must state their tolerance.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import torch

from .findings import Finding
from .manifest import Oracle

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


def _allclose(spec: Oracle, expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor]) -> Tuple[bool, float, float, str]:
    """Worst element's excess over ``atol + rtol*|expected|``; NaN never passes."""
    worst_ratio, worst_err, detail = 0.0, 0.0, ""
    ok = True
    for i, (e, a) in enumerate(zip(expected, actual)):
        rtol, atol = tolerance(spec, e.dtype)
        e64, a64 = e.detach().to(torch.float64), a.detach().to(torch.float64)
        err = (a64 - e64).abs()
        nan = torch.isnan(a64) & ~torch.isnan(e64)
        allowed = atol + rtol * e64.abs()
        bad = (err > allowed) | nan
        if e64.numel():
            ratio = float(torch.nan_to_num((err / allowed).max(), nan=float("inf")))
            max_err = float(torch.nan_to_num(err.max(), nan=float("inf")))
        else:
            ratio, max_err = 0.0, 0.0
        if bool(bad.any()):
            ok = False
            n_bad = int(bad.sum())
            where = tuple(int(v) for v in bad.nonzero()[0].tolist())
            n_nan = int(nan.sum())
            detail = (f"output {i}: {n_bad} of {e64.numel()} elements outside rtol={rtol:g}, atol={atol:g}"
                      f" (first at index {list(where)}" + (f"; {n_nan} NaN" if n_nan else "") + ")")
        if ratio > worst_ratio:
            worst_ratio, worst_err = ratio, max_err
    return ok, worst_err, worst_ratio, detail


def _bitwise_equal(e: torch.Tensor, a: torch.Tensor) -> bool:
    """Bit-for-bit equality: NaN equals the same NaN, -0.0 differs from 0.0."""
    if e.numel() == 0:
        return True
    if e.is_floating_point() or e.is_complex():
        e, a = e.reshape(-1).contiguous().view(torch.uint8), a.reshape(-1).contiguous().view(torch.uint8)
    return torch.equal(e, a)


def check_outputs(
    spec: Oracle,
    expected: Any,
    actual: Any,
    *,
    case: str,
    reference64: Optional[Callable[[], Any]] = None,
    inputs: Any = None,
    custom: Optional[Callable[..., Any]] = None,
) -> Finding:
    """Apply one oracle to one pair of outputs."""
    check = f"oracle:{spec.kind}"
    exp, act = flatten(expected), flatten(actual)
    if len(exp) != len(act):
        return Finding(check, False, f"baseline returned {len(exp)} outputs, candidate {len(act)}", case)
    for i, (e, a) in enumerate(zip(exp, act)):
        if e.shape != a.shape or e.dtype != a.dtype:
            return Finding(check, False, f"output {i}: expected {tuple(e.shape)} {e.dtype}, "
                           f"got {tuple(a.shape)} {a.dtype}", case)
    if spec.kind == "allclose":
        ok, err, ratio, detail = _allclose(spec, exp, act)
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
            r64 = r.detach().to(torch.float64)
            denom = float(torch.linalg.vector_norm(r64)) or 1.0
            rel = float(torch.linalg.vector_norm(a.detach().to(torch.float64) - r64)) / denom
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


def null_candidates(expected: Any, inputs: Sequence[Any]) -> Mapping[str, Any]:
    """Outputs that do no work: an oracle any of them passes cannot tell right from wrong."""
    exp = flatten(expected)
    nulls: dict[str, Any] = {
        "zeros": tuple(torch.zeros_like(e) for e in exp),
        "a constant": tuple(torch.full_like(e, 1.0) if e.is_floating_point() else torch.ones_like(e) for e in exp),
    }
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if len(exp) == 1 and tensors:
        same = [x for x in tensors if x.shape == exp[0].shape and x.dtype == exp[0].dtype]
        if same:
            nulls["an input passed through"] = (same[0].clone(),)
    return nulls
