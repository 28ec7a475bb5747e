"""The default oracle (``kind: rounding``): the candidate may round no worse than the baseline does.

Both sides are judged against one float64 reference (the baseline on its inputs upcast; see
:class:`ReferenceLadder` where it cannot run so), and the candidate may be as wrong as honest
rounding can make it, no more. Per floating output, maxima over the elements::

    err_b   = max |b - r|                      the baseline's own error
    err_c   = max |c - r|                      the candidate's error
    allowed = F * err_b + (C * sqrt(K) * u_acc + eps_out) * max |r| + D * u_acc * max |r_abs|
    pass  iff  err_c <= allowed

* ``F`` (:data:`FACTOR`, the oracle's ``factor``) keeps the rule fair against an inaccurate
  baseline; ``C`` (:data:`BOUND`, ``bound``) is the constant of the probabilistic error bound of
  a length-``K`` sum, what a candidate summing in another order needs where the baseline rounds
  far less. ``u_acc`` is the unit roundoff products are summed in (float32 for float32 and the
  half types, float64 for float64); ``eps_out`` one unit in the last place of the output's
  dtype; ``K`` the reduction length (:func:`reduction_length`).
* ``r_abs`` is the reference run on the absolute values of the floating inputs (``sum |x_i|``
  for a sum, ``|A| @ |B|`` for a product): the size of what was combined. ``max |r|`` vanishes
  when the terms cancel and honest rounding does not, so the third term (``D``,
  :data:`CANCELLATION`) keeps the allowance from vanishing with it. No ``sqrt(K)`` there: a
  mixed-sign sum's honest error grows like ``u * sum |x_i|``, and a ``sqrt(K)`` would admit a
  bf16 step. It counts only where the op is a sum of products of its inputs
  (:func:`combined_magnitude`), and is computed only where an output fails without it.
* Where ``r`` is not finite, ``c`` must match it; where only ``b`` overflowed, ``c`` may equal
  ``b`` or be within ``allowed`` of ``r``; NaN in ``c`` where ``r`` is finite never passes.
  Integer and bool outputs must be equal.
* With no reference at all, the candidate is held against the baseline's output, ``err_b``
  taken as 0 and the second term doubled, and the message says so.

It catches a tf32, bf16 or fp16 downgrade behind an fp32 signature on inputs whose terms
cancel, and accumulation in a half type. It cannot catch a downgrade whose error averages out
(inputs of one sign at K in the thousands: as accurate there as an honest naive sum), nor an
error in an element tiny next to ``max |r|``; it is unfair to a naive sequential sum of many
tiny terms next to large ones (raise ``bound``). Why ``allclose`` is not the default, and the
measured margins behind ``F = 4, C = 2, D = 2``: docs/decisions.md and evidence/README.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..manifest.spec import reduction_terms
from .chunks import flat_chunks, max_abs, max_abs_diff

#: F: how many times the baseline's own error a candidate may make (measured margins:
#: evidence/README.md).
FACTOR = 4.0
#: C: the constant of the sqrt(K) bound on a sum's error, relative to max |r| (measured: same file).
BOUND = 2.0
#: D: the constant of the cancellation term, ``D * u_acc * max |r_abs|`` (module docstring);
#: measured by ``evidence/numerics/cancellation_sweep.py`` (its output beside it).
CANCELLATION = 2.0


def reduction_length(inputs: Sequence[Any], output: torch.Tensor, declared: Optional[str] = None) -> Tuple[int, str]:
    """``K`` for one output, and how it was found.

    Declared (the oracle's ``reduction``), it is read off the inputs' shapes, so it
    follows every case and every awkward size the preflight adds. Otherwise it is
    estimated from shapes alone as the larger of (a) the largest dimension of any input
    tensor and (b) the largest input's element count over the output's. (a) is at least
    the inner dimension of a matrix product (``m x k @ k x n``), the length of a row a
    softmax or a norm reduces, and the sequence length of attention; (b) is the length
    of a reduction over whole axes (a full sum: every element). The estimate errs high
    for elementwise ops and for products whose outer dimensions are larger than the
    inner one: that only loosens the bound, by the square root of the excess. It errs
    low for convolutions (``K = C_in x kh x kw``, which no single dimension shows):
    declare ``reduction`` for those."""
    if declared:
        k = 1
        for n, i, d in reduction_terms(declared):
            if n is not None:
                k *= n
            else:
                assert i is not None and d is not None
                t = inputs[i] if i < len(inputs) else None
                if not isinstance(t, torch.Tensor) or not -t.dim() <= d < max(t.dim(), 1):
                    raise ValueError(f"reduction {declared!r}: inputs[{i}] has no dimension {d}")
                k *= int(t.shape[d])
        return max(1, k), f"K={max(1, k)} declared ({declared})"
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if not tensors:
        return 1, "K=1 (no input tensors)"
    largest_dim = max((max(t.shape) if t.dim() else 1) for t in tensors)
    ratio = math.ceil(max(t.numel() for t in tensors) / max(1, output.numel()))
    k = max(1, largest_dim, ratio)
    return k, f"K={k} estimated from shapes"


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: the largest relative error of one rounding."""
    return float(torch.finfo(dtype).eps) / 2


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision products are expected to be summed in for an output of ``dtype``."""
    real = torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype
    return torch.float64 if real == torch.float64 else torch.float32


@dataclass(frozen=True)
class OutputError:
    """One output's figures under the rule (see the module docstring)."""

    index: int
    bound: float
    err_c: float
    err_b: float
    scale: float
    k: int
    k_how: str
    allowed: float
    nonfinite: int  # elements whose non-finite class the candidate does not match
    ok: bool
    #: max |r_abs|: the reference on the inputs' absolute values, where the op is a sum of
    #: products of its inputs (:func:`combined_magnitude`); 0 where not used.
    combined: float = 0.0
    #: why the cancellation term was not applied, where it was looked for and not used.
    combined_why: str = ""

    @property
    def ratio(self) -> float:
        if self.nonfinite or math.isnan(self.err_c):
            return math.inf
        return self.err_c / self.allowed if self.allowed > 0 else (0.0 if self.err_c == 0 else math.inf)


#: reference -> baseline output -> (their versions, the device, max|ref|, max|base - ref|),
#: for pairs whose every element is finite. Keyed by the tensors themselves, weakly: an
#: entry goes with either tensor, and an in-place write (a new version) voids it.
_FIGURES: Any = WeakIdKeyDictionary()


def _baseline_figures(ref: torch.Tensor, base: torch.Tensor, device: Any) -> Optional[Tuple[float, float]]:
    hit = _FIGURES.get(ref, {}).get(base)
    if hit is None or hit[:3] != (ref._version, base._version, str(device)):
        return None
    return hit[3], hit[4]


def _remember(ref: torch.Tensor, base: torch.Tensor, device: Any, scale: float, err_b: float) -> None:
    per = _FIGURES.get(ref)
    if per is None:
        per = _FIGURES[ref] = WeakIdKeyDictionary()
    per[base] = (ref._version, base._version, str(device), scale, err_b)


def output_error(index: int, ref: torch.Tensor, base: torch.Tensor, cand: torch.Tensor, k: int, k_how: str,
                 factor: float, *, bound: float = BOUND, reference_is_baseline: bool = False,
                 first_failure: bool = False, combined: float = 0.0) -> OutputError:
    """The rule for one floating (or complex) output; integer and bool outputs must be equal.

    ``first_failure``: where the baseline's figures are already known (so the allowance is
    too), stop at the first chunk over it; the candidate's error is then a lower bound.
    For outputs expected to fail (the calibration's do-nothing outputs), one chunk
    decides instead of the whole output."""
    if not (cand.is_floating_point() or cand.is_complex()):
        differ = int((base.to(cand.device) != cand).sum()) if base.numel() else 0
        return OutputError(index, bound, float(differ), 0.0, 0.0, k, "exact", 0.0, 0, differ == 0)
    wide = torch.complex128 if cand.is_complex() else torch.float64
    if ref.numel() == 0:
        return OutputError(index, bound, 0.0, 0.0, 0.0, k, k_how, 0.0, 0, True)
    # Chunk by chunk in float64 (``chunks.chunk_for`` elements a time): the figures are maxima
    # and counts, so they combine, and memory does not grow with the output.
    zero = torch.zeros((), dtype=torch.float64, device=cand.device)
    nonfinite = 0
    scale = err_b = 0.0
    parts = []
    known = _baseline_figures(ref, base, cand.device)
    u_acc = unit_roundoff(accumulation_dtype(cand.dtype))
    real = cand.real.dtype if cand.is_complex() else cand.dtype
    eps_out = float(torch.finfo(real).eps)
    limit = math.inf
    if known is not None and first_failure:
        limit = _allowed(known[0], known[1], bound, k, u_acc, eps_out, factor, reference_is_baseline, combined)
    finite = True
    for _, (rc, bc, cc) in flat_chunks(ref, base, cand):
        r = rc.to(device=cand.device, dtype=wide)
        if known is not None:
            # The reference's size and the baseline's error are the same for every candidate
            # output held against this pair: one subtraction and one pass here.
            ec_max = max_abs_diff(cc, r)
            if math.isfinite(ec_max):
                parts.append(ec_max)
                del r
                if ec_max > limit:
                    break
                continue
        bd = bc.to(cand.device)
        # The common case first: where the three maxima are finite numbers no element of
        # the chunk is NaN or infinite, and they are the figures. Each difference is taken
        # in float64 by type promotion, with no float64 copy of the operand first.
        s_max, eb_max, ec_max = max_abs(r), max_abs_diff(bd, r), max_abs_diff(cc, r)
        if math.isfinite(s_max) and math.isfinite(eb_max) and math.isfinite(ec_max):
            scale = max(scale, s_max)
            if not reference_is_baseline:
                err_b = max(err_b, eb_max)
            parts.append(ec_max)
            del r, bd
            continue
        finite = finite and math.isfinite(s_max) and math.isfinite(eb_max)
        b, c = bd.to(wide), cc.to(wide)
        finite_r = torch.isfinite(r)
        finite_b = torch.isfinite(b)
        # Where r is not finite, c must match it: NaN with NaN, an infinity with the same one.
        both_nan = torch.isnan(r) & torch.isnan(c)
        same_inf = torch.isinf(r) & (c == r)
        nonfinite += int((~finite_r & ~(both_nan | same_inf)).sum())
        # The output's size where the baseline represents it (an overflow is no measure of it).
        scale = max(scale, float(torch.where(finite_r & finite_b, r.abs(), zero).max()))
        if not reference_is_baseline:
            err_b = max(err_b, float(torch.where(finite_r & finite_b, (b - r).abs(), zero).max()))
        diff = (c - r).abs()
        diff = torch.where(torch.isnan(diff) & finite_r, torch.full_like(diff, math.inf), diff)
        # The baseline overflowed where the math did not: the candidate may do the same there.
        excused = finite_r & ~finite_b & ((c == b) | (torch.isnan(c) & torch.isnan(b)))
        parts.append(float(torch.where(finite_r & ~excused, diff, zero).max()))
        del r, b, c, bd, diff, excused, finite_r, finite_b
    if known is not None:
        scale, err_b = known
    elif finite and not reference_is_baseline:
        _remember(ref, base, cand.device, scale, err_b)
    err_c = max(parts) if parts else 0.0
    allowed = _allowed(scale, err_b, bound, k, u_acc, eps_out, factor, reference_is_baseline, combined)
    ok = nonfinite == 0 and err_c <= allowed
    return OutputError(index, bound, err_c, err_b, scale, k, k_how, allowed, nonfinite, ok, combined)


def _allowed(scale: Any, err_b: Any, bound: float, k: int, u_acc: float, eps_out: float, factor: float,
             reference_is_baseline: bool, combined: Any = 0.0) -> Any:
    """The allowance (module docstring); elementwise where the figures are tensors (a sweep)."""
    second = (bound * math.sqrt(k) * u_acc + eps_out) * scale + CANCELLATION * u_acc * combined
    return (2 * second) if reference_is_baseline else (factor * err_b + second)


def allowed(scale: Any, err_b: Any, combined: Any, k: int, dtype: torch.dtype, *, factor: float = FACTOR,
            bound: float = BOUND) -> Any:
    """The rule's allowance for an output of ``dtype`` against a float64 reference, from its
    figures (``max |r|``, the baseline's error, ``max |r_abs|``); floats or tensors of them."""
    real = torch.empty((), dtype=dtype).real.dtype if dtype.is_complex else dtype
    return _allowed(scale, err_b, bound, k, unit_roundoff(accumulation_dtype(dtype)), float(torch.finfo(real).eps),
                    factor, False, combined)


#: Highest total degree (in the inputs' scale) of an op the cancellation term applies to:
#: a sum is 1, a product of two operands 2, a chain of three 3.
MAX_DEGREE = 4


def combined_magnitude(ref: torch.Tensor, mag: torch.Tensor, mag2: torch.Tensor) -> Tuple[float, str]:
    """``max |r_abs|`` for the cancellation term, or 0 and why it does not apply.

    ``mag`` is the reference on the inputs' absolute values, ``mag2`` on twice them. The
    term is the size of what was combined only where the op is a sum of products of its
    inputs (a sum, mean, dot, matrix product, cumulative sum, convolution): there
    ``|r| <= r_abs`` element by element, and ``r_abs`` scales as ``2**d`` with the inputs
    for one degree ``d``. Elsewhere (an exponential, a normalisation) ``r_abs`` measures
    nothing that was summed (``exp(|x|)`` of negative ``x`` is huge), so the term is
    left out and the rule is as before."""
    if mag.shape != ref.shape or mag2.shape != ref.shape or mag.is_complex() or ref.is_complex():
        return 0.0, "the reference on the inputs' absolute values has another shape or is complex"
    top, lo, hi = 0.0, math.inf, 0.0
    for _, (r, m, m2) in flat_chunks(ref, mag, mag2):
        r, m, m2 = r.double(), m.to(device=r.device, dtype=torch.float64), m2.to(device=r.device, dtype=torch.float64)
        if not (bool(torch.isfinite(m).all()) and bool(torch.isfinite(m2).all()) and bool(torch.isfinite(r).all())):
            return 0.0, "the reference on the inputs' absolute values is not finite"
        if bool((r.abs() > m * (1 + 1e-9)).any()) or bool((m < 0).any()):
            return 0.0, "the op is not a sum of products of its inputs (|ref| exceeds it on their absolute values)"
        nz = m > 0
        if bool(nz.any()):
            ratio = m2[nz] / m[nz]
            lo, hi = min(lo, float(ratio.min())), max(hi, float(ratio.max()))
        top = max(top, float(m.max()) if m.numel() else 0.0)
    if top == 0.0:
        return 0.0, ""
    d = round(math.log2(hi)) if hi > 0 else 0
    if not 1 <= d <= MAX_DEGREE or abs(lo / 2 ** d - 1) > 1e-9 or abs(hi / 2 ** d - 1) > 1e-9:
        return 0.0, "the op is not a sum of products of its inputs (it does not scale as a power of them)"
    return top, ""


def describe(e: OutputError, n_outputs: int, how: str, factor: float) -> str:
    """One line: the rule, its figures and the threshold, for a finding's message."""
    which = f"output {e.index}: " if n_outputs > 1 else ""
    if e.nonfinite:
        return (f"{which}{e.nonfinite} element(s) where the reference is NaN or infinite and the candidate's output "
                f"is not the same ({how})")
    if e.k_how == "exact":
        return f"{which}{int(e.err_c)} element(s) differ (integer or bool output: must be equal)"
    if how.startswith("no reference"):
        rule = (f"|candidate - baseline| <= 2 x (C sqrt(K) u + eps) x max|baseline| = 2 x ({e.bound:g} x sqrt({e.k}) x "
                f"u + eps) x {e.scale:.3g} = {e.allowed:.3g}")
        return f"{which}rounding rule ({how}; {e.k_how}): worst error {e.err_c:.3g}, allowed {rule}"
    times = f"{e.err_c / e.err_b:.3g}x the baseline's {e.err_b:.3g}" if e.err_b > 0 else "the baseline's is 0"
    if e.combined:
        cancel = f"{CANCELLATION:g} x u x {e.combined:.3g}"
    else:
        cancel = f"0 (no cancellation term: {e.combined_why})" if e.combined_why else "0 (not needed)"
    return (f"{which}rounding rule (against a {how}; {e.k_how}): the candidate's worst error {e.err_c:.3g} "
            f"({times}); allowed F x err_b + (C sqrt(K) u + eps) x max|ref| + D u x max|ref on |inputs|| = "
            f"{factor:g} x {e.err_b:.3g} + ({e.bound:g} x sqrt({e.k}) x u + eps) x {e.scale:.3g} + {cancel} = "
            f"{e.allowed:.3g}")


class ReferenceUnavailable(Exception):
    """No rung of the ladder could compute a reference; the message lists why each failed."""


class ReferenceLadder:
    """The reference of the ``rounding`` and ``relative_error`` oracles, tried in order.

    Called with no arguments, it returns the reference outputs (as the plain
    ``reference64`` callables do) and leaves how it made them in :attr:`how`. Rungs:

    1. ``named`` (the oracle's ``function``, a reference implementation the manifest
       names), on the inputs upcast to float64; then
    2. the baseline on its inputs upcast to float64, where they are (``host=False``); then
    3. the same on the host's CPU (``host=True`` starts here: the memory plan found no
       room on the device). Flash and cuDNN attention, Triton kernels and compiled
       half-precision graphs take no float64 on the GPU; their math often runs on the CPU.
    4. the baseline on its inputs upcast to float32, only where every floating input is
       narrower than float32 (bf16, fp16, fp8): a float32 computation rounds 2^16 times
       less than a bf16 one, so it stands in for the exact result. For float32 inputs it
       would be the baseline again and proves nothing, so the rung is skipped.

    When every rung fails, :class:`ReferenceUnavailable` says why each did; the oracle
    then judges the candidate against the baseline's output (module docstring). The first
    rung that works is remembered for the next call on inputs of the same shapes."""

    _remembered: dict = {}

    def __init__(self, fn: Optional[Callable[..., Any]], inputs: Sequence[Any], *, host: bool = False,
                 named: Optional[Callable[..., Any]] = None) -> None:
        self.fn, self.inputs, self.host, self.named = fn, tuple(inputs), host, named
        self.how = ""

    def _rungs(self, scale: Optional[float] = None) -> List[Tuple[str, Callable[[], Any]]]:
        """The rungs on the inputs, or (``scale``) on ``scale`` times their absolute values."""
        floats = [v for v in self.inputs if isinstance(v, torch.Tensor) and v.is_floating_point()]
        on_cpu = all(v.device.type == "cpu" for v in self.inputs if isinstance(v, torch.Tensor))
        rungs: List[Tuple[str, Callable[[], Any]]] = []
        inputs = self.inputs if scale is None else magnitudes(self.inputs, scale)
        if self.named is not None:
            named = self.named
            rungs.append(("float64 reference (the oracle's function)", lambda: named(*upcast(inputs, torch.float64))))
        fn = self.fn
        if fn is not None:
            if not self.host:
                rungs.append(("float64 reference (the baseline on float64 inputs)",
                              lambda: fn(*upcast(inputs, torch.float64))))
            if self.host or not on_cpu:
                rungs.append(("float64 reference (the baseline on float64 inputs on the CPU)",
                              lambda: fn(*upcast(inputs, torch.float64, device="cpu"))))
            if floats and all(torch.finfo(v.dtype).bits < 32 for v in floats):
                rungs.append(("float32 reference (the baseline on float32 inputs; no float64 run worked)",
                              lambda: fn(*upcast(inputs, torch.float32))))
        return rungs

    def magnitude(self) -> Tuple[Any, Any]:
        """The reference's rung run on the inputs' absolute values and on twice them (for
        :func:`combined_magnitude`); raises where there is no reference or an input is complex."""
        if any(isinstance(v, torch.Tensor) and v.is_complex() for v in self.inputs):
            raise ReferenceUnavailable("complex inputs")
        i = self._remembered.get(self._key())
        if i is None:
            self()
            i = self._remembered[self._key()]
        return self._rungs(1.0)[i][1](), self._rungs(2.0)[i][1]()

    def _key(self) -> Tuple[Any, ...]:
        return (id(self.fn), id(self.named), self.host) + tuple(
            (tuple(v.shape), v.dtype, v.device.type) if isinstance(v, torch.Tensor) else type(v).__name__
            for v in self.inputs)

    def __call__(self) -> Any:
        rungs = self._rungs()
        start = self._remembered.get(self._key(), 0)
        failures: List[str] = []
        for i, (how, run) in enumerate(rungs):
            if i < start:
                continue
            try:
                out = run()
            except Exception as e:  # the next rung; the reason is kept for the message
                failures.append(f"{how.split(' (')[0]} ({how.split('(', 1)[-1].rstrip(')')}) raised "
                                f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
                continue
            self._remembered[self._key()] = i
            self.how = how
            return out
        raise ReferenceUnavailable("; ".join(failures) or "no baseline to run")


def magnitudes(values: Sequence[Any], scale: float = 1.0) -> Tuple[Any, ...]:
    """The floating tensors among ``values`` as ``scale`` times their absolute values, others as they are."""
    return tuple(v.abs() * scale if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values)


def upcast(values: Sequence[Any], dtype: torch.dtype, device: Optional[str] = None) -> Tuple[Any, ...]:
    """The floating tensors among ``values`` in ``dtype`` (and on ``device``), others as they are."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if device is not None:
                v = v.to(device)
            if v.is_floating_point():
                v = v.to(dtype)
        out.append(v)
    return tuple(out)
