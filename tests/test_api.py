"""The Python API (expkit/api/): settings, callables as references, dict manifests, Result, load, run.

The runner is replaced by a fake that stores a recorded result (tests/data/results/), so
these tests check the API's own work; the README's example (tests/test_examples.py) runs
a real claim end to end.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import types
from pathlib import Path

import pytest
import yaml

import api_kernels as K
import expkit
from expkit import api
from expkit.core.errors import ConfigError, ExpkitError, ManifestError
from expkit.manifest.schema import build
from expkit.manifest.spec import Manifest, load as load_manifest
from expkit.runner import RunOutcome

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "results"
CPU = ROOT / "manifests" / "examples" / "cpu"


# --- settings --------------------------------------------------------------------------


def test_settings_become_hydra_overrides_in_order():
    assert api.settings_overrides({"measure": "quick", "seed": 1, "measure__target_ci": 0.02,
                                   "defences": {"isolate": False, "fresh": "regenerate"},
                                   "cost": {"provider": None, "usd_per_hour": 2.5}}) == [
        "measure=quick", "seed=1", "measure.target_ci=0.02", "defences.isolate=false",
        "defences.fresh=regenerate", "cost.provider=null", "cost.usd_per_hour=2.5"]


def test_setting_values_that_hydra_would_misread_are_quoted():
    assert api.settings_overrides({"launcher__partition": "gpu a,b"}) == ["launcher.partition='gpu a,b'"]
    assert api.settings_overrides({"launcher__account": "it's"}) == ["launcher.account='it\\'s'"]


def test_unknown_setting_names_the_nearest_and_says_where_the_claim_goes():
    with pytest.raises(ConfigError, match=r"unknown setting `meassure` \(did you mean `measure`\?; the claim"):
        api.settings_overrides({"meassure": "quick"})


def test_settings_compose_through_hydra():
    from expkit.manifest.settings import load_settings

    s = load_settings(api.settings_overrides({"measure": "quick", "measure__target_ci": 0.02, "seed": 7}))
    assert (s.measure.name, s.measure.target_ci, s.seed) == ("quick", 0.02, 7)


# --- callables as references ------------------------------------------------------------


def test_module_level_callables_become_module_qualname():
    assert api.reference(K.double_add, "candidate") == "api_kernels:double_add"
    assert api.reference(K.Namespace.nested, "candidate") == "api_kernels:Namespace.nested"
    assert api.reference(K.op_object, "candidate") == "api_kernels:op_object"  # found by what binds it
    assert api.reference("pkg.mod:fn", "candidate") == "pkg.mod:fn"


def test_library_callables_resolve_to_an_importable_name():
    import torch
    from expkit.manifest.refs import resolve

    for fn in (torch.matmul, torch.nn.functional.gelu):
        ref = api.reference(fn, "baseline")
        assert resolve(ref, ROOT, manifest_path=ROOT / "x.yaml", key="baseline") is fn, ref


def nested_factory():
    def inner(x):
        return x
    return inner


@pytest.mark.parametrize("obj,words", [
    (lambda x: x, "is a lambda or is defined inside a function"),
    (nested_factory(), "is a lambda or is defined inside a function"),
    (functools.partial(K.double_add), "cannot be imported by name: no module binds it"),
    (3, "expected a callable or a `module:function` string, got int 3"),
    ("no_colon", "is not a `module:function` reference"),
])
def test_what_a_worker_cannot_import_is_a_manifest_error_naming_key_and_fix(obj, words):
    with pytest.raises(ManifestError) as e:
        api.reference(obj, "oracles[0].function")
    assert str(e.value).startswith("manifest (dict): oracles[0].function: ") and words in str(e.value)
    assert "\n" not in str(e.value)


def _fake_main(monkeypatch, file: str | None, spec_name: str | None = None) -> types.ModuleType:
    main = types.ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    main.__spec__ = types.SimpleNamespace(name=spec_name) if spec_name else None

    def kernel(x):
        return x
    kernel.__module__, kernel.__qualname__ = "__main__", "kernel"
    main.kernel = kernel
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main


def test_a_notebook_cell_function_is_refused_with_the_fix(monkeypatch):
    main = _fake_main(monkeypatch, None)
    with pytest.raises(ManifestError, match=r"candidate: `kernel` cannot be imported by name: it is defined in "
                                            r"`__main__` without a \.py file \(a notebook cell or the REPL\)"):
        api.reference(main.kernel, "candidate")


def test_a_script_function_is_named_by_the_script_file(monkeypatch, tmp_path):
    script = tmp_path / "my_script.py"
    script.write_text("def kernel(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    main = _fake_main(monkeypatch, str(script))
    assert api.reference(main.kernel, "candidate") == "my_script:kernel"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "my_script.py").write_text(script.read_text())
    main_m = _fake_main(monkeypatch, str(tmp_path / "pkg" / "my_script.py"), spec_name="pkg.my_script")  # python -m
    assert api.reference(main_m.kernel, "candidate") == "pkg.my_script:kernel"


def test_a_module_that_sys_path_cannot_find_is_refused(monkeypatch):
    ghost = types.ModuleType("ghost_module_not_on_path")

    def kernel(x):
        return x
    kernel.__module__, kernel.__qualname__ = ghost.__name__, "kernel"
    ghost.kernel = kernel
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)
    with pytest.raises(ManifestError, match="module 'ghost_module_not_on_path' is not on sys.path"):
        api.reference(kernel, "baseline")


# --- dict and Manifest manifests --------------------------------------------------------


def _claim(**over):
    m = {"name": "api-claim", "claim": {"speedup": 1.0}, "baseline": K.double_mul, "candidate": K.double_add,
         "inputs": {"factory": K.inputs, "free": ("n",)}, "cases": [{"name": "n8", "params": {"n": 8}}],
         "oracles": [{"kind": "exact"}]}
    m.update(over)
    return m


def test_a_dict_with_callables_becomes_plain_manifest_data():
    data = api.manifest_dict(_claim())
    assert (data["baseline"], data["candidate"], data["inputs"]) == (
        "api_kernels:double_mul", "api_kernels:double_add", {"factory": "api_kernels:inputs", "free": ["n"]})
    assert isinstance(build(Manifest, data), Manifest)
    yaml.safe_dump(data)  # plain data: no tuples, no callables


@pytest.mark.parametrize("over,key", [
    ({"claim": {"speedup": 0}}, "claim.speedup: must be > 0"),
    ({"candidat": K.double_add}, "candidat: unknown key (did you mean `candidate`?)"),
    ({"cases": [{"name": "a", "params": {"n": K.inputs}}]}, "cases[0].params.n: a callable is not allowed here"),
])
def test_a_bad_dict_names_the_key(over, key):
    with pytest.raises(ManifestError) as e:
        api.manifest_dict(_claim(**over))
    assert str(e.value).startswith(f"manifest (dict): {key}")


def test_a_manifest_object_round_trips():
    lm = load_manifest(CPU / "honest-win.yaml")
    assert build(Manifest, api.manifest_dict(lm.manifest)) == lm.manifest


def test_a_kernelbench_manifest_object_drops_what_the_loader_filled_in():
    lm = load_manifest(ROOT / "manifests" / "examples" / "kernelbench" / "pairwise-distance.yaml")
    data = api.manifest_dict(lm.manifest)
    assert "inputs" not in data and "baseline" not in data
    assert Path(data["kernelbench"]["problem"]).is_absolute()


def test_claim_manifest_takes_the_short_forms():
    data = api.claim_manifest(name="c", baseline=K.double_mul, candidate=K.double_add, inputs=K.inputs, speedup=1.2,
                              cases={"a": {"n": 4}, "b": None}, free=["n"], description="d")
    assert data["cases"] == [{"name": "a", "params": {"n": 4}}, {"name": "b", "params": {}}]
    assert data["claim"] == {"speedup": 1.2} and data["description"] == "d"
    assert api.claim_manifest(name="c", baseline="m:f", candidate="m:g", inputs="m:i", speedup=1)["cases"] == [
        {"name": "default"}]


# --- Result and load ---------------------------------------------------------------------


def _stored(name: str) -> dict:
    return json.loads((DATA / "session" / name / "result.json").read_text())


def test_result_from_a_stored_run():
    r = api.Result.from_result(_stored("honest-win"), Path("runs/hw"))
    assert (r.verdict, r.exit_code, r.ok, r.report) == ("supported", 0, True, Path("runs/hw/report.md"))
    c = r.case("square-1024")
    stored = _stored("honest-win")["measured"]["cases"]["square-1024"]
    assert (c.speedup, c.ci_low, c.ci_high, c.claimed) == (stored["speedup"], stored["ci_low"], stored["ci_high"],
                                                          stored["claimed"])
    assert c.baseline == api.SideTime(stored["baseline"]["median"], stored["baseline"]["ci_low"],
                                      stored["baseline"]["ci_high"], stored["baseline"]["n"])
    # A CPU run: judged on call time (the host clock), no kernel time.
    assert c.judged_on == "call" and c.baseline_call_s == c.baseline.median_s and c.baseline_kernel_s is None
    assert c.call_speedup == pytest.approx(c.baseline.median_s / c.candidate.median_s) and c.kernel_speedup is None
    assert r.overall is not None and r.overall.cases == 2
    with pytest.raises(KeyError, match="no measured case 'nope'"):
        r.case("nope")


def test_result_reads_kernel_and_call_time_of_a_gpu_run():
    d = json.loads((DATA / "synthetic-kernel-time" / "result.json").read_text())
    (name,) = d["measured"]["cases"]
    fig = d["timing"]["cases"][name]
    c = api.Result.from_result(d, Path("r")).case(name)
    assert c.judged_on == "kernel" and c.baseline.median_s == fig["baseline"]["kernel_median"]
    assert (c.baseline_kernel_s, c.baseline_call_s) == (fig["baseline"]["kernel_median"], fig["baseline"]["call_median"])
    assert (c.kernel_speedup, c.call_speedup) == pytest.approx((fig["kernel_speedup"], fig["call_speedup"]))
    assert "in kernel time; " in repr(api.Result.from_result(d, Path("r")))


def test_a_case_judged_on_call_time_has_kernel_time_beside_it():
    d = json.loads((DATA / "synthetic-kernel-time" / "result.json").read_text())
    (name,) = d["measured"]["cases"]
    d["timing"]["cases"][name]["judged_on"] = "call"
    c = api.Result.from_result(d, Path("r")).case(name)
    assert c.judged_on == "call" and c.baseline_kernel_s is not None


def test_invalid_run_has_no_cases_and_exit_3():
    r = api.Result.from_result(_stored("wrong-kernel"), Path("r"))
    assert (r.verdict, r.exit_code, r.cases, r.overall) == ("invalid", 3, (), None)


GOLDEN_REPR = """SUPPORTED: honest-win (exit 0)
  - {reason}
  square-1024: {sq}
  tall-2048x512: {tall}
  report: runs/hw/report.md"""


def test_repr_and_markdown_are_short_summaries():
    r = api.Result.from_result(_stored("honest-win"), Path("runs/hw"))
    text = repr(r)
    assert text.splitlines()[0] == "SUPPORTED: honest-win (exit 0)"
    assert text.splitlines()[-1] == "  report: runs/hw/report.md"
    assert len(text.splitlines()) == 1 + len(r.reasons[:5]) + 2 + 1
    md = r._repr_markdown_()
    assert md.startswith("**SUPPORTED**: honest-win (exit 0)")
    rows = [line for line in md.splitlines() if line.startswith("| square-1024 |")]
    assert len(rows) == 1 and rows[0].count("|") == 10 and "| call time |" in rows[0]


def test_load_reads_a_run_folder_and_refuses_others(tmp_path):
    shutil.copytree(DATA / "session" / "honest-win", tmp_path / "hw")
    r = expkit.load(tmp_path / "hw")
    assert r == api.Result.from_result(_stored("honest-win"), tmp_path / "hw")
    with pytest.raises(ExpkitError, match="no result.json here"):
        expkit.load(tmp_path)
    shutil.copytree(DATA / "session", tmp_path / "s")
    with pytest.raises(ExpkitError, match="a session folder holds one run per subfolder"):
        expkit.load(tmp_path / "s")


def test_load_upgrades_an_old_result():
    r = expkit.load(DATA / "v1-honest-win")
    assert r.verdict in ("supported", "refuted", "inconclusive", "invalid") and r.cases


# --- run, with the runner faked ----------------------------------------------------------


class FakeRunner:
    """Stands in for ``runner.run_manifest``: records its call, stores a recorded result."""

    def __init__(self, stored: str = "honest-win", raises: BaseException | None = None) -> None:
        self.stored, self.raises, self.calls = stored, raises, []

    def __call__(self, path, overrides, out_dir, *, progress=None, plots=True):
        self.calls.append((Path(path), list(overrides), Path(out_dir), progress))
        if self.raises is not None:
            raise self.raises
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in (DATA / "session" / self.stored).iterdir():
            shutil.copy(f, out_dir / f.name)
        result = json.loads((out_dir / "result.json").read_text())
        return RunOutcome(result["verdict"], 0, out_dir, result)


@pytest.fixture
def fake(monkeypatch):
    f = FakeRunner()
    monkeypatch.setattr("expkit.runner.run_manifest", f)
    return f


def test_run_a_dict_writes_its_manifest_into_the_run_folder(tmp_path, fake):
    r = expkit.run(_claim(), out=tmp_path / "run", measure="quick", seed=3)
    path, overrides, out, _ = fake.calls[0]
    assert path == tmp_path / "run" / api.MANIFEST_FILE and out == tmp_path / "run"
    assert overrides == ["measure=quick", "seed=3"]
    lm = load_manifest(path)
    assert (lm.manifest.baseline, lm.manifest.candidate) == ("api_kernels:double_mul", "api_kernels:double_add")
    assert r.verdict == "supported" and r.run_dir == tmp_path / "run"


def test_run_a_path_runs_the_file_and_keyword_settings_come_last(tmp_path, fake):
    expkit.run(CPU / "honest-win.yaml", out=tmp_path / "o", overrides=["measure=rigorous"], measure="quick")
    path, overrides, _, _ = fake.calls[0]
    assert path == CPU / "honest-win.yaml" and overrides == ["measure=rigorous", "measure=quick"]
    assert not (tmp_path / "o" / api.MANIFEST_FILE).exists()


def test_run_into_a_session_registers_and_renders(tmp_path, fake):
    r = expkit.run(_claim(), session=tmp_path / "s", name="first")
    assert r.run_dir == tmp_path / "s" / "first"
    runs = json.loads((tmp_path / "s" / "session.json").read_text())["runs"]
    assert [(x["run"], x["status"]) for x in runs] == [("first", "done")]
    assert (tmp_path / "s" / "session.md").is_file()
    with pytest.raises(ExpkitError, match="give out or session, not both"):
        expkit.run(_claim(), session=tmp_path / "s", out=tmp_path / "o")


def test_an_exception_escapes_with_its_run_folder_and_the_session_records_it(tmp_path, monkeypatch):
    monkeypatch.setattr("expkit.runner.run_manifest", FakeRunner(raises=RuntimeError("boom")))
    with pytest.raises(RuntimeError) as e:
        expkit.run(_claim(), session=tmp_path / "s", name="r")
    assert getattr(e.value, api.RUN_DIR_ATTR) == tmp_path / "s" / "r"
    runs = json.loads((tmp_path / "s" / "session.json").read_text())["runs"]
    assert runs[0]["status"] == "crashed" and "RuntimeError: boom" in runs[0]["note"]


def test_a_bad_manifest_raises_before_anything_runs(tmp_path, fake):
    with pytest.raises(ManifestError, match="claim.speedup"):
        expkit.run(_claim(claim={"speedup": -1}), out=tmp_path / "o")
    with pytest.raises(ManifestError, match="no such file"):
        expkit.run(tmp_path / "missing.yaml")
    assert fake.calls == [] and not (tmp_path / "o").exists()


def test_run_refuses_inside_a_worker_that_imported_an_unguarded_script(monkeypatch, fake):
    monkeypatch.setattr("multiprocessing.parent_process", lambda: object())
    monkeypatch.setattr("multiprocessing.current_process", lambda: types.SimpleNamespace(name="expkit-worker"))
    with pytest.raises(ExpkitError, match=r"guard that call with `if __name__ == \"__main__\":`"):
        expkit.run(_claim())


def test_the_package_exports_the_api():
    assert expkit.run is api.run and expkit.load is api.load and expkit.Result is api.Result
