"""The GitHub Actions job summary: written only where GitHub says where."""

import json
from pathlib import Path

from expkit.report import ci_summary

DATA = Path(__file__).resolve().parent / "data" / "results"


def results():
    return [json.loads((DATA / "session" / n / "result.json").read_text()) for n in ("honest-win", "stride-bug")]


def test_nothing_is_written_off_github(tmp_path):
    assert ci_summary.publish(results(), environ={}) is None
    assert list(tmp_path.iterdir()) == []


def test_the_verdict_table_is_appended(tmp_path):
    path = tmp_path / "summary.md"
    path.write_text("earlier step\n")
    env = {ci_summary.ENV_VAR: str(path)}
    assert ci_summary.publish(results(), ["r1/report.md", "r2/report.md"], environ=env) == path
    text = path.read_text()
    assert text.startswith("earlier step\n### expkit verdicts")
    from expkit.verdict.wording import fmt_x

    overall = results()[0]["measured"]["overall"]
    assert f"| **SUPPORTED** | honest-win | 1.3× | {fmt_x(overall['speedup'])} [{fmt_x(overall['ci_low'])}, " in text
    assert "| **INVALID** | stride-bug | 1.15× | not measured |" in text and "r2/report.md" in text


def test_an_unwritable_summary_is_not_an_error(tmp_path):
    env = {ci_summary.ENV_VAR: str(tmp_path / "no" / "such" / "dir" / "f.md")}
    assert ci_summary.append("x", environ=env) is None


def test_a_session_publishes_its_finished_runs(tmp_path):
    path = tmp_path / "summary.md"
    assert ci_summary.publish_session(DATA / "session", environ={ci_summary.ENV_VAR: str(path)}) == path
    assert path.read_text().count("| **") == 4
