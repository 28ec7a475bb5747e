"""benchmarks/audit_ab.py: one run audited from two trees, alternating, read from the audit folders alone."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from repo_scripts import ROOT, load

ab = load("benchmarks/audit_ab.py")

# A stand-in `python -m expkit audit`: one candidate's record and stages, its seconds the tree's.
FAKE_MAIN = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1])
    (out / "c0").mkdir(parents=True)
    seconds = {seconds}
    (out / "c0" / "result.json").write_text(json.dumps({{"stages": {{"start": seconds / 10, "preflight": 1.0,
                                                                      "measure": seconds - 2}}}}))
    recs = [{{"attempt": 1, "candidate": "c0", "seconds": seconds, "verdict": "supported", "run_dir": "c0"}},
            {{"attempt": 2, "candidate": "c0", "seconds": 99.0, "verdict": "supported", "run_dir": "c0"}}]
    (out / "candidates.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in recs))
    (out / "argv.json").write_text(json.dumps(args))
''')


def _tree(root: Path, seconds: float) -> Path:
    pkg = root / "expkit"
    (pkg / "suites").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "suites" / "__init__.py").write_text("")
    (pkg / "suites" / "manifest_process.py").write_text("PRELOAD = ('a', 'b')\n")
    (pkg / "__main__.py").write_text(FAKE_MAIN.format(seconds=seconds))
    return root


def test_the_order_alternates_which_tree_runs_first():
    assert ab.order(3) == [(1, "old"), (1, "new"), (2, "new"), (2, "old"), (3, "old"), (3, "new")]


def test_each_tree_audits_from_its_own_root_and_only_first_attempts_are_compared(tmp_path, monkeypatch):
    old, new = _tree(tmp_path / "old", 20.0), _tree(tmp_path / "new", 10.0)
    (tmp_path / "problems").mkdir()
    monkeypatch.chdir(tmp_path)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_ab.py"), str(old), "run",
                          "--out", str(tmp_path / "ab"), "--rounds", "2", "--new", str(new), "--",
                          "--problems", "problems", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"old: {old / 'expkit' / '__init__.py'} 2 modules preloaded" in text
    assert f"new: {new / 'expkit' / '__init__.py'} 2 modules preloaded" in text
    assert "| 1 | old | c0 | 20.0 | 2.0 | 1.0 | 18.0 | supported |" in text
    assert "| 2 | new | c0 | 10.0 | 1.0 | 1.0 | 8.0 | supported |" in text
    assert "99.0" not in text  # the retry is not a first attempt
    assert "new / old, each candidate within its round: 0.50, 0.50" in text
    assert "old: 2 first attempts, median 20.0 s" in text
    # the relative --problems was the caller's, resolved before the audit ran from its tree's root
    argv = json.loads((tmp_path / "ab" / "1-old" / "argv.json").read_text())
    assert argv[argv.index("--problems") + 1] == str(tmp_path / "problems")
    assert argv[argv.index("--device") + 1] == "cpu"


def test_an_audit_that_wrote_no_record_is_named_and_the_rest_still_compared(tmp_path):
    old, new = _tree(tmp_path / "old", 20.0), _tree(tmp_path / "new", 10.0)
    (old / "expkit" / "__main__.py").write_text("raise SystemExit(2)\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_ab.py"), str(old), "run",
                          "--out", str(tmp_path / "ab"), "--rounds", "1", "--new", str(new)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "round 1, old: no candidate record" in out.stderr and "(exit 2)" in out.stderr
    assert "| 1 | new | c0 | 10.0 |" in out.stdout
    assert "each candidate within its round: none" in out.stdout


def test_a_tree_without_expkit_is_one_line_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_ab.py"), str(tmp_path / "empty"), "run",
                          "--out", str(tmp_path / "ab")], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert str(tmp_path / "empty") in out.stderr and "git archive" in out.stderr and "Traceback" not in out.stderr
