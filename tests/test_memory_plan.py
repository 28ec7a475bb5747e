"""The memory plan from one plain call's figures (expkit/bench/sides/memory_plan.py)."""

from __future__ import annotations

import pytest
import torch

from expkit.bench.sides.memory_plan import GiB, measure_call, plan

L2 = 50 << 20


def probe(i, o, peak, free):
    return {"input_bytes": i, "output_bytes": o, "peak_bytes": peak, "free": free}


def test_small_inputs_keep_every_defence_and_every_input_set():
    p = plan(probe(4 << 20, 4 << 20, 8 << 20, 70 * GiB), input_sets=4, l2_bytes=L2)
    assert (p.input_sets, p.hold_previous, p.keep_pristine, p.clone_for_baseline, p.reference) == \
        (4, True, True, True, "device")
    assert not p.notes


def test_inputs_far_beyond_l2_use_one_set():
    p = plan(probe(1 * GiB, 1 * GiB, 2 * GiB, 70 * GiB), input_sets=4, l2_bytes=L2)
    assert p.input_sets == 1 and "L2" in p.notes[0]


def test_an_8_gib_problem_gives_copies_up_and_keeps_its_reference_on_the_device():
    """KernelBench's 8 GiB reductions: the full plan projects 56 GiB; the budget is 2 x 8 + 1.
    The held copies go; the transient float64 reference stays where it is fast, since the
    78 GiB free hold it, and the plan says that the checks go over the budget."""
    p = plan(probe(8 * GiB, 1 << 20, 8 * GiB, 78 * GiB), input_sets=4, l2_bytes=L2)
    assert p.input_sets == 1
    assert p.budget_bytes == 17 * GiB and p.budget_bytes < p.projected_bytes <= 0.85 * 78 * GiB
    assert (p.hold_previous, p.keep_pristine, p.clone_for_baseline, p.reference) == (False, False, False, "device")
    assert len(p.notes) == 5 and "stays on the device" in p.notes[-1]


def test_the_reference_leaves_the_device_only_when_free_memory_cannot_hold_it():
    p = plan(probe(8 * GiB, 1 << 20, 8 * GiB, 40 * GiB), input_sets=4, l2_bytes=L2)
    assert p.reference == "host" and "host" in p.notes[-1]
    assert p.projected_bytes <= p.budget_bytes


def test_on_the_host_the_reference_has_nowhere_else_to_go_and_the_plan_says_it_is_over():
    p = plan({**probe(512 << 20, 512 << 20, 1 * GiB, 20 * GiB), "device": "cpu"}, input_sets=4, l2_bytes=L2)
    assert p.reference == "device" and not any("stays on the device" in n for n in p.notes)
    assert p.projected_bytes > p.budget_bytes and "over twice the plain call's peak" in p.notes[-1]


def test_free_memory_caps_the_budget():
    p = plan(probe(256 << 20, 256 << 20, 512 << 20, 1 * GiB), input_sets=4, l2_bytes=L2)
    assert p.budget_bytes == int(0.85 * GiB)


def test_a_plan_that_still_does_not_fit_says_so():
    p = plan(probe(30 * GiB, 30 * GiB, 60 * GiB, 78 * GiB), input_sets=4, l2_bytes=L2)
    assert not p.hold_previous and not p.keep_pristine and not p.clone_for_baseline and p.reference == "host"
    assert "over" in p.notes[-1]


def test_an_unmeasured_call_gives_the_full_plan_and_says_it_was_not_sized():
    p = plan({"free": None}, input_sets=4, l2_bytes=None)
    assert p.input_sets == 4 and "not sized" in p.notes[0]


def test_measure_call_reports_bytes_on_the_host():
    got = measure_call(lambda x: x * 2, lambda: (torch.randn(1 << 20),), "cpu")
    assert got["input_bytes"] == 4 << 20 and got["output_bytes"] == 4 << 20
    assert got["peak_bytes"] is None or got["peak_bytes"] >= 0


def test_measure_call_turns_out_of_memory_into_data():
    def boom(x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    got = measure_call(boom, lambda: (torch.randn(4),), "cpu")
    assert got["oom"] and "Tried to allocate" in got["raised"]


def test_a_baseline_that_cannot_run_once_ends_with_exit_5_a_report_and_no_traceback(tmp_path, capsys):
    import json
    import textwrap

    from expkit.cli import main

    (tmp_path / "oom.py").write_text(textwrap.dedent('''
        import torch
        def inputs(params, gen, device):
            return (torch.randn(8, generator=gen, device=device),)
        def base(x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB total)")
        def cand(x):
            return x * 2
    '''))
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: oom
        claim: {speedup: 1.5}
        baseline: oom:base
        candidate: oom:cand
        inputs: {factory: oom:inputs}
        cases: [{name: c, params: {}}]
    '''))
    code = main(["run", str(tmp_path / "m.yaml"), "measure=quick", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 5 and "Traceback" not in err and "20.00 GiB" in err
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["verdict"] == "inconclusive" and "exit code 5" in result["reasons"][0]
    assert (tmp_path / "run" / "report.md").is_file()


OOM_SIDES = '''
import torch
def inputs(params, gen, device):
    return (torch.randn(64, generator=gen, device=device),)
def base(x):
    return x * 2
def oom_always(x):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
def oom_when_profiled(x):
    if torch._C._autograd._profiler_enabled():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    return x + x
'''


@pytest.mark.parametrize("candidate,where", [("oom_always", "trial 0"), ("oom_when_profiled", "while profiled")])
def test_a_candidate_out_of_memory_is_a_memory_finding_in_the_trials_and_in_the_profiled_call(tmp_path, candidate,
                                                                                              where):
    """Out of memory is an outcome (issue 19), in a trial and in the identity check's profiled
    call alike (KernelBench 38_L1Norm on the H100 ran out there, and it read as a plain crash)."""
    from expkit.bench.sides.in_process import preflight_in_process
    from expkit.manifest.settings import OracleSettings
    from sides import load_sides

    lm, k = load_sides(tmp_path, "oomsides", OOM_SIDES,
                       f"name: t\nclaim: {{speedup: 1.0}}\nbaseline: oomsides:base\ncandidate: oomsides:{candidate}\n"
                       "inputs: {factory: oomsides:inputs}\ncases: [{name: c, params: {}}]\n"
                       "expect: {forbid_baseline: false}\n")
    res = preflight_in_process(lm, k.base, getattr(k, candidate), k.inputs, run_seed=1,
                               settings=OracleSettings(), device="cpu", identity=True)
    bad = [f for f in res.findings if not f.ok and f.invalidates]
    assert res.invalid and [f.check for f in bad] == ["memory"], [(f.check, f.message) for f in bad]
    assert "the candidate ran out of memory" in bad[0].message and "Tried to allocate 8.00 GiB" in bad[0].message
    assert where in bad[0].message


LIVE = '''
import gc
import torch
SEEN = {"base": [], "cand": []}
def inputs(params, gen, device):
    return (torch.rand(params["n"], generator=gen, device=device),)
def _live(n):
    return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.numel() == n)
def base(x):
    SEEN["base"].append(_live(x.numel()))
    return x * 2
def cand(x):
    SEEN["cand"].append(_live(x.numel()))
    return x + x
'''


@pytest.mark.parametrize("hold", [False, True])
def test_no_trial_holds_the_previous_trials_tensors_unless_the_plan_says_so(tmp_path, hold):
    """Regression (KernelBench's 6 GiB ReLU on the H100, result.json's memory.measured): the
    candidate's worker never heard the plan's ``hold_previous: false`` and kept the previous
    trial's inputs and outputs (30 GiB allocated in a trial call where one call's is 12), and
    the baseline's judge kept its pristine inputs and expected output into the next trial.
    Both sides share this process here, so every tensor of the case's size alive at each
    call is counted: with nothing held, no trial sees more than the first one does."""
    from expkit.bench.sides.memory_plan import MemoryPlan
    from expkit.bench.sides.pair import Pair
    from expkit.bench.sides.side import BASELINE, CANDIDATE
    from expkit.manifest.settings import DefenceSettings, OracleSettings, Settings
    from sides import load_sides

    lm, k = load_sides(tmp_path, "live", LIVE, "name: t\nclaim: {speedup: 1.0}\nbaseline: live:base\n"
                       "candidate: live:cand\ninputs: {factory: live:inputs}\ncases: [{name: c, params: {n: 12347}}]\n")
    settings = Settings(oracle=OracleSettings(trials=4), defences=DefenceSettings(isolate=False))
    pair = Pair(lm, settings, "cpu", sides={BASELINE: (k.base, k.inputs), CANDIDATE: (k.cand, k.inputs)})
    try:
        pair.adopt_memory(MemoryPlan(1, hold_previous=hold))
        res = pair.preflight(1, identity=False)
    finally:
        pair.close(None)
    assert not res.invalid
    cand, base = k.SEEN["cand"], k.SEEN["base"]
    assert len(cand) >= 4 and len(base) >= 4
    first = max(cand[:2]), max(base[:2])  # trial 0 (baseline first) and trial 1 (candidate first)
    if hold:  # the previous trial's input and output are alive in every later trial's call
        assert max(cand[2:]) == first[0] + 2, cand
    else:
        assert max(cand[2:]) <= first[0] and max(base[2:]) <= first[1], (cand, base)


def test_while_timed_each_side_is_projected_to_hold_a_committed_output_beside_the_one_being_made():
    """The parent picks the calls to re-check after a block's reply (bench/defences/commit.py), so
    each side holds one committed output while its next call makes another: a 1 GiB
    elementwise case peaked at 4.1 GiB a worker on an H200 before a request carried one
    block where one output fills the commitments (tests/gpu/test_gpu_memory.py)."""
    from expkit.bench.sides.memory_plan import _project

    gib = 1 << 30
    p = {"input_bytes": gib, "output_bytes": gib, "peak_bytes": 2 * gib}
    assert _project(p, 1, False, False, False, False) == 2 * (gib + 2 * gib)
