from pathlib import Path

import pytest

from expkit.core.errors import ManifestError
from expkit.manifest import load

EXAMPLES = Path(__file__).resolve().parent.parent / "manifests" / "examples" / "cpu"

GOOD = """
name: t
claim: {speedup: 1.5, tolerance: 0.1, source: "PR #1", claimed_on: NVIDIA L4}
baseline: kernels:a
candidate: kernels:b
inputs: {factory: kernels:inputs, free: [n]}
cases:
  - {name: small, params: {n: 4}, claim: 1.2}
  - {name: big, params: {n: 4096}}
expect:
  must_run: ["x::y"]
  launch: [{kernel: "k*", block: [384, 1, 1], max_shared_memory: 49152}]
oracles: [{kind: allclose, rtol: 1.0e-3, atol: 1.0e-5}]
"""


def write(tmp_path, text):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


def test_loads_a_full_manifest(tmp_path):
    m = load(write(tmp_path, GOOD)).manifest
    assert m.claim.speedup == 1.5 and m.claim.threshold() == pytest.approx(1.35)
    assert m.claimed(m.cases[0]) == 1.2 and m.claimed(m.cases[1]) == 1.5
    assert m.expect.launch[0].block == (384, 1, 1)
    assert m.inputs.free == ("n",)
    with pytest.raises(Exception):
        m.claim.speedup = 2  # frozen


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_cpu_example_loads(example):
    assert load(example).manifest.name


def error(tmp_path, text) -> ManifestError:
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, text))
    return e.value


def test_misspelt_key_names_file_key_and_suggestion(tmp_path):
    e = error(tmp_path, GOOD.replace("candidate:", "candiate:"))
    assert e.key == "candiate" and "did you mean `candidate`" in str(e) and "m.yaml" in str(e)


def test_nested_misspelt_key_has_full_path(tmp_path):
    e = error(tmp_path, GOOD.replace("max_shared_memory", "max_shared_mem"))
    assert e.key == "expect.launch[0].max_shared_mem"
    assert "max_shared_memory" in e.fix


def test_wrong_type(tmp_path):
    e = error(tmp_path, GOOD.replace("speedup: 1.5", "speedup: fast"))
    assert e.key == "claim.speedup" and "expected a number" in e.problem


def test_missing_required_key(tmp_path):
    e = error(tmp_path, GOOD.replace("baseline: kernels:a\n", ""))
    assert e.key == "baseline" and "required" in e.problem


def test_semantic_check_names_nested_key(tmp_path):
    e = error(tmp_path, GOOD.replace("tolerance: 0.1", "tolerance: 5"))
    assert e.key == "claim.tolerance"


def test_unknown_oracle_kind_suggests(tmp_path):
    e = error(tmp_path, GOOD.replace("kind: allclose", "kind: allclos"))
    assert e.key == "oracles[0].kind" and "allclose" in e.fix


def test_malformed_yaml_gives_line(tmp_path):
    e = error(tmp_path, "name: [unclosed\nclaim: 1\n")
    assert "malformed YAML" in e.problem and "line" in e.problem


def test_duplicate_case_names(tmp_path):
    e = error(tmp_path, GOOD.replace("name: big", "name: small"))
    assert e.key == "cases"


def test_a_misspelt_measure_preset_names_the_nearest_and_the_presets(tmp_path):
    """Passed on to Hydra as ``measure=quik``, it failed only when the run composed its
    settings, in Hydra's words; ``expkit validate`` let it through (issue 51)."""
    e = error(tmp_path, GOOD + "measure: {preset: quik}\n")
    assert e.key == "measure.preset" and e.problem == "no preset `quik` (did you mean `quick`?)"
    assert e.fix == "the presets, in conf/measure/: default, quick, rigorous"
    assert load(write(tmp_path, GOOD + "measure: {preset: rigorous}\n")).manifest.measure.preset == "rigorous"
