"""The manifest's JSON Schema: in sync with the dataclasses, and agreeing with the loader.

The loader (expkit/manifest/) is the authority. The schema must accept every manifest
the loader accepts (checked over every YAML file in the repository) and reject the
common mistakes the loader rejects.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")  # a test extra; the GPU image lacks it

from expkit.manifest import json_schema  # noqa: E402
from expkit.manifest.schema import SchemaError, build
from expkit.manifest.spec import ORACLE_KINDS, Manifest

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "expkit schema --out expkit/manifest/manifest.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(json_schema.shipped())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_the_shipped_schema_is_a_fresh_generation():
    assert json_schema.shipped() == json_schema.render(), (
        f"expkit/manifest/manifest.schema.json is out of date with the dataclasses in expkit/manifest/spec.py; "
        f"regenerate it: {REGENERATE}")


def test_the_schema_follows_the_spec_constants():
    schema = json_schema.generate()
    assert schema["definitions"]["Oracle"]["properties"]["kind"]["enum"] == list(ORACLE_KINDS)
    assert schema["required"] == ["name", "claim", "cases"] and schema["additionalProperties"] is False
    assert set(schema["definitions"]) >= {"Claim", "Case", "Inputs", "Expect", "Oracle", "KernelBench", "EndToEnd"}


def _yaml_files() -> list[Path]:
    return sorted(p for d in ("manifests", "tests", "examples") for p in (ROOT / d).rglob("*.yaml"))


def _loads(raw: object) -> bool:
    try:
        build(Manifest, raw)
    except SchemaError:
        return False
    return True


def test_every_shipped_manifest_loads_and_validates(validator):
    shipped = sorted((ROOT / "manifests").rglob("*.yaml"))
    assert len(shipped) >= 20
    for path in shipped:
        raw = yaml.safe_load(path.read_text())
        assert _loads(raw), f"{path} does not load"
        errors = sorted(validator.iter_errors(raw), key=str)
        assert not errors, f"{path.relative_to(ROOT)}: {errors[0].message} at {list(errors[0].absolute_path)}"


def test_whatever_the_loader_accepts_the_schema_accepts(validator):
    """Every YAML file of the repository, tests' manifests included (those meant to fail are skipped by the loader)."""
    checked = 0
    for path in _yaml_files():
        raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, dict) or "claim" not in raw or not _loads(raw):
            continue
        checked += 1
        errors = list(validator.iter_errors(raw))
        assert not errors, f"{path.relative_to(ROOT)}: {errors[0].message}"
    assert checked >= 50


BASE = yaml.safe_load((ROOT / "manifests" / "examples" / "cpu" / "honest-win.yaml").read_text())


def _edit(path: str, value: object) -> dict:
    raw = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = raw
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return raw


@pytest.mark.parametrize("path,value", [
    ("candidat", "kernels:chain_right"),            # unknown key
    ("claim.speedupp", 1.5),                        # misspelt nested key
    ("claim", KeyError),                            # missing required key
    ("claim.speedup", 0),                           # bound
    ("claim.tolerance", 1.0),
    ("device", "gpu"),                              # enumeration
    ("oracles", [{"kind": "allclos"}]),
    ("oracles", [{"kind": "custom"}]),              # custom needs a function
    ("oracles", []),
    ("cases", []),
    ("candidate", KeyError),                        # sides needed without kernelbench
    ("kernelbench", {"problem": "p.py", "solution": "s.py"}),  # kernelbench and sides together
    ("expect.max_plausible_speedup", 1),
    ("cases.0.precision", "fp64"),
    ("measure.target_ci", "tight"),
])
def test_mistakes_the_loader_rejects_the_schema_rejects(validator, path, value):
    raw = _edit(path, value)
    assert not _loads(raw), "the edit should be a mistake for the loader too"
    assert list(validator.iter_errors(raw)), f"the schema accepts {path}={value!r}"


def test_a_reference_that_is_not_module_function_is_rejected_as_validate_rejects_it(validator, tmp_path, capsys):
    from expkit.cli import main

    raw = _edit("candidate", "kernels.chain_right")
    assert list(validator.iter_errors(raw))
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "kernels.py").write_text((ROOT / "manifests" / "examples" / "cpu" / "kernels.py").read_text())
    assert main(["validate", str(tmp_path / "m.yaml")]) == 2  # the loader reads it; resolving it fails
    assert "is not a `module:function` reference" in capsys.readouterr().err


def test_a_kernelbench_manifest_needs_no_sides(validator):
    raw = yaml.safe_load((ROOT / "manifests" / "examples" / "kernelbench" / "pairwise-distance.yaml").read_text())
    assert "baseline" not in raw and not list(validator.iter_errors(raw))


def test_the_modeline_in_the_manifest_reference_points_at_the_shipped_file():
    readme = (ROOT / "docs" / "manifest.md").read_text()
    assert "# yaml-language-server: $schema=" in readme
    line = next(x for x in readme.splitlines() if x.startswith("# yaml-language-server: $schema=../"))
    target = (ROOT / "manifests" / "examples" / "cpu" / line.split("=", 1)[1]).resolve()
    assert target == json_schema.SCHEMA_FILE.resolve()
