"""``expkit audit``: a whole generation run judged in one command, summarised as the field does.

The run under examples/generation-run/ (the README's audit example) is in KernelBench's layout: three tiny problems and eight
generated candidates (honest and faster, a copy of the reference, wrong, a result-reusing
cheat, one that crashes, one that hangs, one that does not compile). One audit of it runs
through the command line with real workers; its summary is checked against fast_p
computed here, independently, from the per-candidate records. The retries of inconclusive
verdicts run with a fake supervisor (no worker), so that their rule is tested exactly.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from expkit.bench.processes.shm_files import PID_FILE, PREFIX, SHM_DIR
from expkit.core.errors import ExpkitError
from expkit.manifest.settings import LauncherSettings
from expkit.report import audit_report as rep
from expkit.report import store
from expkit.suites import audit, retries
from expkit.suites.launchers import LocalLauncher
from expkit.suites.manifest_process import DONE, Outcome
from expkit.verdict import stats
from golden import check

DATA = Path(__file__).parent.parent / "examples" / "generation-run"
RUN = DATA / "runs" / "tiny"
#: A stored result whose case has every key a result.json case holds.
RESULTS = Path(__file__).parent / "data" / "results" / "priced-gemv" / "result.json"
FAST = ["measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01", "oracle.trials=2"]
EXPECTED = {  # candidate -> (correct, category)
    "level_1_problem_1_sample_0": (True, None),
    "level_1_problem_1_sample_1": (False, "runs the baseline's own ops"),
    "level_1_problem_1_sample_2": (False, "wrong output"),
    "level_1_problem_2_sample_0": (False, "replays or skips work once timed"),
    "level_1_problem_2_sample_1": (True, None),
    "level_1_problem_2_sample_2": (False, "crashes"),
    "level_1_problem_3_sample_0": (False, "hangs"),
    "level_1_problem_3_sample_1": (False, "does not compile"),
}


# --- the run through the command ----------------------------------------------------------


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    from expkit.cli import main

    out = tmp_path_factory.mktemp("audit") / "a"
    code = main(["audit", str(RUN), "--out", str(out), "--jobs", "2", "--timeout", "20", "--quiet",
                 "--claims", str(RUN / "claims.csv"), *FAST])
    assert code == 0
    return out


def test_every_candidate_is_an_outcome_row_with_its_reason(audited):
    finals = {r["candidate"]: r for r in rep.final_records(audited)}
    assert {k: (r["correct"], r["category"]) for k, r in finals.items()} == EXPECTED, \
        {k: (r["verdict"], r["reason"][:120]) for k, r in finals.items()}
    assert finals["level_1_problem_3_sample_0"]["reason"].startswith("worker: timed out after 20 s")
    assert finals["level_1_problem_2_sample_0"]["kind"] == "cheat"
    assert finals["level_1_problem_2_sample_0"]["speedup"] > 1  # what timing alone would have reported
    for r in finals.values():
        assert r["final"] and (audited / r["run_dir"] / "report.md").is_file(), r
        assert r["speedup"] is not None or not r["correct"]
        stored = store.load_result(audited / r["run_dir"] / "result.json")  # the record is the run's verdict
        assert r["verdict"] == stored["verdict"]
        assert r["correct"] == (stored["verdict"] != "invalid")  # none here is unmeasured


def test_a_hung_candidate_is_named_at_its_own_line_and_its_workers_output_stays_with_its_run(audited):
    """The supervisor's kill reaches the side workers too: the candidate's stack dump,
    kept in the run folder's ``workers/``, names the kernel's own loop. A run whose
    workers closed leaves no such folder, and none leaves a folder in the system's temp."""
    finals = {r["candidate"]: r for r in rep.final_records(audited)}
    hung = finals["level_1_problem_3_sample_0"]
    assert "level_1_problem_3_sample_0_kernel.py:" in hung["reason"] and "in forward" in hung["reason"], hung["reason"]
    dumps = list((audited / hung["run_dir"] / "workers").glob("*/*stderr*"))
    assert any("in forward" in p.read_text() for p in dumps), dumps
    # Killed with their job, the side workers could not remove their shared files (the
    # candidate's placed inputs among them); the supervisor did, by the pids their folders name.
    pids = [int(p.read_text()) for p in (audited / hung["run_dir"] / "workers").glob(f"*/{PID_FILE}")]
    assert len(pids) == 2
    assert not [f for f in os.listdir(SHM_DIR) if f.startswith(tuple(f"{PREFIX}{p}-" for p in pids))]
    for name, r in finals.items():
        if name != "level_1_problem_3_sample_0":
            assert not (audited / r["run_dir"] / "workers").exists(), name


def test_a_candidates_report_leaves_its_figures_to_expkit_report(audited):
    """An audit draws no figures with each verdict (its cost is per candidate); the measured
    candidate's report says how to draw them, and `expkit report` does."""
    from expkit.cli import main
    from expkit.report.run_report import UNDRAWN

    run_dir = audited / {r["candidate"]: r for r in rep.final_records(audited)}["level_1_problem_2_sample_1"]["run_dir"]
    assert not list(run_dir.glob("*.png")) and UNDRAWN in (run_dir / "report.md").read_text()
    assert json.loads((audited / rep.AUDIT).read_text())["plots"] is False
    assert main(["report", str(run_dir)]) == 0
    assert list(run_dir.glob("*.png")) and UNDRAWN not in (run_dir / "report.md").read_text()


def test_plots_asks_each_candidates_run_to_draw_them(tmp_path):
    jobs = []

    def supervise(job, start, cancel=None):
        jobs.append(job)
        store.write_json(Path(job.run_dir) / store.RESULT, _fake_result("supported"))
        return Outcome(job.run_dir, DONE, "supported", 0, seconds=1.0)

    audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu", plots=True,
                    launcher=LocalLauncher(LauncherSettings(), gpus=[], supervisor=supervise))
    assert [j.plots for j in jobs] == [True]


def test_records_stream_one_line_per_attempt(audited):
    lines = (audited / rep.RECORDS).read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert {r["candidate"] for r in recs} == set(EXPECTED)
    first = [r for r in recs if r["attempt"] == 1]
    assert len(first) == len(EXPECTED) and all(r["preset"] == "quick" for r in first)
    for r in recs:
        if r["attempt"] > 1:  # a retry follows an inconclusive first pass: the step its record named
            before = next(x for x in recs if x["candidate"] == r["candidate"] and x["attempt"] == r["attempt"] - 1)
            assert before["verdict"] == "inconclusive" and not before["final"]
            assert (before["next"]["preset"], before["next"]["processes"]) == (r["preset"], r["processes"])
            # in twice quick's five processes, or one preset up
            assert (r["preset"], r["processes"]) in (("quick", 10), ("default", None)), r
    plan = json.loads((audited / rep.AUDIT).read_text())
    assert plan["device"] == "cpu" and plan["slots"] == 2 and len(plan["candidates"]) == 8
    assert (audited / "session.md").is_file()


def _independent_fast_p(records, p):
    """KernelBench's fast_p: sample 0 of each problem, correct and speedup > p, over the problems."""
    problems = sorted({r["problem"] for r in records})
    hits = 0
    for pid in problems:
        first = [r for r in records if r["problem"] == pid and r["sample"] == 0]
        if first and first[0]["correct"] and first[0]["speedup"] > p:
            hits += 1
    return hits, len(problems)


def test_summary_matches_fast_p_computed_from_the_records(audited):
    records = rep.final_records(audited)
    views = rep.summarise(records)
    text = (audited / rep.AUDIT_REPORT).read_text()
    for p in rep.THRESHOLDS:
        k, n = _independent_fast_p(records, p)
        got = views["first"]["fast_p"][f"{p:g}"]
        assert (got["k"], got["n"]) == (k, n)
        assert f"| fast_{p:g} | {k / n:.2f} " in text
        every = sum(bool(r["correct"] and r["speedup"] > p) for r in records)
        assert views["all"]["fast_p"][f"{p:g}"]["k"] == every and views["all"]["fast_p"][f"{p:g}"]["n"] == 8
    correct = [r["speedup"] for r in records if r["correct"]]
    assert views["all"]["geomean"]["value"] == pytest.approx(math.exp(sum(map(math.log, correct)) / len(correct)))
    assert views["first"]["correct"]["k"] == 1  # only problem 1's first sample is correct
    assert "| replays or skips work once timed | cheat | 1 | 1 |" in text


def test_claims_are_set_against_the_measurement(audited):
    text = (audited / rep.AUDIT_REPORT).read_text()
    assert "| 2 | 0 | 38.0× |" in text and "not correct: replays or skips work once timed" in text
    assert "| 1 | 1 | 1× | not measured | invalid | not correct: runs the baseline's own ops |" in text


# --- finding candidates -------------------------------------------------------------------


def test_kernelbench_layout_pairs_kernels_with_problems_by_id(tmp_path):
    run = tmp_path / "runs" / "r"
    shutil.copytree(RUN, run)
    shutil.copytree(DATA / "KernelBench", tmp_path / "KernelBench")
    (run / "level_1_problem_9_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    (tmp_path / "KernelBench" / "level1" / "4_Unused.py").write_text("")
    cands, orphans, missing, roots = audit.kernelbench_candidates(run, tmp_path / "m", device="cpu")
    assert [(c.problem, c.sample) for c in cands] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1)]
    assert cands[0].problem_name == "1_Row_L2_norm" and Path(cands[0].manifest).is_file()
    assert orphans == ["level_1_problem_9_sample_0_kernel.py"] and missing == ["4_Unused"]
    assert roots == str((tmp_path / "KernelBench" / "level1").resolve())
    text = Path(cands[0].manifest).read_text()
    assert "expkit audit" in text and "forbid_baseline" not in text.split("cases:")[1]
    # --problems: KernelBench's checkout, its KernelBench/ folder or the level's folder.
    for given in (tmp_path, tmp_path / "KernelBench", tmp_path / "KernelBench" / "level1"):
        assert audit.kernelbench_candidates(run, tmp_path / "m3", device="cpu", problems=given)[3] == roots
    allowed, *_ = audit.kernelbench_candidates(run, tmp_path / "m2", device="cpu", allow_baseline_ops=True)
    assert "expect: {forbid_baseline: false}" in Path(allowed[0].manifest).read_text()


def test_problems_not_found_is_one_line_naming_the_flag(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(RUN, run)
    with pytest.raises(ExpkitError, match="--problems KERNELBENCH_DIR"):
        audit.kernelbench_candidates(run, tmp_path / "m", device="cpu")
    with pytest.raises(ExpkitError, match="--problems .*: holds neither level1/"):
        audit.kernelbench_candidates(run, tmp_path / "m", device="cpu", problems=tmp_path)


# --- inconclusive verdicts, with a fake supervisor ----------------------------------------


def _fake_result(verdict, speedup=1.0):
    return {"schema_version": store.RESULT_SCHEMA_VERSION, "name": "fake", "verdict": verdict, "reasons": [],
            "checks": [], "measured": {"overall": {"speedup": speedup, "ci_low": speedup * 0.9,
                                                   "ci_high": speedup * 1.1, "confidence": 0.95, "cases": 1},
                                     "cases": {}},
            "claim": {"speedup": 1.0}, "wall_seconds": 1.0, "started": "2026-01-01T00:00:00+00:00"}


def _fake_launcher(verdicts, seen):
    """A local launcher whose supervisor writes ``verdicts[preset]`` without running anything."""

    def supervise(job, start, cancel=None):
        preset = next(o.split("=", 1)[1] for o in job.overrides if o.startswith("measure="))
        seen.append((Path(job.run_dir).name, preset, dict(job.env)))
        verdict = verdicts[preset]
        store.write_json(Path(job.run_dir) / store.RESULT, _fake_result(verdict))
        return Outcome(job.run_dir, DONE, verdict, 0, seconds=10.0)

    return LocalLauncher(LauncherSettings(), gpus=[], supervisor=supervise)


def _one_candidate(tmp_path):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    shutil.copytree(DATA / "KernelBench", tmp_path / "KernelBench")
    shutil.copy(RUN / "level_1_problem_2_sample_1_kernel.py", run)
    return run


def test_an_inconclusive_candidate_is_measured_again_one_preset_up(tmp_path):
    seen = []
    out = audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu",
                          launcher=_fake_launcher({"quick": "inconclusive", "default": "supported"}, seen))
    assert [(n, p) for n, p, _ in seen] == [("level_1_problem_2_sample_1", "quick"),
                                           ("level_1_problem_2_sample_1-default", "default")]
    recs = rep.all_records(out.session_dir)
    assert [(r["attempt"], r["verdict"], r["final"]) for r in recs] == [(1, "inconclusive", False),
                                                                        (2, "supported", True)]
    assert out.records[0]["verdict"] == "supported" and out.exit_code == 0
    # Both attempts of one candidate share its compile caches; they sit in the audit folder.
    assert seen[0][2] == seen[1][2] and seen[0][2]["TORCH_EXTENSIONS_DIR"].startswith(str(out.session_dir.resolve()))
    assert "1 candidate inconclusive after the first pass; 1 re-measured" in out.report.read_text()


@pytest.mark.parametrize("kwargs, attempts", [
    ({"retries": 0}, 1),  # no retry allowed
    ({"budget": 5.0}, 1),  # predicted 10 s (its last attempt's seconds) does not fit in 5 s
    ({"budget": 15.0, "retries": 2}, 2),  # one retry fits (10 s); a second would bring the retries to 20 s
    ({"retries": 5}, 3),  # the ladder ends at rigorous
])
def test_retries_stop_at_the_count_the_budget_or_the_last_preset(tmp_path, kwargs, attempts):
    seen = []
    out = audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu",
                          overrides=["measure.max_seconds=1"],  # the same cap for every preset: ratio 1
                          launcher=_fake_launcher({p: "inconclusive" for p in audit.LADDER}, seen), **kwargs)
    recs = rep.all_records(out.session_dir)
    assert len(recs) == attempts and recs[-1]["final"] and not any(r["final"] for r in recs[:-1])
    assert out.records[0]["verdict"] == "inconclusive"
    assert recs[-1]["kept"] and not any(r["kept"] for r in recs[:-1])  # why it stays inconclusive
    assert recs[-1]["kept"] in out.report.read_text()


def _measured(verdict, rounds, measure=6.0, speedups=None, stopped="time budget spent"):
    """A result whose one case, judged ``verdict`` too, was measured in as many processes as
    ``rounds`` (rounds each, at ``speedups``, each +-1%), its measurement ``measure`` seconds."""
    result = _fake_result(verdict)
    case = next(iter(json.loads(RESULTS.read_text())["measured"]["cases"].values()))
    per = [{"speedup": s, "ci_low": s * 0.99, "ci_high": s * 1.01, "rounds": r}
           for r, s in zip(rounds, speedups or [1.0] * len(rounds))]
    result["measured"]["cases"] = {"c": {**case, "per_process": per, "processes": len(per), "verdict": verdict,
                                         "stopped": stopped}}
    result["stages"] = {"measure": measure}
    return result


def test_a_retry_is_predicted_from_the_rounds_the_next_preset_asks_of_a_process():
    """10 s, 6 of them measuring 6 rounds a process: default asks 10, so the measurement
    takes about 10 s and the attempt 14; the budget holds twice that. Capped by the whole
    attempt times the presets' ratio (3 s to 30 s: 100 s), which a process of one round
    would have passed."""
    retry = retries.Retries([], 1, None)
    quick, default = retries.Step("quick"), retries.Step("default")
    assert retry.predict(_measured("inconclusive", [6, 6, 7]), 10.0, quick, default) == pytest.approx(
        retries.RETRY_MARGIN * (4.0 + 6.0 * 10 / 6))
    assert retry.predict(_measured("inconclusive", [1, 6]), 10.0, quick, default) == pytest.approx(100.0)
    assert retry.predict(_fake_result("inconclusive"), 10.0, quick, default) == pytest.approx(100.0)


def test_a_retry_that_fits_by_its_rounds_runs_within_a_budget_its_whole_attempt_did_not_fit(tmp_path):
    seen = []

    def supervise(job, start, cancel=None):
        preset = next(o.split("=", 1)[1] for o in job.overrides if o.startswith("measure="))
        seen.append(preset)
        verdict = {"quick": "inconclusive", "default": "supported"}[preset]
        store.write_json(Path(job.run_dir) / store.RESULT, _measured(verdict, [6, 6, 6]))
        return Outcome(job.run_dir, DONE, verdict, 0, seconds=10.0)

    out = audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu", budget=50.0,
                          launcher=LocalLauncher(LauncherSettings(), gpus=[], supervisor=supervise))
    assert seen == ["quick", "default"] and out.records[0]["verdict"] == "supported"


SPREAD = [0.95, 1.05, 1.0]  # three processes, each +-1%: they disagree by far more than that


@pytest.mark.parametrize("result, step, then", [
    (_measured("inconclusive", [6, 6, 6], speedups=SPREAD), retries.Step("quick"), retries.Step("quick", 6)),
    (_measured("inconclusive", [6, 6, 6], stopped=stats.STOP_SPREAD), retries.Step("quick"),
     retries.Step("quick", 6)),
    (_measured("inconclusive", [6, 6, 6]), retries.Step("quick"), retries.Step("default")),
    (_measured("inconclusive", [6] * 6), retries.Step("quick", 6), retries.Step("default", 6)),
    (_measured("inconclusive", [6, 6, 6], speedups=SPREAD), retries.Step("rigorous"), retries.Step("rigorous", 6)),
    (_measured("inconclusive", [6, 6, 6]), retries.Step("rigorous"), None),
    (_measured("supported", [6, 6, 6], speedups=SPREAD), retries.Step("quick"), None),  # settled: an
    # inconclusive verdict from elsewhere (an implausible speedup) that no measurement changes
    (_fake_result("inconclusive"), retries.Step("quick"), retries.Step("default")),  # no cases kept
])
def test_a_retry_adds_processes_where_their_spread_is_the_width_else_goes_one_preset_up(result, step, then):
    assert retries.Retries([], 1, None).next_step(result, step) == then


def test_a_retry_in_more_processes_costs_the_attempt_times_their_ratio_and_replaces_the_given_count():
    retry = retries.Retries(["measure.processes=3"], 1, None)
    result = _measured("inconclusive", [6, 6, 6], speedups=SPREAD)
    assert retry.predict(result, 10.0, retries.Step("quick"), retries.Step("quick", 6)) == pytest.approx(20.0)
    assert retries.Step("quick", 6).overrides(["measure.processes=3", "measure.max_seconds=1"]) == (
        "measure=quick", "measure.max_seconds=1", "measure.processes=6")
    assert retries.Step("default").overrides(["measure.processes=3"]) == ("measure=default", "measure.processes=3")


def test_processes_that_disagree_are_measured_again_in_twice_as_many_and_a_resume_keeps_that_step(tmp_path):
    seen, limits = [], []

    def supervise(job, start, cancel=None):
        given = dict(o.split("=", 1) for o in job.overrides)
        seen.append((Path(job.run_dir).name, given["measure"], given.get("measure.processes")))
        limits.append(job.timeout)
        if len(seen) == 2 and not (tmp_path / "resumed").exists():
            raise KeyboardInterrupt("stopped")
        verdict = "inconclusive" if len(seen) == 1 else "supported"
        store.write_json(Path(job.run_dir) / store.RESULT, _measured(verdict, [6, 6, 6], speedups=SPREAD))
        return Outcome(job.run_dir, DONE, verdict, 0, seconds=10.0)

    launcher = LocalLauncher(LauncherSettings(), gpus=[], supervisor=supervise)
    first = audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu", timeout=15,
                            overrides=["measure.processes=3"], launcher=launcher)
    assert first.interrupted
    (rec,) = rep.all_records(tmp_path / "a")
    assert (rec["schema_version"], rec["processes"], rec["final"], rec["next"]) == (
        2, None, False, {"preset": "quick", "processes": 6, "time_limit": 40.0})
    (tmp_path / "resumed").touch()
    again = audit.run_audit(resume=tmp_path / "a", launcher=launcher)
    name = "level_1_problem_2_sample_1"
    assert seen == [(name, "quick", "3"), (f"{name}-quick-p6", "quick", "6"), (f"{name}-quick-p6", "quick", "6")]
    # 10 s in 3 processes: the retry in 6 is predicted at 20 s, and given twice that, also on resuming
    assert limits == [15.0, 40.0, 40.0]
    assert [(r["attempt"], r["processes"], r["verdict"]) for r in again.records] == [(2, 6, "supported")]
    text = again.report.read_text()
    assert "quick: inconclusive → quick in 6 processes: supported" in text
    assert "1 re-measured (1 attempt in more processes at the same preset, 0 at a larger preset;" in text


@pytest.mark.parametrize("limit, ceiling, runs, given", [
    (15.0, None, True, 40.0),  # twice the 20 s it is predicted to take: a retry is no hang for measuring more
    (15.0, 35.0, True, 35.0),  # no longer than the launcher can give a worker
    (15.0, 18.0, False, None),  # predicted longer than that: not started, where it would be killed as a hang
    (100.0, None, True, None),  # the audit's own limit is room enough
])
def test_a_retrys_time_limit_grows_with_what_it_is_predicted_to_take(limit, ceiling, runs, given):
    retry = retries.Retries([], 1, None)
    retry.bound_by(limit, ceiling)
    result = _measured("inconclusive", [6, 6, 6], speedups=SPREAD)
    nxt = retry.decide("c", result, 1, retries.Step("quick"), 10.0)
    assert (nxt is not None, retry.time_limits.get("c")) == (runs, given)


@pytest.mark.parametrize("result, attempt, step, bounds, why", [
    (_measured("inconclusive", [6, 6, 6], speedups=SPREAD), 2, retries.Step("quick", 6), {},
     "measured 2 time(s), the most --retries 1 allows"),
    (_measured("inconclusive", [6, 6, 6], speedups=SPREAD), 1, retries.Step("quick"), {"budget": 15.0},
     "a retry at measure=quick measure.processes=6 was predicted at 20 s, with 15 s of the --budget 15 s left"),
    (_measured("inconclusive", [6, 6, 6], speedups=SPREAD), 1, retries.Step("quick"), {"ceiling": 18.0},
     "predicted at 20 s, longer than the launcher can give a worker (18 s)"),
    ({**_measured("supported", [6, 6, 6]), "reasons": ["plausibility [case c]: measured 14.8x is above 10x"]}, 1,
     retries.Step("quick"), {}, "every case was settled, and more measurement does not change why it is "
                                "inconclusive: plausibility [case c]: measured 14.8x"),
    (_measured("inconclusive", [6, 6, 6]), 1, retries.Step("rigorous"), {}, "rigorous is the last preset"),
    ({**_fake_result("inconclusive"), "measured": {"overall": None, "cases": {}}}, 1, retries.Step("quick"), {},
     "no speedup was measured"),
])
def test_an_inconclusive_verdict_left_as_it_is_says_why(result, attempt, step, bounds, why):
    retry = retries.Retries([], 1, bounds.get("budget"))
    retry.bound_by(0.0, bounds.get("ceiling"))
    assert retry.decide("c", {**result, "verdict": "inconclusive"}, attempt, step, 10.0) is None
    assert why in retry.kept["c"], retry.kept


def test_a_record_before_schema_2_resumes_one_preset_up(tmp_path):
    rec = {"schema_version": 1, "preset": "quick", "final": False}
    assert audit._due(rec) == retries.Step("default")
    assert audit._due({**rec, "preset": "rigorous"}) is None


def test_an_unreadable_result_is_that_candidates_record_not_the_audits_end(tmp_path):
    def supervise(job, start, cancel=None):
        damaged = {**_fake_result("supported"), "measured": {"overall": {"speedup": 1.0}, "cases": {}}}
        store.write_json(Path(job.run_dir) / store.RESULT, damaged)
        return Outcome(job.run_dir, DONE, "supported", 0, seconds=1.0)

    out = audit.run_audit([str(_one_candidate(tmp_path))], out=tmp_path / "a", device="cpu",
                          launcher=LocalLauncher(LauncherSettings(), gpus=[], supervisor=supervise))
    rec = out.records[0]
    assert rec["verdict"] is None and not rec["correct"]
    assert "not a result.json expkit can read (key 'ci_low' missing)" in rec["reason"], rec["reason"]


def test_a_usage_error_is_one_line(tmp_path):
    with pytest.raises(ExpkitError, match="--measure 'fast'"):
        audit.run_audit([str(RUN)], preset="fast", out=tmp_path / "a")
    with pytest.raises(ExpkitError, match="measure=default: give the first pass's preset as --measure default"):
        audit.run_audit([str(RUN)], overrides=["measure=default"], out=tmp_path / "a")
    with pytest.raises(ExpkitError, match="--device cuda, and this machine's launcher sees no GPU"):
        audit.run_audit([str(RUN)], device="cuda", out=tmp_path / "g",
                        launcher=LocalLauncher(LauncherSettings(), gpus=[]))
    assert not (tmp_path / "g").exists()  # refused before any folder was made
    with pytest.raises(ExpkitError, match="--claims .*nope.csv: no such file"):
        audit.run_audit([str(RUN)], claims=tmp_path / "nope.csv", out=tmp_path / "a")


# --- classification, intervals, claims ----------------------------------------------------


def _invalid(*checks):
    return {"verdict": "invalid", "reasons": [f"{c}: {m}" for c, m in checks],
            "checks": [{"check": c, "ok": False, "message": m, "severity": "invalid"} for c, m in checks],
            "measured": {}}


@pytest.mark.parametrize("result, category, kind", [
    (_invalid(("crash", "candidate raised RuntimeError: solution x.py failed to import: SyntaxError")),
     "does not compile", "failure"),
    (_invalid(("worker", "timed out after 20 s (launcher.timeout_seconds) and was killed")), "hangs", "failure"),
    (_invalid(("worker", "killed by SIGKILL (the kernel's out-of-memory killer?)")), "out of memory", "failure"),
    (_invalid(("worker", "killed by SIGSEGV")), "crashes", "failure"),
    # A wrong output is a failure even where a defence also fired: no evaluation counts it.
    (_invalid(("forbidden", "baseline op ran"), ("oracle:allclose", "max abs error 3")), "wrong output", "failure"),
    (_invalid(("forbidden", "baseline op `aten::mm` ran in the candidate")), "runs the baseline's own ops", "cheat"),
    (_invalid(("inputs", "the candidate wrote to input 0")), "writes to its inputs", "cheat"),
    (_invalid(("something-new", "x")), "something-new", "cheat"),
])
def test_classify_puts_failures_before_cheats(result, category, kind):
    assert rep.classify(result)[:2] == (category, kind)


def test_an_unmeasured_inconclusive_is_not_correct():
    res = {"verdict": "inconclusive", "reasons": ["memory: cannot run once"], "measured": {"overall": None},
           "checks": [{"check": "memory", "ok": False, "message": "cannot run once", "severity": "warning"}]}
    assert not rep.is_correct(res) and rep.classify(res)[0] == "out of memory"


def test_wilson_interval_known_values():
    lo, hi = rep.wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    assert rep.wilson(0, 10)[0] == 0.0 and round(rep.wilson(0, 10)[1], 4) == 0.2775
    assert rep.wilson(0, 0) == (None, None)


def test_claims_files(tmp_path):
    # What KernelBench's benchmark_eval_analysis.py writes (output_file=...): counts beside the figures.
    (tmp_path / "c.json").write_text(json.dumps({"run_name": "r", "level": 1, "total_count": 100, "correct_count": 90,
                                                 "fast_p": {"1.0": 0.6}, "geo_mean_speedup": 1.8,
                                                 "correctness_rate": 0.9}))
    got = rep.read_claims(tmp_path / "c.json")
    assert got == {"problems": [], "summary": {"fast_p": {"1.0": 0.6}, "geo_mean_speedup": 1.8,
                                               "correctness_rate": 0.9}}
    (tmp_path / "p.json").write_text(json.dumps({"1": 2.0, "19_ReLU": 1.1}))
    assert [(c["problem"], c["speedup"]) for c in rep.read_claims(tmp_path / "p.json")["problems"]] == [
        (1, 2.0), ("19_ReLU", 1.1)]
    (tmp_path / "bad.csv").write_text("name,x\n1,2\n")
    with pytest.raises(ExpkitError, match="bad.csv: needs the columns problem and speedup"):
        rep.read_claims(tmp_path / "bad.csv")


# --- the report's markdown ----------------------------------------------------------------


def _synthetic_audit(folder):
    """An audit folder with fixed records: four problems, three samples each, every kind of outcome."""
    folder.mkdir()
    rows = [  # problem, sample, verdict, speedup, ci_low, ci_high, category, kind
        (1, 0, "supported", 1.8, 1.6, 2.0, None, None), (1, 1, "invalid", 6.0, 5.5, 6.5,
                                                         "replays or skips work once timed", "cheat"),
        (1, 2, "refuted", 0.7, 0.6, 0.8, None, None),
        (2, 0, "inconclusive", 1.02, 0.9, 1.15, None, None), (2, 1, "invalid", None, None, None, "wrong output",
                                                               "failure"),
        (2, 2, "supported", 2.6, 2.2, 3.0, None, None),
        (3, 0, "invalid", None, None, None, "runs the baseline's own ops", "cheat"),
        (3, 1, "invalid", None, None, None, "hangs", "failure"), (3, 2, "supported", 1.2, 1.1, 1.3, None, None),
        (4, 0, "supported", 3.1, 2.9, 3.3, None, None), (4, 1, "invalid", None, None, None, "crashes", "failure"),
        (4, 2, None, None, None, None, "problem error", "error"),
    ]
    cands, recs = [], []
    for pid, s, verdict, sp, lo, hi, cat, kind in rows:
        name = f"level_1_problem_{pid}_sample_{s}"
        cand = {"candidate": name, "level": 1, "problem": pid, "problem_name": f"{pid}_P{pid}", "sample": s,
                "manifest": f"manifests/{name}.yaml"}
        cands.append(cand)
        correct = verdict in rep.MEASURED
        base = {**{k: cand[k] for k in ("candidate", "level", "problem", "problem_name", "sample")},
                "schema_version": 1, "status": "done" if verdict else "error", "seconds": 3.0, "run_dir": name,
                "verdict": verdict, "correct": correct, "speedup": sp, "ci_low": lo, "ci_high": hi,
                "category": cat, "kind": kind, "reason": "check [case default]: what it found" if cat else ""}
        if pid == 2 and s == 0:
            recs.append({**base, "attempt": 1, "preset": "quick", "final": False, "ci_low": 0.8, "ci_high": 1.3})
            recs.append({**base, "schema_version": 2, "attempt": 2, "preset": "default", "processes": None,
                         "final": True, "next": None, "seconds": 12.0,
                         "kept": "measured 2 time(s), the most --retries 1 allows"})
        else:
            recs.append({**base, "attempt": 1, "preset": "quick", "final": True})
    claims = {"problems": [{"level": 1, "problem": 1, "sample": 0, "speedup": 2.5},
                           {"level": 1, "problem": 2, "sample": 0, "speedup": 1.0},
                           {"level": None, "problem": "3_P3", "sample": 0, "speedup": 1.4},
                           {"level": 1, "problem": 7, "sample": 0, "speedup": 1.1}],
              "summary": {"fast_p": {"1.0": 0.75}, "geo_mean_speedup": 1.9, "correctness_rate": 0.5}}
    plan = {"schema_version": 1, "name": "synthetic", "inputs": ["runs/synthetic"],
            "problems_root": "KernelBench/level1", "device": "cuda", "preset": "quick", "retries": 1,
            "budget_seconds": 600, "thresholds": list(rep.THRESHOLDS),
            "confidence": 0.95, "slots": 4, "candidates": cands, "claims": claims, "orphans": [],
            "problems_without_candidates": ["5_P5"], "wall_seconds": 20.0}
    (folder / rep.AUDIT).write_text(json.dumps(plan))
    (folder / rep.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_golden_audit_report(tmp_path):
    folder = _synthetic_audit(tmp_path / "synthetic")
    text = rep.render(folder)
    check("audit.md", text)
    views = rep.summarise(rep.final_records(folder))
    # First samples: problems 1, 2, 4 correct (1.8, 1.02, 3.1); problem 3's is a cheat.
    assert views["first"]["fast_p"]["1"]["k"] == 3 and views["first"]["fast_p"]["1.5"]["k"] == 2
    assert views["best"]["fast_p"]["2"]["k"] == 2  # problem 2's best (2.6) and problem 4's (3.1)
    assert views["first"]["fast_p"]["1"]["lower_bound"]["k"] == 2  # problem 2's interval reaches below 1
    # The level's problem with no candidate (5_P5) counts as unsolved where KernelBench counts it.
    level = rep.summarise(rep.final_records(folder), unjudged=1)
    assert [(level[v]["fast_p"]["1"]["k"], level[v]["fast_p"]["1"]["n"]) for v in ("first", "all", "best")] == [
        (3, 5), (5, 12), (4, 5)]
    assert "(3/5)" in text and "so does the one problem of the level with no candidate" in text


def test_manifests_group_into_problems_by_their_kernelbench_problem(tmp_path):
    run = _one_candidate(tmp_path)
    shutil.copy(RUN / "level_1_problem_2_sample_0_kernel.py", run)
    shutil.copy(RUN / "level_1_problem_1_sample_0_kernel.py", run)
    written, *_ = audit.kernelbench_candidates(run, tmp_path / "m", device="cpu")
    cands = audit.manifest_candidates([str(tmp_path / "m")])
    assert [(c.candidate, c.problem, c.problem_name, c.sample) for c in cands] == [
        ("level_1_problem_1_sample_0", 1, "1_Row_L2_norm", 0), ("level_1_problem_2_sample_0", 2, "2_Pairwise_dot", 0),
        ("level_1_problem_2_sample_1", 2, "2_Pairwise_dot", 1)]


def test_an_interrupted_audit_resumes_where_it_stopped(tmp_path):
    run = _one_candidate(tmp_path)
    shutil.copy(RUN / "level_1_problem_2_sample_0_kernel.py", run)
    shutil.copy(RUN / "level_1_problem_1_sample_0_kernel.py", run)
    seen = []
    calls = []

    def interrupting(job, start, cancel=None):
        calls.append(job)
        if len(calls) == 2:
            raise KeyboardInterrupt("stopped")
        return _fake_launcher({"quick": "supported"}, seen)._supervise(job, start, cancel=cancel)

    first = audit.run_audit([str(run)], out=tmp_path / "a", device="cpu", overrides=["measure.max_seconds=1"],
                            launcher=LocalLauncher(LauncherSettings(), gpus=[], supervisor=interrupting))
    assert first.interrupted and first.exit_code == 130 and len(first.records) == 1
    cost = rep.context(tmp_path / "a")["cost"]  # one candidate judged of three planned
    assert cost["per_candidate"] == rep.fmt_duration(first.records[0]["seconds"]), cost
    with pytest.raises(ExpkitError, match="only launcher settings may change"):
        audit.run_audit(resume=tmp_path / "a", overrides=["measure=rigorous"])
    again = audit.run_audit(resume=tmp_path / "a", launcher=_fake_launcher({"quick": "supported"}, seen))
    assert again.exit_code == 0 and not again.interrupted
    assert sorted(r["candidate"] for r in again.records) == sorted(EXPECTED)[:1] + sorted(EXPECTED)[3:5]
    assert [n for n, _, _ in seen] == ["level_1_problem_1_sample_0", "level_1_problem_2_sample_0",
                                       "level_1_problem_2_sample_1"]
    plan = json.loads((tmp_path / "a" / rep.AUDIT).read_text())
    assert plan["overrides"] == ["measure.max_seconds=1"] and not plan["interrupted"]
    assert "3 candidates over 2 problems, 3 judged" in again.report.read_text()



def test_a_jobs_environment_and_plots_survive_its_file_and_pickling(tmp_path):
    import pickle

    from expkit.suites.manifest_process import Job

    job = Job("m.yaml", str(tmp_path), ("measure=quick",), env=(("TRITON_CACHE_DIR", "/x/triton"),), plots=False)
    job.write()
    assert Job.read(tmp_path) == job and pickle.loads(pickle.dumps(job)) == job


def test_every_candidate_intervals_resample_samples_within_problems_too():
    """Four problems alike (two of three samples correct): problems alone would give [0.67, 0.67]."""
    recs = [{"level": 1, "problem": p, "sample": s, "correct": s < 2, "speedup": 1.0 + s if s < 2 else None,
             "ci_low": 0.9} for p in range(4) for s in range(3)]
    got = rep.summarise(recs)["all"]["correct"]
    assert got["value"] == pytest.approx(2 / 3) and got["ci_low"] < 0.6 and got["ci_high"] > 0.75
    none = rep.summarise(recs)["all"]["fast_p"]["2"]  # no candidate above 2x: Wilson over the 4 problems
    assert (none["k"], none["ci_low"], round(none["ci_high"], 2)) == (0, 0.0, 0.49)
    one = rep.summarise([r for r in recs if r["problem"] == 0])["all"]
    assert one["correct"]["ci_low"] is None and one["geomean"]["ci_low"] is None


def test_the_command_prints_the_summary_or_the_records_as_json(tmp_path, capsys, monkeypatch):
    from expkit.cli import main

    folder = _synthetic_audit(tmp_path / "synthetic")
    seen = {}

    def fake(paths, **kwargs):
        seen.update(kwargs, paths=paths)
        return audit.AuditOutcome(folder, tuple(rep.final_records(folder)), folder / rep.AUDIT_REPORT, 0)

    monkeypatch.setattr(audit, "run_audit", fake)
    assert main(["audit", "runs/x", "--jobs", "3", "--budget", "60", "measure.max_seconds=2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["audit"] == str(folder) and len(out["records"]) == 12
    assert seen["paths"] == ["runs/x"] and seen["overrides"] == ["measure.max_seconds=2"]
    assert (seen["jobs"], seen["budget"], seen["preset"], seen["retries"]) == (3, 60.0, "quick", 2)
    assert main(["audit", "runs/x", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Audit synthetic") and "## Candidates" not in text and f"report: {folder}" in text


def test_on_gpus_each_candidate_gets_one_gpu_and_cuda_manifests(tmp_path):
    """The GPU path without a GPU: a local launcher told of two GPUs, a fake supervisor."""
    run = _one_candidate(tmp_path)
    shutil.copy(RUN / "level_1_problem_2_sample_0_kernel.py", run)
    placed = []

    def supervise(job, start, cancel=None):
        placed.append((Path(job.run_dir).name, job.gpu, job.device))
        store.write_json(Path(job.run_dir) / store.RESULT, _fake_result("supported", 1.5))
        return Outcome(job.run_dir, DONE, "supported", 0, seconds=1.0)

    out = audit.run_audit([str(run)], out=tmp_path / "a",
                          launcher=LocalLauncher(LauncherSettings(), gpus=["0", "1"], supervisor=supervise))
    assert sorted(placed) == [("level_1_problem_2_sample_0", "0", "cuda"), ("level_1_problem_2_sample_1", "1", "cuda")]
    assert "device: cuda" in (out.session_dir / "manifests" / "level_1_problem_2_sample_0.yaml").read_text()
    plan = json.loads((out.session_dir / rep.AUDIT).read_text())
    assert plan["device"] == "cuda" and plan["slots"] == 2
