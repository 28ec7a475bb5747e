"""The report's figures exist, are real pictures, and come out the same from the same files."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from expkit.report import plots, store

DATA = Path(__file__).resolve().parent / "data" / "results"


def copy_run(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def image_stats(path):
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    gray = img[..., :3].mean(axis=2)
    return img.shape, float(gray.var()), float((gray < 0.5).mean())


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    run = copy_run(DATA / "priced-gemv", tmp_path_factory.mktemp("plots"))
    result = store.load_result(run / store.RESULT)
    samples = store.read_samples(run / store.SAMPLES)
    return run, result, samples, plots.write_run_plots(run, result, samples)


def test_both_figures_are_drawn_and_are_not_blank(drawn):
    run, _, _, (names, notes) = drawn
    assert notes == [] and names == {"speedup": plots.SPEEDUP, "timings": plots.TIMINGS}
    for name in names.values():
        path = run / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000
        shape, variance, dark = image_stats(path)
        assert shape[0] > 200 and shape[1] > 300
        # A blank or single-colour image has no variance; axes, points and text give plenty.
        assert variance > 0.005 and 0.002 < dark < 0.5


def test_figures_are_deterministic(drawn, tmp_path):
    run, result, samples, (names, _) = drawn
    again = copy_run(DATA / "priced-gemv", tmp_path)
    plots.write_run_plots(again, result, samples)
    assert all((again / n).read_bytes() == (run / n).read_bytes() for n in names.values())


def test_an_unmeasured_run_has_no_figures(tmp_path):
    run = copy_run(DATA / "session" / "stride-bug", tmp_path)
    result = store.load_result(run / store.RESULT)
    assert plots.write_run_plots(run, result, store.read_samples(run / store.SAMPLES)) == ({}, [])
    assert not list(run.glob("*.png"))


def test_a_figure_that_cannot_be_drawn_is_a_note_not_a_crash(tmp_path):
    run = copy_run(DATA / "priced-gemv", tmp_path)
    result = store.load_result(run / store.RESULT)
    broken = store.read_samples(run / store.SAMPLES).drop(columns=["seconds"])
    drawn, notes = plots.write_run_plots(run, result, broken)
    assert drawn == {"speedup": plots.SPEEDUP}
    assert len(notes) == 1 and notes[0].startswith(plots.TIMINGS)
    assert np.isfinite(image_stats(run / plots.SPEEDUP)[1])
