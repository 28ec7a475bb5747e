"""The recheck of a timed call: which calls are committed, and what judging it costs.

Every call of a block is committed (its output kept and digested when the block ends),
the parent picks afterwards, and the baseline's worker rebuilds the picked call's inputs
from the block's seed. A timer may call more often than asked (the GPU timer re-runs a
block whose hold the host outran); on the H100 an older scheme that named the kept call
by its number made the Liger layer-norm training-step audit fail its recheck by up to
1.6 on one element, an honest candidate called invalid: every call the timer made is
committed, and each is judged on its own inputs."""

from __future__ import annotations

from pathlib import Path

import torch

from expkit.bench.defences.commit import sampled_digests
from expkit.bench.sides.side import CANDIDATE, SideBench
from expkit.manifest.settings import Settings
from expkit.manifest.spec import load

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


def chain(a, b, c):
    return (a @ b) @ c


def make_inputs(params, gen, device):
    return tuple(torch.randn(64, 64, generator=gen) for _ in range(3))


class RetryingTimer:
    """Calls the per-call hook and ``fn`` ``extra`` times more than asked, as a re-run block does."""

    per_call_hook = True
    method = "fake"
    info = None

    def __init__(self, before, after, extra: int) -> None:
        self.before, self.after, self.extra = before, after, extra

    def sample(self, fn, number: int) -> float:
        for _ in range(number + self.extra):
            self.before()
            fn()
            self.after()
        return 1e-3


def committed_block(extra: int, number: int = 8, seed: int = 11, input_sets: int = 2):
    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=chain, factory=make_inputs, local=True)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=input_sets, keep_pristine=True)
    cs = side.case
    cs.timer = RetryingTimer(cs.before, cs.after, extra)
    cs.commits.open_request()
    cs.begin(seed)
    cs.timer.sample(cs.call, number)
    return cs, cs.commits.seal()


def test_every_call_the_timer_made_is_committed_and_judged_on_its_own_inputs():
    cs, sealed = committed_block(extra=3)
    kept = [i for i, _ in sealed["kept"]]
    assert sealed["calls"] == sealed["held"] == 11 and kept == list(range(11))
    for i, digest in sealed["kept"]:
        out = cs.commits.output(0, i)
        assert sampled_digests([(out,)], sealed["seed"]) == [digest]
        assert torch.equal(out, chain(*cs.inputs_of(11, i)))  # the inputs rebuilt from the block's seed
    # and not on another call's: the salts differ from call to call
    i = kept[-1]
    assert not torch.equal(cs.commits.output(0, i), chain(*cs.inputs_of(11, i - 1)))


def test_the_inputs_a_call_was_given_are_rebuilt_in_another_process_from_the_seed_alone():
    """The baseline's worker rebuilds them from its own sets (salted by its own blocks)."""
    cs, _ = committed_block(extra=0)
    lm = load(MANIFEST)
    other = SideBench(lm, Settings(), "cpu", "baseline", fn=chain, factory=make_inputs, local=True)
    other.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=99, input_sets=2)
    other.case.begin(5)
    other.case.timer.sample(other.case.call, 7)  # its own block, its own salts
    for i in (0, 3, 7):
        assert all(torch.equal(a, b) for a, b in zip(other.case.inputs_of(11, i), cs.inputs_of(11, i)))


def test_past_its_capacity_a_block_keeps_a_reservoir_and_says_how_many_calls_it_could_not():
    from expkit.bench.defences.commit import Commitments

    c = Commitments(capacity=3 * 64 * 64 * 4)
    c.open_request()
    c.open_block()
    for i in range(20):
        c.keep(i, torch.full((64, 64), float(i)))
    sealed = c.seal()
    kept = [i for i, _ in sealed["kept"]]
    assert sealed["calls"] == 20 and len(kept) == 3 and len(set(kept)) == 3
    assert all(c.output(0, i)[0, 0].item() == i for i in kept)


# -- a recheck whose output is the baseline's own bits needs no float64 reference -----------

def test_same_bits_compares_every_bit_chunk_by_chunk(monkeypatch):
    from expkit.checks import chunks, oracles

    monkeypatch.setattr(chunks, "HOST_CHUNK", 7)
    x = torch.randn(50)
    assert oracles.same_bits(x, x.clone()) and oracles.same_bits((x, x), [x.clone(), x.clone()])
    y = x.clone()
    y[49] = torch.nextafter(y[49], torch.tensor(float("inf")))  # one ulp, in the last chunk
    assert not oracles.same_bits(x, y)
    assert not oracles.same_bits(torch.zeros(3), -torch.zeros(3))  # -0.0 is other bits
    nan = torch.full((3,), float("nan"))
    assert oracles.same_bits(nan, nan.clone())
    assert not oracles.same_bits(x, x.double()) and not oracles.same_bits(x, x[:49])
    assert not oracles.same_bits(x, (x, x))


def judged_recheck(candidate_output, oracle_kind: str):
    from expkit.bench.sides.judge import Judge
    from expkit.bench.sides.side import BASELINE
    from expkit.bench.processes.transport import Exporter
    from expkit.manifest.spec import Oracle

    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", BASELINE, fn=chain, factory=make_inputs, local=True)
    judge = Judge(side)
    judge.per_call = [(0, Oracle(kind=oracle_kind))]
    made = []
    real = judge._reference64
    judge._reference64 = lambda pristine: made.append(1) or real(pristine)
    inputs = make_inputs({}, torch.Generator().manual_seed(3), "cpu")
    ex = Exporter(local=True)
    out = candidate_output(inputs)
    kept = {"outputs": ex.export([out]), "digest": sampled_digests([(out,)], 7)[0], "seed": 7}
    return judge.recheck("c", kept, list(inputs)), made


def test_a_recheck_of_the_baselines_own_bits_makes_no_reference():
    found, made = judged_recheck(lambda i: chain(*i), "rounding")
    assert found == [] and made == []


def test_a_recheck_of_other_bits_still_judges_against_the_reference():
    found, made = judged_recheck(lambda i: chain(*i) * 1.001, "rounding")
    assert made and found and "recheck" in found[0].check
    found, made = judged_recheck(lambda i: chain(*i), "relative_error")  # not passed by definition
    assert made and found == []


def test_later_trials_of_the_baselines_own_bits_make_no_reference():
    from expkit.bench.sides.judge import Judge
    from expkit.bench.sides.side import BASELINE
    from expkit.manifest.spec import Oracle

    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", BASELINE, fn=chain, factory=make_inputs, local=True)
    judge = Judge(side)
    judge.per_call = [(0, Oracle(kind="rounding"))]
    made = []
    real = judge._reference64
    judge._reference64 = lambda pristine: made.append(1) or real(pristine)
    judge.pristine = make_inputs({}, torch.Generator().manual_seed(3), "cpu")
    judge.expected = chain(*judge.pristine)
    same = (chain(*judge.pristine),)
    assert judge._judge("c", 1, True, True, same, "", [])["findings"] == [] and made == []
    assert judge._judge("c", 0, True, True, same, "", [])["findings"] and made  # trial 0 reports its figures
    made.clear()
    other = (chain(*judge.pristine) * 1.001,)
    assert any(not f["ok"] for f in judge._judge("c", 1, True, True, other, "", [])["findings"]) and made


def test_the_two_sides_are_profiled_one_after_the_other():
    """Each side's profile builds input sets of its own; run at once, the two sides' peaks
    add up (KernelBench's HuberLoss, 8 GiB of inputs, ran out of memory on an H100). The
    candidate's reply comes back before the baseline is asked."""
    from expkit.bench.sides.pair import Pair
    from expkit.bench.sides.preflight_run import profiled_identity
    from expkit.bench.processes.traces import trace_to_dict
    from expkit.checks.preflight import CaseRun
    from expkit.checks.trace import Trace
    from expkit.manifest import load

    log = []
    empty = {"trace": trace_to_dict(Trace((), (), (), {"activities": ("cpu",)})), "swallowed": []}

    class Side:
        def __init__(self, name):
            self.name, self.pending = name, None

        def send(self, op, **payload):
            assert self.pending is None
            log.append(("ask", self.name, op))
            self.pending = op

        def receive(self):
            log.append(("got", self.name, self.pending))
            self.pending = None
            return empty

        def request(self, op, **payload):
            self.send(op, **payload)
            return self.receive()

    pair = Pair.__new__(Pair)
    pair.lm = load(Path(__file__).parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml")
    pair.isolated, pair.c, pair.b, pair.gpu = True, Side("candidate"), Side("baseline"), None
    profiled_identity(pair, CaseRun("c", {}, True), 1)
    profiles = [e for e in log if e[2] == "profile"]
    assert profiles == [("ask", "candidate", "profile"), ("got", "candidate", "profile"),
                        ("ask", "baseline", "profile"), ("got", "baseline", "profile")]


def test_both_sides_time_on_inputs_in_the_memory_the_factory_made():
    """Regression (KernelBench 7 and 9 on CPU, 2026-11-24): the candidate's timed input sets
    were placed in shared memory, the baseline's were not, and honest matmuls read 0.4-0.8x,
    three times slower in some processes. No timed input set is in an exported segment now;
    a picked call's output is copied out when the recheck exports it."""
    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=chain, factory=make_inputs, local=False)
    try:
        side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=2, keep_pristine=False)
        sets = side.case.fresh.sets
        assert len(sets) == 2 and all(side.exporter._segment_of(t) is None for s in sets for t in s)
        side.case.timer = RetryingTimer(side.case.before, side.case.after, 0)
        side.case.commits.open_request()
        side.case.begin(3)
        side.case.timer.sample(side.case.call, 4)
        sealed = side.case.commits.seal()
        (i, _), = sealed["kept"]  # no room for copies: a reservoir of one
        shown = side.reveal(0, i)
        assert len(shown["outputs"]) == 1 and all(side.exporter._segment_of(t) is None for s in sets for t in s)
    finally:
        side.exporter.release_exports()
        side.close()


def test_a_picked_output_changed_after_its_block_is_not_the_committed_one():
    found, _ = judged_recheck_changed()
    assert [f.check for f in found] == ["recheck"] and "committed" in found[0].message


def judged_recheck_changed():
    from expkit.bench.sides.judge import Judge
    from expkit.bench.sides.side import BASELINE
    from expkit.bench.processes.transport import Exporter

    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", BASELINE, fn=chain, factory=make_inputs, local=True)
    judge = Judge(side)
    inputs = make_inputs({}, torch.Generator().manual_seed(3), "cpu")
    partial = chain(*inputs)
    partial[::3] = 0.0  # what the call returned, committed
    digest = sampled_digests([(partial,)], 7)[0]
    fixed = chain(*inputs)  # made right once the pick was known
    kept = {"outputs": Exporter(local=True).export([fixed]), "digest": digest, "seed": 7}
    return judge.recheck("c", kept, list(inputs)), None


def test_a_cpu_recheck_goes_wide_only_after_a_baseline_call_that_took_long(monkeypatch):
    """A recheck's oracles use every host core only where the baseline's call took at
    least ``WIDE_RECHECK_S`` or its tensors hold ``WIDE_RECHECK_BYTES``: below both the
    pool's spin afterwards, which the next timed block waits out, costs more than the
    cores save. The verdict is the same either way."""
    from expkit.bench.sides import judge as jm
    from expkit.checks import preflight as pf

    seen = []
    real = pf.harness_threads
    monkeypatch.setattr(pf, "harness_threads", lambda wide=True: seen.append(wide) or real(wide))
    monkeypatch.setattr(jm, "WIDE_RECHECK_S", 10.0)
    narrow, made_narrow = judged_recheck(lambda i: chain(*i) * 1.001, "rounding")
    monkeypatch.setattr(jm, "WIDE_RECHECK_S", 0.0)
    wide, made_wide = judged_recheck(lambda i: chain(*i) * 1.001, "rounding")
    monkeypatch.setattr(jm, "WIDE_RECHECK_S", 10.0)
    monkeypatch.setattr(jm, "WIDE_RECHECK_BYTES", 1)  # a quick call on much data: the upcast is the work
    judged_recheck(lambda i: chain(*i) * 1.001, "rounding")
    assert seen == [False, True, True]
    assert made_narrow and made_wide and [f.check for f in narrow] == [f.check for f in wide] == ["recheck"]


def test_narrow_harness_work_keeps_the_threads_and_marks_no_wide_work(monkeypatch):
    from expkit.checks import preflight as pf

    marks = []
    monkeypatch.setattr(pf, "wide_work_ended", lambda: marks.append(1))
    before = torch.get_num_threads()
    with pf.harness_threads(wide=False):
        assert torch.get_num_threads() == before
    assert marks == []
    with pf.harness_threads():
        pass
    assert marks == [1] and torch.get_num_threads() == before


# --- what a failed recheck says (issue 51) ------------------------------------------------------------------------


def test_a_recheck_just_past_its_allowance_names_the_figures_and_numeric_error_first():
    """An honest fp32 sum missed the rounding oracle's allowance by 2% on a timed call's
    inputs, and the message asked "a replay, a skipped computation or drift?"."""
    from expkit.bench.sides.judge import recheck_message
    from expkit.core.findings import Finding

    f = Finding("oracle:rounding", False, "rounding rule (...): the candidate's worst error 3.99e-05 ...", "c",
                figure=3.99e-05, threshold=3.93e-05)
    msg = recheck_message(f)
    assert msg.startswith("a timed call's output against the baseline's on that call's inputs fails oracle:rounding "
                          "after timing (error 3.99e-05, allowed 3.93e-05: 1.02x the allowance)")
    assert msg.index("most likely numeric") < msg.index("replayed result") and msg.endswith(f.message)


def test_a_recheck_far_past_its_allowance_still_reads_as_a_replay():
    from expkit.bench.sides.judge import recheck_message
    from expkit.core.findings import Finding

    far = recheck_message(Finding("oracle:rounding", False, "m", "c", figure=0.8, threshold=4e-05))
    assert "(error 0.8, allowed 4e-05: 2e+04x the allowance)" in far and "numeric" not in far
    assert "a replayed result, a skipped computation or drift rather than rounding" in far
    bare = recheck_message(Finding("oracle:allclose", False, "m", "c"))
    assert "fails oracle:allclose after timing, having passed the preflight (a replayed result" in bare
