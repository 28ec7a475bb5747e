"""End-to-end truth: Amdahl's prediction, the disagreement rule, the evidence, the CPU story."""

from __future__ import annotations

import itertools
import json
import random
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from expkit.bench.sides.in_process import collect_in_process as collect
from expkit.workload.collect import WallTimer, isolation_findings
from expkit.workload.compile import compile_stats, dynamo_snapshot
from expkit.verdict.pipeline import end_to_end as apply
from expkit.workload.assess import EndToEndResult, judge
from expkit.workload.prediction import (AS_PREDICTED, BELOW, LARGER_GAIN, MICRO_WIN_E2E_LOSS, SMALLER_GAIN, Interval,
                                        amdahl, compare, predict)
from expkit.workload.profile import RUN_LABEL, ProfileSummary, grown, summarize_trace
from expkit.workload.utilisation import observe_utilisation, open_utilisation
from expkit.manifest import load
from expkit.report.workload import report_context
from expkit.manifest.settings import MeasureSettings, Settings
from expkit.verdict import INCONCLUSIVE, INVALID, REFUTED, SUPPORTED, CaseVerdict, Verdict

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "manifests" / "examples" / "cpu"


# --- Amdahl ----------------------------------------------------------------------------


@pytest.mark.parametrize("f, s, want", [(0.0, 5.0, 1.0), (1.0, 5.0, 5.0), (0.5, 2.0, 4 / 3), (0.25, 0.5, 0.8),
                                        (0.9, 10.0, 1 / 0.19)])
def test_amdahl_known_values(f, s, want):
    assert amdahl(f, s) == pytest.approx(want)


@pytest.mark.parametrize("f, s", [(-0.1, 2.0), (1.1, 2.0), (0.5, 0.0), (0.5, -1.0)])
def test_amdahl_rejects_impossible_inputs(f, s):
    with pytest.raises(ValueError):
        amdahl(f, s)


def test_prediction_interval_holds_every_point_of_the_box():
    rng = random.Random(8)
    for _ in range(200):
        fl, fh = sorted(rng.uniform(0, 1) for _ in range(2))
        sl, sh = sorted(rng.uniform(0.2, 6) for _ in range(2))
        p = predict(Interval((sl + sh) / 2, sl, sh), Interval((fl + fh) / 2, fl, fh))
        for f, s in itertools.product([fl, (fl + fh) / 2, fh], [sl, (sl + sh) / 2, sh]):
            assert p.speedup.low - 1e-12 <= amdahl(f, s) <= p.speedup.high + 1e-12
        # and the bounds are attained (not a loose box)
        corners = [amdahl(f, s) for f in (fl, fh) for s in (sl, sh)]
        assert p.speedup.low == pytest.approx(min(corners)) and p.speedup.high == pytest.approx(max(corners))


def test_unknown_share_assumes_any_share():
    p = predict(Interval(3.0, 2.5, 3.5), None)
    assert p.share_source == "unknown"
    assert p.speedup.low == pytest.approx(1.0) and p.speedup.high == pytest.approx(3.5)


# --- the disagreement rule, on synthetic figures -----------------------------------------


def _pred(micro=(2.6, 2.5, 2.7), share=(0.4, 0.35, 0.45)):
    return predict(Interval(*micro), Interval(*share))


def test_micro_win_end_to_end_loss():
    a = compare(_pred(), Interval(0.6, 0.58, 0.63))
    assert a.label == MICRO_WIN_E2E_LOSS and a.short
    assert "0.6x" in a.detail and "predicts" in a.detail


def test_gain_smaller_than_predicted():
    p = _pred()
    assert p.speedup.low > 1.2
    a = compare(p, Interval(1.1, 1.05, 1.15))
    assert a.label == SMALLER_GAIN and a.short


def test_overlapping_intervals_are_not_a_disagreement_even_with_the_point_below():
    p = _pred()
    e = Interval(p.speedup.low - 0.01, p.speedup.low - 0.05, p.speedup.low + 0.01)
    assert compare(p, e).label == AS_PREDICTED


def test_gain_larger_than_predicted():
    p = _pred()
    a = compare(p, Interval(p.speedup.high + 0.5, p.speedup.high + 0.1, p.speedup.high + 1))
    assert a.label == LARGER_GAIN and not a.short


def test_a_loss_after_a_micro_result_that_is_not_a_win_is_only_below_prediction():
    # The micro interval includes 1: no "micro win" to speak of.
    p = _pred(micro=(1.05, 0.95, 1.15), share=(0.9, 0.9, 0.9))
    a = compare(p, Interval(0.5, 0.45, 0.55))
    assert a.label == BELOW and a.short


def test_a_loss_whose_interval_reaches_one_is_not_called_a_loss():
    a = compare(_pred(), Interval(0.8, 0.6, 1.02))
    assert a.label == BELOW


# --- the verdict -------------------------------------------------------------------------


def _result(word, agreement=None):
    judged = CaseVerdict("decode", word, 1.0, 0.9, f"workload interval says {word}")
    return EndToEndResult("decode", "c", judged=judged, agreement=agreement)


def test_a_refuted_workload_refutes_a_supported_kernel_and_says_so_first():
    v = Verdict(SUPPORTED, ("speedup [case c]: fine",))
    out = apply(v, _result(REFUTED, compare(_pred(), Interval(0.6, 0.58, 0.63))))
    assert out.verdict == REFUTED
    assert out.reasons[0].startswith("end_to_end [workload decode] (micro win, end-to-end loss)")
    assert "speedup [case c]: fine" in out.reasons


@pytest.mark.parametrize("micro, workload, want", [
    (SUPPORTED, SUPPORTED, SUPPORTED), (SUPPORTED, INCONCLUSIVE, INCONCLUSIVE), (INCONCLUSIVE, REFUTED, REFUTED),
    (REFUTED, SUPPORTED, REFUTED), (INVALID, REFUTED, INVALID)])
def test_verdicts_combine_worst_first(micro, workload, want):
    assert apply(Verdict(micro, ("r",)), _result(workload)).verdict == want


def test_without_a_claim_on_the_workload_the_verdict_is_untouched():
    v = Verdict(SUPPORTED, ("r",))
    assert apply(v, EndToEndResult("decode", "c")) is v


# --- evidence: profiles ------------------------------------------------------------------


def _ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _cpu_trace():
    """Two runs of two steps; ``attn`` (with a nested ``aten::mm``) is the replaced op."""
    ev = []
    for r, t0 in enumerate((0.0, 1000.0)):
        ev.append(_ev("user_annotation", f"{RUN_LABEL}#{r}", t0, 800))
        ev.append(_ev("cpu_op", "my::attn", t0 + 10, 200))
        ev.append(_ev("cpu_op", "aten::mm", t0 + 20, 100))  # nested in attn: counted once
        ev.append(_ev("cpu_op", "aten::add", t0 + 300, 50))
        ev.append(_ev("cpu_op", "my::attn", t0 + 400, 200))
        ev.append(_ev("cpu_op", "aten::_local_scalar_dense", t0 + 700, 20))
    return {"traceEvents": ev}


def test_cpu_profile_share_counts_the_outermost_matching_op_once():
    p = summarize_trace(_cpu_trace(), steps=2, replaced=["my::attn", "aten::mm"])
    assert p.runs == 2 and p.wall_us == (800.0, 800.0)
    assert p.shares == pytest.approx((0.5, 0.5))  # 400 of 800 us, the nested mm not added again
    assert p.share == Interval(0.5, 0.5, 0.5)
    assert p.ops_per_step == pytest.approx(5 / 2) and p.scalar_reads_per_step == pytest.approx(0.5)
    assert p.kernels_per_step is None and p.syncs_per_step is None and p.gpu_busy is None
    # self time: attn 2 x (200 - 100 for the nested mm's first call) ... per run
    assert p.op_self_us["my::attn"] == pytest.approx(100 + 200)
    assert p.op_self_us["aten::mm"] == pytest.approx(100)


def test_no_matching_pattern_leaves_the_share_unknown():
    p = summarize_trace(_cpu_trace(), steps=2, replaced=["nothing::here"])
    assert p.share is None and p.matched == ()


def _gpu_trace(graph: bool):
    ev = [_ev("user_annotation", f"{RUN_LABEL}#0", 0, 100)]
    ev.append(_ev("cpu_op", "aten::_scaled_dot_product_efficient_attention", 5, 20, **{"External id": 7}))
    ev.append(_ev("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1, **{"External id": 7}))
    ev.append(_ev("cpu_op", "aten::add", 30, 10, **{"External id": 8}))
    ev.append(_ev("cuda_runtime", "cudaGraphLaunch" if graph else "cudaLaunchKernel", 32, 5, correlation=2,
                  **{"External id": 8}))
    ev.append(_ev("cuda_runtime", "cudaStreamSynchronize", 50, 40))
    ev.append(_ev("kernel", "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(Params)", 20, 30, tid=7, correlation=1,
                  stream=7, device=0))
    ev.append(_ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 60, 30, tid=7, correlation=2,
                  stream=7, device=0))
    ev.append(_ev("kernel", "triton_poi_fused_add_0", 95, 25, tid=7, correlation=2, stream=7, device=0))
    return {"traceEvents": ev}


def test_gpu_profile_counts_launches_syncs_graphs_and_busy_time():
    p = summarize_trace(_gpu_trace(graph=True), steps=1, replaced=["aten::_scaled_dot_product*"])
    assert p.wall_us == (120.0,)  # the last kernel ends after the span
    assert p.kernels_per_step == 3 and p.launches_per_step == 1 and p.graph_launches_per_step == 1
    assert p.syncs_per_step == 1
    assert p.gpu_busy == pytest.approx((30 + 30 + 25) / 120)
    assert p.shares == pytest.approx((30 / 120,))  # the kernel its op launched
    assert p.kernel_us["fmha_cutlassF_bf16_aligned_64x64_rf_sm80"] == 30


def test_gpu_share_by_kernel_name_where_no_op_is_recorded():
    p = summarize_trace(_gpu_trace(graph=True), steps=1, replaced=["re:fmha"])
    assert p.shares == pytest.approx((30 / 120,)) and p.matched == ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80",)


def test_grown_lists_what_the_candidate_added():
    base = summarize_trace(_gpu_trace(graph=True), steps=1)
    cand = summarize_trace(_gpu_trace(graph=False), steps=1)
    slower = ProfileSummary(**{**cand.__dict__, "op_self_us": {**cand.op_self_us, "aten::copy_": 500.0},
                                   "op_counts": {**cand.op_counts, "aten::copy_": 2.0}})
    rows = grown(base, slower)
    assert rows[0].name == "aten::copy_" and rows[0].grew_us == 500 and rows[0].candidate_per_step == 2


# --- evidence: the compiler --------------------------------------------------------------


def test_compile_stats_are_differences_of_snapshots():
    m_old = SimpleNamespace(recompile_reason=None, cudagraph_skip_reason=None)
    m_new = SimpleNamespace(recompile_reason="0/1: ___check_obj_id(self.attn)", cudagraph_skip_reason="mutated inputs")
    before = {"frames": {"total": 3, "ok": 3}, "stats": {"unique_graphs": 2}, "graph_break": {"old": 4},
              "metrics": [m_old]}
    first = {"frames": {"total": 6, "ok": 4}, "stats": {"unique_graphs": 4}}
    after = {"frames": {"total": 7, "ok": 5}, "stats": {"unique_graphs": 5}, "inductor": {"cudagraph_skips": 1},
             "graph_break": {"old": 4, "Skip calling `torch.compiler.disable()`d function\n  Explanation: ...": 16},
             "unimplemented": {"x\n\n*** While handling this graph break, another graph break occurred: ***\n\n"
                               "graph break in loop\n  Explanation: ... falling back to eager": 1},
             "metrics": [m_old, m_new]}
    c = compile_stats(before, first, after, 1.5)
    assert c.compiled and c.frames == 4 and c.frames_compiled == 2 and c.graphs == 3
    assert c.graphs_after_first_call == 1 and c.graph_breaks == 16
    assert c.graph_break_reasons == (("Skip calling `torch.compiler.disable()`d function", 16),)
    assert c.fallbacks == 1 and "graph break in loop" in c.fallback_reasons[0][0]
    assert "runs eagerly" in c.fallback_reasons[0][0]
    assert c.recompiles == 1 and c.cudagraph_skips == 1 and c.cudagraph_skip_reasons == ("mutated inputs",)


def test_nothing_compiled_reads_as_not_compiled():
    c = compile_stats({}, {}, {}, 0.01)
    assert not c.compiled and c.graph_breaks == 0 and c.fallbacks == 0


def _summary(ops_per_step, counts):
    return ProfileSummary(runs=1, steps=1, wall_us=(1.0,), shares=(), matched=(), ops_per_step=ops_per_step,
                              scalar_reads_per_step=0.0, op_counts=counts)


def test_isolation_passes_a_baseline_that_runs_as_before():
    before = _summary(100, {"Torch-Compiled Region: 0/0": 1, "aten::mm": 4})
    found = isolation_findings(before, _summary(102, dict(before.op_counts)), "w")
    assert [f.ok for f in found] == [True]


def test_isolation_catches_a_baseline_that_lost_its_compiled_frame():
    before = _summary(100, {"Torch-Compiled Region: 0/0": 1})
    after = _summary(160, {"Torch-Compiled Region: 1/0": 4, "Torch-Compiled Region: 2/0": 4})
    (f,) = isolation_findings(before, after, "w")
    assert not f.ok and f.invalidates and "0/0" in f.message and "1/0" in f.message and "own copy" in f.message


# --- evidence: NVML utilisation ----------------------------------------------------------


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = FakeNVMLError

    def __init__(self, values, fail_init=False):
        self.values, self.fail_init, self.shutdowns = list(values), fail_init, 0

    def nvmlInit(self):
        if self.fail_init:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        return ("gpu", u)

    def nvmlDeviceGetUtilizationRates(self, h):
        v = self.values.pop(0) if self.values else 50.0
        return SimpleNamespace(gpu=v, memory=0)


def test_utilisation_is_sampled_while_the_workload_runs():
    nv = FakeNvml([90.0, 80.0, 70.0])
    sampler = open_utilisation(0, nvml=nv, period_s=1000.0)  # the thread samples once, then stop() once
    calls = []
    clock = iter(range(100)).__next__
    u = observe_utilisation(lambda: calls.append(1), 3, sampler, clock=lambda: float(clock()))
    sampler.close()
    assert u.samples == 2 and u.mean == pytest.approx(85.0) and u.low == 80.0 and u.high == 90.0
    assert u.runs == len(calls) >= 1 and u.missing is None and nv.shutdowns == 1


def test_no_nvml_gives_the_reason_not_a_number():
    reason = open_utilisation(0, nvml=FakeNvml([], fail_init=True))
    assert isinstance(reason, str) and "Driver Not Loaded" in reason
    u = observe_utilisation(lambda: None, 1.0, reason)
    assert u.mean is None and "Driver Not Loaded" in u.missing


def test_wall_timer_drains_the_device_around_the_block():
    ticks = iter([0.0, 2.0]).__next__
    syncs = []
    t = WallTimer(sync=lambda: syncs.append(1), clock=ticks)
    assert t.sample(lambda: None, 4) == pytest.approx(0.5) and len(syncs) == 2


# --- collect and judge on a tiny workload (no profiler noise in the figures checked) ------


def _tiny_manifest(tmp_path: Path, candidate: str, *, must_run=("tiny::fast",)) -> Path:
    (tmp_path / "tiny_e2e.py").write_text(textwrap.dedent('''
        import torch
        from expkit import Workload

        @torch.library.custom_op("tiny::slow", mutates_args=())
        def slow(x: torch.Tensor) -> torch.Tensor:
            return (x * 2).sum(-1)

        @torch.library.custom_op("tiny::fast", mutates_args=())
        def fast(x: torch.Tensor) -> torch.Tensor:
            return x.sum(-1) * 2

        @torch.library.custom_op("tiny::wrong", mutates_args=())
        def wrong(x: torch.Tensor) -> torch.Tensor:
            return x.sum(-1) * 3

        def inputs(params, gen, device):
            return (torch.randn(int(params["n"]), 8, generator=gen, device=device),)

        def workload(op, side, params, gen, device):
            x = torch.randn(16, 8, generator=gen, device=device)
            def run():
                y = x
                for _ in range(int(params["steps"])):
                    y = op(y.repeat(1, 8)[:, :8]).unsqueeze(-1).repeat(1, 8) / 16
                return y
            return Workload(run, steps=int(params["steps"]), step="step")
    '''))
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(f'''
        name: tiny
        claim: {{speedup: 1.0}}
        baseline: tiny_e2e:slow
        candidate: tiny_e2e:{candidate}
        inputs: {{factory: tiny_e2e:inputs}}
        cases: [{{name: c, params: {{n: 4}}}}]
        expect: {{must_run: {list(must_run)}}}
        end_to_end:
          name: loop
          workload: tiny_e2e:workload
          params: {{steps: 3}}
          replaced: ["tiny::slow"]
          claim: 1.0
          profile_runs: 2
          oracles: [{{kind: allclose, rtol: 1.0e-5, atol: 1.0e-6}}]
    '''))
    return path


FAST = Settings(measure=MeasureSettings(warmup_seconds=0.0, min_rounds=3, min_seconds=0.0, max_seconds=0.05,
                                        max_rounds=6, target_ci=1.0, min_block_seconds=0.0005, bootstrap=200))


def test_collect_then_judge_a_tiny_workload(tmp_path):
    lm = load(_tiny_manifest(tmp_path, "fast"))
    sys.modules.pop("tiny_e2e", None)
    from expkit.manifest.refs import resolve

    base = resolve("tiny_e2e:slow", lm.folder, manifest_path=lm.path, key="baseline")
    cand = resolve("tiny_e2e:fast", lm.folder, manifest_path=lm.path, key="candidate")
    got = collect(lm, base, cand, device="cpu", settings=FAST, run_seed=1)
    json.dumps(got)  # crosses the worker's channel as JSON
    assert got["skipped"] is None and got["samples"]["baseline"] and got["samples"]["candidate"]
    assert got["share"] is not None and 0 < got["share"]["value"] <= 1
    checks = {f["check"]: f["ok"] for f in got["findings"]}
    assert checks == {"end_to_end:oracle:allclose": True, "end_to_end:identity": True, "end_to_end:isolation": True}
    assert got["evidence"]["baseline"]["profile"]["matched"] == ["tiny::slow"]
    assert got["evidence"]["candidate"]["steps"] == 3
    micro = SimpleNamespace(speedup=2.0, ci_low=1.8, ci_high=2.2)
    r = judge(lm, got, {"c": micro}, FAST, seed=1)
    assert r.estimate is not None and r.prediction is not None and r.agreement is not None
    assert r.prediction.share_source == "profile" and r.judged is not None
    block = r.to_dict()
    assert block["measured"]["speedup"] == r.estimate.speedup and block["prediction"]["micro"]["value"] == 2.0
    ctx = report_context({"end_to_end": block, "measured": {"confidence": 0.95}})
    assert ctx["rows"] and ctx["why"]


def test_a_workload_with_the_wrong_answer_is_invalid_and_not_timed(tmp_path):
    lm = load(_tiny_manifest(tmp_path, "wrong", must_run=("tiny::wrong",)))
    sys.modules.pop("tiny_e2e", None)
    from expkit.manifest.refs import resolve

    base = resolve("tiny_e2e:slow", lm.folder, manifest_path=lm.path, key="baseline")
    cand = resolve("tiny_e2e:wrong", lm.folder, manifest_path=lm.path, key="candidate")
    got = collect(lm, base, cand, device="cpu", settings=FAST, run_seed=1)
    assert got["skipped"] and "samples" not in got
    bad = [f for f in got["findings"] if not f["ok"]]
    assert bad and bad[0]["check"] == "end_to_end:oracle:allclose" and bad[0]["severity"] == "invalid"
    assert judge(lm, got, {}, FAST).estimate is None


def test_a_workload_that_never_runs_the_candidate_is_invalid(tmp_path):
    lm = load(_tiny_manifest(tmp_path, "fast", must_run=("tiny::nowhere",)))
    sys.modules.pop("tiny_e2e", None)
    from expkit.manifest.refs import resolve

    base = resolve("tiny_e2e:slow", lm.folder, manifest_path=lm.path, key="baseline")
    cand = resolve("tiny_e2e:fast", lm.folder, manifest_path=lm.path, key="candidate")
    got = collect(lm, base, cand, device="cpu", settings=FAST, run_seed=1)
    ident = [f for f in got["findings"] if f["check"] == "end_to_end:identity"]
    assert ident and not ident[0]["ok"] and "tiny::nowhere" in ident[0]["message"] and got["skipped"]


def test_a_skipped_block_is_recorded_with_its_reason(tmp_path):
    lm = load(_tiny_manifest(tmp_path, "fast"))
    r = judge(lm, None, {}, FAST, skip="the run is already invalid (oracle)")
    assert r.to_dict()["skipped"] == "the run is already invalid (oracle)" and not r.refutes


def test_manifest_rejects_an_unknown_case_for_the_prediction(tmp_path):
    path = _tiny_manifest(tmp_path, "fast")
    path.write_text(path.read_text().replace("name: loop", "name: loop\n  case: nope"))
    from expkit.core.errors import ManifestError

    with pytest.raises(ManifestError, match="end_to_end.case"):
        load(path)


# --- the GPU example's decoder, on the CPU, with a stand-in for the Triton kernel --------


@pytest.mark.slow
def test_gpu_decoder_structure_on_cpu_shows_the_compiled_path_breaking():
    """The GPU story's workload code runs on a CPU (Dynamo's eager backend, no Triton): the
    baseline compiles whole, the opaque candidate makes Dynamo give up the decoder's frame."""
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "manifests" / "examples" / "gpu"))
    try:
        import decoder
    finally:
        sys.path.pop(0)

    def sdpa(q, k, v, n):
        mask = torch.arange(k.shape[2]) < n
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.view(1, 1, 1, -1))

    @torch.compiler.disable
    def opaque(q, k, v, n):
        return F.scaled_dot_product_attention(q, k[:, :, :int(n)], v[:, :, :int(n)])

    params = dict(layers=2, heads=2, head_dim=8, vocab=64, max_len=32, batch=1, prompt_len=8, new_tokens=3,
                  dtype="float32", compile_mode="default", compile_backend="eager")
    stats, outs = {}, {}
    for side, op in (("baseline", sdpa), ("candidate", opaque)):
        before = dynamo_snapshot()
        wl = decoder.decoder(op, side, params, torch.Generator().manual_seed(0), "cpu")
        wl.run()
        first = dynamo_snapshot()
        outs[side] = wl.run()
        stats[side] = compile_stats(before, first, dynamo_snapshot(), 0.0)
    assert outs["baseline"].shape == (3, 1, 64)
    torch.testing.assert_close(outs["candidate"], outs["baseline"], rtol=1e-4, atol=1e-5)
    assert stats["baseline"].graph_breaks == 0 and stats["baseline"].fallbacks == 0
    assert stats["candidate"].graph_breaks + stats["candidate"].fallbacks > 0


# --- the CPU example, end to end ---------------------------------------------------------


@pytest.mark.slow
def test_cpu_example_micro_win_end_to_end_loss(tmp_path):
    from expkit.runner import run_manifest

    out = tmp_path / "run"
    outcome = run_manifest(CPU / "micro-win-macro-loss.yaml", ["measure=quick", "oracle.trials=1"], out)
    result = json.loads((out / "result.json").read_text())
    block = result["end_to_end"]
    assert block["skipped"] is None, block["skipped"]
    micro = result["measured"]["overall"]
    assert micro["speedup"] > 1.0, micro
    assert block["measured"]["speedup"] < 1.0, block["measured"]
    assert block["prediction"]["speedup"]["value"] > 1.0 and block["prediction"]["share_source"] == "profile"
    # the evidence names the cause: the conversion copies the candidate adds
    assert any(g["name"] == "aten::copy_" for g in block["grown"][:2]), block["grown"]
    assert outcome.verdict != "supported"
    report = (out / "report.md").read_text()
    assert "## End to end" in report and "Workload, predicted by Amdahl's law" in report
