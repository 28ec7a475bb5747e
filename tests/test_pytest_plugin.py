"""expkit's pytest plugin (expkit/pytest_plugin.py), driven through pytester.

Most tests replace the runner with a fake that stores a recorded result chosen by the
manifest's name (supported, refuted, invalid, inconclusive), so they check the plugin's
own work in a second or so; ``test_the_pytest_example_runs`` runs the shipped example
(examples/test_matrix_chain_claims.py) for real, in a fresh process.
"""

from __future__ import annotations

import json
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch  # noqa: F401 -- imported once here: pytester's in-process runs drop what they import, and torch cannot be imported twice

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "results" / "session"

CONFTEST = f'''
import json, shutil
from pathlib import Path
import pytest

DATA = Path({str(DATA)!r})
STORED = {{"supported": "honest-win", "refuted": "asserted-not-demonstrated", "invalid": "wrong-kernel",
           "inconclusive": "honest-win"}}


@pytest.fixture(autouse=True)
def fake_runner(monkeypatch):
    from expkit.manifest.spec import load
    from expkit.runner import RunOutcome

    def run_manifest(path, overrides, out_dir, *, progress=None, plots=True):
        name = load(path).manifest.name
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in (DATA / STORED[name.split("-")[0]]).iterdir():
            shutil.copy(f, out_dir / f.name)
        result = json.loads((out_dir / "result.json").read_text())
        if name.startswith("inconclusive"):
            result["verdict"], result["reasons"] = "inconclusive", ["interval straddles the bar"]
            (out_dir / "result.json").write_text(json.dumps(result))
        (out_dir / "overrides.json").write_text(json.dumps(list(overrides)))
        return RunOutcome(result["verdict"], 0, out_dir, result)

    monkeypatch.setattr("expkit.runner.run_manifest", run_manifest)
    monkeypatch.setattr("expkit.pytest_plugin._cuda_available", lambda: False)
'''

KERNELS = '''
import torch

def inputs(params, gen, device):
    return (torch.randn(8, generator=gen, device=device),)

def slow(x):
    return x * 2

def fast(x):
    return x + x
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(plugin_kernels=KERNELS)  # a name no other test imports: pytester keeps those
    pytester.syspathinsert()
    return pytester


def claims(verdicts: str, **extra: str) -> str:
    body = "from plugin_kernels import fast, inputs, slow\n\n"
    for v in verdicts.split():
        body += (f"def test_{v}(expkit_claim):\n"
                 f"    r = expkit_claim(name={v!r}, baseline=slow, candidate=fast, inputs=inputs, speedup=1.5,"
                 f" measure='quick'{extra.get(v, '')})\n"
                 f"    assert r.verdict == 'supported'\n\n")
    return body


def _subprocess_args(monkeypatch: pytest.MonkeyPatch) -> list:
    """Arguments for a fresh pytest that finds expkit and its plugin, installed or not (a bare checkout)."""
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    registered = any(e.name == "expkit" for e in entry_points(group="pytest11"))
    return ["-p", "no:cacheprovider"] + ([] if registered else ["-p", "expkit.pytest_plugin"])


def test_the_plugin_is_registered_under_pytest11():
    assert any(e.name == "expkit" and e.value == "expkit.pytest_plugin" for e in entry_points(group="pytest11"))


def test_verdicts_become_test_outcomes_with_the_reasons_as_message(project, tmp_path):
    project.makepyfile(test_claims=claims("supported refuted invalid inconclusive"))
    res = project.runpytest(f"--expkit-reports={tmp_path / 'r'}")
    res.assert_outcomes(passed=1, failed=3)
    out = res.stdout.str()
    stored = json.loads((DATA / "asserted-not-demonstrated" / "result.json").read_text())
    assert f"expkit REFUTED: {stored['name']} (exit 1)" in out and stored["reasons"][0] in out
    assert "expkit INVALID: wrong-kernel (exit 3)" in out and "expkit INCONCLUSIVE" in out
    assert "report: " in out and "Traceback" not in out and "def test_refuted" not in out  # no Python traceback


def test_inconclusive_skips_when_asked(project, tmp_path):
    project.makepyfile(test_claims=claims("inconclusive"))
    project.runpytest("--expkit-inconclusive=skip", f"--expkit-reports={tmp_path / 'r'}").assert_outcomes(skipped=1)
    project.makeini("[pytest]\nexpkit_inconclusive = skip\n")
    project.runpytest(f"--expkit-reports={tmp_path / 'r2'}").assert_outcomes(skipped=1)
    project.makepyfile(test_claims=claims("inconclusive", inconclusive=", inconclusive='fail'"))
    project.runpytest(f"--expkit-reports={tmp_path / 'r3'}").assert_outcomes(failed=1)  # the claim's own word wins


def test_gpu_manifests_are_skipped_without_a_gpu(project, tmp_path):
    project.makepyfile(test_claims=claims("supported", supported=", device='cuda'"))
    res = project.runpytest("-rs", f"--expkit-reports={tmp_path / 'r'}")
    res.assert_outcomes(skipped=1)
    assert "expkit: supported needs a CUDA GPU and torch sees none on this machine" in res.stdout.str()


def test_reports_go_into_one_session_named_by_the_option(project, tmp_path):
    project.makepyfile(test_claims=claims("supported refuted"))
    reports = tmp_path / "reports"
    res = project.runpytest(f"--expkit-reports={reports}", "--expkit-set", "seed=5")
    runs = json.loads((reports / "session.json").read_text())["runs"]
    assert [(r["run"], r["status"]) for r in runs] == [("test_claims-test_supported", "done"),
                                                       ("test_claims-test_refuted", "done")]
    assert (reports / "session.md").is_file() and (reports / "test_claims-test_supported" / "result.json").is_file()
    overrides = json.loads((reports / "test_claims-test_supported" / "overrides.json").read_text())
    assert overrides == ["measure=quick", "seed=5"]  # the command line's settings after the claim's own
    assert f"session report: {reports / 'session.md'}" in res.stdout.str()
    assert "2 claim(s): 1 refuted, 1 supported" in res.stdout.str()


def test_the_default_reports_folder_is_under_the_root(project):
    project.makepyfile(test_claims=claims("supported"))
    project.runpytest().assert_outcomes(passed=1)
    (session,) = (project.path / "reports").glob("*-pytest")
    assert (session / "session.md").is_file()


def test_the_marker_runs_a_manifest_beside_the_test_and_hands_over_the_result(project, tmp_path):
    (project.path / "claims").mkdir()
    (project.path / "claims" / "supported.yaml").write_text(
        "name: supported\nclaim: {speedup: 1.5}\nbaseline: plugin_kernels:slow\ncandidate: plugin_kernels:fast\n"
        "inputs: {factory: plugin_kernels:inputs}\ncases: [{name: a}]\n")
    (project.path / "claims" / "test_marked.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.expkit('supported.yaml', measure='quick')\n"
        "def test_holds(expkit_result):\n"
        "    assert expkit_result.verdict == 'supported' and expkit_result.cases\n\n"
        "@pytest.mark.expkit({'name': 'refuted', 'claim': {'speedup': 9}, 'baseline': 'plugin_kernels:slow',\n"
        "                     'candidate': 'plugin_kernels:fast', 'inputs': {'factory': 'plugin_kernels:inputs'},\n"
        "                     'cases': [{'name': 'a'}]})\n"
        "def test_body_never_runs():\n"
        "    raise AssertionError('the body ran after a refuted claim')\n")
    res = project.runpytest(f"--expkit-reports={tmp_path / 'r'}")
    res.assert_outcomes(passed=1, failed=1)
    assert "the body ran" not in res.stdout.str() and "expkit REFUTED" in res.stdout.str()


@pytest.mark.parametrize("call,words", [
    ("expkit_claim(name='supported', baseline=slow, candidate=fast, inputs=inputs, speedup=0)",
     "expkit: manifest (dict): claim.speedup: must be > 0"),
    ("expkit_claim('m.yaml', baseline=slow)", "give a manifest or its parts, not both"),
    ("expkit_claim(baseline=slow)", "missing: candidate, inputs, speedup"),
    ("expkit_claim('missing.yaml')", "missing.yaml: no such file"),
    ("expkit_claim(name='supported', baseline=slow, candidate=fast, inputs=inputs, speedup=1, meassure='quick')",
     "unknown setting `meassure` (did you mean `measure`?"),
])
def test_mistakes_fail_the_test_with_expkits_one_line(project, tmp_path, call, words):
    project.makepyfile(test_claims=f"from plugin_kernels import fast, inputs, slow\n\n"
                                   f"def test_x(expkit_claim):\n    {call}\n")
    res = project.runpytest(f"--expkit-reports={tmp_path / 'r'}")
    res.assert_outcomes(failed=1)
    assert words in res.stdout.str() and "Traceback" not in res.stdout.str()


def test_a_bad_option_is_a_usage_error(project):
    res = project.runpytest("--expkit-set", "measure")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--expkit-set 'measure': expected KEY=VALUE" in res.stderr.str()


@pytest.mark.slow
def test_the_pytest_example_runs(pytester: pytest.Pytester, tmp_path, monkeypatch):
    """examples/test_matrix_chain_claims.py, as CI runs it: real claims, a fresh process."""
    for name in ("matrix_chain.py", "matrix-chain.yaml", "test_matrix_chain_claims.py"):
        shutil.copy(ROOT / "examples" / name, pytester.path / name)
    reports = tmp_path / "reports"
    res = pytester.runpytest_subprocess(*_subprocess_args(monkeypatch), f"--expkit-reports={reports}", timeout=540)
    res.assert_outcomes(passed=2, xfailed=1)
    verdicts = {r["run"]: r["status"] for r in json.loads((reports / "session.json").read_text())["runs"]}
    assert len(verdicts) == 3 and set(verdicts.values()) == {"done"}
    assert (reports / "session.md").is_file()


@pytest.mark.gpu
def test_a_gpu_claim_runs_where_there_is_a_gpu(pytester: pytest.Pytester, tmp_path, monkeypatch):
    """On a CUDA machine a `device: cuda` manifest is run, not skipped, and its result has both figures."""
    honest = ROOT / "manifests" / "examples" / "gpu" / "honest.yaml"
    pytester.makepyfile(test_gpu=f"import pytest\n\n"
                                 f"@pytest.mark.expkit({str(honest)!r}, measure='quick')\n"
                                 f"def test_honest(expkit_result):\n"
                                 f"    (case, *_) = expkit_result.cases\n"
                                 f"    print('FIGURES', case.judged_on, case.baseline_kernel_s, case.baseline_call_s)\n"
                                 f"    assert case.baseline_call_s is not None\n")
    reports = tmp_path / "reports"
    res = pytester.runpytest_subprocess("-s", *_subprocess_args(monkeypatch), f"--expkit-reports={reports}",
                                        timeout=540)
    res.assert_outcomes(passed=1)
    assert (reports / "session.md").is_file()
    print(res.stdout.str())
