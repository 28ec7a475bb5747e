"""Check a candidate's profiler trace against the manifest's ``expect:`` block.

The question is "did the kernel the claim is about actually run?". Each check returns a
:class:`Finding` whose message names both what was expected and what ran, so a failed
check reads as a diagnosis rather than a bare "identity failed".

Patterns (``must_run``, ``must_not_run``, ``allow``, ``launch[].kernel``) are
case-sensitive globs (:func:`fnmatch.fnmatchcase`) or, prefixed ``re:``, regular
expressions used with :func:`re.search`. A glob matches an op by its full qualified
name (``expkit_examples::attn_basic``, ``aten::mm``) and a kernel by its full
demangled name, its ``ns::function`` name or its bare function name (see
:func:`expkit.checks.trace.kernel_short_name`), so ``attn_vectorized*`` matches
``attn_vectorized_k384(float4 const*, float4*, float, int)`` without spelling the
parameter list. A regex is searched in the full name.

Checks, in the order their findings come back:

``identity`` (``must_run``)
    Each pattern must match an op (CPU) or an op or a kernel (GPU) of the candidate.
    On GPU an op name only proves which wrapper was called, so GPU claims should also
    name the kernel in a ``launch`` entry.
``forbidden`` (``must_not_run`` and ``forbid_baseline``)
    No op or kernel may match ``must_not_run``. With ``forbid_baseline`` the
    baseline's own work may not appear in the candidate unless ``allow`` matches it:
    on the GPU every kernel it launched, by full name (template arguments, so dtypes,
    included); where no kernel is known (CPU) its outermost ops by name; under both,
    every op of its tree that it called on its own operands, by name and operands. The
    finding says which rule it applied; see :func:`_check_baseline`,
    :func:`baseline_fingerprint` and :func:`baseline_calls`.
``launch`` (GPU)
    For each entry, at least one candidate kernel matching the name pattern must
    have exactly the expected block and grid and at most the expected shared memory
    and registers. The name must match too: block size alone is never proof (cuDNN's
    SDPA kernel also runs 384 threads per block, ``tests/data/traces/sdpa_fp16.json``).
``stream`` (GPU, ``same_stream``)
    Every candidate kernel must run on the stream the harness times, or be ordered
    with it at both ends of the call (a library's own streams, such as cuDNN's for
    grouped convolutions; :meth:`.trace.Trace.unordered_kernels`). Unordered side-stream
    work escapes a timer that records events on the harness stream.

On a CPU-only trace (no CUDA activity recorded) ``launch`` and ``stream`` findings
are "not applicable": ``ok`` with a message saying so, never a silent pass and never
a failure. On a GPU trace, a launch entry with no kernel at all is a failure.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from ..core.errors import ExpkitError
from ..core import findings as core_findings
from ..manifest.spec import Expect, LaunchExpect
from .operands import OpCall, calls_of, is_dispatcher_op
from .structural import STRUCTURAL_KERNELS, STRUCTURAL_OPS
from .trace import KernelEvent, OpEvent, Trace, kernel_qualified_name, kernel_short_name
from ..verdict.wording import NOT_CHECKED, UNIDENTIFIED


_LIST_MAX = 6


@dataclass(frozen=True)
class Finding:
    """The result of one check. ``check`` is ``identity``, ``forbidden``, ``launch``
    or ``stream``; ``message`` names what was expected and what was observed."""

    check: str
    ok: bool
    message: str


# --- patterns --------------------------------------------------------------------


def _compile(pattern: str) -> Callable[[str], bool]:
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error as e:
            raise ExpkitError(f"expect: pattern `{pattern}` is not a valid regular expression: {e}") from None
        return lambda s: rx.search(s) is not None
    return lambda s: fnmatch.fnmatchcase(s, pattern)


def matches_op(pattern: str, name: str) -> bool:
    """Whether ``pattern`` matches an op's full qualified name."""
    return _compile(pattern)(name)


def matches_kernel(pattern: str, name: str) -> bool:
    """Whether ``pattern`` matches a kernel's full, qualified or bare function name
    (a ``re:`` pattern is searched in the full name only, where it finds those too)."""
    test = _compile(pattern)
    if pattern.startswith("re:"):
        return test(name)
    return test(name) or test(kernel_qualified_name(name)) or test(kernel_short_name(name))


def _any(patterns: Iterable[str], name: str, matcher: Callable[[str, str], bool]) -> bool:
    return any(matcher(p, name) for p in patterns)


# --- formatting ------------------------------------------------------------------


def _dims(d: Sequence[int]) -> str:
    return "[" + ",".join(str(int(x)) for x in d) + "]"


def _pad3(d: Optional[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    if d is None:
        return None
    d = tuple(int(x) for x in d)
    return d + (1,) * (3 - len(d)) if len(d) < 3 else d


def _listing(items: Sequence[str], empty: str = "nothing") -> str:
    items = list(dict.fromkeys(items))
    if not items:
        return empty
    shown = ", ".join(items[:_LIST_MAX])
    return shown + (f" and {len(items) - _LIST_MAX} more" if len(items) > _LIST_MAX else "")


def _kernel_desc(k: KernelEvent, extra: Sequence[str] = ()) -> str:
    parts = [f"`{k.short_name}` with block {_dims(k.block) if k.block else '(not recorded)'}"]
    for field in extra:
        if field == "grid":
            parts.append(f"grid {_dims(k.grid) if k.grid else '(not recorded)'}")
        elif field == "shared_memory":
            parts.append("shared memory (not recorded)" if k.shared_memory is None
                         else f"shared memory {k.shared_memory} B")
        elif field == "registers":
            parts.append("registers (not recorded)" if k.registers_per_thread is None
                         else f"{k.registers_per_thread} registers/thread")
    return ", ".join(parts)


def _ran_ops(trace: Trace) -> str:
    return _listing([f"`{n}`" for n in trace.op_names(top_level=True)])


def _ran_kernels(trace: Trace, extra: Sequence[str] = ()) -> str:
    if not trace.kernels:
        return "no kernel" + (f" (ops: {_ran_ops(trace)})" if trace.ops else "")
    return _listing([_kernel_desc(k, extra) for k in trace.kernels])


def _under(trace: Trace, op: Optional[OpEvent]) -> str:
    """`` under `root` `` where ``op`` is nested inside a top-level op, else ``""``."""
    if op is None:
        return ""
    root = trace.root_of(op)
    return f" under `{root.name}`" if root is not op else ""


def _context(trace: Trace, op: Optional[OpEvent]) -> str:
    under = _under(trace, op)
    return f" ({under.strip()})" if under else ""


def _launcher(trace: Trace, k: KernelEvent) -> str:
    op = trace.op_of_kernel(k)
    return f" (launched by `{op.name}`{_under(trace, op)})" if op is not None else ""


# --- the baseline's fingerprint ---------------------------------------------------


def _outermost(trace: Trace) -> Tuple[OpEvent, ...]:
    """Dispatcher ops with no dispatcher op around them on their thread (labels are transparent)."""
    out = []
    for op in trace.ops:
        if not is_dispatcher_op(op.name):
            continue
        if not any(o is not op and o.tid == op.tid and is_dispatcher_op(o.name) and o.depth < op.depth
                   and o.ts_us <= op.ts_us < o.end_us for o in trace.ops):
            out.append(op)
    return tuple(out)


def _counts(name: str, allow: Sequence[str]) -> bool:
    return is_dispatcher_op(name) and not _any(STRUCTURAL_OPS, name, matches_op) and not _any(allow, name, matches_op)


def baseline_fingerprint(baseline: Trace, allow: Sequence[str] = ()) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The op and kernel names that identify the baseline's work: ``(ops, kernels)``.

    Ops: the names of the baseline's *outermost* dispatcher ops (no dispatcher op
    around them; labels and framework spans are transparent), less
    :data:`STRUCTURAL_OPS` and ``allow``. That is the baseline's identity: the call the
    user wrote (``aten::scaled_dot_product_attention``, ``aten::matmul``); anywhere in the
    candidate's tree, under any name of the candidate's, it is forbidden. The ops
    nested under it are forbidden only as *calls on the baseline's own operands*
    (:func:`baseline_calls`): by name alone, a nested ``aten::mm`` would reject every
    honest blocked product that runs ``aten::mm`` on sub-blocks. Ops whose every tensor
    operand has no storage (Dynamo tracing on fake tensors) are not work.

    Kernels (GPU traces): every kernel name the baseline launched, at any depth, less
    :data:`STRUCTURAL_KERNELS` and ``allow``, compared by full demangled name: a
    bare name such as ``vectorized_elementwise_kernel`` is shared by unrelated
    element-wise ops, while the full name carries the functor. Where the baseline is
    itself a chain of generic library kernels (cuBLAS GEMMs, say) that the candidate
    also uses on purpose, list them under ``allow``.
    """
    calls = calls_of(baseline.meta)
    if calls is not None:
        names: Iterable[str] = (c.name for c in calls if c.outermost and c.computes)
    else:
        names = (o.name for o in _outermost(baseline))
    ops = tuple(dict.fromkeys(n for n in names if _counts(n, allow)))
    kernels = tuple(n for n in baseline.kernel_names()
                    if not _any(STRUCTURAL_KERNELS, n, matches_op) and not _any(allow, n, matches_kernel))
    return ops, kernels


def baseline_calls(baseline: Trace, allow: Sequence[str] = ()) -> Tuple[OpCall, ...]:
    """The baseline's op calls, at any depth, that read only its own operands.

    A call counts when every tensor operand was *held* (:mod:`.operands`): an input,
    a parameter, a cache, or a view or copy of one -- the call re-ran part of the
    baseline's work on the values the candidate is given too. Such a call in the
    candidate, same op and same operand classes, sizes and dtypes (more operands after
    them allowed: an ``out=`` variant passes its output too), is forbidden: a
    candidate that reaches an inner op of the baseline (``getattr(torch.ops.aten,
    name)``, a library's private entry point) on its inputs is caught whatever it is
    called under. Calls on values computed during the call (``made``), like the
    ``aten::mm`` of one block of a blocked product, are the candidate's own business.
    Empty where the trace recorded no operands (older torch, a stored fixture)."""
    calls = calls_of(baseline.meta) or ()
    return tuple(dict.fromkeys(c for c in calls if c.on_held_operands and _counts(c.name, allow)
                               and not any(_any(allow, w, matches_op) for w in c.within)))


def _operands(call: OpCall) -> str:
    return ", ".join(o.describe() for o in call.operands)


# --- the checks ------------------------------------------------------------------


def _launch_by_pattern(expect: Expect) -> dict:
    return {le.kernel: le for le in expect.launch}


def _expected_launch(le: LaunchExpect) -> str:
    parts = [f"kernel matching `{le.kernel}`"]
    cfg = []
    if le.block is not None:
        cfg.append(f"block {_dims(_pad3(le.block))}")
    if le.grid is not None:
        cfg.append(f"grid {_dims(_pad3(le.grid))}")
    if le.max_shared_memory is not None:
        cfg.append(f"shared memory <= {le.max_shared_memory} B")
    if le.max_registers is not None:
        cfg.append(f"<= {le.max_registers} registers/thread")
    if cfg:
        parts.append("with " + ", ".join(cfg))
    return " ".join(parts)


def _launch_extra(le: LaunchExpect) -> List[str]:
    extra = []
    if le.grid is not None:
        extra.append("grid")
    if le.max_shared_memory is not None:
        extra.append("shared_memory")
    if le.max_registers is not None:
        extra.append("registers")
    return extra


def _fits(k: KernelEvent, le: LaunchExpect) -> bool:
    if le.block is not None and k.block != _pad3(le.block):
        return False
    if le.grid is not None and k.grid != _pad3(le.grid):
        return False
    # A limit the trace cannot show is not met: an absent field proves nothing.
    if le.max_shared_memory is not None and (k.shared_memory is None or k.shared_memory > le.max_shared_memory):
        return False
    if le.max_registers is not None and (k.registers_per_thread is None
                                         or k.registers_per_thread > le.max_registers):
        return False
    return True


def _check_must_run(expect: Expect, cand: Trace) -> List[Finding]:
    out = []
    launches = _launch_by_pattern(expect)
    for p in expect.must_run:
        op_hits = [o for o in cand.ops if matches_op(p, o.name)]
        k_hits = [k for k in cand.kernels if matches_kernel(p, k.name)] if cand.on_gpu else []
        if op_hits or k_hits:
            what = ([f"op `{op_hits[0].name}`"] if op_hits else []) + \
                   ([f"kernel `{k_hits[0].short_name}`"] if k_hits else [])
            out.append(Finding("identity", True, f"`{p}` ran: " + " and ".join(what)))
            continue
        if not cand.on_gpu:
            msg = f"expected op matching `{p}`; ran {_ran_ops(cand)}"
        elif p in launches:
            le = launches[p]
            msg = f"expected {_expected_launch(le)}; ran {_ran_kernels(cand, _launch_extra(le))}"
        else:
            msg = f"expected op or kernel matching `{p}`; ran {_ran_kernels(cand)} (top-level ops: {_ran_ops(cand)})"
        out.append(Finding("identity", False, msg))
    return out


def _check_must_not_run(expect: Expect, cand: Trace) -> List[Finding]:
    out = []
    for p in expect.must_not_run:
        hits = [f"op `{o.name}`{_context(cand, o)}" for o in cand.ops if matches_op(p, o.name)]
        if cand.on_gpu:
            hits += [f"kernel `{k.short_name}`{_launcher(cand, k)}"
                     for k in cand.kernels if matches_kernel(p, k.name)]
        if hits:
            out.append(Finding("forbidden", False, f"`{p}` must not run; ran {_listing(hits)}"))
        else:
            out.append(Finding("forbidden", True, f"nothing matching `{p}` ran"))
    return out


#: The words a ``forbidden`` finding ends with, naming the reuse rule it applied.
RULE_KERNELS = "reuse judged by kernels, each by its full demangled name (a GPU trace)"
RULE_OPS = "reuse judged by op names (no kernel recorded)"


def _check_baseline(expect: Expect, cand: Trace, base: Trace) -> Finding:
    """The baseline's work in the candidate (``forbid_baseline``), judged by what ran.

    On the GPU, where the baseline's kernels are known, the rule compares kernels by full
    demangled name, template arguments included (``reduce_kernel<float>`` is not
    ``reduce_kernel<double>``), and not outermost op names: ``(a.double() @ b.double())``
    and ``a @ b`` share ``aten::matmul`` and no kernel, a DGEMM and an SGEMM being different
    work; a candidate that reaches the baseline's own kernel is caught under any op name.
    Where no kernel is known (a CPU trace, or a baseline that launched only structural
    ones) the op-name rule stays. Calls on the baseline's own operands (same op, operand
    classes, sizes and dtypes) are forbidden under both. The finding names the rule."""
    ops, kernels = baseline_fingerprint(base, expect.allow)
    signatures = {c.signature: c for c in baseline_calls(base, expect.allow)}
    gpu = cand.on_gpu and base.on_gpu
    if not gpu:
        kernels = ()
    by_kernels = bool(kernels)
    rule = RULE_KERNELS if by_kernels else RULE_OPS
    if by_kernels:
        ops = ()  # what ran is compared, not what it was called
    if not ops and not kernels and not signatures:
        return Finding("forbidden", True, "the baseline ran only structural or allowed work "
                       f"({_ran_ops(base)}); nothing of it to forbid, so this check is vacuous")
    forbidden_ops, forbidden_k = set(ops), set(kernels)
    hits = []
    cand_calls = calls_of(cand.meta)
    if cand_calls is not None:
        reruns = []
        for c in cand_calls:
            under = f" (under `{c.root}`)" if c.root != c.name else ""
            if c.name in forbidden_ops and c.computes:
                hits.append(f"baseline op `{c.name}` ran in the candidate{under}")
            elif any((c.name, c.operands[:n]) in signatures for n in range(1, len(c.operands) + 1)):
                # A prefix: an ``out=`` variant passes the output as one more operand.
                reruns.append(f"the baseline's call `{c.name}` on its own operands ({_operands(c)}) ran in the "
                              f"candidate{under}")
        # A forbidden outermost op brings its inner calls with it; name them only on their own.
        hits += [] if hits else reruns
    else:
        hits += [f"baseline op `{o.name}` ran in the candidate{_context(cand, o)}"
                 for o in cand.ops if o.name in forbidden_ops]
    for k in cand.kernels:
        if k.name in forbidden_k:
            hits.append(f"baseline kernel `{k.short_name}` ran in the candidate{_launcher(cand, k)}")
    if hits:
        fix = ("" if all(h.startswith("baseline op") for h in hits) else
               "; a candidate meant to reuse one of the baseline's calls lists the op under expect.allow")
        return Finding("forbidden", False, "; ".join(dict.fromkeys(hits)) + f"; {rule}" + fix)
    if by_kernels:
        desc = f"none of the baseline's {len(kernels)} kernel(s)"
        if signatures:
            desc += f" or its {len(signatures)} call(s) on its own operands"
    else:
        desc = f"none of the baseline's outermost ops ({_listing([f'`{n}`' for n in ops], 'none')})"
        if signatures:
            desc += f", its {len(signatures)} call(s) on its own operands"
    return Finding("forbidden", True, desc + f" ran in the candidate; {rule}")


def _check_launch(expect: Expect, cand: Trace) -> List[Finding]:
    out = []
    for le in expect.launch:
        want = _expected_launch(le)
        if not cand.on_gpu:
            out.append(Finding("launch", True,
                               f"not applicable: CPU-only trace, no kernels recorded ({want} unchecked)"))
            continue
        extra = _launch_extra(le)
        named = [k for k in cand.kernels if matches_kernel(le.kernel, k.name)]
        fitting = [k for k in named if _fits(k, le)]
        if fitting:
            out.append(Finding("launch", True, f"{_kernel_desc(fitting[0], extra)} ran as expected ({want})"))
        elif named:
            seen = _listing([_kernel_desc(k, extra) for k in named])
            out.append(Finding("launch", False, f"expected {want}; ran {seen}"))
        else:
            out.append(Finding("launch", False, f"expected {want}; ran {_ran_kernels(cand, extra)}"))
    return out


def _check_stream(cand: Trace, harness_stream: Optional[int]) -> Finding:
    if not cand.on_gpu:
        return Finding("stream", True, "not applicable: CPU-only trace, no streams recorded")
    stream = harness_stream if harness_stream is not None else cand.harness_stream
    if stream is None:
        return Finding("stream", False, "the harness stream is unknown, so the candidate's streams cannot "
                       "be checked (record with expkit.checks.recording.capture, which marks it, or pass harness_stream)")
    off = [k for k in cand.kernels if k.stream != stream]
    loose = cand.unordered_kernels(stream)
    if loose:
        listed = _listing([f"kernel `{k.short_name}` ran on stream {k.stream}" for k in loose])
        how = ("" if len(loose) == len(off) or "entry_end_us" not in cand.meta else
               f" ({len(off) - len(loose)} other kernel(s) off the stream were ordered with it)")
        why = ("" if "entry_end_us" not in cand.meta else
               ", unordered with it (started before the caller's earlier work ended, or still ran when the "
               "call had returned and its stream went on)")
        return Finding("stream", False, f"{listed}; the harness times stream {stream}{why}{how}")
    if off:
        streams = ", ".join(str(s) for s in dict.fromkeys(k.stream for k in off))
        return Finding("stream", True, f"{len(off)} of {len(cand.kernels)} candidate kernel(s) ran on stream(s) "
                       f"{streams}, each ordered with the harness stream {stream} at both ends of the call "
                       "(a library's own streams): in the call's span")
    return Finding("stream", True, f"all {len(cand.kernels)} candidate kernel(s) ran on the harness stream {stream}")


def unidentified(expect: Expect, on_gpu: bool) -> Optional[core_findings.Finding]:
    """The ``identity`` finding of a manifest that names nothing the candidate must run
    (no ``must_run``; on a GPU, no ``launch`` either), else None. It passes (nothing failed)
    and says what the run cannot show: that the speedup is the intended kernel's. Without
    it a report said "demonstrated" of a claim whose kernel nobody identified (issue 51)."""
    if expect.must_run or (on_gpu and expect.launch):
        return None
    return core_findings.Finding("identity", True, (
        f"{NOT_CHECKED}{UNIDENTIFIED}: the manifest names no expect.must_run, so the speedup is the candidate's as "
        "called, whatever it ran; name the intended op or kernel there (\"What ran\" lists the candidate's)"),
        severity=core_findings.WARNING)


def check_expectations(expect: Expect, candidate: Trace, baseline: Trace, *,
                       harness_stream: Optional[int] = None) -> Tuple[Finding, ...]:
    """Every check of ``expect`` against the candidate's trace (see module docstring).

    ``baseline`` is the trace of the baseline on the same inputs, used only for the
    ``forbid_baseline`` fingerprint. ``harness_stream`` is the CUPTI stream id the
    harness times; where ``None`` it is read from the candidate trace's marker.
    Findings come back in a fixed order: identity, forbidden, launch, stream.
    Checks the manifest turned off (``forbid_baseline: false``, ``same_stream:
    false``) produce no finding.
    """
    findings: List[Finding] = []
    findings += _check_must_run(expect, candidate)
    findings += _check_must_not_run(expect, candidate)
    if expect.forbid_baseline:
        findings.append(_check_baseline(expect, candidate, baseline))
    findings += _check_launch(expect, candidate)
    if expect.same_stream:
        findings.append(_check_stream(candidate, harness_stream))
    return tuple(findings)
