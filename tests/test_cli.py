"""The CLI through its library entry point, on the shipped CPU examples."""

import json
from pathlib import Path

import pytest

from expkit.cli import main

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
    assert "measure/quik" in capsys.readouterr().err


def test_report_rerenders_identically(tmp_path):
    out = tmp_path / "r"
    main(["run", str(CPU / "wrong-kernel.yaml"), "measure=quick", "--out", str(out), "--quiet"])
    before = (out / "report.md").read_text()
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text() == before
