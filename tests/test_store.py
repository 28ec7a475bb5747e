"""On-disk formats: atomic writes, the samples table, and loading every result.json version."""

import json
import shutil
from pathlib import Path

import pytest

from expkit import store
from expkit.errors import ExpkitError

DATA = Path(__file__).resolve().parent / "data" / "results"
V1 = DATA / "v1-honest-win"


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "f.json"
    store.atomic_write(path, "one")
    store.atomic_write(path, b"two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.json"
    store.write_json(path, {"a": 1})

    class Boom(str):
        def encode(self, *args):
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        store.atomic_write(path, Boom("x"))
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_samples_round_trip_and_missing_file(tmp_path):
    rows = [{"case": "c", "side": "baseline", "round": 0, "position": 1, "number": 4, "seconds": 1.5e-3,
             "t_start": 0.0, "t_end": 0.006, "flagged": False}]
    store.write_samples(tmp_path / store.SAMPLES, rows)
    df = store.read_samples(tmp_path / store.SAMPLES)
    assert list(df["schema_version"]) == [store.SAMPLES_SCHEMA_VERSION]
    assert df["seconds"][0] == pytest.approx(1.5e-3) and not bool(df["flagged"][0])
    assert len(store.read_samples(tmp_path / "absent.csv")) == 0


def test_the_v1_fixture_is_a_real_version_1_file():
    raw = json.loads((V1 / store.RESULT).read_text())
    assert raw["schema_version"] == 1
    assert not {"savings", "roofline", "telemetry", "upgraded_from"} & set(raw)


def test_a_version_1_result_loads_upgraded_to_the_current_version():
    raw = json.loads((V1 / store.RESULT).read_text())
    data = store.load_result(V1 / store.RESULT)
    assert data["schema_version"] == store.RESULT_SCHEMA_VERSION == 2
    assert data["upgraded_from"] == 1
    assert data["verdict"] == raw["verdict"] and data["measured"] == raw["measured"]
    assert data["roofline"] is None
    assert data["telemetry"]["note"] == raw["environment"]["telemetry"]
    for name, case in raw["measured"]["cases"].items():
        saved = data["savings"]["cases"][name]["seconds_per_call"]["estimate"]
        assert saved == pytest.approx(case["baseline"]["median"] - case["candidate"]["median"], rel=1e-9)
    assert data["savings"]["usd_per_hour"] == raw["cost"]["usd_per_hour"]


def test_current_results_load_unchanged():
    path = DATA / "session" / "honest-win" / store.RESULT
    assert store.load_result(path) == json.loads(path.read_text())


@pytest.mark.parametrize("version", [store.RESULT_SCHEMA_VERSION + 1, 0])
def test_unreadable_versions_are_a_clear_error(tmp_path, version):
    data = json.loads((V1 / store.RESULT).read_text())
    data["schema_version"] = version
    store.write_json(tmp_path / store.RESULT, data)
    with pytest.raises(ExpkitError, match="schema_version"):
        store.load_result(tmp_path / store.RESULT)


def test_env_and_run_dir_helpers(tmp_path):
    assert store.load_env(tmp_path / store.ENV) == {}
    assert not store.is_run_dir(tmp_path)
    shutil.copy(V1 / store.RESULT, tmp_path / store.RESULT)
    assert store.is_run_dir(tmp_path)
    assert store.load_env(V1 / store.ENV)["device"] == "cpu"
