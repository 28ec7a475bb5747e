"""Check a candidate's profiler trace against the manifest's ``expect:`` block.

The question is "did the kernel the claim is about actually run?" -- in the regression
story behind this module a "vectorized, 384-thread" kernel was credited with a 1.7x
speedup while the bindings still launched the old 128-thread one. Each check returns
a :class:`Finding` whose message names both what was expected and what ran, so a
failed check reads as a diagnosis rather than a bare "identity failed".

Patterns (``must_run``, ``must_not_run``, ``allow``, ``launch[].kernel``) are
case-sensitive globs (:func:`fnmatch.fnmatchcase`) or, prefixed ``re:``, regular
expressions used with :func:`re.search`. A glob matches an op by its full qualified
name (``expkit_examples::attn_basic``, ``aten::mm``) and a kernel by its full
demangled name, its ``ns::function`` name or its bare function name (see
:func:`expkit.trace.kernel_short_name`), so ``attn_vectorized*`` matches
``attn_vectorized_k384(float4 const*, float4*, float, int)`` without spelling the
parameter list. A regex is searched in the full name.

Checks, in the order their findings come back:

``identity`` (``must_run``)
    Each pattern must match an op (CPU) or an op or a kernel (GPU) of the candidate.
    On GPU an op name only proves which wrapper was called -- in the story the
    wrapper's name was right and its kernel wrong -- so GPU claims should also name
    the kernel in a ``launch`` entry.
``forbidden`` (``must_not_run`` and ``forbid_baseline``)
    No op or kernel may match ``must_not_run``. With ``forbid_baseline`` the
    baseline's own work may not appear in the candidate unless ``allow`` matches it;
    see :func:`baseline_fingerprint` for what counts as the baseline's work.
``launch`` (GPU)
    For each entry, at least one candidate kernel matching the name pattern must
    have exactly the expected block and grid and at most the expected shared memory
    and registers. The name must match too: block size alone is never proof -- on
    an H100 the cuDNN SDPA kernel also runs 384 threads per block (fixture
    ``tests/data/traces/sdpa_fp16.json``), the same count as the story's kernel.
``stream`` (GPU, ``same_stream``)
    Every candidate kernel must run on the stream the harness times; work queued on
    a side stream escapes a timer that records events on the harness stream.

On a CPU-only trace (no CUDA activity recorded) ``launch`` and ``stream`` findings
are "not applicable": ``ok`` with a message saying so, never a silent pass and never
a failure. On a GPU trace, a launch entry with no kernel at all is a failure.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from .errors import ExpkitError
from .manifest import Expect, LaunchExpect
from .trace import KernelEvent, OpEvent, Trace, kernel_qualified_name, kernel_short_name

#: Ops any implementation may run, excluded from the baseline's fingerprint. They
#: fall in three groups, none of which can carry the baseline's result:
#:
#: * allocation and constant initialisation (``empty*``, ``zeros*``, ``ones*``,
#:   ``full*``, ``new_*``, ``fill_``, ``zero_``, ``resize_``, ``set_``): they read no
#:   input. ``aten::zeros`` is here although it writes memory: what it writes is a
#:   constant, and forbidding it would reject every candidate that zero-initialises
#:   an output or accumulator. A candidate that *returns* zeros is the oracles' job.
#: * views and metadata (``view``, ``reshape``, ``as_strided``, ``t``, ``transpose``,
#:   ``permute``, ``expand``, ``squeeze`` ...): they compute nothing.
#: * copies and dtype/layout conversion (``contiguous``, ``clone``, ``copy_``, ``to``,
#:   ``_to_copy``): data movement that both sides may need to prepare inputs.
#:
#: Where the baseline's work *is* one of these (a transpose-copy benchmark, say), the
#: fingerprint cannot tell the two apart; name the op in ``must_not_run`` instead.
STRUCTURAL_OPS: Tuple[str, ...] = (
    "aten::empty*", "aten::new_*", "aten::zeros*", "aten::ones*", "aten::full", "aten::full_like",
    "aten::fill_", "aten::zero_", "aten::resize_", "aten::resize_as_", "aten::set_",
    "aten::view", "aten::view_as", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias",
    "aten::as_strided", "aten::t", "aten::numpy_T", "aten::transpose", "aten::permute",
    "aten::expand", "aten::expand_as", "aten::squeeze", "aten::unsqueeze", "aten::flatten",
    "aten::unflatten", "aten::slice", "aten::select", "aten::narrow", "aten::alias",
    "aten::detach", "aten::detach_", "aten::lift*", "aten::resolve_conj", "aten::resolve_neg",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::record_stream",
)

#: Kernels any implementation may launch, excluded from the baseline's fingerprint
#: (matched against the full demangled name). Their GPU counterparts of the ops
#: above: the fill kernel behind ``fill_``/``zero_``/``zeros`` (its name, with
#: ``FillFunctor``, is in every GPU fixture, launched by the harness marker) and
#: torch's copy kernels behind ``copy_``/``clone``/``contiguous`` and dtype
#: conversion, whose lambdas are defined in ``direct_copy_kernel_cuda`` (and
#: ``float8_copy_kernel_cuda``) in ``aten/src/ATen/native/cuda/Copy.cu``. memset and
#: memcpy are separate trace categories that the parser does not read as kernels;
#: the ``Memset``/``Memcpy`` names are listed in case a tool reports them as kernels.
STRUCTURAL_KERNELS: Tuple[str, ...] = (
    "*FillFunctor*", "*copy_kernel_cuda*", "Memset*", "Memcpy*",
)

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


def baseline_fingerprint(baseline: Trace, allow: Sequence[str] = ()) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The op and kernel names that identify the baseline's work: ``(ops, kernels)``.

    Ops: the baseline's *top-level* op names, less :data:`STRUCTURAL_OPS` and
    ``allow``. Top level only, because that is the baseline's identity: the call the
    user wrote (``aten::scaled_dot_product_attention``, ``aten::matmul``). The ops
    nested under it (``aten::bmm``, ``aten::_softmax`` inside SDPA's math path, or
    ``aten::mm`` under ``aten::matmul``) are implementation details that an honest
    candidate may legitimately share; forbidding them would reject a fused kernel
    that still uses one ``mm``. A candidate that calls the baseline still shows the
    top-level op somewhere in its tree, which is where it is looked for (any depth).

    Kernels (GPU traces): every kernel name the baseline launched, less
    :data:`STRUCTURAL_KERNELS` and ``allow``, compared by full demangled name: a
    bare name such as ``vectorized_elementwise_kernel`` is shared by unrelated
    element-wise ops, while the full name carries the functor. Where the baseline is
    itself a chain of generic library kernels (cuBLAS GEMMs, say) that the candidate
    also uses on purpose, list them under ``allow``.
    """
    ops = tuple(n for n in baseline.op_names(top_level=True)
                if not _any(STRUCTURAL_OPS, n, matches_op) and not _any(allow, n, matches_op))
    kernels = tuple(n for n in baseline.kernel_names()
                    if not _any(STRUCTURAL_KERNELS, n, matches_op) and not _any(allow, n, matches_kernel))
    return ops, kernels


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


def _check_baseline(expect: Expect, cand: Trace, base: Trace) -> Finding:
    ops, kernels = baseline_fingerprint(base, expect.allow)
    gpu = cand.on_gpu and base.on_gpu
    if not gpu:
        kernels = ()
    if not ops and not kernels:
        return Finding("forbidden", True, "the baseline ran only structural or allowed work "
                       f"({_ran_ops(base)}); nothing of it to forbid, so this check is vacuous")
    forbidden_ops, forbidden_k = set(ops), set(kernels)
    hits = [f"baseline op `{o.name}` ran in the candidate{_context(cand, o)}"
            for o in cand.ops if o.name in forbidden_ops]
    for k in cand.kernels:
        if k.name in forbidden_k:
            hits.append(f"baseline kernel `{k.short_name}` ran in the candidate{_launcher(cand, k)}")
    if hits:
        return Finding("forbidden", False, "; ".join(dict.fromkeys(hits)))
    desc = f"none of the baseline's top-level ops ({_listing([f'`{n}`' for n in ops], 'none')})"
    if gpu:
        desc += f" or its {len(kernels)} kernel(s)"
    return Finding("forbidden", True, desc + " ran in the candidate")


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
                       "be checked (record with expkit.trace.capture, which marks it, or pass harness_stream)")
    off = [k for k in cand.kernels if k.stream != stream]
    if off:
        listed = _listing([f"kernel `{k.short_name}` ran on stream {k.stream}" for k in off])
        return Finding("stream", False, f"{listed}; the harness times stream {stream}")
    return Finding("stream", True, f"all {len(cand.kernels)} candidate kernel(s) ran on the harness stream {stream}")


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
