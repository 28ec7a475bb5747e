"""The CLI through its library entry point, on the shipped CPU examples."""

import json
import os
from pathlib import Path

import pytest

from expkit.cli import main
from expkit.core.errors import ExpkitError

ROOT = Path(__file__).resolve().parent.parent
CPU = ROOT / "manifests" / "examples" / "cpu"


@pytest.mark.parametrize("name,verdict,code,reason", [
    ("honest-win", "supported", 0, "speedup"),
    ("asserted-not-demonstrated", "refuted", 1, "speedup"),
    ("wrong-kernel", "invalid", 3, "identity [case S128]: expected op matching "
                                   "`expkit_examples::attn_vectorized`; ran `expkit_examples::attn_basic`"),
    ("stride-bug", "invalid", 3, "oracle:allclose [case d4097]"),
])
def test_examples_give_their_verdicts(tmp_path, name, verdict, code, reason):
    out = tmp_path / name
    assert main(["run", str(CPU / f"{name}.yaml"), "measure=quick", "--out", str(out), "--quiet"]) == code
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == verdict
    assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]
    assert (out / "report.md").read_text().startswith(f"# {name}\n\n**{verdict.upper()}**")
    if verdict == "invalid":
        assert result["measured"]["cases"] == {}  # preflight stopped it before measuring


def test_validate_names_a_misspelt_key_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CPU / "honest-win.yaml").read_text().replace("candidate:", "candidat:"))
    (tmp_path / "kernels.py").write_text((CPU / "kernels.py").read_text())
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "bad.yaml: candidat: unknown key (did you mean `candidate`?)" in err


def test_validate_accepts_the_examples(capsys):
    assert main(["validate", *map(str, sorted(CPU.glob("*.yaml")))]) == 0


def test_validate_takes_a_folder_and_a_glob_as_run_does(capsys):
    n = len(list(CPU.glob("*.yaml")))
    assert main(["validate", str(CPU)]) == 0
    assert capsys.readouterr().out.count("ok: ") == n
    assert main(["validate", str(CPU / "*.yaml")]) == 0
    assert capsys.readouterr().out.count("ok: ") == n
    assert main(["validate", str(CPU / "no-such-folder")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("edit,key", [
    (("candidate: kernels:chain_right", "candidate: kernels:chain_rigth"), "candidate"),
    (("candidate: kernels:chain_right", "candidate: nosuchmodule:f"), "candidate"),
    (("speedup: 1.5", "speedup: [1]"), "claim.speedup"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, edit, key):
    (tmp_path / "kernels.py").write_text((CPU / "kernels.py").read_text())
    m = tmp_path / "m.yaml"
    m.write_text((CPU / "honest-win.yaml").read_text().replace(*edit))
    assert main(["run", str(m), "measure=quick", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f": {key}: " in err and "Traceback" not in err


def test_bad_override_is_exit_2(tmp_path, capsys):
    assert main(["run", str(CPU / "honest-win.yaml"), "measure=quik", "--quiet"]) == 2
    assert "conf/measure/" in capsys.readouterr().err


@pytest.mark.parametrize("override, says", [
    ("measure=quik", "override `measure=quik`: no preset `quik` for measure (did you mean `quick`? the measure "
                     "presets, in conf/measure/, are default, quick, rigorous)"),
    ("launcher=slurn", "(did you mean `slurm`? the launcher presets, in conf/launcher/, are local, slurm)"),
    ("measure.target_cl=0.02", "override `measure.target_cl=0.02`: no setting `target_cl` in measure (did you mean "
                               "`target_ci`? the measure settings are name, warmup_seconds, "),
    ("mesure=quick", "override `mesure=quick`: no setting `mesure` (did you mean `measure`? the settings are measure, "
                     "oracle, cost, launcher, defences, seed; the claim itself belongs in the manifest)"),
    ("seed.value=3", "override `seed.value=3`: `seed` is one value, with no settings under it (give seed=...)"),
])
def test_a_misspelt_preset_or_setting_names_the_nearest_and_the_choices(tmp_path, capsys, override, says):
    """Hydra's own words ("Could not find 'measure/quik'") named neither the nearest name nor
    the presets there are (issue 51)."""
    assert main(["run", str(CPU / "honest-win.yaml"), override, "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "o").exists()  # refused before anything ran


@pytest.mark.parametrize("override, says", [
    ("defences.pin_cores=maybe", "Value 'maybe' is not a valid bool"),
    ("measure.max_seconds=abc", "could not be converted to Float"),
    ("defences.pin_core=true", "no setting `pin_core` in defences (did you mean `pin_cores`?"),
])
def test_a_bad_value_or_key_says_what_was_wrong_in_one_line(capsys, override, says):
    assert main(["run", str(CPU / "honest-win.yaml"), override, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and override.split("=")[0] in err, err


def test_report_rerenders_identically(tmp_path):
    out = tmp_path / "r"
    main(["run", str(CPU / "wrong-kernel.yaml"), "measure=quick", "--out", str(out), "--quiet"])
    before = (out / "report.md").read_text()
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text() == before


# --- a command line that behaves (issue 16) -------------------------------------------------


def test_options_and_overrides_in_any_order(tmp_path, monkeypatch):
    from expkit import api

    seen = []
    monkeypatch.setattr(api, "run", lambda path, **kw: seen.append((path, kw)) or (_ for _ in ()).throw(
        KeyboardInterrupt()))
    for argv in (["run", "m.yaml", "--out", "D", "measure=quick", "seed=1"],
                 ["run", "--out", "D", "measure=quick", "m.yaml", "--quiet", "seed=1"],
                 ["run", "measure=quick", "seed=1", "m.yaml", "--out", "D"]):
        assert main(argv) == 130
    assert [(p, kw["out"], kw["overrides"]) for p, kw in seen] == [("m.yaml", Path("D"), ["measure=quick", "seed=1"])] * 3


def test_run_with_options_before_the_overrides_really_runs(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", str(CPU / "wrong-kernel.yaml"), "--out", str(out), "--quiet", "measure=quick"]) == 3
    assert json.loads((out / "result.json").read_text())["settings"]["overrides"] == ["measure=quick"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "INVALID: wrong-kernel (exit 3)" and printed[-1] == f"  report: {out / 'report.md'}"


def test_version(capsys):
    from expkit import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"expkit {__version__}"


@pytest.mark.parametrize("argv,words", [
    ([], "expkit: give a command: run, validate"),
    (["rnu"], "expkit: unknown command 'rnu' (did you mean `run`?)"),
    (["run", "m.yaml", "--bogus"], "expkit run: unrecognized arguments: --bogus (see `expkit run --help`)"),
    (["compare", "a"], "expkit compare: the following arguments are required: b"),
    (["--nope"], "expkit: unrecognized arguments: --nope"),
])
def test_usage_errors_are_one_line_exit_2(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "usage:" not in err


def test_schema_prints_the_shipped_schema(tmp_path, capsys):
    from expkit.manifest.json_schema import shipped

    assert main(["schema"]) == 0
    assert capsys.readouterr().out == shipped()
    assert main(["schema", "--out", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text() == shipped()


# --- no traceback, ever (issue 19): one boundary, one line, the details in a file --------------


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ failed")


def _exceptions():
    import torch

    from expkit.core.errors import ManifestError, OutOfMemoryPlan

    return [
        (RuntimeError("boom"), 6),
        (KeyError("missing"), 6),
        (MemoryError(), 6),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore text"), 6),
        (SystemExit(3), 6),
        (Unprintable(), 6),
        (ManifestError("m.yaml", "claim.speedup", "must be > 0", "write 1.5"), 2),
        (ExpkitError("several\nlines"), 2),
        (OutOfMemoryPlan("m.yaml: case big", "cuda:0", 40 * 2**30, 12 * 2**30, "halve batch_size"), 5),
        (KeyboardInterrupt(), 130),
    ]


#: Where each stage is entered during `expkit run` (module, attribute), patched to raise: before
#: any worker starts, then once the workers run (the runner closes them on the way out). The
#: runner is being rewritten (issue 19): keep these to names it reaches through.
RUN_STAGES = [
    ("expkit.api", "prepare"),
    ("expkit.runner", "load_manifest"),
    ("expkit.runner", "load_settings"),
]
RUN_STAGES_WITH_WORKERS = [
    ("expkit.bench.processes.environment", "capture"),
]
#: Other commands, with the library function each calls.
COMMAND_STAGES = [
    (["report", "{run}"], "expkit.report.run_report", "write"),
    (["session", "{run}"], "expkit.report.session", "render_session"),
    (["compare", "{run}", "{run}"], "expkit.report.compare", "compare"),
    (["validate", "{manifest}"], "expkit.manifest.spec", "load"),
    (["schema"], "expkit.manifest.json_schema", "render"),
    (["doctor"], "expkit.cli.doctor", "diagnose"),
    (["audit", "{manifest}", "--quiet"], "expkit.suites.audit", "run_audit"),
]


def _check_one_line(capsys, code, expected, folder=None):
    captured = capsys.readouterr()
    err = captured.err
    assert code == expected, err
    assert err.count("\n") == 1 and "Traceback" not in err + captured.out, err
    if expected == 6:
        assert " failed in " in err and "(exit 6: a failure of expkit or its environment, not a verdict)" in err
        path = Path(err.split("traceback in ")[1].split(" (exit")[0])
        assert path.is_file() and "Traceback (most recent call last)" in path.read_text()
        if folder is not None:
            assert path == folder / "error.txt"
    if expected == 130:
        assert err == "interrupted\n"
    return err


@pytest.mark.parametrize("module,attr", RUN_STAGES)
@pytest.mark.parametrize("exc,expected", _exceptions(), ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else None)
def test_any_exception_in_a_run_stage_is_one_line(tmp_path, capsys, monkeypatch, module, attr, exc, expected):
    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(f"{module}.{attr}", boom)
    out = tmp_path / "o"
    code = main(["run", str(CPU / "honest-win.yaml"), "--out", str(out), "--quiet", "measure=quick"])
    _check_one_line(capsys, code, expected, folder=out)


@pytest.mark.parametrize("module,attr", RUN_STAGES_WITH_WORKERS)
@pytest.mark.parametrize("exc,expected", [_exceptions()[0], _exceptions()[-2], _exceptions()[-1]])
def test_any_exception_once_the_workers_run_is_one_line(tmp_path, capsys, monkeypatch, module, attr, exc, expected):
    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(f"{module}.{attr}", boom)
    out = tmp_path / "o"
    code = main(["run", str(CPU / "honest-win.yaml"), "--out", str(out), "--quiet", "measure=quick"])
    _check_one_line(capsys, code, expected, folder=out)


@pytest.mark.parametrize("argv,module,attr", COMMAND_STAGES)
@pytest.mark.parametrize("exc,expected", _exceptions()[:3] + _exceptions()[-2:])
def test_any_exception_in_another_command_is_one_line(tmp_path, capsys, monkeypatch, argv, module, attr, exc,
                                                        expected):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "results" / "session" / "honest-win", run)

    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(f"{module}.{attr}", boom)
    code = main([a.format(run=run, manifest=CPU / "honest-win.yaml") for a in argv])
    if argv[0] == "validate" and isinstance(exc, ExpkitError):
        expected = 2  # validate reports every manifest's problem and exits 2 for any of them
    folder = run if argv[0] in ("report", "session") else None
    _check_one_line(capsys, code, expected, folder=folder)


def test_the_line_names_the_stage_and_where_it_was_raised(tmp_path, capsys, monkeypatch):
    import torch

    def deep(*a, **k):  # as if raised inside torch, called from the bench
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    code = compile("def open_session(*a, **k):\n    return deep()\n", str(ROOT / "expkit" / "bench" / "sessions.py"),
                   "exec")
    ns = {"deep": deep}
    exec(code, ns)
    monkeypatch.setattr("expkit.runner.load_settings", ns["open_session"])
    err = _check_one_line(capsys, main(["run", str(CPU / "honest-win.yaml"), "--out", str(tmp_path / "o"),
                                        "--quiet"]), 6, folder=tmp_path / "o")
    assert err.startswith("error: expkit run failed in the bench (worker process and channel) "
                          "(expkit/bench/sessions.py:2 in open_session), raised at ")
    assert "test_cli.py" in err and "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB;" in err


def test_details_go_to_a_temporary_file_when_the_command_has_no_folder(capsys, monkeypatch, tmp_path):
    import tempfile

    from expkit.cli.boundary import ERROR_DIR_ENV

    monkeypatch.setattr("expkit.manifest.json_schema.render", lambda: 1 / 0)
    monkeypatch.delenv(ERROR_DIR_ENV)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the system's temporary folder, for this test
    err = _check_one_line(capsys, main(["schema"]), 6)
    path = Path(err.split("traceback in ")[1].split(" (exit")[0])
    text = path.read_text()
    assert path.parent == tmp_path
    assert path.name.startswith("expkit-error-") and "command: expkit schema" in text and "ZeroDivisionError" in text


def test_the_suites_failures_leave_no_details_in_the_systems_temporary_folder(capsys, monkeypatch, tmp_path):
    """Each test that makes a command fail on purpose left an expkit-error-*.txt in /tmp
    (12 from test_cli.py alone); the suite's conftest points the boundary at its own
    temporary folder, which the processes the tests start inherit (issue 51)."""
    import os
    import subprocess
    import sys
    import tempfile

    from expkit.cli.boundary import ERROR_DIR_ENV

    system = tmp_path / "system-tmp"
    system.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    monkeypatch.setattr("expkit.manifest.json_schema.render", lambda: 1 / 0)
    err = _check_one_line(capsys, main(["schema"]), 6)
    path = Path(err.split("traceback in ")[1].split(" (exit")[0])
    assert path.parent == Path(os.environ[ERROR_DIR_ENV]) and path.is_file()
    proc = subprocess.run([sys.executable, "-c", "import sys; from expkit.cli import main; "
                           "import expkit.manifest.json_schema as j; j.render = lambda: 1 / 0; sys.exit(main(['schema']))"],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(system)}, timeout=120)
    assert proc.returncode == 6 and f"traceback in {os.environ[ERROR_DIR_ENV]}/expkit-error-" in proc.stderr, proc.stderr
    assert list(system.iterdir()) == []


@pytest.mark.parametrize("candidate,tail", [
    ("base", "raise RuntimeError('the module under test is broken')\n"),   # fails while the worker imports it
    ("crash", ""),                                                          # kills its worker with SIGSEGV
])
def test_no_traceback_from_a_real_process_whose_candidate_crashes(tmp_path, candidate, tail):
    """End to end in a fresh process: nothing a worker prints reaches the terminal."""
    import subprocess
    import sys

    (tmp_path / "kernels.py").write_text("import ctypes\nimport torch\n"
                                         "def inputs(p, g, d):\n    return (torch.randn(64, generator=g, device=d),)\n"
                                         "def base(x):\n    return x * 2\n"
                                         "def crash(x):\n    ctypes.string_at(0)\n    return x\n" + tail)
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"name: broken\nclaim: {{speedup: 1.0}}\nbaseline: kernels:base\n"
                        f"candidate: kernels:{candidate}\ninputs: {{factory: kernels:inputs}}\ncases: [{{name: a}}]\n")
    proc = subprocess.run([sys.executable, "-m", "expkit", "run", str(manifest), "--out", str(tmp_path / "o"),
                           "measure=quick"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "Traceback" not in proc.stderr + proc.stdout and "Fatal Python error" not in proc.stderr, proc.stderr
    assert proc.returncode in (2, 3), proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr


def test_a_shared_folder_too_small_for_the_inputs_is_one_line_exit_2_naming_the_fix(tmp_path):
    """A real run on a 1 MiB tmpfs as the workers' shared folder (a container's /dev/shm is
    small): 64 KiB inputs fit, 4 MiB ones do not. Before, the run ended with exit 6 and
    "OSError: [Errno 28] No space left on device". Needs mount rights, as root has."""
    import subprocess
    import sys

    shm = tmp_path / "shm"
    shm.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(shm)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (tmp_path / "kernels.py").write_text("import torch\n"
                                             "def inputs(p, g, d):\n    return (torch.randn(p['n'], generator=g, device=d),)\n"
                                             "def base(x):\n    return x * 2\n"
                                             "def cand(x):\n    return x + x\n")
        got = {}
        for n in (1 << 14, 1 << 20):
            (tmp_path / "m.yaml").write_text(
                "name: shm\nclaim: {speedup: 1.0}\nbaseline: kernels:base\ncandidate: kernels:cand\n"
                f"inputs: {{factory: kernels:inputs}}\ncases: [{{name: a, params: {{n: {n}}}}}]\n")
            got[n] = subprocess.run([sys.executable, "-m", "expkit", "run", "m.yaml", "--out", f"o{n}",
                                     "measure=quick", "measure.max_seconds=0.5"], capture_output=True, text=True,
                                    cwd=tmp_path, timeout=300, env={**os.environ, "EXPKIT_SHM_DIR": str(shm)})
        assert got[1 << 14].returncode in (0, 1, 4), got[1 << 14].stdout  # a verdict on the claim
        small = got[1 << 20]
        assert small.returncode == 2 and len(small.stderr.strip().splitlines()) == 1, small.stderr
        assert small.stderr.startswith(f"error: {shm} has ") and "--shm-size" in small.stderr
        assert not os.listdir(shm)  # the workers' files were removed
    finally:
        subprocess.run(["umount", str(shm)], capture_output=True)


def test_a_baseline_that_fails_on_its_own_case_is_one_line_exit_2(tmp_path, capsys):
    """Found by the KernelBench sweep (100_HingeLoss with its sizes divided, whose
    reference no longer runs): the baseline raising in the memory plan's plain call was
    reported as a failure of expkit (exit 6). It is the manifest's to fix."""
    (tmp_path / "k.py").write_text(
        "import torch\n"
        "def inputs(params, gen, device):\n"
        "    return (torch.randn(params['n'], generator=gen), torch.randn(params['n'] + 1, generator=gen))\n"
        "def add(a, b):\n"
        "    return a + b\n")
    (tmp_path / "m.yaml").write_text(
        "name: t\nclaim: {speedup: 1.0}\nbaseline: k:add\ncandidate: k:add\n"
        "inputs: {factory: k:inputs}\ncases: [{name: c, params: {n: 64}}]\n")
    assert main(["run", str(tmp_path / "m.yaml"), "measure=quick", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the baseline raised RuntimeError" in err and "case 'c'" in err


def test_the_command_ends_without_teardown_but_runs_exit_handlers_and_flushes(tmp_path):
    """``expkit`` (``cli.entry``) ends its process with ``os._exit`` once ``main`` returns:
    exit handlers still run, a large piped stdout arrives whole, and the exit code is main's."""
    import subprocess
    import sys

    script = ("import atexit, sys; atexit.register(lambda: print('handler ran')); "
              "sys.argv = ['expkit'] + sys.argv[1:]; from expkit.cli import entry; entry()")
    ok = subprocess.run([sys.executable, "-c", script, "schema"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.rstrip().endswith("handler ran") and len(ok.stdout) > 4096  # the whole schema, then the handler
    bad = subprocess.run([sys.executable, "-c", script, "validate", str(tmp_path / "missing.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


# --- paths a command reads or writes: one line naming the path, exit 2, nothing created (issue 51) ---------


def _one_usage_line(capsys, code):
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err + captured.out, captured.err
    assert " failed in " not in captured.err and "exit 6" not in captured.err, captured.err
    return captured.err


@pytest.mark.parametrize("argv,says", [
    (["report", "{tmp}/missing"], "missing: no such folder"),
    (["report", "{tmp}/empty"], "empty: not a run folder, no result.json in it"),
    (["report", "{tmp}/session"], "session: not a run folder, no result.json in it (it holds run folders (run)"),
    (["session", "{tmp}/missing"], "missing: no such folder"),
    (["compare", "{tmp}/missing", "{tmp}/empty"], "missing: no such folder"),
    (["compare", "{tmp}/session", "{tmp}/missing"], "missing: no such folder"),
    (["validate", "{tmp}/missing.yaml"], "missing.yaml: no such file or folder"),
    (["run", "{tmp}/missing.yaml", "--quiet"], "missing.yaml: no such file"),
    (["run", "--resume", "{tmp}/missing", "--quiet"], "missing: not a session folder"),
    (["import", "kernelbench", "{tmp}/missing"], "missing: not a folder"),
])
def test_a_path_that_is_not_what_the_command_reads_is_one_line_and_creates_nothing(tmp_path, capsys, argv, says):
    """`expkit report` on a missing folder was exit 6, "a failure of expkit", and made the
    folder to hold error.txt; every command that reads a path says what is wrong with it."""
    import shutil

    (tmp_path / "empty").mkdir()
    shutil.copytree(ROOT / "tests" / "data" / "results" / "session" / "honest-win", tmp_path / "session" / "run")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    err = _one_usage_line(capsys, main([a.format(tmp=tmp_path) for a in argv]))
    assert says in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing made, nothing written


def test_a_damaged_result_json_is_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "result.json").write_text('{"verdict": "supp')
    err = _one_usage_line(capsys, main(["report", str(tmp_path)]))
    assert "result.json: not a result.json expkit can read" in err and "run the manifest again" in err


@pytest.mark.parametrize("option", ["--out", "--session"])
def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, option):
    (tmp_path / "a-file").write_text("")
    err = _one_usage_line(capsys, main(["run", str(CPU / "honest-win.yaml"), option, str(tmp_path / "a-file" / "o"),
                                        "--quiet", "measure=quick"]))
    assert "a-file/o: cannot create the " in err and "give a folder you can write to" in err


def test_a_reader_that_goes_away_is_exit_141_not_a_failure_of_expkit(monkeypatch, capsys, tmp_path):
    """`expkit run M | head -3` ended in "expkit run failed in the command line ... BrokenPipeError"
    and an error.txt in the run folder, exit 6, once the verdict was out (issue 51)."""
    import io
    import sys

    class Gone(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Gone())
    assert main(["schema"]) == 141
    assert capsys.readouterr().err == ""


def test_every_command_is_in_the_commands_reference():
    from expkit.cli.commands import _parsers

    table = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    missing = [name for name in _parsers()[1] if f"`expkit {name} " not in table]
    assert not missing, f"docs/commands.md has no row for: {missing}"
