"""The value probe: one preflight trial with every input the factory drew all >= 0 shifted
to both signs, so that an op checked only on non-negative inputs (KernelBench's level 1
draws every input with ``torch.rand``) cannot pass a copy of its input for a ReLU."""

import textwrap

import pytest
import torch

from expkit.bench.sides.in_process import preflight_in_process
from expkit.checks import preflight
from expkit.manifest.settings import OracleSettings
from sides import load_sides

OPS = textwrap.dedent('''
    import torch
    def rand(params, gen, device):
        return (torch.rand(params["n"], generator=gen, device=device),)
    def rand_and_scale(params, gen, device):
        return (torch.rand(params["n"], generator=gen, device=device), 3)
    def relu(x): return torch.relu(x)
    def relu_by_clamp(x): return x.clamp(min=0)
    def relu_by_max(x): return torch.maximum(x, torch.zeros_like(x))
    def passthrough(x): return x.clone()
    def abs_(x): return x.abs()
    def log(x): return torch.log(x)
    def log_by_hand(x): return torch.log2(x) * 0.6931471805599453
    def sqrt(x): return torch.sqrt(x)
    def rsqrt_inverse(x): return 1.0 / torch.rsqrt(x)
    def scale_relu(x, k): return torch.relu(x) * k
    def scale_passthrough(x, k): return x * k
    def rows(params, gen, device):
        return (torch.rand(params["rows"], params["n"], generator=gen, device=device) * 100,)
    def signed_rows(params, gen, device):
        x = torch.rand(params["rows"], params["n"], generator=gen, device=device) * 100
        return (2 * x - x.max(),)
    def _scan(x, block):  # a prefix sum that adds in float32: blocks, then their running totals
        c = x.reshape(x.shape[0], -1, block)
        loc = torch.cumsum(c, 2)
        carry = torch.cumsum(loc[:, :, -1], 1) - loc[:, :, -1]
        return (loc + carry.unsqueeze(2)).reshape(x.shape)
    def scan_by_256(x): return _scan(x, 256)
    def scan_by_1024(x): return _scan(x, 1024)
    def scan_of_magnitudes(x): return _scan(x.abs(), 1024)
    def cumsum(x): return torch.cumsum(x, 1)
''')

#: KernelBench's fp32 tolerance, as ``expkit import kernelbench`` declares it.
KERNELBENCH_FP32 = "oracles: [{kind: allclose, rtol: 1.0e-4, atol: 1.0e-4}]\n"


def _preflight(tmp_path, baseline, candidate, factory="rand", expect="", params="{n: 4096}", device="cpu"):
    lm, ops = load_sides(tmp_path, "ops", OPS, textwrap.dedent(f'''
        name: probe
        claim: {{speedup: 1.0}}
        baseline: ops:{baseline}
        candidate: ops:{candidate}
        inputs: {{factory: "ops:{factory}"}}
        cases: [{{name: c, params: {params}}}]
    ''') + expect)
    return preflight_in_process(lm, getattr(ops, baseline), getattr(ops, candidate), getattr(ops, factory),
                                run_seed=3, settings=OracleSettings(), device=device)


def _probe_findings(res):
    return [f for f in res.findings if f.check == preflight.VALUE_PROBE or "value probe" in f.message]


def test_a_copy_of_the_input_passes_relu_on_rand_inputs_but_not_the_probe(tmp_path):
    res = _preflight(tmp_path, "relu", "passthrough")
    assert res.invalid
    bad = [f for f in res.findings if not f.ok and f.invalidates]
    assert bad and all("value probe" in f.message for f in bad), [(f.check, f.message) for f in bad]
    assert "expect.value_probe: false" in bad[0].message  # the fix, where the claim is for x >= 0 only


def test_a_copy_of_the_input_passes_abs_only_without_the_probe(tmp_path):
    assert _preflight(tmp_path, "abs_", "passthrough").invalid
    off = _preflight(tmp_path, "abs_", "passthrough", expect="expect: {value_probe: false}\n")
    assert not off.invalid  # the probe is what catches it: it can be switched off, and says how
    assert not _probe_findings(off)


@pytest.mark.parametrize("candidate", ["relu_by_clamp", "relu_by_max"])
def test_honest_relus_through_other_ops_pass_the_probe(tmp_path, candidate):
    res = _preflight(tmp_path, "relu", candidate)
    assert not res.invalid, [(f.check, f.message) for f in res.findings if not f.ok]
    (f,) = [f for f in res.findings if f.check == preflight.VALUE_PROBE]
    assert f.ok and "shifted to both signs" in f.message


@pytest.mark.parametrize("baseline,candidate", [("log", "log_by_hand"), ("sqrt", "rsqrt_inverse")])
def test_outside_the_baselines_own_domain_the_probe_is_not_judged(tmp_path, baseline, candidate):
    """log and sqrt of negative inputs are NaN for the baseline too: the probe says so as a
    warning and the run stays valid (a false alarm here would be a harness bug)."""
    res = _preflight(tmp_path, baseline, candidate)
    assert not res.invalid, [(f.check, f.message) for f in res.findings if not f.ok]
    (f,) = [f for f in res.findings if f.check == preflight.VALUE_PROBE]
    assert f.ok and f.severity == "warning" and "not judged" in f.message and "not finite" in f.message


SCAN = {"factory": "rows", "params": "{rows: 8, n: 32768}"}


def test_two_honest_float32_prefix_sums_pass_a_probe_whose_tolerance_the_baseline_cannot_meet(tmp_path):
    """A fixed atol chosen for non-negative inputs: on the probe, outputs near zero keep the
    rounding error of partial sums in the thousands, and the baseline itself is farther than
    1e-4 from its float64 reference there. The rounding rule judges the probe instead (as on
    KernelBench's cumsum problems, where torch.compile's scan and torch.cumsum differ so)."""
    res = _preflight(tmp_path, "scan_by_256", "scan_by_1024", expect=KERNELBENCH_FP32, **SCAN)
    assert not res.invalid, [(f.check, f.message[:300]) for f in res.findings if not f.ok]
    (warned,) = [f for f in res.findings if f.check == "oracle:allclose" and not f.ok]
    assert warned.severity == "warning" and warned.message.startswith("on the value probe (inputs [0]")
    assert "the rounding rule judges the probe instead and passes the candidate" in warned.message


def test_a_candidate_right_only_for_non_negative_inputs_still_fails_the_probe_under_the_rounding_rule(tmp_path):
    res = _preflight(tmp_path, "scan_by_256", "scan_of_magnitudes", expect=KERNELBENCH_FP32, **SCAN)
    assert res.invalid
    (bad,) = [f for f in res.findings if f.invalidates]
    assert bad.message.startswith("on the value probe") and "nor does the candidate pass the rounding rule" in bad.message


@pytest.mark.gpu
def test_on_a_gpu_torch_cumsum_and_a_blocked_scan_pass_the_probe_as_kernelbench_sizes_them(tmp_path):
    """KernelBench's 89_cumsum row length (32,768), torch.cumsum as the baseline: on a GPU it
    adds in float32, and the probe's outputs near zero are further than 1e-4 from float64."""
    res = _preflight(tmp_path, "cumsum", "scan_by_1024", expect=KERNELBENCH_FP32, device="cuda", **SCAN)
    assert not res.invalid, [(f.check, f.message[:300]) for f in res.findings if not f.ok]
    (warned,) = [f for f in res.findings if f.check == "oracle:allclose" and not f.ok]
    assert "the rounding rule judges the probe instead and passes the candidate" in warned.message
    assert _preflight(tmp_path, "cumsum", "scan_of_magnitudes", expect=KERNELBENCH_FP32, device="cuda", **SCAN).invalid


def test_off_the_probe_a_declared_tolerance_stands_even_where_the_baseline_cannot_meet_it(tmp_path):
    """The rule is the probe's alone: on inputs the claim itself declares, its tolerance is the
    claim's own word, and a tolerance too tight for them is fixed in the manifest's oracle."""
    res = _preflight(tmp_path, "scan_by_256", "scan_by_1024", factory="signed_rows",
                     expect=KERNELBENCH_FP32 + "expect: {value_probe: false}\n", params="{rows: 8, n: 32768}")
    assert res.invalid


def test_non_tensor_arguments_are_left_alone(tmp_path):
    assert not _preflight(tmp_path, "scale_relu", "scale_relu", factory="rand_and_scale").invalid
    assert _preflight(tmp_path, "scale_relu", "scale_passthrough", factory="rand_and_scale").invalid


def test_signed_probe_shifts_non_negative_floating_inputs_to_both_signs():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1000, generator=g)
    y = torch.randn(1000, generator=g)  # already both signs: left alone
    i = torch.arange(10)  # integers: left alone
    c = torch.ones(10)  # constant: shifting it would make it all one value again
    before = y.clone(), i.clone(), c.clone()
    expect = 2 * x - x.max()
    assert preflight.signed_probe([x, y, i, c, 5]) == (0,)
    assert torch.equal(x, expect) and x.min() < 0 < x.max()
    assert torch.equal(y, before[0]) and torch.equal(i, before[1]) and torch.equal(c, before[2])


def test_signed_probe_shifts_a_shared_storage_once():
    x = torch.rand(64)
    expect = 2 * x - x.max()
    assert preflight.signed_probe([x, x.view(8, 8)]) == (0,)  # one storage, shifted once, not twice
    assert torch.equal(x, expect)


class _Worker:
    """A side's worker as the parent sees it: canned replies, and the requests it was sent."""

    def __init__(self, **replies):
        self.replies, self.sent = replies, []

    def request(self, op, **payload):
        self.sent.append((op, payload))
        return dict(self.replies.get(op, {}))


def test_what_the_probe_shifted_is_the_baselines_word_not_the_candidates():
    """A candidate's worker that says it shifted nothing cannot turn the probe into a plain
    trial: the parent takes the list from the baseline's worker, which builds the same inputs."""
    from types import SimpleNamespace

    from expkit.bench.sides.preflight_run import correctness_trial
    from expkit.checks.preflight import CaseRun

    c = _Worker(trial_inputs={"inputs": [], "positions": [0], "probed": []},
                trial_call={"outputs": [], "findings": []})
    b = _Worker(expect={"findings": [], "probed": [0], "finite": True},
                judge={"findings": [{"check": "oracle:rounding", "ok": False, "message": "worst error 1",
                                     "case": "c"}]})
    pair = SimpleNamespace(b=b, c=c, lm=SimpleNamespace(path="m.yaml"),
                           settings=SimpleNamespace(oracle=SimpleNamespace(calibrate=True)))
    out = correctness_trial(pair, CaseRun("c", {"n": 8}, True), trial=2, run_seed=1, defended=True, probe=True)
    assert ("expect", ) == tuple(op for op, m in b.sent if op == "expect" and m["probe"])
    (bad,) = [f for f in out.findings if not f.ok]
    assert out.failed and bad.message.startswith("on the value probe (inputs [0]")
