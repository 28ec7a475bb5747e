"""Locate where a candidate model's numerics first part from the baseline's, module by module.

When a model-level oracle (perplexity, KL divergence) fails, the next question is *which
operator* is wrong. The answer here comes from running both models on clones of the same
inputs with hooks on every module (leaves and containers) and comparing, per module call,
what the candidate computed with what the baseline computed.

Algorithm (teacher forcing). A naive comparison of two free-running models blames everything
downstream of the first bug, and it cannot see a second bug at all: by the time the second bad
layer runs, its inputs already differ, so its error is indistinguishable from inherited error.
So the baseline runs first and every module call's inputs and outputs are recorded (cloned, in
call order, keyed by module name and call index). The candidate then runs with

* a forward pre-hook that first compares the inputs the candidate actually produced with the
  recorded ones, then replaces them with the recorded ones, and
* a forward hook that compares the candidate's output with the recorded one, then replaces it
  with the recorded one.

Each module is thus judged on exactly the inputs the baseline saw, and an error never travels
downstream: a module whose output differs is an *origin* by construction, however many other
origins there are. Code that lives in a container's own ``forward`` (a residual add, the
attention softmax in a hand-written block) is judged too: a container whose output differs while
its children were all substituted is itself the origin; and when the inputs the candidate
computed for child ``X`` differ from the baseline's, the container (the module running when
``X`` was called) is an origin with ``feeds="X"``, because only its own code sits between its
children's (substituted, agreeing) outputs and ``X``'s inputs.

Trade-offs and limits, stated:

* Memory: every module call's inputs and outputs are kept, so use a small batch.
* Matching is by module name and call index, so both models must have the same module tree
  (true for a deep copy with swapped kernels, e.g. :func:`expkit.zoo.tinylm.swap_linears`).
* Work done by calling ``submodule.forward(...)`` directly, or by plain functions outside any
  module, is not separable from the enclosing module's own code.
* Substituted tensors are cast to the dtype and device of the candidate's own tensor, so a
  candidate running in a lower precision keeps doing so; the comparison is done in float64 on
  the CPU, with ``|cand - base| <= atol + rtol * |base|`` per element (``torch.isclose`` with the
  baseline as reference); NaN agrees only with NaN, integer and bool tensors must be equal.
* Randomness inside the models (dropout in train mode) would make every call differ, so models
  that hold an active dropout are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import nn

_Key = Tuple[str, int]


@dataclass(frozen=True)
class Divergence:
    """One origin of divergence.

    ``module`` is the qualified name (``""`` is the model itself). ``max_abs_diff`` and
    ``max_rel_diff`` are over the differing tensor's elements (``inf`` for a shape, dtype or
    structure mismatch). ``output_shape`` is that tensor's shape; ``input_shapes`` the shapes of
    the module's tensor inputs. ``feeds`` is set when the difference is in the inputs this
    module's own code computed for its child ``feeds`` rather than in its output. ``call`` is the
    index of the module's call (0 for a module called once).
    """

    module: str
    module_type: str
    max_abs_diff: float
    max_rel_diff: float
    input_shapes: Tuple[Tuple[int, ...], ...]
    output_shape: Tuple[int, ...]
    in_features: Optional[int]
    call: int = 0
    feeds: Optional[str] = None

    def describe(self) -> str:
        name = self.module or "(model)"
        what = f"inputs of {self.feeds}" if self.feeds is not None else "output"
        extra = f", in_features={self.in_features}" if self.in_features is not None else ""
        return (f"{name} ({self.module_type}{extra}): {what} {list(self.output_shape)} differs, "
                f"max |diff| {self.max_abs_diff:.3g}, max rel {self.max_rel_diff:.3g}")


@dataclass(frozen=True)
class ModuleDiff:
    """One module call of the candidate, compared with the baseline's (a row of the full table)."""

    module: str
    module_type: str
    call: int
    inputs_agree: bool
    output_agrees: bool
    max_abs_diff: float
    max_rel_diff: float


@dataclass(frozen=True)
class _Cmp:
    ok: bool
    max_abs: float
    max_rel: float
    shape: Tuple[int, ...]


# --------------------------------------------------------------------------- nested values

def _leaves(x: Any) -> Iterator[Any]:
    if isinstance(x, (tuple, list)):
        for item in x:
            yield from _leaves(item)
    elif isinstance(x, Mapping):
        for k in sorted(x, key=repr):
            yield from _leaves(x[k])
    else:
        yield x


def _structure(x: Any) -> Any:
    """A hashable skeleton: containers and keys, with tensors and other leaves as markers."""
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_structure(i) for i in x))
    if isinstance(x, Mapping):
        return ("map", tuple((repr(k), _structure(x[k])) for k in sorted(x, key=repr)))
    return "T" if isinstance(x, torch.Tensor) else "-"


def _map(fn, x: Any) -> Any:
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # named tuple
        return type(x)(*(_map(fn, i) for i in x))
    if isinstance(x, (tuple, list)):
        return type(x)(_map(fn, i) for i in x)
    if isinstance(x, Mapping):
        return type(x)((k, _map(fn, v)) for k, v in x.items())
    return fn(x)


def _map2(fn, ref: Any, like: Any) -> Any:
    """Rebuild ``ref`` with ``fn(ref_leaf, like_leaf)`` at each leaf; same structure assumed."""
    if isinstance(ref, tuple) and hasattr(ref, "_fields"):
        return type(ref)(*(_map2(fn, r, l) for r, l in zip(ref, like)))
    if isinstance(ref, (tuple, list)):
        return type(ref)(_map2(fn, r, l) for r, l in zip(ref, like))
    if isinstance(ref, Mapping):
        return type(ref)((k, _map2(fn, ref[k], like[k])) for k in ref)
    return fn(ref, like)


def _snapshot(x: Any) -> Any:
    # Clone: a later in-place op (x += ..., ReLU(inplace=True)) must not rewrite the record.
    return _map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def _adopt(ref: Any, like: Any) -> Any:
    """The baseline's value ``ref``, cast to the dtype and device of the candidate's ``like``."""
    def leaf(r: Any, l: Any) -> Any:
        if isinstance(r, torch.Tensor) and isinstance(l, torch.Tensor):
            return r.to(device=l.device, dtype=l.dtype, copy=True)
        if isinstance(r, torch.Tensor):
            return r.clone()
        return r
    return _map2(leaf, ref, like)


def _shapes(x: Any) -> Tuple[Tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in _leaves(x) if isinstance(t, torch.Tensor))


def _compare(cand: Any, base: Any, rtol: float, atol: float) -> _Cmp:
    """Compare candidate and baseline values leaf by leaf; report the worst leaf, preferring
    one that fails the tolerance over one that merely has the largest difference."""
    if _structure(cand) != _structure(base):
        return _Cmp(False, math.inf, math.inf, ())
    ok, worst = True, (False, 0.0, 0.0, ())  # (fails, max_abs, max_rel, shape)
    for c, b in zip(_leaves(cand), _leaves(base)):
        if not isinstance(b, torch.Tensor):
            if c is not b and c != b:
                return _Cmp(False, math.inf, math.inf, ())
            continue
        if c.shape != b.shape or c.dtype.is_floating_point != b.dtype.is_floating_point:
            return _Cmp(False, math.inf, math.inf, tuple(b.shape))
        if c.numel() == 0:
            continue
        if b.is_complex() and c.is_complex():
            c, b = torch.view_as_real(c), torch.view_as_real(b)
        cd, bd = c.detach().cpu().double(), b.detach().cpu().double()
        if b.dtype.is_floating_point:
            same = (cd == bd) | (torch.isnan(cd) & torch.isnan(bd))  # also equal infinities
            diff = torch.where(same, torch.zeros_like(cd), (cd - bd).abs().nan_to_num(math.inf))
            close = same | (diff <= atol + rtol * bd.abs())
        else:
            diff = (cd - bd).abs()
            close = diff == 0
        rel = torch.where(diff == 0, torch.zeros_like(diff), diff / bd.abs()).nan_to_num(math.inf)
        leaf = (not bool(close.all()), float(diff.max()), float(rel.max()), tuple(b.shape))
        ok = ok and not leaf[0]
        if leaf[:2] > worst[:2]:
            worst = leaf
    return _Cmp(ok, worst[1], worst[2], worst[3])


# --------------------------------------------------------------------------- the two passes

def _check_deterministic(model: nn.Module) -> None:
    for name, m in model.named_modules():
        if "Dropout" in type(m).__name__ and m.training and getattr(m, "p", 0) > 0:
            raise ValueError(f"{name or type(model).__name__}: dropout is active; call .eval() "
                             "on both models, or every call would differ")


def _device_of(model: nn.Module) -> Optional[torch.device]:
    for p in model.parameters():
        return p.device
    return None


def _place(inputs: tuple, model: nn.Module) -> tuple:
    dev = _device_of(model)
    return _map(lambda t: (t.detach().clone().to(dev) if dev is not None else t.detach().clone())
                if isinstance(t, torch.Tensor) else t, tuple(inputs))


def _in_features(m: nn.Module) -> Optional[int]:
    v = getattr(m, "in_features", None)
    return v if isinstance(v, int) else None


def record(model: nn.Module, inputs: tuple):
    """Every module call's inputs and outputs of ``model`` on ``inputs`` (the baseline's
    side of :func:`all_divergent`, for a replay in another process)."""
    _check_deterministic(model)
    return _record(model, _place(inputs, model))


def replay(model: nn.Module, inputs: tuple, ins: Any, outs: Any, rtol: float, atol: float) -> Tuple["Divergence", ...]:
    """The candidate's side of :func:`all_divergent` against a :func:`record` made elsewhere."""
    _check_deterministic(model)
    _, origins = _replay(model, _place(inputs, model), ins, outs, rtol, atol)
    return _unique_origins(origins)


def _record(model: nn.Module, inputs: tuple):
    ins: Dict[_Key, Any] = {}
    outs: Dict[_Key, Any] = {}
    calls: Dict[str, int] = {}
    stack: List[_Key] = []

    def pre(name):
        def hook(mod, args, kwargs):
            key = (name, calls.get(name, 0))
            calls[name] = key[1] + 1
            ins[key] = _snapshot((args, kwargs))
            stack.append(key)
        return hook

    def post(name):
        def hook(mod, args, kwargs, output):
            outs[stack.pop()] = _snapshot(output)
        return hook

    _run_hooked(model, inputs, pre, post)
    return ins, outs


def _run_hooked(model: nn.Module, inputs: tuple, pre, post) -> None:
    """One no-grad forward of ``model`` with ``pre(name)``/``post(name)`` hooks (with
    kwargs) on every module, removed again whatever happens."""
    handles = []
    try:
        for name, m in model.named_modules():
            handles.append(m.register_forward_pre_hook(pre(name), with_kwargs=True))
            handles.append(m.register_forward_hook(post(name), with_kwargs=True))
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()


def _replay(model: nn.Module, inputs: tuple, ins, outs, rtol: float, atol: float):
    rows: List[ModuleDiff] = []
    origins: List[Divergence] = []
    calls: Dict[str, int] = {}
    stack: List[Tuple[_Key, nn.Module, bool]] = []

    def pre(name):
        def hook(mod, args, kwargs):
            key = (name, calls.get(name, 0))
            calls[name] = key[1] + 1
            ref = ins.get(key)
            if ref is None:  # the baseline never made this call: nothing to compare or adopt
                stack.append((key, mod, True))
                return None
            got = (args, kwargs)
            cmp = _compare(got, ref, rtol, atol)
            if not cmp.ok and stack:
                (pname, pcall), parent, _ = stack[-1]
                origins.append(Divergence(
                    pname, type(parent).__name__, cmp.max_abs, cmp.max_rel,
                    _shapes(ins.get((pname, pcall))), cmp.shape, _in_features(parent),
                    call=pcall, feeds=name))
            stack.append((key, mod, cmp.ok))
            if _structure(got) != _structure(ref):
                return None  # cannot adopt across a different call signature; run as is
            new_args, new_kwargs = _adopt(ref, got)
            return tuple(new_args), dict(new_kwargs)
        return hook

    def post(name):
        def hook(mod, args, kwargs, output):
            key, _, inputs_ok = stack.pop()
            ref = outs.get(key)
            if ref is None:
                return None
            cmp = _compare(output, ref, rtol, atol)
            rows.append(ModuleDiff(name, type(mod).__name__, key[1], inputs_ok, cmp.ok,
                                   cmp.max_abs, cmp.max_rel))
            if not cmp.ok:
                origins.append(Divergence(
                    name, type(mod).__name__, cmp.max_abs, cmp.max_rel, _shapes(ins[key]),
                    cmp.shape, _in_features(mod), call=key[1]))
            if _structure(output) != _structure(ref):
                return None
            return _adopt(ref, output)  # downstream sees the baseline's value
        return hook

    _run_hooked(model, inputs, pre, post)
    return rows, origins


def _run(model_a, model_b, inputs, rtol, atol):
    if rtol < 0 or atol < 0:
        raise ValueError("rtol and atol must be non-negative")
    _check_deterministic(model_a)
    _check_deterministic(model_b)
    ins, outs = _record(model_a, _place(inputs, model_a))
    return _replay(model_b, _place(inputs, model_b), ins, outs, rtol, atol)


# --------------------------------------------------------------------------- public API

def all_divergent(model_a: nn.Module, model_b: nn.Module, inputs: tuple, rtol: float,
                  atol: float) -> Tuple[Divergence, ...]:
    """Every origin of divergence of ``model_b`` (candidate) from ``model_a`` (baseline), in
    execution order, one per module (its first divergent call). Empty when they agree."""
    _, origins = _run(model_a, model_b, inputs, rtol, atol)
    return _unique_origins(origins)


def _unique_origins(origins: Any) -> Tuple["Divergence", ...]:
    seen, out = set(), []
    for d in origins:
        if (d.module, d.feeds) not in seen:
            seen.add((d.module, d.feeds))
            out.append(d)
    return tuple(out)


def first_divergence(model_a: nn.Module, model_b: nn.Module, inputs: tuple, rtol: float,
                     atol: float) -> Optional[Divergence]:
    """The first origin in execution order (modules complete before their containers), or
    ``None`` when every module call agrees within tolerance."""
    found = all_divergent(model_a, model_b, inputs, rtol, atol)
    return found[0] if found else None


def compare_modules(model_a: nn.Module, model_b: nn.Module, inputs: tuple, rtol: float,
                    atol: float) -> Tuple[ModuleDiff, ...]:
    """Every module call of the candidate with its comparison, agreeing ones included, in
    completion order: the full table behind :func:`all_divergent`, for reports."""
    rows, _ = _run(model_a, model_b, inputs, rtol, atol)
    return tuple(rows)
