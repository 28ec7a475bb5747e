"""first_divergence / all_divergent on small hand-built models with planted bugs."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from expkit.checks.divergence import all_divergent, compare_modules, first_divergence

TOL = dict(rtol=1e-5, atol=1e-6)


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4)).eval()


def _x(seed: int = 1) -> torch.Tensor:
    return torch.randn(3, 8, generator=torch.Generator().manual_seed(seed))


def _perturb(model: nn.Module, name: str, delta: float) -> nn.Module:
    bad = copy.deepcopy(model)
    with torch.no_grad():
        bad.get_submodule(name).weight[0, 0] += delta
    return bad


def test_identical_models_have_no_divergence():
    a = _mlp()
    assert first_divergence(a, copy.deepcopy(a), (_x(),), **TOL) is None
    assert all_divergent(a, copy.deepcopy(a), (_x(),), **TOL) == ()


def test_origin_is_the_bad_layer_not_the_layers_downstream():
    a = _mlp()
    b = _perturb(a, "2", 0.5)
    d = first_divergence(a, b, (_x(),), **TOL)
    assert d is not None and d.module == "2" and d.module_type == "Linear"
    assert d.in_features == 16 and d.output_shape == (3, 16) and d.input_shapes == ((3, 16),)
    assert d.max_abs_diff > 1e-3
    # downstream ReLU "3", Linear "4" and the Sequential itself inherit the error: not origins
    assert [x.module for x in all_divergent(a, b, (_x(),), **TOL)] == ["2"]
    rows = {r.module: r for r in compare_modules(a, b, (_x(),), **TOL)}
    assert not rows["2"].output_agrees and rows["4"].output_agrees and rows[""].output_agrees


def test_two_bad_layers_are_both_found_in_execution_order():
    a = _mlp()
    b = _perturb(_perturb(a, "0", 0.5), "4", -0.25)
    found = all_divergent(a, b, (_x(),), **TOL)
    assert [d.module for d in found] == ["0", "4"]
    assert first_divergence(a, b, (_x(),), **TOL).module == "0"


def test_tolerance_decides():
    a = _mlp()
    # Below atol + rtol * |y| for outputs of order 0.1, and yet some ulps of them: a change
    # of 1e-7 could round away entirely on one CPU's BLAS and not on another's.
    b = _perturb(a, "2", 1e-6)
    assert first_divergence(a, b, (_x(),), **TOL) is None
    assert first_divergence(a, b, (_x(),), rtol=0.0, atol=0.0).module == "2"


class _Pair(nn.Module):
    """Returns a tuple; its second element is wrong when ``bug`` is set."""

    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.bug = bug

    def forward(self, x):
        return x * 2, (x + 1 + (0.1 if self.bug else 0.0)).sum(-1)


class _UsesPair(nn.Module):
    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.pair = _Pair(bug)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        a, s = self.pair(x)
        return self.out(a) + s.unsqueeze(-1)


def test_module_returning_a_tuple():
    torch.manual_seed(0)
    a = _UsesPair().eval()
    b = copy.deepcopy(a)
    b.pair.bug = True
    x = torch.randn(5, 4)
    found = all_divergent(a, b, (x,), **TOL)
    assert [d.module for d in found] == ["pair"]
    assert found[0].output_shape == (5,)  # the differing element of the tuple
    assert found[0].in_features is None
    assert math.isclose(found[0].max_abs_diff, 0.4, rel_tol=1e-5)  # 0.1 summed over 4


class _Glue(nn.Module):
    """A container with arithmetic of its own between and after its children."""

    def __init__(self, mid_scale: float = 1.0, out_shift: float = 0.0) -> None:
        super().__init__()
        self.f = nn.Linear(4, 4)
        self.g = nn.Linear(4, 4)
        self.mid_scale, self.out_shift = mid_scale, out_shift

    def forward(self, x):
        return self.g(self.f(x) * self.mid_scale) + x + self.out_shift


def test_container_code_between_children_is_blamed_with_feeds():
    torch.manual_seed(0)
    a = nn.Sequential(_Glue(), nn.Linear(4, 4)).eval()
    b = copy.deepcopy(a)
    b[0].mid_scale = 1.01
    found = all_divergent(a, b, (torch.randn(2, 4),), **TOL)
    assert [(d.module, d.module_type, d.feeds) for d in found] == [("0", "_Glue", "0.g")]
    assert found[0].output_shape == (2, 4)


def test_container_code_after_children_is_blamed():
    torch.manual_seed(0)
    a = nn.Sequential(_Glue(), nn.Linear(4, 4)).eval()
    b = copy.deepcopy(a)
    b[0].out_shift = 0.5
    found = all_divergent(a, b, (torch.randn(2, 4),), **TOL)
    assert [(d.module, d.feeds) for d in found] == [("0", None)]


class _KwargUser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)  # in-place: the recorded input must be a clone

    def forward(self, x, *, scale: float = 1.0):
        return self.act(self.lin(x)) * scale


def test_keyword_inputs_and_in_place_modules():
    torch.manual_seed(0)
    outer = nn.ModuleDict({"k": _KwargUser()})

    class Wrap(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m["k"](x, scale=2.0)

    a = Wrap(outer).eval()
    assert first_divergence(a, copy.deepcopy(a), (torch.randn(3, 4),), **TOL) is None
    b = _perturb(a, "m.k.lin", 1.0)
    assert [d.module for d in all_divergent(a, b, (torch.randn(3, 4),), **TOL)] == ["m.k.lin"]


def test_nan_agrees_only_with_nan():
    class NanAt(nn.Module):
        def __init__(self, other_bad: bool) -> None:
            super().__init__()
            self.other_bad = other_bad

        def forward(self, x):
            y = x.clone()
            y[0] = float("nan")
            if self.other_bad:
                y[1] = float("nan")
            return y

    x = torch.arange(4.0)
    assert first_divergence(NanAt(False), NanAt(False), (x,), **TOL) is None
    d = first_divergence(NanAt(False), NanAt(True), (x,), **TOL)
    assert d is not None and d.max_abs_diff == math.inf


def test_shape_mismatch_is_a_divergence():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 4)).eval()
    b = copy.deepcopy(a)
    b.append(nn.Flatten(0))  # b's model output has another shape
    d = first_divergence(a, b, (torch.randn(2, 4),), **TOL)
    assert d is not None and d.module == "" and d.max_abs_diff == math.inf


def test_active_dropout_is_refused():
    a = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))  # left in train mode
    with pytest.raises(ValueError, match="dropout"):
        first_divergence(a, copy.deepcopy(a), (torch.randn(2, 4),), **TOL)


def test_divergence_is_frozen_and_describes_itself():
    a = _mlp()
    d = first_divergence(a, _perturb(a, "4", 0.3), (_x(),), **TOL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.module = "x"  # type: ignore[misc]
    assert "4 (Linear, in_features=16): output [3, 4] differs" in d.describe()


class _Cast(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.to(self.dtype)


def test_candidate_in_lower_precision_keeps_its_dtype():
    a = nn.Sequential(_Cast(torch.float64), _mlp().double())
    b = nn.Sequential(_Cast(torch.float32), _mlp().float())
    # the baseline's float64 values are handed to b cast to float32, so b computes in float32:
    # its rounding (~1e-7 relative) passes rtol 1e-5 and fails an exact comparison
    assert first_divergence(a, b, (_x(),), rtol=1e-5, atol=1e-6) is None
    d = first_divergence(a, b, (_x(),), rtol=0.0, atol=0.0)
    assert d is not None and d.module == "1.0" and 0 < d.max_abs_diff < 1e-5


def test_models_are_left_without_hooks():
    a, b = _mlp(), _perturb(_mlp(), "0", 1.0)
    all_divergent(a, b, (_x(),), **TOL)
    for m in list(a.modules()) + list(b.modules()):
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert not torch.equal(a(_x()), b(_x()))  # b runs free again: no substitution left
    assert torch.equal(a(_x()), F.linear(F.relu(F.linear(F.relu(F.linear(
        _x(), a[0].weight, a[0].bias)), a[2].weight, a[2].bias)), a[4].weight, a[4].bias))
