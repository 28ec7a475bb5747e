"""On-disk formats: atomic writes, the samples table, and loading every result.json version."""

import json
import shutil
from pathlib import Path

import pytest

from expkit.report import store
from expkit.core.errors import ExpkitError

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
    assert data["schema_version"] == store.RESULT_SCHEMA_VERSION == 5
    assert data["upgraded_from"] == 1
    assert data["verdict"] == raw["verdict"]
    assert {k: v for k, v in data["measured"].items() if k not in ("cases", "unmeasured")} == \
        {k: v for k, v in raw["measured"].items() if k != "cases"}
    assert data["measured"]["unmeasured"] == {}  # 5's key: no record of a case left out before it
    for name, case in raw["measured"]["cases"].items():  # every stored figure kept; 3's fields added
        assert {k: data["measured"]["cases"][name][k] for k in case} == case
        assert data["measured"]["cases"][name]["processes"] == 1
    assert data["roofline"] is None
    assert data["telemetry"]["note"] == raw["environment"]["telemetry"]
    for name, case in raw["measured"]["cases"].items():
        saved = data["savings"]["cases"][name]["seconds_per_call"]["estimate"]
        assert saved == pytest.approx(case["baseline"]["median"] - case["candidate"]["median"], rel=1e-9)
    assert data["savings"]["usd_per_hour"] == raw["cost"]["usd_per_hour"]


def test_current_results_load_unchanged():
    path = DATA / "synthetic-processes" / store.RESULT
    assert json.loads(path.read_text())["schema_version"] == store.RESULT_SCHEMA_VERSION
    assert store.load_result(path) == json.loads(path.read_text())


def test_a_version_2_result_gains_the_one_process_fields_of_version_3():
    path = DATA / "session" / "honest-win" / store.RESULT
    raw = json.loads(path.read_text())
    data = store.load_result(path)
    assert raw["schema_version"] == 2 and data["schema_version"] == 5 and data["upgraded_from"] == 2
    for name, case in data["measured"]["cases"].items():
        assert {k: case[k] for k in raw["measured"]["cases"][name]} == raw["measured"]["cases"][name]
        assert case["processes"] == 1 and case["per_process"] is None and case["process_spread"] is None
        assert case["interval"] == store.BEFORE_3_INTERVAL
    assert {k: v for k, v in data.items() if k not in ("measured", "schema_version", "upgraded_from")} == \
        {k: v for k, v in raw.items() if k not in ("measured", "schema_version")}


def test_samples_before_version_3_read_as_one_process(tmp_path):
    src = DATA / "session" / "honest-win" / store.SAMPLES
    df = store.read_samples(src)
    assert set(df["replicate"]) == {0}
    rows = df.drop(columns=["schema_version"]).to_dict("records")
    rows[0]["replicate"] = 2
    store.write_samples(tmp_path / store.SAMPLES, rows)
    again = store.read_samples(tmp_path / store.SAMPLES)
    assert list(again["replicate"][:2]) == [2, 0] and set(again["schema_version"]) == {3}


@pytest.mark.parametrize("version", [store.RESULT_SCHEMA_VERSION + 1, 0])
def test_unreadable_versions_are_a_clear_error(tmp_path, version):
    data = json.loads((V1 / store.RESULT).read_text())
    data["schema_version"] = version
    store.write_json(tmp_path / store.RESULT, data)
    with pytest.raises(ExpkitError, match="schema_version"):
        store.load_result(tmp_path / store.RESULT)


@pytest.mark.parametrize("damage, words", [(lambda d: d.pop("name"), "key 'name' missing"),
                                           (lambda d: d["measured"]["overall"].pop("ci_low"), "key 'ci_low' missing"),
                                           (lambda d: d.update(verdict="great"), "unknown verdict")])
def test_a_damaged_result_is_one_clear_error_naming_the_file(tmp_path, damage, words):
    """A result.json edited by hand or cut by a full disk: an ExpkitError naming the file and
    what is missing (exit 2 at the command line), not a traceback."""
    data = store.load_result(V1 / store.RESULT).to_json()
    damage(data)
    store.write_json(tmp_path / store.RESULT, data)
    with pytest.raises(ExpkitError, match=f"{tmp_path / store.RESULT}: not a result.json .*{words}.*run the manifest again"):
        store.load_result(tmp_path / store.RESULT)


def test_env_and_run_dir_helpers(tmp_path):
    assert store.load_env(tmp_path / store.ENV) == {}
    assert not store.is_run_dir(tmp_path)
    shutil.copy(V1 / store.RESULT, tmp_path / store.RESULT)
    assert store.is_run_dir(tmp_path)
    assert store.load_env(V1 / store.ENV)["device"] == "cpu"


def test_samples_v2_keep_both_figures(tmp_path):
    rows = [{"case": "c", "side": "baseline", "round": 0, "position": 0, "number": 64, "seconds": 4.2e-6,
             "t_start": 0.0, "t_end": 0.001, "flagged": False, "call_seconds": 7.4e-6, "source": "kernel",
             "flags": "other-stream;unrecorded"},
            {"case": "c", "side": "candidate", "round": 0, "position": 1, "number": 64, "seconds": 1e-3,
             "t_start": 0.001, "t_end": 0.002, "flagged": False}]  # a timer with one figure
    store.write_samples(tmp_path / store.SAMPLES, rows)
    df = store.read_samples(tmp_path / store.SAMPLES)
    assert list(df["schema_version"]) == [store.SAMPLES_SCHEMA_VERSION] * 2
    assert df["call_seconds"][0] == pytest.approx(7.4e-6) and df["source"][0] == "kernel"
    assert df["flags"][0] == "other-stream;unrecorded"
    assert df["call_seconds"].isna()[1] and df["source"][1] == "" and df["flags"][1] == ""


def test_samples_v1_files_still_load_with_the_new_columns_empty():
    path = V1 / store.SAMPLES
    assert path.read_text().splitlines()[1].startswith("1,")  # a real version-1 file
    df = store.read_samples(path)
    assert len(df) > 0 and df["call_seconds"].isna().all()
    assert (df["source"] == "").all() and (df["flags"] == "").all()
    assert df["seconds"].dtype.kind == "f"
