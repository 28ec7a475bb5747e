"""benchmarks/stopping_cost.py: what it reads from a run's result.json, and its table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "stopping_cost.py"


def _script():
    spec = importlib.util.spec_from_file_location("stopping_cost", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _result(rounds_a, rounds_b, measure=2.5):
    return {"verdict": "supported", "stages": {"measure": measure},
            "measured": {"cases": {
                "a": {"timed_seconds": 0.5, "stopped": "target interval reached",
                      "per_process": [{"rounds": n} for n in rounds_a]},
                "b": {"timed_seconds": 1.25, "stopped": "budget spent",
                      "per_process": [{"rounds": n} for n in rounds_b]}}}}


def test_a_row_has_each_cases_rounds_by_process_and_the_stage_seconds():
    r = _script().row({"seconds": 7.5, "result": _result([10, 12], [40, 11])})
    assert r["seconds"] == 7.5 and r["measure"] == 2.5 and r["verdict"] == "supported"
    assert r["cases"]["a"] == {"timed": 0.5, "rounds": [10, 12], "stopped": "target interval reached"}
    assert r["cases"]["b"]["rounds"] == [40, 11]


def test_a_run_that_measured_nothing_gives_an_empty_row_not_an_error():
    r = _script().row({"seconds": 1.0, "result": {"verdict": "invalid", "measured": None}})
    assert r["cases"] == {} and r["measure"] == 0.0


def test_main_alternates_variants_and_summarises_each(tmp_path, monkeypatch, capsys):
    mod = _script()
    calls = []

    def fake(manifest, overrides, out):
        calls.append(list(overrides))
        slow = "defences.enabled=false" not in overrides
        return {"seconds": 9.0 if slow else 7.0, "result": _result([20, 30] if slow else [10, 10], [10, 10])}

    monkeypatch.setattr(mod, "run_once", fake)
    manifest = tmp_path / "m.yaml"
    manifest.write_text("name: m\n")
    assert mod.main([str(manifest), "--rounds", "2"]) == 0
    # measure=default added, variants in turn within each round; rounds over every process of every case
    assert calls == [["measure=default"], ["measure=default", "defences.enabled=false"]] * 2
    out = capsys.readouterr().out
    assert "| defended | 2 | 9.00 (9.00-9.00) | 2.50 | 15 (30) |" in out
    assert "| undefended | 2 | 7.00 (7.00-7.00) | 2.50 | 10 (10) |" in out


def test_a_preset_named_in_the_overrides_is_kept(monkeypatch, capsys, tmp_path):
    mod = _script()
    seen = []
    monkeypatch.setattr(mod, "run_once", lambda m, o, out: seen.append(list(o)) or
                        {"seconds": 1.0, "result": json.loads(json.dumps(_result([10], [10])))})
    manifest = tmp_path / "m.yaml"
    manifest.write_text("name: m\n")
    mod.main([str(manifest), "--rounds", "1", "--variant", "only=", "--", "measure=quick"])
    assert seen == [["measure=quick"]]
    manifests = []
    monkeypatch.setattr(mod, "run_once", lambda m, o, out: manifests.append(m) or
                        {"seconds": 1.0, "result": _result([10], [10])})
    mod.main(["--rounds", "1", "--variant", "only=", "--", "measure=quick"])  # no manifest: the default one
    assert manifests == [mod.DEFAULT]
