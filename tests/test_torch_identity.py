"""The torch callable identity audit (bench/defences/tamper.py) and the mode stacks (checks/global_state.py).

A candidate that replaces a torch function the harness or the baseline calls, or pushes
a torch function mode that never pops, is seen at the next check.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from expkit.bench.defences import tamper
from expkit.checks.global_state import snapshot_state, state_changes


def test_every_watched_torch_name_resolves():
    missing = []
    for name in tamper.HARNESS_TORCH:
        try:
            tamper._resolve_dotted(name)  # noqa: SLF001 -- the same lookup the snapshot makes
        except Exception:
            missing.append(name)
    assert not missing
    assert tamper.foreign(tamper.HARNESS_TORCH) == []


def test_a_replaced_harness_method_is_seen_at_the_next_hot_check(monkeypatch):
    snap = tamper.FunctionSnapshot.take()
    assert snap.changed(hot_only=True) == []
    monkeypatch.setattr(torch.Tensor, "element_size", lambda self: 1)
    assert "torch.Tensor.element_size (replaced)" in snap.changed(hot_only=True)
    monkeypatch.undo()
    assert snap.changed(hot_only=True) == []


def test_the_hot_check_sees_a_swapped_code_object_and_a_replaced_module_function(monkeypatch):
    from expkit.timing import per_call

    snap = tamper.FunctionSnapshot.take()
    assert snap.changed(hot_only=True) == []
    cls = per_call.PerCallTimer
    name = next(a for a, v in vars(cls).items() if callable(v) and hasattr(v, "__code__"))
    monkeypatch.setattr(getattr(cls, name), "__code__", (lambda *a, **k: None).__code__)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    got = snap.changed(hot_only=True)
    assert f"expkit.timing.per_call.PerCallTimer.{name} (code swapped)" in got, got
    assert "time.perf_counter (replaced)" in got, got
    monkeypatch.undo()
    assert snap.changed(hot_only=True) == []


def test_a_cpu_blocks_hot_check_leaves_the_gpu_timings_functions_to_the_case_checkpoints(monkeypatch):
    """A CPU block's timer and recheck never call the CUDA timer, the kernel-time recorder
    or ``torch.cuda``: its hot check skips them (``gpu=False``), a GPU block's reads them,
    and the full check at the case's end sees them either way. What a CPU block does call
    (its timer, the clocks, the recheck's oracles) stays in its hot check."""
    from expkit.timing import cuda_timer, per_call

    snap = tamper.FunctionSnapshot.take()
    assert snap.changed(hot_only=True, gpu=False) == [] and snap.changed(hot_only=True) == []
    monkeypatch.setattr(cuda_timer.CudaTimer, "sample", lambda self, fn, number: 1e-9)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    assert snap.changed(hot_only=True, gpu=False) == []
    gpu = snap.changed(hot_only=True)
    assert "expkit.timing.cuda_timer.CudaTimer.sample (replaced)" in gpu and "torch.cuda.synchronize (replaced)" in gpu
    assert "expkit.timing.cuda_timer.CudaTimer.sample (replaced)" in snap.changed()
    monkeypatch.setattr(per_call.PerCallTimer, "sample", lambda self, fn, number: 1e-9)
    assert snap.changed(hot_only=True, gpu=False) == ["expkit.timing.per_call.PerCallTimer.sample (replaced)"]
    snap.watch(["torch.softmax"])  # a later watch rebuilds both hot subsets
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: None)
    assert "torch.softmax (replaced)" in snap.changed(hot_only=True, gpu=False)


def test_the_hot_check_sees_an_inherited_method_shadowed_and_a_module_function_removed(monkeypatch):
    """``torch.Tensor.clone`` lives on a base class: assigning ``torch.Tensor.clone`` puts a
    new one in front of it without touching the original, and the hot check still sees it;
    a watched function deleted from its module is reported removed."""
    from expkit.checks import oracles

    snap = tamper.FunctionSnapshot.take()
    assert snap.changed(hot_only=True) == []
    assert "clone" not in vars(torch.Tensor)  # inherited, as the check assumes
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, **k: self, raising=False)
    assert "torch.Tensor.clone (replaced)" in snap.changed(hot_only=True)
    monkeypatch.undo()
    assert snap.changed(hot_only=True) == []
    name = next(a for a, v in vars(oracles).items()
                if callable(v) and getattr(v, "__module__", None) == oracles.__name__ and hasattr(v, "__code__"))
    monkeypatch.delattr(oracles, name)
    assert f"expkit.checks.oracles.{name} (removed)" in snap.changed(hot_only=True)
    monkeypatch.undo()
    assert snap.changed(hot_only=True) == []


def test_the_baselines_callables_come_from_its_ops():
    names = tamper.torch_callables_for(["aten::softmax", "aten::linear", "aten::add_", "aten::_softmax",
                                        "aten::mm.out", "expkit::op", "aten::no_such_op"])
    assert {"torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.nn.functional.linear",
            "torch.Tensor.add_", "torch.mm", "torch.Tensor.mm"} <= set(names)
    assert not any("_softmax" in n or "no_such_op" in n or "expkit" in n for n in names)


def test_watch_adds_the_baselines_callables_and_flags_one_replaced_before(monkeypatch):
    snap = tamper.FunctionSnapshot.take()
    monkeypatch.setattr(F, "gelu", lambda x, approximate="none": x)  # before the watch: not torch's own
    names = tamper.torch_callables_for(["aten::gelu", "aten::softmax"])
    assert snap.watch(names) == ["torch.nn.functional.gelu (not torch's own)"]
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: None)  # after: replaced
    assert "torch.softmax (replaced)" in snap.changed(hot_only=True)


def test_foreign_accepts_torchs_own_python_and_builtins():
    assert tamper.foreign(["torch.nn.functional.softmax", "torch.mm", "torch.Tensor.add_",
                           "torch.Tensor.__torch_function__", "torch.cuda.synchronize"]) == []


def test_a_code_swap_in_place_is_seen(monkeypatch):
    snap = tamper.FunctionSnapshot.take()
    fn = F.softmax
    snap.watch(["torch.nn.functional.softmax"])
    monkeypatch.setattr(fn, "__code__", (lambda input, dim=None, _stacklevel=3, dtype=None: input).__code__)
    assert "torch.nn.functional.softmax (code swapped)" in snap.changed(hot_only=True)


def test_a_pushed_torch_function_mode_is_a_change_of_global_state():
    from torch.overrides import TorchFunctionMode

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    before = snapshot_state()
    mode = Spy()
    mode.__enter__()
    try:
        changes = state_changes(before, snapshot_state())
    finally:
        mode.__exit__(None, None, None)
    assert changes == ["torch function modes (stack depth): 0 -> 1"]
    assert state_changes(before, snapshot_state()) == []


def test_the_hot_check_is_cheap():
    """The cost the lead's per-block call adds (figures in evidence/harness-cost/defence-overhead/README.md)."""
    snap = tamper.FunctionSnapshot.take()
    snap.watch(tamper.torch_callables_for(["aten::softmax", "aten::mm", "aten::linear"]))
    snap.changed(hot_only=True)
    t0 = time.perf_counter()
    for _ in range(200):
        snap.changed(hot_only=True)
    per = (time.perf_counter() - t0) / 200
    assert per < 5e-3  # a loose ceiling for a loaded CI machine; the measured figure is far below
