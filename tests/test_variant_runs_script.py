"""benchmarks/variant_runs.py: the variants the variant-by-variant benchmarks take, and their runs."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "variant_runs.py"


def _module():
    spec = importlib.util.spec_from_file_location("variant_runs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variants_from_the_command_line_or_the_default():
    mod = _module()
    assert mod.parse_variants([], {"a": []}) == {"a": []}
    assert mod.parse_variants(["x=", "y=k=1,j=2"], {"a": []}) == {"x": [], "y": ["k=1", "j=2"]}


def test_a_preset_leads_unless_one_is_named():
    mod = _module()
    assert mod.with_preset(["a=1"], "default") == ["measure=default", "a=1"]
    assert mod.with_preset(["measure=quick", "a=1"], "default") == ["measure=quick", "a=1"]


def test_env_overrides_reach_the_run_and_not_its_keys(monkeypatch, tmp_path):
    mod = _module()
    seen = {}

    def fake_run(cmd, cwd, env, **kw):
        seen["cmd"], seen["env"], seen["cwd"] = cmd, env, cwd

    monkeypatch.setattr(subprocess, "run", fake_run)
    mod.run_cli(Path("m.yaml"), ["measure=default", "env:EXPKIT_DEBUG_RECHECK=skip"], tmp_path / "o", via="w.py")
    assert seen["env"]["EXPKIT_DEBUG_RECHECK"] == "skip"
    assert "env:EXPKIT_DEBUG_RECHECK=skip" not in seen["cmd"] and "measure=default" in seen["cmd"]
    assert seen["cmd"][1:3] == ["w.py", "run"] and seen["cwd"] == mod.ROOT
    mod.run_cli(Path("m.yaml"), [], tmp_path / "o")
    assert seen["cmd"][1:4] == ["-m", "expkit", "run"]


def test_overrides_after_a_double_dash_are_never_taken_for_the_manifest():
    mod = _module()
    assert mod.split_overrides(["--rounds", "1", "--", "measure=quick"]) == (["--rounds", "1"], ["measure=quick"])
    assert mod.split_overrides(["m.yaml"]) == (["m.yaml"], [])


def test_a_missing_manifest_is_one_line_naming_it(tmp_path):
    import pytest

    mod = _module()
    with pytest.raises(SystemExit, match=r"x\.py: nope\.yaml: no such manifest"):
        mod.require_manifest("nope.yaml", "x.py")
    m = tmp_path / "m.yaml"
    m.write_text("name: m\n")
    assert mod.require_manifest(str(m), "x.py") == m
