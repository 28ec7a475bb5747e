import textwrap

import pytest

from expkit.bench.sides.in_process import preflight_in_process
from expkit.checks import preflight
from expkit.core.errors import ManifestError
from expkit.manifest import load
from expkit.manifest.settings import OracleSettings

KERNELS = textwrap.dedent('''
    import torch
    def inputs(params, gen, device):
        n = params["n"]
        return (torch.randn(n, generator=gen, device=device),)
    def base(x): return x * 2
    def good(x): return x + x
    def tail_unwritten(x):
        out = torch.empty_like(x)
        k = (x.numel() // 4) * 4
        out[:k] = x[:k] * 2
        return out
    def mutates(x):
        y = x * 2
        x.zero_()
        return y
    def aliased(x): return x.mul_(2)
    class Lazy(torch.Tensor): pass
    def subclass(x): return (x * 2).as_subclass(Lazy)
    def raises(x): raise RuntimeError("boom")
    def bad_factory(params, gen, device): raise KeyError("n")
    def tiny_inputs(params, gen, device):
        return (1e-9 * torch.randn(params["n"], generator=gen, device=device),)
''')


def setup(tmp_path, candidate, factory="k:inputs", free="[n]", oracle="{kind: allclose}"):
    (tmp_path / "k.py").write_text(KERNELS)
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f'''
        name: t
        claim: {{speedup: 1.5}}
        baseline: k:base
        candidate: k:{candidate}
        inputs: {{factory: "{factory}", free: {free}}}
        cases: [{{name: c, params: {{n: 64}}}}]
        oracles: [{oracle}]
    '''))
    lm = load(tmp_path / "m.yaml")
    import importlib, sys
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("k", None)
    k = importlib.import_module("k")
    sys.path.remove(str(tmp_path))
    return lm, k


def run(tmp_path, candidate, **kw):
    lm, k = setup(tmp_path, candidate, **kw)
    factory = getattr(k, lm.manifest.inputs.factory.split(":")[1])
    return preflight_in_process(lm, k.base, getattr(k, candidate), factory, run_seed=1,
                                settings=OracleSettings(), device="cpu")


def failures(res):
    return [(f.check, f.case) for f in res.findings if not f.ok]


def test_honest_candidate_passes_every_case_including_edges(tmp_path):
    res = run(tmp_path, "good")
    assert not res.invalid, failures(res)
    assert "c/n=13" in res.cases_checked and "c/n=65" in res.cases_checked


def test_unwritten_tail_fails_only_on_awkward_sizes(tmp_path):
    res = run(tmp_path, "tail_unwritten")
    assert res.invalid
    bad_cases = {c for _, c in failures(res)}
    assert "c" not in bad_cases and "c/n=13" in bad_cases
    msg = next(f.message for f in res.findings if f.case == "c/n=13")
    assert "NaN" in msg  # poisoned allocation shows the unwritten elements


def test_input_mutation_is_caught(tmp_path):
    assert ("inputs", "c") in failures(run(tmp_path, "mutates"))


def test_aliased_output_is_caught(tmp_path):
    res = run(tmp_path, "aliased")
    assert any(f.check in ("output", "inputs") for f in res.findings if not f.ok)


def test_tensor_subclass_output_is_rejected(tmp_path):
    res = run(tmp_path, "subclass")
    assert ("output", "c") in failures(res)


def test_crash_is_invalid_with_the_error(tmp_path):
    res = run(tmp_path, "raises")
    f = next(f for f in res.findings if f.check == "crash")
    assert "RuntimeError: boom" in f.message


def test_vacuous_oracle_is_flagged(tmp_path):
    res = run(tmp_path, "good", factory="k:tiny_inputs", free="[]")
    assert any(f.check == "calibration:allclose" and not f.ok for f in res.findings)


def test_factory_error_is_a_manifest_error(tmp_path):
    with pytest.raises(ManifestError) as e:
        run(tmp_path, "good", factory="k:bad_factory")
    assert e.value.key == "inputs.factory" and "KeyError" in str(e.value)


def test_seeds_are_derived_and_replayable():
    assert preflight.derive_seed(1, "c", 0) == preflight.derive_seed(1, "c", 0)
    assert preflight.derive_seed(1, "c", 0) != preflight.derive_seed(2, "c", 0)


def test_edge_sizes_avoid_friendly_divisors():
    sizes = preflight.edge_sizes(4096)
    assert 4097 in sizes and 1 in sizes and 4096 not in sizes
    for d in (4, 8, 16, 128):
        assert any(s % d for s in sizes)


RELU = textwrap.dedent('''
    import torch
    def nonnegative(params, gen, device):
        return (torch.rand(params["n"], generator=gen, device=device),)
    def relu(x): return torch.relu(x)
    def clamp(x): return x.clamp(min=0)
''')


def test_an_op_that_is_the_identity_on_its_inputs_is_a_warning_not_a_vacuous_oracle(tmp_path):
    """Regression (KernelBench 19_ReLU with its reference as the candidate): torch.rand inputs
    are never negative, so "the input passed through" *is* the right answer; that is the
    inputs' property, not a defect of the oracle or of the candidate."""
    (tmp_path / "kr.py").write_text(RELU)
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: t
        claim: {speedup: 1.0}
        baseline: kr:relu
        candidate: kr:clamp
        inputs: {factory: "kr:nonnegative"}
        cases: [{name: c, params: {n: 4096}}]
    '''))
    lm = load(tmp_path / "m.yaml")
    import importlib, sys
    sys.path.insert(0, str(tmp_path))
    k = importlib.import_module("kr")
    sys.path.remove(str(tmp_path))
    res = preflight_in_process(lm, k.relu, k.clamp, k.nonnegative, run_seed=1, settings=OracleSettings(),
                               device="cpu")
    assert not res.invalid, failures(res)
    (f,) = [f for f in res.findings if f.check.startswith("calibration:")]
    assert f.severity == "warning" and "cannot tell the right answer from an input passed through" in f.message


WIDE_SOFTMAX = textwrap.dedent('''
    import torch
    def wide(params, gen, device):
        return (torch.rand(params["rows"], params["cols"], generator=gen, device=device),)
    def softmax(x): return torch.softmax(x, dim=-1)
    def softmax_by_hand(x):
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        return e / e.sum(dim=-1, keepdim=True)
    def softmax_too_flat(x):
        return torch.full_like(x, 1.0 / x.shape[-1])
''')


def _wide_softmax(tmp_path, candidate):
    """KernelBench's 23_Softmax story at a CPU size: every output of a softmax of uniform
    inputs over 65,536 columns is under 2.6e-5, below KernelBench's fp32 atol of 1e-4, so
    zeros pass it."""
    (tmp_path / "ws.py").write_text(WIDE_SOFTMAX)
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f'''
        name: t
        claim: {{speedup: 1.0}}
        baseline: ws:softmax
        candidate: ws:{candidate}
        inputs: {{factory: "ws:wide"}}
        oracles: [{{kind: allclose, rtol: 1.0e-4, atol: 1.0e-4}}]
        cases: [{{name: c, params: {{rows: 4, cols: 65536}}}}]
    '''))
    lm = load(tmp_path / "m.yaml")
    import importlib, sys
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("ws", None)
    k = importlib.import_module("ws")
    sys.path.remove(str(tmp_path))
    return preflight_in_process(lm, k.softmax, getattr(k, candidate), k.wide, run_seed=1,
                                settings=OracleSettings(), device="cpu")


def test_a_vacuous_oracle_hands_the_case_to_the_rounding_rule(tmp_path):
    """False alarm found on the H100 (KernelBench 23_Softmax, its reference as the candidate:
    invalid, "oracle is vacuous"): the rounding rule can judge these outputs, and does."""
    res = _wide_softmax(tmp_path, "softmax_by_hand")
    assert not res.invalid, failures(res)
    (f,) = [f for f in res.findings if f.check == "calibration:allclose"]
    assert f.severity == "warning" and "the rounding rule judges this case instead" in f.message


def test_a_candidate_the_vacuous_oracle_passes_and_the_rounding_rule_rejects_is_invalid(tmp_path):
    res = _wide_softmax(tmp_path, "softmax_too_flat")
    assert res.invalid
    (f,) = [f for f in res.findings if f.check == "calibration:allclose"]
    assert f.severity == "invalid" and "nor does the candidate pass the rounding rule" in f.message


COUNTING = textwrap.dedent('''
    import gc
    import torch
    SEEN = []
    def inputs(params, gen, device):
        return (torch.rand(params["n"], generator=gen, device=device),)
    def base(x): return x * 2
    def counting(x):
        if torch._C._autograd._profiler_enabled():  # the identity check's profiled call
            SEEN.append(sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.numel() == x.numel()))
        return x + x
''')


def test_the_profiled_call_runs_without_the_trials_tensors(tmp_path):
    """Regression (KernelBench 38_L1Norm on the H100, 8 GiB of input): the trials' inputs,
    outputs and held tensors and the judge's pristine inputs and expected output stayed
    alive through the identity check's profiled calls, and the candidate's ran out of
    memory where a plain call fits. Here both sides share this process, so every tensor
    of the case's size alive during the profiled call is counted: only its own input."""
    from sides import load_sides

    lm, k = load_sides(tmp_path, "cnt", COUNTING, "name: t\nclaim: {speedup: 1.0}\nbaseline: cnt:base\n"
                       "candidate: cnt:counting\ninputs: {factory: cnt:inputs}\ncases: [{name: c, params: {n: 12347}}]\n")
    res = preflight_in_process(lm, k.base, k.counting, k.inputs, run_seed=1, settings=OracleSettings(), device="cpu",
                               identity=True)
    assert not res.invalid, failures(res)
    assert k.SEEN == [1]


def test_inputs_build_on_the_threads_asked_and_one_thread_marks_no_wide_work(tmp_path, monkeypatch):
    """``build_inputs`` runs the factory on every host core unless given ``threads`` (two
    workers building at once take half each); on one thread no pool woke, so nothing is
    marked for a timed block's settle to wait out. torch's own count is restored after."""
    import torch

    lm, _ = setup(tmp_path, "good")
    seen, marked = [], []
    monkeypatch.setattr(preflight, "wide_work_ended", lambda: marked.append(1))
    monkeypatch.setattr(preflight.os, "cpu_count", lambda: 4)
    factory = lambda params, gen, device: (seen.append(torch.get_num_threads()), torch.zeros(2))[1]  # noqa: E731
    before = torch.get_num_threads()
    preflight.build_inputs(factory, {}, 1, "cpu", lm)
    preflight.build_inputs(factory, {}, 1, "cpu", lm, threads=1)
    preflight.build_inputs(factory, {}, 1, "cpu", lm, threads=2)
    assert seen == [4, 1, 2] and marked == [1, 1] and torch.get_num_threads() == before


def test_a_call_drains_the_gpu_only_where_this_process_uses_cuda(monkeypatch):
    """On a GPU host a CPU run's workers created a CUDA context to drain a device they never
    used, and asked the driver ``is_available()`` each call (10 ms a call on an H200 host)."""
    import torch

    synced, asked = [], []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert preflight.call_synced(lambda x: x + 1, (1,)) == 2
    assert synced == [] and asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # the code under test used the GPU
    assert preflight.call_synced(lambda x: x + 1, (1,)) == 2
    assert synced == [1] and asked == []
