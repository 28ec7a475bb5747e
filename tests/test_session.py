"""Sessions: the folder contract, a session killed at any point, and the golden session report."""

import json
import shutil
import threading
from pathlib import Path

import pytest

from expkit.report import session as S
from expkit.report import store
from expkit.core.errors import ExpkitError
from golden import check

DATA = Path(__file__).resolve().parent / "data" / "results"
RUNS = ("honest-win", "asserted-not-demonstrated", "wrong-kernel", "stride-bug")


def fill(run_dir, name):
    """Put a finished run's stored files into ``run_dir`` (what run_manifest would write)."""
    for f in (store.RESULT, store.SAMPLES, store.ENV):
        shutil.copy(DATA / "session" / name / f, run_dir / f)


def test_golden_session_report_of_the_four_cpu_examples():
    text = S.render(DATA / "session")
    check("session.md", text)
    for name in RUNS:
        assert f"| {name} |" in text


def test_session_totals_and_findings():
    s = S.load_session(DATA / "session")
    tot = S.summary(s)
    assert tot["runs"] == tot["finished"] == 4 and tot["unfinished"] == 0
    assert tot["verdicts"] == {"invalid": 2, "refuted": 1, "supported": 1}
    assert tot["worst"] == "invalid" and tot["exit_code"] == 3
    expected = sum(json.loads((DATA / "session" / n / store.RESULT).read_text())["cost"]["seconds"] for n in RUNS)
    assert tot["device_seconds"] == pytest.approx(expected)
    kinds = [f["kind"] for f in S.context(s)["findings"]]
    assert kinds.count("invalid") == 2 and kinds.count("claimed elsewhere") == 2


def test_new_register_mark(tmp_path):
    sess = S.new_session(tmp_path, name="nightly")
    assert sess.parent == tmp_path and sess.name.endswith("-nightly")
    a = S.register_run(sess, Path("m/attn.yaml"))
    b = S.register_run(sess, Path("other/attn.yaml"))
    assert (a.name, b.name) == ("attn", "attn-2") and a.is_dir() and b.is_dir()
    S.mark(sess, a, S.RUNNING)
    S.mark(sess, a, S.DONE)
    data = json.loads((sess / S.SESSION).read_text())
    assert data["schema_version"] == S.SESSION_SCHEMA_VERSION
    ra, rb = data["runs"]
    assert ra["status"] == "done" and ra["started"] and ra["finished"]
    assert rb["status"] == "queued" and rb["started"] is None and rb["manifest"] == "other/attn.yaml"
    with pytest.raises(ValueError):
        S.mark(sess, a, "finished")
    with pytest.raises(ExpkitError):
        S.mark(sess, sess / "nope", S.DONE)
    assert sorted(p.name for p in sess.iterdir()) == ["attn", "attn-2", "session.json"]


def test_a_session_killed_between_runs_still_renders(tmp_path):
    sess = S.new_session(tmp_path)
    done = S.register_run(sess, Path("honest-win.yaml"))
    S.mark(sess, done, S.RUNNING)
    fill(done, "honest-win")
    S.mark(sess, done, S.DONE)
    killed = S.register_run(sess, Path("asserted-not-demonstrated.yaml"))
    S.mark(sess, killed, S.RUNNING)  # the process died here: no result.json
    S.register_run(sess, Path("stride-bug.yaml"))  # never started
    text = S.render_session(sess).read_text()
    assert "3 runs, 1 finished: 1 supported." in text
    assert "unfinished: started, no result (killed?)" in text and "unfinished: queued, never started" in text
    assert "| honest-win | square-1024 |" in text


def test_a_run_killed_after_its_result_counts_as_finished(tmp_path):
    sess = S.new_session(tmp_path)
    run = S.register_run(sess, Path("stride-bug.yaml"))
    S.mark(sess, run, S.RUNNING)
    fill(run, "stride-bug")  # result written, then killed before mark(done)
    s = S.load_session(sess)
    assert s.runs[0].status == S.DONE and s.runs[0].result["verdict"] == "invalid"


def test_a_corrupt_result_is_listed_not_fatal(tmp_path):
    sess = S.new_session(tmp_path)
    run = S.register_run(sess, Path("x.yaml"))
    (run / store.RESULT).write_text("{ half a file")
    text = S.render(sess)
    assert "result.json could not be read" in text


def test_folders_without_session_json(tmp_path):
    for name in RUNS[:2]:
        (tmp_path / name).mkdir()
        fill(tmp_path / name, name)
    (tmp_path / "notes").mkdir()  # not a run: ignored
    s = S.load_session(tmp_path)
    assert [r.name for r in s.runs] == ["asserted-not-demonstrated", "honest-win"] and not s.listed
    one = S.load_session(tmp_path / "honest-win")  # a single run reads as a one-run session
    assert len(one.runs) == 1 and one.runs[0].folder == tmp_path / "honest-win"
    assert "1 run, 1 finished: 1 supported." in S.render(tmp_path / "honest-win")
    with pytest.raises(ExpkitError):
        S.load_session(tmp_path / "notes")


def test_record_run_marks_done_and_crashed(tmp_path):
    sess = tmp_path / "s"

    def ok(run_dir):
        fill(run_dir, "honest-win")
        return "outcome"

    assert S.record_run(sess, Path("honest-win.yaml"), ok) == "outcome"
    with pytest.raises(RuntimeError):
        S.record_run(sess, Path("boom.yaml"), lambda d: (_ for _ in ()).throw(RuntimeError("no GPU")))
    runs = json.loads((sess / S.SESSION).read_text())["runs"]
    assert [(r["run"], r["status"]) for r in runs] == [("honest-win", "done"), ("boom", "crashed")]
    assert runs[1]["note"] == "RuntimeError: no GPU"
    assert "crashed: RuntimeError: no GPU" in (sess / S.SESSION_REPORT).read_text()


def test_parallel_registrations_are_not_lost(tmp_path):
    sess = S.new_session(tmp_path)
    threads = [threading.Thread(target=S.register_run, args=(sess, Path(f"m{i}.yaml"))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(json.loads((sess / S.SESSION).read_text())["runs"]) == 8


def test_inconclusive_runs_are_findings_with_what_would_settle_them(tmp_path):
    run = tmp_path / "honest-win"
    run.mkdir()
    fill(run, "honest-win")
    data = json.loads((run / store.RESULT).read_text())
    data["verdict"] = "inconclusive"
    c = data["measured"]["cases"]["square-1024"]
    c.update(speedup=1.2, ci_low=1.0, ci_high=1.4, threshold=1.1, verdict="inconclusive", timed_seconds=3.0)
    store.write_json(run / store.RESULT, data)
    findings = S.context(S.load_session(tmp_path))["findings"]
    assert [f["kind"] for f in findings] == ["inconclusive"]
    assert "square-1024" in findings[0]["text"] and "measure.max_seconds=12" in findings[0]["text"]


def test_cli_session(tmp_path, capsys, monkeypatch):
    from expkit.cli import main

    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    shutil.copytree(DATA / "session", tmp_path / "s")
    assert main(["session", str(tmp_path / "s"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] == 4 and (tmp_path / "s" / S.SESSION_REPORT).is_file()
