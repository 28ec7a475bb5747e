"""The recheck of a block's last call when the memory plan keeps no pristine copy.

Without a copy, the recheck holds a call's output against its inputs as they are after
the block, so the call must be the last one: every call before it salts an input set
in place. A timer may call more often than asked (the GPU timer re-runs a block whose
hold the host outran); on the H100 that made the Liger layer-norm training-step audit
fail its recheck by up to 1.6 on one element, an honest candidate called invalid."""

from __future__ import annotations

from pathlib import Path

import torch

from expkit.bench.side import CANDIDATE, LAST_CALL, SideBench
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


def kept_call(recheck: int, extra: int):
    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=chain, factory=make_inputs, local=True)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=1, keep_pristine=False)
    cs = side.case
    cs.timer = RetryingTimer(cs.before, cs.after, extra)
    cs.begin(recheck)
    cs.timer.sample(cs.call, 8)
    out, inputs = cs.kept
    return out, chain(*inputs)


def test_the_last_call_is_kept_however_often_the_timer_called():
    out, again = kept_call(LAST_CALL, extra=3)
    assert torch.equal(out, again)


def test_call_number_minus_one_is_not_the_last_when_a_block_is_re_run():
    # What the pair asked for before: call 7 of 8. Three more calls salted its inputs.
    out, again = kept_call(7, extra=3)
    assert not torch.equal(out, again)
