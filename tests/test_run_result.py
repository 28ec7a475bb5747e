"""The run's result is one typed, immutable value (``report/result.py``), built once: the
runner stores it and renders the report from it, and no stage edits it or reads it back."""

import copy
import json
import pickle
from pathlib import Path

import pytest

from expkit.report import store
from expkit.report.result import RESULT_SCHEMA_VERSION, RunResult, freeze, thaw
from expkit.runner import run_manifest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "results"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=2"]


def _stored(name: str) -> dict:
    return json.loads((DATA / "session" / name / "result.json").read_text())


def test_a_result_refuses_every_edit_at_every_depth():
    r = store.upgrade(_stored("honest-win"))
    edits = [lambda: r.document.__setitem__("verdict", "refuted"),
             lambda: r["measured"]["cases"].pop("square-1024"),
             lambda: r["reasons"].append("forged"),
             lambda: r["checks"][0].update(ok=True),
             lambda: r["measured"].setdefault("x", 1),
             lambda: r["claim"].clear()]
    for edit in edits:
        with pytest.raises(TypeError, match="immutable"):
            edit()
    with pytest.raises(Exception):
        r.verdict = "refuted"  # type: ignore[misc]
    assert r.verdict == r["verdict"] == "supported"


def test_a_result_reads_as_its_document_and_goes_back_to_json_unchanged():
    doc = store.upgrade(_stored("honest-win")).to_json()
    r = RunResult.of(doc)
    assert r == doc and dict(r) == doc and json.loads(json.dumps(r.document)) == doc
    assert type(r.to_json()["reasons"]) is list and type(r.to_json()["measured"]) is dict
    assert copy.deepcopy(r.document) == doc and pickle.loads(pickle.dumps(r.document)) == doc
    copied = dict(r["measured"])  # a copy is the reader's own, and mutable
    copied["extra"] = 1
    assert "extra" not in r["measured"]
    assert (r.name, r.exit_code, [c.name for c in r.cases]) == (doc["name"], 0, list(doc["measured"]["cases"]))


def test_only_the_current_version_is_built_directly_older_ones_are_upgraded():
    old = _stored("honest-win")
    assert old["schema_version"] < RESULT_SCHEMA_VERSION
    with pytest.raises(ValueError, match="upgrades them"):
        RunResult.of(old)
    up = store.upgrade(old)
    assert up.schema_version == RESULT_SCHEMA_VERSION and up["upgraded_from"] == old["schema_version"]
    with pytest.raises(ValueError, match="unknown verdict"):
        RunResult.of({**up.to_json(), "verdict": "great"})


def test_freeze_and_thaw_are_inverse_on_json_data():
    data = {"a": [1, {"b": (2, 3)}], "c": {"d": None}}
    assert thaw(freeze(data)) == {"a": [1, {"b": [2, 3]}], "c": {"d": None}}
    assert freeze(freeze(data)) == freeze(data)


def test_a_run_builds_its_result_once_and_never_reads_it_back(tmp_path, monkeypatch):
    """The runner renders the report from the value it built: ``result.json`` is written, not
    read, during a run; the outcome carries the same value the file holds."""
    def no_read(path):
        raise AssertionError(f"result.json read back during the run: {path}")

    monkeypatch.setattr(store, "load_result", no_read)
    out = run_manifest(ROOT / "tests" / "data" / "suite" / "healthy.yaml", FAST, tmp_path / "run")
    assert isinstance(out.result, RunResult) and out.verdict == out.result.verdict
    assert json.loads((tmp_path / "run" / store.RESULT).read_text()) == out.result.to_json()
    assert out.result.verdict.upper() in (tmp_path / "run" / store.REPORT).read_text()
    with pytest.raises(TypeError):
        out.result["reasons"].append("forged")
