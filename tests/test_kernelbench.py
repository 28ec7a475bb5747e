"""KernelBench-style pairs: pairing, manifests, the adapter's seeding, and whole runs.

The problems under tests/data/kernelbench/ are small and written for these tests
(elementwise, reduction, matmul, a two-layer network) in KernelBench's file format.
"""

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from expkit.manifest import kernelbench as kb
from expkit.suites import kernelbench_import as kbi
from expkit.core.errors import ExpkitError, ManifestError
from expkit.manifest import KERNELBENCH_TOLERANCE, load

DATA = Path(__file__).parent / "data" / "kernelbench"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=2"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("kb-manifests")
    written, orphans = kbi.write_manifests(DATA, out, device="cpu")
    return out, {p.stem: p for p in written}, orphans


def test_pairs_by_content_and_stem_prefix():
    pairs, orphans = kbi.find_pairs(DATA)
    got = {(p.problem.name, str(p.solution.relative_to(DATA))) for p in pairs}
    assert got == {
        ("1_leaky_relu.py", "1_leaky_relu_where.py"), ("1_leaky_relu.py", "1_leaky_relu_calls_baseline.py"),
        ("2_row_sum.py", "solutions/2_row_sum.py"), ("3_matmul.py", "3_matmul_einsum.py"),
        ("3_matmul.py", "3_matmul_syntax_error.py"), ("4_mlp.py", "4_mlp_addmm.py"), ("4_mlp.py", "4_mlp_reordered.py"),
    }
    assert orphans == []


def test_prefix_must_end_at_a_separator(tmp_path):
    problem = (DATA / "1_leaky_relu.py").read_text()
    solution = (DATA / "1_leaky_relu_where.py").read_text()
    (tmp_path / "1_conv.py").write_text(problem)
    (tmp_path / "11_conv.py").write_text(problem)
    (tmp_path / "11_conv_fast.py").write_text(solution)
    (tmp_path / "7_other_new.py").write_text(solution)
    pairs, orphans = kbi.find_pairs(tmp_path)
    assert [(p.problem.name, p.solution.name) for p in pairs] == [("11_conv.py", "11_conv_fast.py")]
    assert [o.name for o in orphans] == ["7_other_new.py"]


def test_imported_manifests_load_with_kernelbench_tolerance(imported):
    out, written, orphans = imported
    assert set(written) == {"1_leaky_relu_where", "1_leaky_relu_calls_baseline", "2_row_sum-solutions",
                            "3_matmul_einsum", "3_matmul_syntax_error", "4_mlp_addmm", "4_mlp_reordered"}
    lm = load(written["4_mlp_addmm"])
    m = lm.manifest
    assert m.kernelbench.problem.endswith("4_mlp.py") and (lm.folder / m.kernelbench.problem).is_file()
    assert m.baseline is None and m.inputs.factory.endswith("4_mlp.py:get_inputs")
    assert [(o.kind, o.rtol, o.atol) for o in m.oracles] == [("allclose", 1e-4, 1e-4)]
    assert m.claim.speedup == 1.0 and m.device == "cpu" and [c.name for c in m.cases] == ["default"]
    with pytest.raises(ExpkitError, match="already exists"):
        kbi.write_manifests(DATA, out, device="cpu")


def test_free_globals_go_into_case_params(tmp_path):
    written, _ = kbi.write_manifests(DATA, tmp_path, device="cpu", precision="bf16", free=["batch_size"],
                                    overwrite=True)
    m = load(next(p for p in written if p.stem == "4_mlp_addmm")).manifest
    assert m.cases[0].params == {"batch_size": 32} and m.inputs.free == ("batch_size",)
    assert m.oracles[0].rtol == KERNELBENCH_TOLERANCE["bf16"] == 1e-2
    m = load(next(p for p in written if p.stem == "3_matmul_einsum")).manifest  # no batch_size there
    assert m.cases[0].params == {} and m.inputs.free == ()
    with pytest.raises(ExpkitError, match="--free nope: no problem"):
        kbi.write_manifests(DATA, tmp_path / "x", device="cpu", free=["nope"])


def _manifest(tmp_path, body):
    for f in ("4_mlp.py", "4_mlp_addmm.py", "4_mlp_reordered.py", "1_leaky_relu.py", "3_matmul_syntax_error.py"):
        shutil.copy(DATA / f, tmp_path / f)
    (tmp_path / "m.yaml").write_text(body)
    return tmp_path / "m.yaml"


BASE = textwrap.dedent("""
    name: t
    claim: {speedup: 1.0}
    cases: [{name: default}]
""")


def test_schema_kernelbench_replaces_the_three_keys(tmp_path):
    with pytest.raises(ManifestError) as e:
        load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py}\n"
                                        "baseline: k:f\n"))
    assert e.value.key == "baseline" and "brings its own" in e.value.problem
    with pytest.raises(ManifestError) as e:
        load(_manifest(tmp_path, BASE))
    assert e.value.key == "baseline" and "required" in e.value.problem and "kernelbench" in e.value.fix
    with pytest.raises(ManifestError) as e:
        load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py, precision: fp8}\n"))
    assert e.value.key == "kernelbench.precision"
    m = load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py}\n"
                                      "oracles: [{kind: allclose, rtol: 0.5, atol: 0.5}]\n")).manifest
    assert (m.oracles[0].rtol, m.oracles[0].atol) == (0.5, 0.5)  # a stated tolerance is kept


def test_same_seed_gives_same_weights_and_order_matters(tmp_path):
    lm = load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py}\n"))
    base, cand, factory = kb.sides(lm)
    state = torch.random.get_rng_state()
    b, c = base.build(), cand.build()
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left as it was
    assert torch.equal(b.fc1.weight, c.fc1.weight) and torch.equal(b.fc2.bias, c.fc2.bias)
    g = torch.Generator().manual_seed(7)
    (x,) = factory({}, g, "cpu")
    assert x.shape == (32, 64)
    torch.testing.assert_close(cand(x), base(x), rtol=1e-4, atol=1e-4)
    lm2 = load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_reordered.py}\n"))
    assert not torch.equal(kb.sides(lm2)[1].build().fc1.weight, b.fc1.weight)


def test_inputs_follow_the_trial_generator_and_params(tmp_path):
    lm = load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py, "
                                         "precision: bf16}\n"))
    _, _, factory = kb.sides(lm)
    a = factory({}, torch.Generator().manual_seed(1), "cpu")[0]
    again = factory({}, torch.Generator().manual_seed(1), "cpu")[0]
    other = factory({}, torch.Generator().manual_seed(2), "cpu")[0]
    assert a.dtype == torch.bfloat16 and torch.equal(a, again) and not torch.equal(a, other)
    assert factory({"batch_size": 13}, torch.Generator().manual_seed(1), "cpu")[0].shape == (13, 64)
    assert factory({}, torch.Generator().manual_seed(1), "cpu")[0].shape == (32, 64)  # the global is restored
    with pytest.raises(ValueError, match="name no global"):
        factory({"nope": 1}, torch.Generator().manual_seed(1), "cpu")


def test_inputs_are_drawn_on_the_runs_device(tmp_path, monkeypatch):
    # get_inputs() calls torch.randn() with no device; preflight.build_inputs runs it with
    # the run's device as torch's default, so the draw happens there (the meta device
    # stands in for a GPU here), not on the host and then copied: a host draw of
    # KernelBench's 6 GiB inputs takes tens of seconds.
    from expkit.checks import preflight

    lm = load(_manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 4_mlp_addmm.py}\n"))
    _, _, factory = kb.sides(lm)
    drawn, real = [], torch.randn

    def spy(*a, **k):
        out = real(*a, **k)
        drawn.append(out.device.type)
        return out

    with torch.device("meta"):  # torch caches its list of factories on first use: before the patch
        torch.empty(1)
    monkeypatch.setattr(torch, "randn", spy)
    # a meta generator does not exist: the seed is drawn from a host one
    monkeypatch.setattr(preflight, "make_generator", lambda seed, device: torch.Generator().manual_seed(seed))
    (got,) = preflight.build_inputs(factory, {}, 1, "meta", lm)
    assert got.device.type == "meta" and drawn == ["meta"]
    assert torch.get_default_device().type == "cpu"  # restored after the call


def test_broken_problem_is_a_manifest_error_broken_solution_a_failed_candidate(tmp_path):
    path = _manifest(tmp_path, BASE + "kernelbench: {problem: 4_mlp.py, solution: 3_matmul_syntax_error.py}\n")
    base, cand, _ = kb.sides(load(path))
    assert "failed to import: SyntaxError" in cand.error
    with pytest.raises(RuntimeError, match="failed to import"):
        cand(torch.zeros(1))
    (tmp_path / "4_mlp.py").write_text("import torch\nclass Model: pass\n")
    with pytest.raises(ManifestError, match="defines no `get_inputs`"):
        kb.sides(load(path))
    (tmp_path / "4_mlp.py").write_text("raise ImportError('no such extension')\n")
    with pytest.raises(ManifestError, match="importing 4_mlp.py raised ImportError"):
        kb.sides(load(path))


@pytest.mark.parametrize("name, invalid, why", [
    ("1_leaky_relu_where", False, None),
    # The baseline's Linear runs aten::addmm on these very operands: its whole op tree is
    # forbidden to the candidate unless listed under expect.allow (issue #13).
    ("4_mlp_addmm", True, "aten::addmm"),
    ("2_row_sum-solutions", False, None),
    ("4_mlp_reordered", True, "oracle:allclose"),
    ("1_leaky_relu_calls_baseline", True, "aten::leaky_relu"),
    ("3_matmul_syntax_error", True, "failed to import"),
])
def test_runs(imported, tmp_path, name, invalid, why):
    from expkit.runner import run_manifest

    _, written, _ = imported
    out = run_manifest(written[name], FAST, tmp_path / name, plots=False)  # the verdict is the test
    reasons = " ".join(out.result["reasons"])
    assert (out.verdict == "invalid") == invalid, reasons
    if invalid:
        assert why in reasons
    else:
        assert out.result["measured"]["cases"]["default"]["speedup"] > 0
    assert (tmp_path / name / "report.md").is_file()


def test_example_manifest_loads():
    lm = load(Path(__file__).parent.parent / "manifests" / "examples" / "kernelbench" / "pairwise-distance.yaml")
    base, cand, factory = kb.sides(lm)
    x, y = factory({}, torch.Generator().manual_seed(3), "cpu")
    torch.testing.assert_close(cand(x, y), base(x, y), rtol=1e-4, atol=1e-4)
