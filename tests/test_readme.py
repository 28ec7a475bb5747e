"""The README stays a short guide whose every snippet runs as shown.

Each fenced block is claimed by one test here: the walkthrough's files (blocks whose first
line is `# mine/...`) are written out and its commands run in a fresh folder; the first
command runs the shipped example there; the setup and test commands are held against what
`.ci/run` does (running them here would install into, or recurse into, this very suite).
A block no test claims fails `test_every_snippet_is_claimed_by_a_test`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
SETUP = ("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[test]' && "
         ".venv/bin/expkit run manifests/examples/cpu/honest-win.yaml measure=quick")
TESTS = ".venv/bin/python -m pytest -q"
FIRST_RUN = ".venv/bin/expkit run manifests/examples/cpu/honest-win.yaml measure=quick"
GPU_RUN = ".venv/bin/expkit run manifests/examples/gpu/honest.yaml measure=quick"
AUDIT_RUN = ".venv/bin/expkit audit examples/generation-run/runs/tiny --jobs 2 --timeout 20"


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(), re.S | re.M)


def _walkthrough_files() -> dict[str, str]:
    return {body.splitlines()[0][2:]: body for _, body in _blocks() if body.startswith("# mine/")}


def _walkthrough_commands() -> list[str]:
    return [body.strip() for lang, body in _blocks() if lang == "bash" and "mine/" in body]


def _run(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs a README command as shown, the virtual environment it names being this test's own."""
    expkit = f"{BIN}/expkit" if (BIN / "expkit").exists() else f"{sys.executable} -m expkit"  # not installed: on the path
    line = " ".join(expkit if w == ".venv/bin/expkit" else w.replace(".venv/bin/", f"{BIN}/") for w in command.split(" "))
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _claimed(lang: str, body: str) -> bool:
    text = body.strip()
    if body.startswith("# mine/"):
        return True  # test_the_walkthrough_runs_as_shown writes it out
    if lang == "python":  # the notebook, verbatim: tests/test_examples.py runs it as a notebook would
        return body == (ROOT / "examples" / "notebook.py").read_text()
    if lang == "bash":
        return text in (SETUP, TESTS, GPU_RUN, AUDIT_RUN) or text in _walkthrough_commands()
    if lang == "markdown":
        return True  # test_the_sample_report_is_quoted_from_the_committed_report
    return False


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300, "README.md is a guide: move reference material to docs/"


def test_every_snippet_is_claimed_by_a_test():
    unclaimed = [body[:80] for lang, body in _blocks() if not _claimed(lang, body)]
    assert not unclaimed, f"README snippets that no test in tests/test_readme.py runs: {unclaimed}"


def test_the_two_commands_are_the_first_two_snippets():
    (_, setup), (_, tests) = _blocks()[:2]
    assert (setup.strip(), tests.strip()) == (SETUP, TESTS)


def test_ci_runs_the_setup_and_test_commands_as_the_readme_shows_them():
    """`.ci/run` is the README's two commands on a clean clone; the two must not drift apart."""
    ci = (ROOT / ".ci" / "run").read_text()
    venv, install, _ = SETUP.split(" && ")
    assert venv in ci and install.replace("torch==2.13.0", "-q torch==2.13.0") in ci and TESTS in ci


def test_the_extras_the_readme_installs_exist():
    extras = re.search(r"^\[project.optional-dependencies\]\n(.*?)^\[", (ROOT / "pyproject.toml").read_text(),
                       re.S | re.M).group(1)
    assert re.search(r'^test = \[.*"pytest', extras, re.M) and re.search(r"^gpu = ", extras, re.M)
    assert "'.[test]'" in SETUP and "'.[gpu]'" in README.read_text()


def test_the_sample_report_is_quoted_from_the_committed_report():
    (quote,) = [body for lang, body in _blocks() if lang == "markdown"]
    report = (ROOT / "reports" / "examples" / "gpu" / "wrong-kernel" / "report.md").read_text()
    assert report.startswith(quote.rstrip("\n").split("\n\n")[0]) and all(
        line in report.splitlines() for line in quote.splitlines())


def test_the_audit_summary_is_quoted_from_the_committed_report():
    """The table under "Auditing a generation run" is rows of the report its section links."""
    section = README.read_text().split("## Auditing a generation run")[1].split("\n## ")[0]
    (link,) = re.findall(r"\[report\]\((evidence/[^)]+/audit\.md|evidence/[^)]+-audit\.md)\)", section)
    rows = [line for line in section.splitlines() if line.startswith("|")]
    report = (ROOT / link).read_text().splitlines()
    assert len(rows) >= 4 and all(row in report for row in rows), [r for r in rows if r not in report]


def test_the_gpu_example_the_readme_runs_is_shipped():
    assert (ROOT / GPU_RUN.split()[2]).is_file()


#: Verdicts an honest claim may get on this suite's host. The suite shares a 2-core machine
#: with other work, where a claim the noise cannot settle is rightly ``inconclusive``; a
#: ``refuted`` or ``invalid`` honest claim is a false alarm, and fails the test.
HONEST = ("supported", "inconclusive")


def _verdicts(folder: Path) -> list[str]:
    return [json.loads(p.read_text())["verdict"] for p in sorted(folder.glob("*/result.json"))]


@pytest.mark.slow
def test_the_first_command_runs_the_shipped_example(tmp_path):
    """The run part of the first command, in a fresh folder so its report lands there."""
    (tmp_path / "manifests").symlink_to(ROOT / "manifests")
    proc = _run(FIRST_RUN, tmp_path)
    assert proc.returncode in (0, 4) and _verdicts(tmp_path / "reports") in ([v] for v in HONEST), (
        proc.stdout + proc.stderr)
    report = proc.stdout.split("report: ")[1].split()[0]
    assert (tmp_path / report).is_file()


@pytest.mark.slow
def test_the_audit_command_runs_the_shipped_generation_run(tmp_path):
    """Every candidate of the shipped run gets a record, the command exits 0 and prints the summary."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    proc = _run(AUDIT_RUN, tmp_path)
    assert proc.returncode == 0 and "## Summary" in proc.stdout, proc.stdout[-3000:] + proc.stderr
    (audit,) = (tmp_path / "reports").glob("*audit-tiny")
    finals = {json.loads(line)["candidate"] for line in (audit / "candidates.jsonl").read_text().splitlines()
              if json.loads(line)["final"]}
    assert len(finals) == 8 and (audit / "audit.md").is_file()


@pytest.mark.slow
def test_the_walkthrough_runs_as_shown(tmp_path):
    """The walkthrough's files and commands as shown: the manifest validates, the run and the
    pytest file end in an honest claim's verdict, the reports where the README says."""
    files = _walkthrough_files()
    assert set(files) == {"mine/my_kernels.py", "mine/my-claim.yaml", "mine/test_my_claims.py"}
    (tmp_path / "mine").mkdir()
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    run, tests = _walkthrough_commands()
    proc = _run(run, tmp_path)
    assert proc.stdout.startswith("ok: mine/my-claim.yaml") and proc.returncode in (0, 4), proc.stdout + proc.stderr
    assert _verdicts(tmp_path / "reports") in ([v] for v in HONEST), proc.stdout
    proc = _run(tests, tmp_path)
    claims = _verdicts(tmp_path / "reports" / "my-claims")
    assert len(claims) == 2 and set(claims) <= set(HONEST), proc.stdout[-3000:]
    assert proc.returncode == (0 if set(claims) == {"supported"} else 1), proc.stdout[-3000:]
    assert (tmp_path / "reports" / "my-claims" / "session.md").is_file()


@pytest.mark.gpu
def test_the_gpu_example_runs_as_shown(tmp_path):
    (tmp_path / "manifests").symlink_to(ROOT / "manifests")
    proc = _run(GPU_RUN, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
