"""Every number of a manifest is finite; a float field reads YAML 1.2's ``1.1e12`` as a number.

Each error is the one line a user sees: the file, the key path and the fix (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from expkit.core.errors import ManifestError
from expkit.manifest import json_schema, load
from expkit.manifest.spec import Manifest
from expkit.manifest.schema import SchemaError, build

GOOD = """
name: t
claim: {speedup: 1.5, tolerance: 0.1}
baseline: kernels:a
candidate: kernels:b
inputs: {factory: kernels:inputs}
cases:
  - {name: small, params: {n: 4, scale: 0.5}, flops: 1.0e+9}
expect: {max_plausible_speedup: 20}
oracles: [{kind: allclose, rtol: 1.0e-3, atol: 1.0e-5}]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("old,new,key", [
    ("speedup: 1.5", "speedup: .nan", "claim.speedup"),
    ("speedup: 1.5", "speedup: .inf", "claim.speedup"),
    ("tolerance: 0.1", "tolerance: .NaN", "claim.tolerance"),
    ("flops: 1.0e+9", "flops: .inf", "cases[0].flops"),
    ("max_plausible_speedup: 20", "max_plausible_speedup: .inf", "expect.max_plausible_speedup"),
    ("rtol: 1.0e-3", "rtol: .nan", "oracles[0].rtol"),
    ("atol: 1.0e-5", "atol: -.inf", "oracles[0].atol"),
    ("scale: 0.5", "scale: .nan", "cases[0].params.scale"),
    ("scale: 0.5", "scale: [1.0, .inf]", "cases[0].params.scale[1]"),
])
def test_nan_and_infinity_are_rejected_in_every_numeric_field(tmp_path, old, new, key):
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, GOOD.replace(old, new)))
    err = e.value
    assert err.key == key
    assert "must be a finite number" in err.problem
    assert "write a finite number" in err.fix
    line = str(err)
    assert "\n" not in line and line.startswith(str(tmp_path / "m.yaml") + f": {key}: ")


def test_an_end_to_end_claim_of_nan_is_rejected(tmp_path):
    text = GOOD + "end_to_end: {workload: w:build, claim: .nan}\n"
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, text))
    assert e.value.key == "end_to_end.claim"


def test_yaml_1_1_float_strings_load_as_numbers(tmp_path):
    text = GOOD.replace("flops: 1.0e+9", "flops: 1.1e12").replace("speedup: 1.5", "speedup: 2e0")
    assert yaml.safe_load(text)["cases"][0]["flops"] == "1.1e12"  # PyYAML reads YAML 1.1
    m = load(write(tmp_path, text)).manifest
    assert m.cases[0].flops == 1.1e12 and isinstance(m.cases[0].flops, float)
    assert m.claim.speedup == 2.0


def test_a_word_in_a_float_field_is_still_an_error(tmp_path):
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, GOOD.replace("speedup: 1.5", "speedup: 1.5x")))
    assert e.value.key == "claim.speedup" and "expected a number" in e.value.problem
    with pytest.raises(ManifestError):
        load(write(tmp_path, GOOD.replace("speedup: 1.5", "speedup: 'inf'")))


def test_the_json_schema_accepts_what_the_loader_reads_as_a_number():
    jsonschema = pytest.importorskip("jsonschema")  # absent from the GPU image
    raw = yaml.safe_load(GOOD.replace("flops: 1.0e+9", "flops: 1.1e12"))
    build(Manifest, raw)
    validator = jsonschema.Draft7Validator(json.loads(json_schema.shipped()))
    assert not list(validator.iter_errors(raw))
    raw["cases"][0]["flops"] = "lots"
    with pytest.raises(SchemaError):
        build(Manifest, raw)
    assert list(validator.iter_errors(raw))
