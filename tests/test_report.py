"""The run report: golden files for stored results, and the wording rules behind them."""

import copy
import shutil
from pathlib import Path

import pandas as pd
import pytest

from expkit import report
from expkit.report import store
from golden import check

DATA = Path(__file__).resolve().parent / "data" / "results"


def copy_run(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


# (fixture run, golden file, draw the figures?): figures cost most of this module's time, so
# only the first run draws them; the others check the report without figure links.
GOLDEN = [
    (DATA / "priced-gemv", "report-priced-gemv.md", True),            # supported, priced, work declared
    (DATA / "session" / "stride-bug", "report-stride-bug.md", True),  # invalid: nothing measured, nothing drawn
    (DATA / "session" / "asserted-not-demonstrated", "report-asserted-not-demonstrated.md", False),  # refuted
    (DATA / "v1-honest-win", "report-v1-honest-win.md", False),       # an upgraded version-1 result
    (DATA / "synthetic-kernel-time", "report-kernel-time.md", False),  # kernel time and call time (GPU)
    (DATA / "synthetic-processes", "report-processes.md", False),  # five processes (result.json 3)
    (DATA / "synthetic-unmeasured", "report-unmeasured.md", False),  # a case every round of which was flagged
    (DATA / "unidentified", "report-unidentified.md", False),  # supported with no expect.must_run (issue 51)
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = {}
    for run, golden, plots in GOLDEN:
        dst = copy_run(run, tmp_path_factory.mktemp("run"))
        out[golden] = (dst, report.write(dst, plots=plots).read_text())
    return out


@pytest.mark.parametrize("golden", [g for _, g, _ in GOLDEN])
def test_golden_run_reports(rendered, golden):
    run, text = rendered[golden]
    check(golden, text)
    for name in ("speedup.png", "timings.png"):
        # A figure is linked exactly when it was drawn beside the report.
        assert (f"]({name})" in text) == (run / name).is_file()
    assert (run / "speedup.png").is_file() == (golden == "report-priced-gemv.md")


def test_report_order_puts_the_verdict_first(rendered):
    text = rendered["report-priced-gemv.md"][1]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[0] == "# priced-gemv" and lines[1].startswith("**SUPPORTED**: the claimed 1.3× speedup")
    order = ["## Why", "## Claim against measurement", "## Evidence", "## Cost", "## Achieved fraction of peak",
             "## Telemetry", "## Timing", "## Provenance"]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)


def _ctx(result):
    return report.context(result, pd.DataFrame(columns=["case", "side", "seconds", "flagged"]))


def test_no_saving_is_claimed_where_the_interval_includes_one():
    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    c = result["measured"]["cases"]["square-1024"]
    c.update(speedup=1.02, ci_low=0.97, ci_high=1.08)
    assert _ctx(result)["savings"][0]["reading"] == "no measurable saving"
    c.update(speedup=0.8, ci_low=0.75, ci_high=0.85)
    assert _ctx(result)["savings"][0]["reading"] == "costs more"


def test_unpriced_and_zero_priced_savings_show_no_dollars():
    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    for rate in (None, 0.0):
        r = copy.deepcopy(result)
        r["savings"]["usd_per_hour"] = rate
        row = _ctx(r)["savings"][0]
        assert row["usd_per_million"] == "n/a" and "$" not in row["per_day"]


def test_inconclusive_runs_say_what_would_settle_them():
    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    result["verdict"] = "inconclusive"
    c = result["measured"]["cases"]["square-1024"]
    c.update(speedup=1.2, ci_low=1.0, ci_high=1.4, threshold=1.1, verdict="inconclusive", timed_seconds=3.0)
    settle = _ctx(result)["settle"]
    assert len(settle) == 1 and "about 4.0× the samples" in settle[0] and "measure.max_seconds=12" in settle[0]


def test_an_inconclusive_headline_names_the_warning_that_made_it_so_where_the_interval_did_not():
    from expkit.verdict.wording import headline

    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    result["verdict"] = "inconclusive"
    result["reasons"] = ["speedup [case square-1024]: interval [1.000, 1.400] straddles 1.100; measure longer"]
    assert headline(result).endswith("and the interval straddles the claim's bar.")
    load = ("load [case square-1024]: the baseline's timing thread waited for a CPU for 58% of its timed blocks "
            "and the candidate's for 36%")
    result["reasons"] = [load, "speedup [case square-1024]: interval [1.33, 3.0] is at or above 1.2, but the host's "
                               "load could explain it (load)"]
    said = headline(result)
    assert said.startswith("**INCONCLUSIVE**") and said.endswith(f", but {load}.") and "straddles" not in said


def test_settle_hint_cases():
    base = {"speedup": 1.2, "ci_low": 1.0, "ci_high": 1.4, "threshold": 1.1, "timed_seconds": 3.0}
    assert report.settle_hint({**base, "threshold": 0.9}) is None          # supported already
    assert report.settle_hint({**base, "threshold": 1.5}) is None          # refuted already
    short = report.settle_hint({**base, "threshold": 1.3})                  # estimate below the bar
    assert "fall short of" in short and "about 4.0×" in short
    assert "no number of samples" in report.settle_hint({**base, "threshold": 1.2})
    assert "too close to the bar" in report.settle_hint({**base, "threshold": 1.199})
    assert report.settle_hint({"speedup": None}) is None
    from expkit.timing.measure import STOP_SPREAD

    spread = report.settle_hint({**base, "threshold": 1.3, "processes": 5, "stopped": STOP_SPREAD})
    assert "measure in more processes" in spread and "measure.processes=10" in spread
    assert "measure.max_seconds" in report.settle_hint({**base, "threshold": 1.3, "processes": 5,
                                                        "stopped": "time budget spent before the target"})
    # processes 20% apart, each within +-1%: more processes, whatever stopped them
    apart = [{"speedup": v, "ci_low": v * 0.99, "ci_high": v * 1.01} for v in (1.0, 1.2, 1.45)]
    hint = report.settle_hint({**base, "threshold": 1.3, "processes": 3, "per_process": apart,
                               "stopped": "time budget spent before the target"})
    assert "disagree by more than the noise within each" in hint and "measure.processes=6" in hint


def test_a_run_without_env_json_still_renders(tmp_path):
    run = copy_run(DATA / "session" / "honest-win", tmp_path)
    (run / store.ENV).unlink()
    text = report.render(run, plots=False)
    assert "| env.json | not recorded |" in text and "speedup.png" not in text


@pytest.mark.parametrize("x, text", [(None, "unknown"), (0.0, "$0.00"), (0.0123, "$0.012"), (7.486, "$7.49"),
                                     (1234.5, "$1,234"), (-2.5, "−$2.50")])
def test_fmt_usd(x, text):
    assert report.fmt_usd(x) == text


@pytest.mark.parametrize("s, text", [(0.0135, "13.5 ms"), (90.0, "90 s"), (600.0, "10 min"), (13561.0, "3.77 h"),
                                     (-0.002, "−2 ms")])
def test_fmt_duration(s, text):
    assert report.fmt_duration(s) == text


def test_the_defences_block_is_shown_as_recorded():
    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    result["defences"] = {"enabled": True, "isolated": True, "start_method": "forkserver", "nested": {"x": 1}}
    ctx = _ctx(result)
    assert ctx["defences"] == "on; isolated: True; start_method: forkserver"
    text = report.template_env().get_template("report.md.j2").render(**ctx)
    assert "Harness defences: on; isolated: True; start_method: forkserver." in text


@pytest.mark.parametrize("confinement, words", [
    ({"landlock_abi": 7, "trace": True, "signals": True},
     "candidate's worker confined: could not trace, read the memory of or signal another process (Landlock ABI 7)"),
    ({"landlock_abi": 5, "trace": True, "signals": False, "why": "no signals before ABI 6"},
     "candidate's worker confined: could not trace or read the memory of another process (Landlock ABI 5, "
     "no signals before ABI 6)"),
    ({"landlock_abi": 0, "trace": False, "signals": False, "why": "the kernel has no Landlock"},
     "candidate's worker not confined (the kernel has no Landlock)"),
    (None, "candidate's worker not confined"),
])
def test_the_defences_line_says_what_the_candidates_worker_could_not_reach(confinement, words):
    result = store.load_result(DATA / "priced-gemv" / store.RESULT).to_json()  # a variant of it: a copy
    result["defences"] = {"enabled": True, "isolated": True, "confinement": confinement}
    assert _ctx(result)["defences"] == f"on; isolated: True; {words}"


def test_a_run_that_never_identified_its_kernel_says_so_and_not_demonstrated(rendered):
    """With no expect.must_run the report said the claim was "demonstrated", and nothing said
    which kernel ran was never checked (issue 51)."""
    text = rendered["report-unidentified.md"][1]
    head = text.splitlines()[2]
    assert head.startswith("**SUPPORTED** for the candidate as called: the claimed 1.2× speedup")
    assert "is measured on " in head and "but not demonstrated for the intended kernel, which was never identified" in head
    assert "- identity: not checked: the intended kernel was not identified" in text  # a reason under "Why"
    assert "| identity | all | not checked | not checked: the intended kernel was not identified" in text
    named = rendered["report-priced-gemv.md"][1]
    assert "not identified" not in named and "is demonstrated on " in named
