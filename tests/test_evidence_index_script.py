"""scripts/evidence_index.py: figures found per passage, their evidence files, the unsourced ones,
and the index's generated parts rewritten in place."""

from __future__ import annotations

from pathlib import Path

import repo_scripts

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return repo_scripts.load("scripts/evidence_index.py")


def _rows(tmp_path, text, name="doc.md"):
    m = _script()
    doc = tmp_path / name
    doc.write_text(text)
    m.ROOT = tmp_path
    return m, m.index([name])


def test_a_passage_with_a_figure_and_a_link_into_evidence_is_sourced(tmp_path):
    _, rows = _rows(tmp_path, "# Cost\n\nThe run took 19.4 s at `default`\n([here](evidence/harness-cost/x.md)).\n")
    assert len(rows) == 1
    assert rows[0].figures == ("19.4 s",) and rows[0].sources == ("evidence/harness-cost/x.md",)
    assert rows[0].section == "Cost" and rows[0].line == 3


def test_a_link_to_an_example_report_is_a_source_and_a_bare_mention_is_not(tmp_path):
    """An example's report is the output of the run that measured its figures; a path named in
    prose outside evidence/ is not a link to a file and stays unsourced."""
    _, rows = _rows(tmp_path, "- [`supported`](reports/examples/gpu/honest/report.md): 1.66x\n"
                              "- reports/examples/gpu/honest/report.md says 1.66x\n", name="README.md")
    assert [r.sources for r in rows] == [("reports/examples/gpu/honest/report.md",), ()]
    table = _script().render(rows, ["README.md"])  # the index lives in evidence/
    assert "[../reports/examples/gpu/honest/report.md](../reports/examples/gpu/honest/report.md)" in table


def test_a_range_with_its_unit_is_one_figure(tmp_path):
    _, rows = _rows(tmp_path, "A first call took 3.9-5.3 s, and audits 1.29-2.41 times as long.\n")
    assert rows[0].figures == ("3.9-5.3 s", "1.29-2.41 times")


def test_an_old_results_path_counts_as_its_new_evidence_file(tmp_path):
    _, rows = _rows(tmp_path, "Speedup 1.94x (`benchmarks/results/cpu-2026-11-27/under_load.md`).\n")
    assert rows[0].sources == ("evidence/defences/busy-host/under_load.md",)


def test_figures_without_a_source_are_listed_as_unsourced_and_code_blocks_are_skipped(tmp_path):
    m, rows = _rows(tmp_path, "- 1201 passed in 7 min\n- no figure here\n\n```\n3.5 ms\n```\n\n| a | 2.5% |\n")
    assert [r.figures for r in rows] == [("1201 passed", "7 min"), ("2.5%",)]
    out = m.render(rows, ["doc.md"])
    assert "2 passages state figures, 0 cite evidence, 2 do not" in out
    assert "| doc.md:1 () | 1201 passed, 7 min |" in out


def test_write_replaces_only_the_marked_parts(tmp_path):
    m, _ = _rows(tmp_path, "It took 2 s ([x](evidence/t/a.md)).\n")
    (tmp_path / "evidence" / "t").mkdir(parents=True)
    (tmp_path / "evidence" / "t" / "a.md").write_text("# A study of two seconds\n")
    index = tmp_path / "evidence" / "README.md"
    index.write_text("keep\n<!-- studies:start -->\nold\n<!-- studies:end -->\nkeep too\n"
                     "<!-- figures:start -->\nold\n<!-- figures:end -->\nend\n")
    m.main(["--write", str(index), str(tmp_path / "doc.md")])
    text = index.read_text()
    assert "old" not in text and text.startswith("keep\n") and "keep too" in text and text.endswith("end\n")
    assert "- [a.md](t/a.md): A study of two seconds" in text
    assert "[t/a.md](t/a.md)" in text
