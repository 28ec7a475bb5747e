"""The adversarial suite: every bad candidate is caught, with the right reason; no honest
one raises an alarm. Each manifest in ``cpu/`` runs end to end through
``expkit.runner.run_manifest`` (worker process, channel, preflight, timing, verdict),
with measurement settings cut to fractions of a second and no figures drawn: the claims
and the reports here are not what is being tested, the defences are.
``docs/threat-model.md`` maps each candidate to the defence that catches it.

The last tests run two cheats through the *undefended* harness
(``defences.enabled=false``) and check that they get through: the suite's teeth are
the defences, not the candidates' clumsiness.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, FrozenSet, List, Tuple

import pytest

from expkit.runner import run_manifest

HERE = Path(__file__).parent / "cpu"

FAST = ("measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02",
        "measure.min_rounds=4", "measure.bootstrap=200")

#: The checks the defences (and the older preflight checks they build on) report.
DEFENCE_CHECKS = frozenset({
    "tamper", "global-state", "threads", "recheck", "timer", "channel", "worker", "plausibility", "uninitialised",
    "fallback", "output", "inputs", "identity", "forbidden", "stream", "launch", "crash", "interference",
    "launches",
})

#: name -> (verdict, checks that must be among the reasons, the case they must name: "" for
#: the whole run). ``a|b`` accepts either check: an uninitialised read is diagnosed as
#: such when a second run without the NaN poison comes out different, which depends on
#: what the allocator hands back; otherwise it stays an oracle failure (with its NaN count).
BAD: Dict[str, Tuple[str, FrozenSet[str], str]] = {
    "ref_passthrough": ("invalid", frozenset({"forbidden", "identity"}), "c"),
    "fallback_odd": ("invalid", frozenset({"forbidden", "fallback"}), "c/d_in=1"),
    "stale_buffer": ("invalid", frozenset({"output"}), "c"),
    "stale_clone": ("invalid", frozenset({"oracle:allclose"}), "c"),
    "replay_cache": ("invalid", frozenset({"recheck"}), "c"),
    "input_zeroer": ("invalid", frozenset({"inputs"}), "c"),
    "thread_defer": ("invalid", frozenset({"threads"}), "c"),
    "parked_defer": ("invalid", frozenset({"threads"}), "c"),
    "child_process": ("invalid", frozenset({"threads"}), "c"),
    "lazy_result": ("invalid", frozenset({"output"}), "c"),
    "timer_patch": ("invalid", frozenset({"tamper"}), ""),
    "timer_rebind": ("invalid", frozenset({"timer"}), "c"),
    "flag_flipper": ("invalid", frozenset({"global-state"}), ""),
    "downcast": ("invalid", frozenset({"oracle:allclose"}), "c"),
    "declared_shape_only": ("invalid", frozenset({"uninitialised|oracle:allclose"}), "c/n=257"),
    "zeros_when_tiny": ("invalid", frozenset({"calibration:allclose"}), "c"),
    "seed_oracle": ("invalid", frozenset({"oracle:allclose"}), "c"),
    "batch_then_skip": ("invalid", frozenset({"recheck"}), "c"),
    "report_forger": ("invalid", frozenset({"channel"}), ""),
    "uninit_garbage": ("invalid", frozenset({"uninitialised|oracle:allclose"}), "c"),
    # Issue #13: cheats that do their work through another op than the baseline's outermost
    # one, caught by a general mechanism (adv_general.py and the modules beside it).
    "inner_reach": ("invalid", frozenset({"forbidden"}), "c"),
    "copy_reach": ("invalid", frozenset({"forbidden"}), "c"),
    "tf32_einsum": ("invalid", frozenset({"oracle:rounding"}), "c"),
    "fp16_softmax": ("invalid", frozenset({"oracle:rounding"}), "c"),
    "mode_stack": ("invalid", frozenset({"global-state"}), ""),
    "harness_patch": ("invalid", frozenset({"tamper"}), ""),
    "poison_sniff": ("invalid", frozenset({"recheck"}), "c"),
    "disguised_child": ("invalid", frozenset({"threads"}), "c"),
    # a process started at import, handed half of each product: in no count and no account
    # of the side's cores before the import check (the whole run: case '')
    "import_pool_cores": ("invalid", frozenset({"threads"}), ""),
    # threads started at import that act on the baseline's worker from outside it while it
    # is timed: stopping it, or computing beside it (checks/interference.py, from the parent;
    # the stop runs unconfined, see NEEDS: confined, its signals are refused)
    "sibling_stop": ("invalid", frozenset({"interference"}), "c"),
    "idle_spin_cores": ("invalid", frozenset({"interference"}), "c"),
    "sibling_nice": ("invalid", frozenset({"interference"}), "c"),
    # issue #49: standard-library functions of the worker's channel replaced once timed
    # (adv_stdlib*.py): bound before the import, none reaches a message; reported as tamper
    "stdlib_times": ("invalid", frozenset({"tamper"}), "c"),
    "stdlib_calls": ("invalid", frozenset({"tamper"}), "c"),
    "stdlib_reach": ("invalid", frozenset({"tamper"}), "c"),
    # Issue #49: cheats written from expkit's source that read or change the harness's own
    # objects in their worker (adv_adaptive.py). The late pick catches those whose outputs
    # are wrong on calls they believe unchecked (every call is committed before the parent
    # picks, and the picked call's inputs are rebuilt by the baseline's worker); the parent's
    # clock catches those whose outputs are right but whose reported time is not.
    "adaptive_frame_peek": ("invalid", frozenset({"recheck"}), "c"),
    "adaptive_gc_peek": ("invalid", frozenset({"recheck"}), "c"),
    "adaptive_fewer_calls": ("invalid", frozenset({"recheck"}), "c"),
    "adaptive_untimed_work": ("invalid", frozenset({"timer"}), "c"),
    "adaptive_reply_forger": ("invalid", frozenset({"timer"}), "c"),
    "adaptive_partial_reply_forger": ("invalid", frozenset({"timer"}), "c"),
}

#: Cheats that use more cores than measure.cpu_threads allows (checks/activity.py's
#: ResourceAccount around each timed block of a side).
AWAITING_CALL_SITE: Dict[str, Tuple[str, FrozenSet[str], str]] = {
    "extra_cores": ("invalid", frozenset({"resources"}), "c"),
    "pool_cores": ("invalid", frozenset({"resources"}), "c"),
    "thread_per_call_cores": ("invalid", frozenset({"resources"}), "c"),
}
#: The issue #13 cheats: none may be caught by the baseline-op rule (a name hit).
GENERAL = ("inner_reach", "copy_reach", "tf32_einsum", "fp16_softmax", "mode_stack", "harness_patch", "poison_sniff",
           "disguised_child", "import_pool_cores", "sibling_stop", "idle_spin_cores",
           "sibling_nice")

#: Settings a cheat's run needs beyond FAST. ``batch_then_skip``'s first calls are slow and
#: honest (it computes everything it can find): the 0.3 s budget can end after two rounds in
#: which no call was stale, so it gets enough rounds for a stale call to be timed at all.
#: ``sibling_stop`` tests the parent's watch, the layer behind the confinement: confined
#: (the default, on Linux 6.12+) its signals never reach the baseline (see
#: test_cheats_that_stop_the_baselines_worker_are_refused_by_the_confinement).
UNCONFINED = ("defences.confine=false",)
#: The watch's rows act while the baseline is timed, which the freeze (bench/defences/freeze.py)
#: prevents by stopping the candidate's worker then: they run without it, to test the watch
#: behind it (test_a_candidate_that_computes_while_its_baseline_is_timed_earns_nothing).
UNFROZEN = ("defences.freeze=false",)
NEEDS = {"batch_then_skip": ("measure.max_seconds=2.0",), "sibling_stop": UNCONFINED + UNFROZEN,
         "idle_spin_cores": UNFROZEN, "sibling_affinity": ("measure.cpu_threads=2",),
         "idle_spin_pool": ("measure.cpu_threads=2",),
         # Its cheat runs half of each block's calls: a block of one call leaves it none to skip, so
         # it runs honestly (1.0x, `refuted`). A busy host's slower calls made such blocks at `quick`'s
         # 2 ms; blocks of 10 ms keep several calls each.
         "adaptive_fewer_calls": ("measure.min_block_seconds=0.01",)}

#: Cheats refused outright rather than caught: the candidate's confinement (bench/defences/confine.py)
#: refuses ``sibling_trace``'s tracing, which leaves nothing the parent's watch reads (a stop
#: under a tracer is reported to the tracer; no SIGCONT ends it); the baseline's affinity
#: guard (bench/defences/affinity_guard.py) undoes ``sibling_affinity``'s narrowing before each block
#: request, and names one made while a block ran.
#: The freeze stops the candidate's worker while the baseline is timed: ``idle_spin_pool``'s
#: thread, inside the allowance the watch gives an idle pool's spin, computes nothing then.
PREVENTED = ("sibling_trace", "sibling_affinity", "idle_spin_pool")

#: Cheats that write files, run from a copy of their manifest and modules (name -> files).
COPIED = {"baseline_rewrite": ("adv_rewrite_base.py", "adv_baseline_rewrite.py")}

HONEST = ("honest_gemv", "honest_threaded", "honest_chatty", "honest_out_buffer", "honest_scoped", "honest_softmax",
          # issue #13: sums in other orders, shares ops with the baseline's insides, a pool and a
          # workspace of its own, compiled code; default oracle unless the manifest says otherwise
          "honest_issue_matmul", "honest_blocked", "honest_split_k", "honest_rowsum", "honest_own_pool",
          "honest_workspace", "honest_compiled",
          # issue #49: the adaptive cheats' control, the same product every call
          "honest_adaptive")
#: Runs whose verdict is asserted beyond "no alarm" (see the tests below).
OTHER = ("baseline_patch",)


def run(name: str, out: Path, *extra: str):
    return run_manifest(HERE / f"{name}.yaml", FAST + NEEDS.get(name, ()) + extra, out_dir=out, plots=False)


#: Warnings that name the host, not the code, in a case timed while other work held the cores:
#: the ``contention`` that measured it (checks/contention.py), a verdict the host's load could
#: explain (``load``, verdict/load.py), a candidate on more threads than allowed timed there
#: (``share``), and a factor above the plausible, whose message then names the busy host as
#: its likelier cause (``plausibility``, verdict/plausibility.py). The product's contract: a
#: busy host may make a verdict ``inconclusive`` with one of these as its named reason, never
#: an alarm against honest code.
HOST = frozenset({"contention", "load", "share", "plausibility"})


def alarms(result) -> List[Tuple[str, str]]:
    """The (check, message) of every finding of ``result`` that accuses the code under test:
    any failed finding but a host warning; and a host warning too where no ``contention``
    finding of its case measured the wait it stands on (a ``load`` or ``share`` with no busy
    host behind it is not the host's). A verdict of ``invalid`` is an alarm with no such
    finding as well. A quiet host raises none of the host warnings, so there this is "no
    failed finding at all"; on a busy one it is what the product promises honest code."""
    failed = [c for c in result["checks"] if not c["ok"]]
    busy = {c["case"] for c in failed if c["check"] == "contention" and c.get("severity") == "warning"}
    out = [(c["check"], c["message"]) for c in failed
           if not (c["check"] in HOST and c.get("severity") == "warning" and c["case"] in busy)]
    if result["verdict"] == "invalid" and not out:
        out.append(("verdict", "invalid: " + "; ".join(result["reasons"])))
    return out


def supported_unless_the_host(result) -> None:
    """An honest claim far above its bar is ``supported``, or ``inconclusive`` with a busy
    host's warning as its leading reason and no alarm: the contract, not a quiet machine."""
    if result["verdict"] == "inconclusive":
        head = result["reasons"][0].split(" [", 1)[0].split(": ", 1)[0]
        assert head in HOST - {"contention"} and not alarms(result), (result["reasons"], alarms(result))
    else:
        assert result["verdict"] == "supported", result["reasons"]


def reason_checks(result) -> Dict[str, set]:
    """check name -> the cases its failing findings name ('' for the whole run)."""
    out: Dict[str, set] = {}
    for c in result["checks"]:
        if not c["ok"]:
            out.setdefault(c["check"], set()).add(c["case"] or "")
    return out


def test_every_manifest_here_is_in_the_suite():
    assert {p.stem for p in HERE.glob("*.yaml")} == (set(BAD) | set(HONEST) | set(AWAITING_CALL_SITE) | set(OTHER)
                                                     | set(PREVENTED) | set(COPIED))


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_candidate_is_caught_with_the_right_reason(name, tmp_path):
    verdict, checks, case = BAD[name]
    out = run(name, tmp_path)
    got = reason_checks(out.result)
    assert out.verdict == verdict, (name, out.result["reasons"])
    for wanted in checks:
        hit = [c for c in wanted.split("|") if c in got]
        assert hit, (name, wanted, got)
        assert case in got[hit[0]], (name, hit[0], got[hit[0]])
    if "uninitialised" not in got and any("uninitialised" in c for c in checks):
        assert any("NaN" in c["message"] for c in out.result["checks"] if not c["ok"])
    # The verdict's reasons (what result.json and the report lead with) name the check.
    heads = {r.split(" [", 1)[0].split(": ", 1)[0] for r in out.result["reasons"]}
    assert heads & {c for wanted in checks for c in wanted.split("|")}, out.result["reasons"]
    # What the honest candidates' tests call an alarm catches every cheat: they assert the
    # product's contract on a busy host without letting a cheat through.
    assert {c for c, _ in alarms(out.result)} & {c for wanted in checks for c in wanted.split("|")}, alarms(out.result)


@pytest.mark.parametrize("name", ["sibling_stop", "import_pool_cores", "sibling_nice"])
def test_cheats_that_act_from_outside_a_worker_are_caught_when_the_workers_come_from_the_fork_server(name, tmp_path):
    """A process that is not fresh (a notebook, a test session that computed with torch)
    starts its workers from the fork server, and did on the H100 host: the workers are
    then not the parent's children, and `sibling_stop` and `import_pool_cores` came out
    `supported` there (evidence/harness-cost/gpu-request-wait/raw.tar.xz:adv_cpu_31205fa.txt)."""
    verdict, checks, case = BAD[name]
    out = run(name, tmp_path, "defences.start_method=forkserver")
    assert out.result["defences"]["start_method"] == "forkserver", out.result["defences"]["start_method"]
    assert out.verdict == verdict and set(checks) <= set(reason_checks(out.result)), out.result["reasons"]


def test_a_candidate_that_replaces_the_channels_standard_library_reaches_no_message(tmp_path):
    """json, hmac, struct, os, select and time functions wrapped once the candidate is timed:
    the worker's channel calls none of them through the module attribute (it bound the C
    functions before the import), so a wrapper that shrinks a reply's times or the number of
    calls asked changes nothing; the tamper check names the replacement. Before issue #49 the
    same wrappers sat in the path: evidence/defences/adaptive-cheats-channel.md."""
    out = run("stdlib_reach", tmp_path)
    err = (tmp_path / "worker-stderr.txt").read_text().splitlines()
    reach = [ln for ln in err if ln.startswith("adv_stdlib: reach ")]
    assert reach, err[-5:]
    import ast

    counts = ast.literal_eval(reach[-1].split("reach ", 1)[1])
    assert len(counts) == 11 and not any(counts.values()), counts
    assert out.verdict == "invalid" and "tamper" in reason_checks(out.result), out.result["reasons"]


def _told(run_dir: Path) -> str:
    """What an ``adv_siblings`` cheat told on its worker's stderr (kept in the run folder)."""
    err = run_dir / "worker-stderr.txt"
    return "\n".join(ln for ln in (err.read_text().splitlines() if err.exists() else ())
                     if ln.startswith("adv_siblings: "))


@pytest.mark.parametrize("name,abi", [("sibling_trace", 2), ("sibling_stop", 6)])
def test_cheats_that_stop_the_baselines_worker_are_refused_by_the_confinement(name, abi, tmp_path):
    """Confined, the candidate's worker can neither trace the baseline's (Landlock ABI 2) nor
    signal it (ABI 6): the cheat is refused and earns what its honest addmm earns, never its
    1.5x claim. Unconfined the same cheat reaches the baseline's worker: `sibling_trace`
    came out `supported` at 2.36-2.54x that way, where the watch sees nothing
    (evidence/defences/confine/README.md)."""
    from expkit.bench.defences.confine import landlock_abi

    if landlock_abi() < abi:
        pytest.skip(f"this kernel's Landlock ABI is {landlock_abi()}; the confinement needs {abi} for this")
    out = run_manifest(HERE / f"{name}.yaml", FAST, out_dir=tmp_path / "on", plots=False)
    confinement = out.result["defences"]["confinement"]
    assert confinement["trace"] and confinement["landlock_abi"] >= abi, confinement
    told = _told(tmp_path / "on")
    assert "refused" in told and "stopped" not in told, told
    assert out.verdict != "supported", out.result["reasons"]
    # The cheat has teeth: unconfined, it stops the baseline's worker.
    off = run_manifest(HERE / f"{name}.yaml", FAST + UNCONFINED + UNFROZEN, out_dir=tmp_path / "off",
                       plots=False)
    assert off.result["defences"]["confinement"] is None
    told = _told(tmp_path / "off")
    if "stopped" not in told:
        pytest.skip(f"this machine refuses the cheat even unconfined: {told}")


def test_a_candidate_that_moves_the_baselines_threads_onto_one_core_earns_nothing(tmp_path):
    """At measure.cpu_threads=2 a thread of the candidate's moved each thread of the baseline's
    worker onto one core: `supported` at 4.2-5.4x from an honest 1.0x before the baseline's
    worker gave its threads their cores back before each block request and named a thread
    narrowed while it ran (bench/defences/affinity_guard.py; evidence/defences/confine)."""
    out = run("sibling_affinity", tmp_path)
    got = reason_checks(out.result)
    assert out.verdict != "supported", out.result["reasons"]
    assert out.verdict != "invalid" or "c" in got.get("interference", set()), out.result["reasons"]


@pytest.mark.parametrize("name", ["idle_spin_pool", "idle_spin_cores"])
def test_a_candidate_that_computes_while_its_baseline_is_timed_earns_nothing(name, tmp_path):
    """Threads of the candidate's compute only while the baseline is timed. One thread at
    measure.cpu_threads=2 stays inside the spin the watch allows an idle pool: it was
    `supported` at 3.5-4.4x from an honest 1.0x before the candidate's worker was stopped
    while its baseline is timed (bench/defences/freeze.py; evidence/defences/freeze). The
    freeze stops every thread of it: the watch reads nothing of its CPU time in the
    baseline's blocks, and the cheat earns what its honest addmm earns."""
    cfg = tuple(a for a in NEEDS.get(name, ()) if a not in UNFROZEN)  # the freeze on, as shipped
    on = run_manifest(HERE / f"{name}.yaml", FAST + cfg, out_dir=tmp_path / "on", plots=False)
    assert on.verdict != "supported", on.result["reasons"]
    assert not [c for c in on.result["checks"] if not c["ok"] and c["check"] == "interference"], on.result["reasons"]
    assert on.result["defences"]["frozen"] is True
    seen = on.result["defences"]["interference"]["c"]["baseline"]
    assert seen["other_cpu_ms"] <= 0.05 * seen["timed_ms"], seen  # stopped: next to no CPU time
    # The cheat has teeth: without the freeze it computes beside the baseline.
    off = run_manifest(HERE / f"{name}.yaml", FAST + cfg + UNFROZEN, out_dir=tmp_path / "off", plots=False)
    assert off.result["defences"]["frozen"] is False
    seen = off.result["defences"]["interference"]["c"]["baseline"]
    assert seen["other_cpu_ms"] > 0.3 * seen["timed_ms"], seen


def test_a_candidate_that_stops_its_baseline_unconfined_earns_nothing_frozen(tmp_path):
    """Where the confinement cannot refuse signals (Landlock ABI below 6, Linux before 6.12)
    the freeze is the layer left: `sibling_stop`'s thread, which stops the baseline's worker
    while the candidate is not being called, is itself stopped while the baseline is timed."""
    out = run_manifest(HERE / "sibling_stop.yaml", FAST + UNCONFINED, out_dir=tmp_path, plots=False)
    assert out.result["defences"]["frozen"] is True and out.result["defences"]["confinement"] is None
    assert out.verdict != "supported", out.result["reasons"]


def test_a_candidate_that_rewrites_the_baselines_module_is_caught(tmp_path):
    """Each replicate's fresh baseline worker imports its module anew: rewritten by the
    candidate's import, every later replicate's baseline was three times slower and the
    honest 1.0x candidate `supported` (evidence/defences/confine/README.md). The
    first pair's baseline imports before any candidate code runs; each later one's code is
    compared with it (checks/code_digest.py)."""
    import shutil

    for f in ("baseline_rewrite.yaml",) + COPIED["baseline_rewrite"]:
        shutil.copy(HERE / f, tmp_path / f)
    out = run_manifest(tmp_path / "baseline_rewrite.yaml", FAST, out_dir=tmp_path / "out", plots=False)
    assert "adv_baseline_rewrite" in (tmp_path / "adv_rewrite_base.py").read_text()  # the cheat did rewrite it
    got = reason_checks(out.result)
    assert out.verdict == "invalid" and "" in got.get("tamper", set()), out.result["reasons"]
    assert any("adv_rewrite_base" in r and "differs between" in r for r in out.result["reasons"]), out.result["reasons"]


@pytest.mark.parametrize("name", sorted(AWAITING_CALL_SITE))
def test_more_cores_than_allowed_is_caught(name, tmp_path):
    verdict, checks, case = AWAITING_CALL_SITE[name]
    out = run(name, tmp_path)
    got = reason_checks(out.result)
    used = out.result["defences"]["resources"][case]["candidate"]
    if out.verdict != verdict:
        # The scheduler gave its extra threads no second core (a machine under other load,
        # or pinned to one core): then it gained no core, and its verdict is what one core
        # earns. Any verdict but `invalid` needs its busiest timed span inside the limit,
        # as the account measured it.
        # A side that timed anything has a judged span: a worker whose blocks never filled
        # the account's pool is judged on that pool when its case ends (ci_run_00f1e34.md).
        assert not used["flagged"] and used["peak_cores"] is not None and used["peak_cores"] <= used["limit"], (
            out.verdict, used, out.result["reasons"])
        return
    assert all(case in got.get(c, set()) for c in checks), got
    assert used["flagged"] and used["peak_cores"] > used["limit"], used


@pytest.mark.parametrize("name", GENERAL)
def test_the_new_cheats_are_not_caught_by_the_baseline_op_rule(name, tmp_path):
    """Each does its work through another op than the baseline's outermost one, so no
    finding may be a name hit of the baseline-op rule: what catches it is general."""
    out = run(name, tmp_path)
    name_hits = [c["message"] for c in out.result["checks"] if not c["ok"] and "baseline op `" in c["message"]]
    assert out.verdict == "invalid" and not name_hits, name_hits


@pytest.mark.parametrize("freeze", ["true", "false"])
@pytest.mark.parametrize("name", ["honest_blocked", "honest_issue_matmul"])
def test_honest_candidates_on_two_threads_raise_no_alarm(name, freeze, tmp_path):
    """At measure.cpu_threads=2 each worker's OpenMP pool spins after its blocks: these were
    `invalid` (`interference`, 0.43 and 0.58 cores of the idle worker) before the watch
    allowed an idle pool its spin (evidence/defences/confine/README.md). With the
    freeze the idle worker is stopped and spins nothing, and the allowance is not given;
    without it, the allowance is what keeps them clear, with a scheduler tick a request for
    the kernel's late account of the spinning thread (on CI ``honest_blocked`` read 1.26
    cores before that: evidence/defences/interference-lag). On a busy host the product's
    contract (:func:`alarms`): ``honest_blocked`` read 13.6x beside one busy process, its
    baseline's pool of two slowed by the wait, and the plausibility warning that names the
    busy host (a ``contention`` finding measured the wait) is no alarm."""
    out = run(name, tmp_path, "measure.cpu_threads=2", f"defences.freeze={freeze}")
    found = [(c, m) for c, m in alarms(out.result) if c in DEFENCE_CHECKS]
    assert not found, found
    assert out.verdict != "invalid", out.result["reasons"]


def test_the_issues_honest_matmul_is_supported_with_the_default_oracle(tmp_path):
    """torch.mm against broadcast multiply then sum, fp32: `invalid` under torch's elementwise
    tolerances before issue #13."""
    out = run("honest_issue_matmul", tmp_path)
    supported_unless_the_host(out.result)
    (f,) = [c for c in out.result["checks"] if c["check"] == "oracle:rounding" and c["case"] == "c"]
    assert f["ok"] and f["message"].startswith("rounding rule (against a float64 reference")


def test_a_patch_of_the_baselines_own_function_reaches_no_baseline(tmp_path):
    """Each side in a process of its own: the candidate's patch of F.gelu slows nothing the
    baseline runs, so the claim (3x, which an honest gelu through five ops cannot reach) is
    not supported, and nothing had to catch it."""
    out = run("baseline_patch", tmp_path)
    assert out.verdict == "refuted", out.result["reasons"]
    assert not [c for c in out.result["checks"] if not c["ok"] and c.get("severity") != "warning"]


def test_a_patch_of_the_baselines_own_function_is_tamper_where_the_sides_share_a_process(tmp_path):
    import torch.nn.functional as F

    real = F.gelu
    try:
        out = run("baseline_patch", tmp_path, "defences.isolate=false")
    finally:
        F.gelu = real
    assert out.verdict == "invalid" and "tamper" in reason_checks(out.result), out.result["reasons"]


def test_order_defence_catches_a_candidate_that_needs_the_baseline_first(tmp_path):
    """Where both sides share a process (defences.isolate=false), the baseline's fresh output
    is in reach; the trials that run the candidate first are what catch it."""
    out = run("stale_clone", tmp_path, "defences.isolate=false")
    msg = next(c["message"] for c in out.result["checks"] if c["check"] == "oracle:allclose" and not c["ok"])
    assert "candidate ran first" in msg


def test_separate_sides_leave_the_baseline_output_out_of_reach_from_the_first_trial(tmp_path):
    out = run("stale_clone", tmp_path)
    msg = next(c["message"] for c in out.result["checks"] if c["check"] == "oracle:allclose" and not c["ok"])
    assert "(trial 0," in msg and "candidate ran first" not in msg
    assert out.result["defences"]["separate_sides"] is True


def test_declared_shape_passes_and_only_awkward_sizes_fail(tmp_path):
    got = reason_checks(run("declared_shape_only", tmp_path).result)
    cases = got.get("uninitialised", set()) | got.get("oracle:allclose", set())
    assert "c" not in cases and {"c/n=1", "c/n=13", "c/n=257"} <= cases


@pytest.mark.parametrize("name", HONEST)
def test_honest_candidate_raises_no_alarm(name, tmp_path):
    """No alarm (:func:`alarms`): on a busy host (another job beside the suite) the timing
    threads wait for a CPU, which the product reports as warnings that may make the verdict
    ``inconclusive``; ``honest_threaded`` and ``honest_own_pool`` failed this test on their
    ``contention`` warnings on a 2-core host beside one ``yes > /dev/null`` (issue 51)."""
    out = run(name, tmp_path)
    assert not alarms(out.result), alarms(out.result)
    assert out.verdict != "invalid"
    assert out.result["defences"]["isolated"] is True
    assert out.result["measured"]["cases"], "an honest candidate is measured"


@pytest.mark.parametrize("name", ("honest_threaded", "honest_own_pool"))
def test_a_pool_started_in_a_later_process_is_no_alarm(name, tmp_path):
    """A later process of a replicated run has no preflight: a pool the candidate starts
    lazily starts in the warm-up, and must not count against the first timed block."""
    out = run(name, tmp_path, "measure.processes=3")
    assert not alarms(out.result), alarms(out.result)
    assert out.result["measured"]["cases"]["c"]["processes"] == 3


def _finding(check, case="c", severity="warning"):
    return {"check": check, "ok": False, "message": f"{check} fired", "case": case, "severity": severity}


@pytest.mark.parametrize("checks,verdict,accused", [
    ([], "supported", set()),
    ([_finding("contention")], "supported", set()),
    ([_finding("contention"), _finding("load"), _finding("share")], "inconclusive", set()),
    ([_finding("contention", case="other"), _finding("load")], "inconclusive", {"load"}),  # no wait behind it
    ([_finding("share")], "inconclusive", {"share"}),
    ([_finding("contention"), _finding("plausibility")], "inconclusive", set()),  # its message names the host
    ([_finding("plausibility")], "inconclusive", {"plausibility"}),
    ([_finding("contention"), _finding("recheck")], "inconclusive", {"recheck"}),
    ([_finding("contention"), _finding("resources", severity="invalid")], "invalid", {"resources"}),
    ([_finding("contention"), _finding("interference", severity="invalid")], "invalid", {"interference"}),
    ([_finding("contention", severity="invalid")], "invalid", {"contention"}),
    ([], "invalid", {"verdict"}),
])
def test_an_alarm_is_what_accuses_the_code_never_a_busy_host(checks, verdict, accused):
    result = {"checks": checks, "verdict": verdict, "reasons": ["r"]}
    assert {c for c, _ in alarms(result)} == accused


@pytest.mark.parametrize("verdict,reasons,checks,holds", [
    ("supported", ["speedup [case c]: interval ..."], [], True),
    ("inconclusive", ["load [case c]: ...", "speedup [case c]: ..."], [_finding("contention"), _finding("load")], True),
    ("inconclusive", ["speedup [case c]: interval straddles ..."], [], False),  # no host behind it
    ("inconclusive", ["load [case c]: ..."], [_finding("load")], False),  # a load warning with no measured wait
    ("refuted", ["speedup [case c]: ..."], [], False),
    ("invalid", ["recheck [case c]: ..."], [_finding("recheck", severity="invalid")], False),
])
def test_supported_unless_the_host_holds_exactly_the_contract(verdict, reasons, checks, holds):
    result = {"verdict": verdict, "reasons": reasons, "checks": checks}
    try:
        supported_unless_the_host(result)
    except AssertionError:
        assert not holds
    else:
        assert holds


def test_candidate_output_is_kept_as_evidence_and_never_believed(tmp_path):
    out = run("honest_chatty", tmp_path)
    stdout = (tmp_path / "worker-stdout.txt").read_text()
    assert "check: pass  speedup: 12.0" in stdout
    assert "gemv_chatty: computing" in (tmp_path / "worker-stderr.txt").read_text()
    assert out.result["defences"]["stdout"] == "worker-stdout.txt"
    assert out.result["measured"]["cases"]["c"]["speedup"] != 12.0


def test_honest_verdict_is_the_same_with_and_without_defences(tmp_path):
    # honest_gemv: BLAS mv against a multiply-then-sum, claimed at 1.0x with 50%
    # tolerance, so the bar (0.5x) is far below what either harness measures.
    on = run("honest_gemv", tmp_path / "on")
    off = run("honest_gemv", tmp_path / "off", "defences.enabled=false")
    assert off.result["defences"]["enabled"] is False
    supported_unless_the_host(on.result)  # the defended run watches the host's load too
    if off.verdict == "inconclusive":
        # The undefended harness (never a claim's judge) keeps no account of the host's load:
        # beside one busy process its interval straddled the bar ([0.27, 2.3] and [0.48, 4.1]
        # against 0.5) with the defended run supported. It may fail to tell, never accuse.
        assert all(r.startswith("speedup [") and "straddles" in r for r in off.result["reasons"]), off.result["reasons"]
    else:
        assert off.verdict == "supported", off.result["reasons"]


# Only cheats without process-wide side effects: the undefended harness runs them in
# this (the test) process.
@pytest.mark.parametrize("name", ["replay_cache", "batch_then_skip"])
def test_undefended_harness_is_fooled(name, tmp_path):
    out = run(name, tmp_path, "defences.enabled=false")
    assert out.verdict != "invalid", out.result["reasons"]


# --- GPU (run by the lead on the device machine: pytest -m gpu tests/adversarial) -----------

torch = pytest.importorskip("torch")
GPU = Path(__file__).parent / "gpu"

#: name -> (verdict, checks as in BAD)
GPU_BAD: Dict[str, Tuple[str, FrozenSet[str]]] = {
    "side_stream": ("invalid", frozenset({"stream"})),
    "side_stream_late": ("invalid", frozenset({"stream"})),
    "stale_empty": ("invalid", frozenset({"uninitialised|oracle:allclose"})),
    "timer_patch": ("invalid", frozenset({"tamper"})),
    # issue #13, where the mechanism differs on a GPU (adv_gpu_general.py, adv_gpu_cudnn_flags.py)
    "tf32_scoped": ("invalid", frozenset({"oracle:rounding"})),
    "cudnn_flags": ("invalid", frozenset({"global-state"})),
    # caught by the recheck, or already in the preflight where the allocator hands a trial the
    # address of an earlier one (the graph then replays on that trial's stale copies)
    "graph_stale": ("invalid", frozenset({"recheck|oracle:rounding"})),
    # the baseline's worker stopped from outside while it is timed (checks/interference.py:
    # on a GPU its stops and priority are watched, not its CPU time)
    "sibling_stop": ("invalid", frozenset({"interference"})),
    # issue #49: the full product under the profiler, half of it on timed calls
    # (adv_gpu_launches.py): the per-call launch check (bench/sides/launches.py), the recorder's seal
    "launch_profiler_aware": ("invalid", frozenset({"launches"})),
    "launch_forged_grid": ("invalid", frozenset({"tamper"})),
    "launch_stopped_recorder": ("invalid", frozenset({"launches"})),
    # issue #49: the H200 cheat that read the kept call from its caller's frames
    "adaptive_frame_peek": ("invalid", frozenset({"recheck"})),
}
GPU_HONEST = ("honest_graph", "honest_joined_stream", "honest_adaptive")
#: As NEEDS: the stop tests the watch, unconfined.
GPU_NEEDS = {"sibling_stop": UNCONFINED + UNFROZEN}


def run_gpu(path: Path, out: Path, *extra: str):
    return run_manifest(path, FAST + extra, out_dir=out, plots=False)


@pytest.mark.parametrize("name", sorted(GPU_BAD))
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_bad_candidate_is_caught(name, tmp_path):
    verdict, checks = GPU_BAD[name]
    out = run_gpu(GPU / f"{name}.yaml", tmp_path, *GPU_NEEDS.get(name, ()))
    got = reason_checks(out.result)
    assert out.verdict == verdict, out.result["reasons"]
    for wanted in checks:
        assert any(c in got for c in wanted.split("|")), (wanted, got)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_honest_candidate_raises_no_alarm(tmp_path):
    out = run_gpu(GPU / "honest_matmul.yaml", tmp_path)
    alarms = [(c["check"], c["message"]) for c in out.result["checks"] if not c["ok"] and c["check"] in DEFENCE_CHECKS]
    assert not alarms, alarms
    assert out.verdict != "invalid"


@pytest.mark.parametrize("name", GPU_HONEST)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_honest_issue13_candidate_raises_no_alarm(name, tmp_path):
    out = run_gpu(GPU / f"{name}.yaml", tmp_path)
    alarms = [(c["check"], c["message"]) for c in out.result["checks"] if not c["ok"] and c.get("severity") != "warning"]
    assert not alarms, alarms
    assert out.verdict != "invalid"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_work_handed_to_a_detached_process_is_caught(tmp_path):
    out = run_gpu(GPU / "gpu_daemon.yaml", tmp_path)
    # Either mechanism names the hand-off: NVML's list of processes on the GPU (empty inside
    # some containers, as on the device this runs on), or the side's own accounting of the
    # child processes still running when the call returned.
    assert out.verdict == "invalid", out.result["reasons"]
    assert {"gpu-processes", "threads"} & set(reason_checks(out.result)), out.result["reasons"]
    assert any("process" in r for r in out.result["reasons"]), out.result["reasons"]


def test_every_gpu_manifest_here_is_in_the_suite():
    known = set(GPU_BAD) | set(GPU_HONEST) | {"honest_matmul", "l2_resident", "gpu_daemon"}
    assert {p.stem for p in GPU.glob("*.yaml")} == known


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_l2_resident_speedup_shrinks_when_timed_cold(tmp_path):
    """Measured warm (inputs left in L2), the one-pass candidate's lead over the
    two-pass baseline is larger than cold (L2 flushed before each call): a claim made
    from the warm number is not supported by the cold measurement expkit makes."""
    warm = run_gpu(GPU / "l2_resident.yaml", tmp_path / "warm", "measure.cold=false")
    w = warm.result["measured"]["cases"]["c"]
    text = (GPU / "l2_resident.yaml").read_text().replace(
        "claim: {speedup: 1.0, tolerance: 0.0}", f"claim: {{speedup: {w['ci_low']:.4f}, tolerance: 0.0}}")
    manifest = tmp_path / "l2_claimed_warm.yaml"
    manifest.write_text(text)
    (tmp_path / "adv_gpu.py").write_text((GPU / "adv_gpu.py").read_text())
    cold = run_gpu(manifest, tmp_path / "cold")
    c = cold.result["measured"]["cases"]["c"]
    assert "cold" in cold.result["timing"]["method"] and "warm" in warm.result["timing"]["method"]
    assert c["speedup"] < w["speedup"], (c["speedup"], w["speedup"])
    assert cold.verdict in ("refuted", "inconclusive"), cold.result["reasons"]
    assert any(r.startswith("speedup") for r in cold.result["reasons"]), cold.result["reasons"]
