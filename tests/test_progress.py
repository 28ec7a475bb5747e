"""The progress line: what it says, and that it says nothing off a terminal."""

import io

from expkit.progress import Progress


class Tty(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_line_shows_case_samples_interval_and_budget():
    p = Progress(stream=Tty())
    p.plan("honest-win", ["square-1024", "tall"], target_ci=0.05)
    assert p.line("tall", 42, 0.031, 1.234) == (
        "honest-win · case 2/2 tall · 84 samples · interval ±3.1% (target ±5.0%) · 1.2 s of budget left")
    assert "±? (not checked yet)" in p.line("other", 1, None, -3.0) and "0.0 s of budget left" in p.line("x", 1, None, -3)


def test_updates_rewrite_one_line_throttled_and_clear_on_exit():
    out, clock = Tty(), Clock()
    with Progress(stream=out, clock=clock, min_interval=0.1) as p:
        p.update("a", 1, None, 3.0)
        p.update("a", 2, None, 2.9)  # within the interval: not written
        clock.t = 0.5
        p.update("a", 3, 0.02, 2.0)
    text = out.getvalue()
    assert text.count("\r") == 4 and "2 samples" in text and "4 samples" not in text and "6 samples" in text
    assert text.endswith("\r")


def test_quiet_off_a_terminal_or_when_disabled():
    for p in (Progress(stream=io.StringIO()), Progress(enabled=False, stream=Tty())):
        p.update("a", 1, 0.1, 1.0)
        p.clear()
        assert p.stream.getvalue() == ""
