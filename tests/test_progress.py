"""The progress line: what it says, that rich redraws it in place and erases it, and silence off a terminal."""

import io

from expkit.cli.progress import Progress


class Tty(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


ERASE_LINE = "\x1b[2K"


def test_line_shows_case_samples_interval_and_budget():
    p = Progress(stream=Tty())
    p.plan("honest-win", ["square-1024", "tall"], target_ci=0.05)
    assert p.line("tall", 42, 0.031, 1.234) == (
        "honest-win · case 2/2 tall · 84 samples · interval ±3.1% (target ±5.0%) · 1.2 s of budget left")
    assert "±? (not checked yet)" in p.line("other", 1, None, -3.0) and "0.0 s of budget left" in p.line("x", 1, None, -3)


def test_updates_redraw_one_line_throttled_and_erase_it_on_exit():
    out, clock = Tty(), Clock()
    with Progress(stream=out, clock=clock, min_interval=0.1) as p:
        p.update("a", 1, None, 3.0)
        p.update("a", 2, None, 2.9)  # within the interval: not drawn
        clock.t = 0.5
        p.update("a", 3, 0.02, 2.0)
        during = out.getvalue()
    assert "2 samples" in during and "4 samples" not in during and "6 samples" in during
    assert during.count(ERASE_LINE) == 1  # the second draw replaced the first in place
    after = out.getvalue()[len(during):]
    assert after.endswith(ERASE_LINE)  # transient: the line is gone when the run ends


def test_a_long_line_stays_one_line():
    out = Tty()
    with Progress(stream=out) as p:
        p.plan("n" * 300, ["c"])
        p.update("c", 1, None, 1.0)
        drawn = out.getvalue()
    assert "\n" not in drawn and "…" in drawn


def test_quiet_off_a_terminal_or_when_disabled():
    for p in (Progress(stream=io.StringIO()), Progress(enabled=False, stream=Tty())):
        p.update("a", 1, 0.1, 1.0)
        p.clear()
        assert p.stream.getvalue() == ""


def test_quiet_off_a_terminal_even_when_colour_is_forced(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # many CI runners set it; a log must still get no redraws
    p = Progress(stream=io.StringIO())
    p.update("a", 1, 0.1, 1.0)
    p.clear()
    assert p.stream.getvalue() == ""
