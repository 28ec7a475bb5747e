"""Comparisons: every row kept with its mark, a planted regression caught, the guarantee kept."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from expkit.report import compare as C
from expkit.report import store
from expkit.core.errors import ExpkitError
from golden import check

DATA = Path(__file__).resolve().parent / "data" / "results"
A = DATA / "priced-gemv"  # its square-1024 case has a tight interval; tall-2048x512 is noisy


def variant(dst, src=A, scale=None, resample_seed=None):
    """A copy of a run whose samples are changed: ``scale`` multiplies a case's candidate times
    (a planted regression); ``resample_seed`` redraws every side's samples from themselves with
    replacement (the same code "run again" with nothing changed, minus the drift of a real rerun)."""
    shutil.copytree(src, dst)
    df = pd.read_csv(dst / store.SAMPLES)
    if resample_seed is not None:
        rng = np.random.default_rng(resample_seed)
        df = pd.concat(g.iloc[rng.integers(0, len(g), len(g))] for _, g in df.groupby(["case", "side"], sort=False))
    for case, factor in (scale or {}).items():
        df.loc[(df["case"] == case) & (df["side"] == "candidate"), "seconds"] *= factor
    df.to_csv(dst / store.SAMPLES, index=False)
    return dst


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative folder names keep the goldens free of tmp paths
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    shutil.copytree(A, tmp_path / "a")
    return tmp_path


def test_a_planted_regression_is_flagged(here):
    variant(here / "planted", scale={"square-1024": 1.2})
    c = C.compare(Path("a"), Path("planted"))
    check("compare-planted.md", C.render(c))
    rows = {r.case: r for r in c.rows}
    assert rows["square-1024"].time.mark == C.WORSE and rows["square-1024"].time.ratio == pytest.approx(1.2)
    assert rows["square-1024"].time.ci_low > 1
    assert rows["tall-2048x512"].time.mark == C.SAME
    assert c.exit_code == 1 and [r.case for r in c.regressions] == ["square-1024"]


def test_an_unchanged_rerun_passes(here):
    variant(here / "rerun", resample_seed=0)
    c = C.compare(Path("a"), Path("rerun"))
    check("compare-rerun.md", C.render(c))
    assert c.exit_code == 0 and not c.regressions
    assert all(r.time.mark in (C.SAME, C.UNSURE) for r in c.rows)


def test_a_run_against_itself_is_unchanged(here):
    c = C.compare(Path("a"), Path("a"))
    assert [(r.time.mark, r.speedup.mark) for r in c.rows] == [(C.SAME, C.SAME)] * 2
    assert all(r.time.ratio == pytest.approx(1.0) for r in c.rows)


def test_an_improvement_is_marked_and_does_not_fail(here):
    variant(here / "faster", scale={"square-1024": 0.7})
    c = C.compare(Path("a"), Path("faster"))
    row = next(r for r in c.rows if r.case == "square-1024")
    assert (row.time.mark, row.speedup.mark) == (C.BETTER, C.BETTER) and c.exit_code == 0


def test_could_not_test_is_never_significant(here):
    b = variant(here / "b", scale={"square-1024": 3.0})
    (b / store.SAMPLES).unlink()
    c = C.compare(Path("a"), Path("b"))
    assert all(r.time.mark == C.NA and "cannot test" in r.note for r in c.rows)
    assert c.exit_code == 0


def test_every_row_is_kept_with_its_reason(here):
    # A: a session of four runs; B: two of them, one now invalid, and one run A never had.
    shutil.copytree(DATA / "session", here / "sa")
    (here / "sb").mkdir()
    shutil.copytree(DATA / "session" / "honest-win", here / "sb" / "honest-win")
    broken = shutil.copytree(DATA / "session" / "asserted-not-demonstrated", here / "sb" / "asserted-not-demonstrated")
    data = json.loads((broken / store.RESULT).read_text())
    data.update(verdict="invalid", reasons=["oracle:allclose [case S128]: max abs error 0.5"])
    store.write_json(broken / store.RESULT, data)
    shutil.copytree(A, here / "sb" / "priced-gemv")
    c = C.compare(Path("sa"), Path("sb"))
    marks = {(r.run, r.case): (r.time.mark, r.note) for r in c.rows}
    assert marks[("honest-win", "square-1024")][0] == C.SAME
    assert marks[("asserted-not-demonstrated", "S128")][0] == C.BROKE
    assert "invalid in B: oracle:allclose" in marks[("asserted-not-demonstrated", "S128")][1]
    assert marks[("wrong-kernel", "all")] == (C.NA, "invalid in A: " + json.loads(
        (DATA / "session" / "wrong-kernel" / store.RESULT).read_text())["reasons"][0] + "; not in B")
    assert marks[("stride-bug", "all")][0] == C.NA
    assert marks[("priced-gemv", "square-1024")] == (C.NA, "not in A")
    assert len(c.rows) == 2 + 2 + 1 + 1 + 2
    assert c.exit_code == 1  # newly invalid fails the gate


def test_two_single_runs_match_whatever_their_names(here):
    b = variant(here / "b", src=DATA / "session" / "honest-win")
    c = C.compare(Path("a"), b)
    assert {r.run for r in c.rows} == {"priced-gemv"}
    assert all("names differ" in r.note and "manifest changed" in r.note for r in c.rows)


def test_the_one_sided_guarantee_holds_under_no_change():
    """With no true change, '+' must come up at most about (1 - confidence) / 2 of the time."""
    rng = np.random.default_rng(1)
    worse = 0
    for i in range(100):
        sides = [1e-3 * rng.lognormal(0, 0.1, 60) for _ in range(4)]
        t, _ = C.compare_samples(*sides, confidence=0.95, min_effect=0.0, resamples=400, seed=i)
        worse += t.mark == C.WORSE
    assert worse <= 8  # expected 2.5 of 100; P(more than 8) is below 0.1% if the interval is right


def test_a_real_change_is_found():
    rng = np.random.default_rng(2)
    found = 0
    for i in range(20):
        ab, ac, bb = (1e-3 * rng.lognormal(0, 0.1, 60) for _ in range(3))
        bc = 1.2e-3 * rng.lognormal(0, 0.1, 60)
        t, s = C.compare_samples(ab, ac, bb, bc, resamples=400, seed=i)
        found += t.mark == C.WORSE and s.mark == C.WORSE
    assert found >= 18


def test_bad_arguments_are_usage_errors(here):
    with pytest.raises(ExpkitError):
        C.compare(Path("a"), Path("a"), gate="both")
    with pytest.raises(ExpkitError):
        C.compare(Path("a"), Path("a"), confidence=1.5)
    with pytest.raises(ExpkitError):
        C.compare(Path("a"), Path("missing"))


def test_cli_compare_exit_codes_and_job_summary(here, capsys, monkeypatch):
    from expkit.cli import main

    variant(here / "planted", scale={"square-1024": 1.2})
    summary = here / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["compare", "a", "planted", "--out", "cmp.md"]) == 1
    assert "**1 regression**" in capsys.readouterr().out
    assert (here / "cmp.md").read_text() == summary.read_text()
    assert main(["compare", "a", "a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0
    assert main(["compare", "a", "nowhere"]) == 2


def test_the_time_mark_comes_from_mann_whitney_and_few_samples_cannot_be_significant():
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(3)
    a = [1e-3 * rng.lognormal(0, 0.02, n) for n in (40, 40)]
    b = [1e-3 * rng.lognormal(0, 0.02, 40), 1.3e-3 * rng.lognormal(0, 0.02, 40)]
    t, _ = C.compare_samples(a[0], a[1], b[0], b[1], confidence=0.99, min_effect=0.05, resamples=400, seed=0)
    assert t.mark == C.WORSE
    assert t.p_value == pytest.approx(mannwhitneyu(b[1], a[1], alternative="two-sided").pvalue)
    # 30% slower on three samples a side: the rank test cannot reach p < 0.01, so it cannot tell
    t, _ = C.compare_samples(a[0][:3], a[1][:3], b[0][:3], b[1][:3], confidence=0.99, min_effect=0.05,
                             resamples=400, seed=0)
    assert t.mark == C.UNSURE and t.p_value > 0.01


def test_a_rank_shift_against_the_medians_is_not_called():
    # B's median is 10% higher, yet B's samples are mostly the faster (U / (n_A n_B) = 0.30):
    # the test and the medians disagree about the direction, so the row cannot say.
    a = np.array([1.0] * 6 + [10.0] * 5) * 1e-3
    b = np.array([1.1] * 6 + [0.5] * 5) * 1e-3
    t, _ = C.compare_samples(a, a, a, b, confidence=0.5, min_effect=0.0, resamples=200, seed=0)
    assert t.ratio == pytest.approx(1.1) and t.p_value < 0.5 and t.mark == C.UNSURE
