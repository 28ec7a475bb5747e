"""One side of a claim in a process of its own: its code, its inputs, its calls.

The baseline and the candidate never share a Python interpreter while either is
checked or measured (issue #13): a candidate that monkeypatches a torch function only
the baseline uses, or changes a process-wide setting and restores it, would otherwise
make the baseline alone pay. Each side is a :class:`SideBench` in its own worker
process (:mod:`.worker`); the parent's :class:`~.pair.Pair` drives the two. A
:class:`SideBench` imports only its own callable and the input factory (and, for the
baseline, the manifest's custom oracles, since the baseline's process judges).

Construction takes the snapshots (process-wide settings, the functions the harness
relies on, live threads) *before* the side's code is imported, then compares: a
module that patches something at import is reported there.

Everything a request returns is plain data; tensors leave the process only as
descriptors (:mod:`..processes.transport`). The requests, by phase:

* preflight: ``trial_inputs`` (build a trial's inputs and export them),
  ``trial_call`` (run the side once under poisoned allocations with the thread,
  setting and tamper checks, export the outputs), ``rerun`` (again without poison,
  for the ``uninitialised`` diagnosis), ``profile`` (one warm call under the profiler,
  the trace as plain data);
* measurement: ``prepare`` (input sets for a case, by the memory plan), ``warm_up``,
  ``call``, ``block`` (one timed block, fresh inputs before each call, every output
  committed), ``reveal`` (a call the parent picked, exported), ``finish_case``;
* memory: ``probe`` (one plain call: input, output and peak bytes, free memory).

The baseline's process also answers the judging requests of :mod:`.judge`.

Size: the requests and :class:`CaseState`, whose hooks are the timed path of ``block``
(fresh inputs, the commitments outside the timed spans), read best together."""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch

from ...checks import oracles, preflight, recording
from ...checks.activity import THREADS, ResourceAccount, activity, new_activity, set_cpu_threads, settle, thread_count
from ...checks.code_digest import imported_code
from ...checks.global_state import GLOBAL_STATE, snapshot_state, state_changes
from ...core.findings import WARNING, Finding
from ...manifest import kernelbench
from ...manifest.refs import resolve
from ...manifest.settings import Settings
from ...timing import factory as timer_factory
from ...timing.warm_up import warm_up
from ..defences.block_checks import after_block, opening, started_at_import
from ..defences.clock import CLOCK
from ..defences.commit import COMMIT_BYTES, COPY_BYTES, Commitments, nbytes
from ..defences.fallback import ExceptionWitness, candidate_files
from ..defences.fresh import FreshInputs
from .ledger import Laps
from .memory_plan import measure_call
from ..defences.tamper import TAMPER, FunctionSnapshot, torch_callables_for
from ..processes.traces import trace_to_dict
from ..processes.transport import Exporter, collect_sent, structure

BASELINE, CANDIDATE = "baseline", "candidate"
ROLES = (BASELINE, CANDIDATE)

#: Every expkit module a side may use (relative to ``expkit``), imported before the
#: snapshot so that it covers them.
HARNESS_MODULES = ("checks.preflight", "timing.measure", "checks.oracles", "timing.timer", "timing.cuda_timer",
                   "checks.expectations", "checks.trace", "checks.recording", "checks.identity", "checks.digest",
                   "bench.processes.channel", "bench.sides.worker", "bench.processes.transport", "bench.sides.judge",
                   "bench.processes.environment", "manifest.refs", "workload.collect", "checks.model_oracles",
                   "timing.kernel_time", "timing.cupti_recorder", "timing.per_call", "timing.factory")


def _harness_modules() -> None:
    for name in HARNESS_MODULES:
        try:
            importlib.import_module(f"expkit.{name}")
        except Exception:
            pass


def resolve_side(lm: Any, role: str) -> Tuple[Callable[..., Any], Callable[..., Any], Dict[int, Any]]:
    """This side's callable, the input factory and (baseline only) the custom oracles.

    Only what this side needs is imported: the candidate's module is never imported in
    the baseline's process, and the custom oracles (which judge) never in the
    candidate's."""
    m = lm.manifest
    if getattr(m, "kernelbench", None) is not None:  # a KernelBench-style pair brings both sides and inputs
        fn, factory = kernelbench.side(lm, role)
    else:
        fn = resolve(getattr(m, role), lm.folder, manifest_path=lm.path, key=role)
        factory = resolve(m.inputs.factory, lm.folder, manifest_path=lm.path, key="inputs.factory")
    custom: Dict[int, Any] = {}
    if role == BASELINE:
        custom = {i: resolve(o.function, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].function")
                  for i, o in enumerate(m.oracles) if o.function}
    return fn, factory, custom


class SideBench:
    """One side's code and the defences around it (see the module docstring)."""

    def __init__(self, lm: Any, settings: Settings, device: str, role: str,
                 fn: Optional[Callable[..., Any]] = None, factory: Optional[Callable[..., Any]] = None,
                 local: bool = False) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        lap = Laps()  # seconds of each start-up step (the run's ``start`` stage), for the evidence
        self.startup = lap.seconds
        _harness_modules()
        lap("harness imports")
        self.lm, self.settings, self.device, self.role = lm, settings, device, role
        self.resources: Optional[Dict[str, Any]] = None  # the last case's ResourceAccount.summary()
        self.defended = settings.defences.enabled
        set_cpu_threads(settings.measure.cpu_threads)  # before the snapshot: the harness's own choice
        self.state0 = snapshot_state()
        self.funcs0 = FunctionSnapshot.take()
        self._told: set = set()
        self.activity0 = activity()
        lap("snapshots")
        before = set(sys.modules)
        if fn is None:
            self.fn, self.factory, self.custom = resolve_side(lm, role)
        else:  # given (tests, the in-process pair): nothing of this side's to import
            self.fn, self.custom = fn, {}
            self.factory = factory if factory is not None else _no_factory
        #: What the import ran, by module, for the parent to compare across processes (.code_digest).
        self.code = imported_code(before) if self.defended else {}
        lap("code under test")
        self.session_findings: List[Finding] = ((self.tamper_findings(f"once the {role}'s code was imported", None)
                                                 + started_at_import(role, self.activity0)) if self.defended else [])
        lap("tamper check")
        self.exporter = Exporter(local=local)
        self.witness: Any = self.fn
        if self.defended and role == CANDIDATE:
            self.witness = ExceptionWitness(self.fn, candidate_files(self.fn, lm.folder))
        self.trial_inputs_: Tuple[Any, ...] = ()
        self.trial_outputs: Any = None
        self.held: Tuple[Any, ...] = ()  # the previous trial's tensors, kept alive on purpose
        #: The memory plan's ``hold_previous`` (the ``configure`` request): False drops them instead.
        self.hold_previous = True
        self.case: Optional[CaseState] = None

    # -- the defences every phase shares -------------------------------------------------
    def tamper_findings(self, when: str, case: Optional[str], *, hot_only: bool = False) -> List[Finding]:
        """Changes since the snapshot that no earlier checkpoint has reported (each once)."""
        out = []
        replaced = [r for r in self.funcs0.changed(hot_only=hot_only, gpu=self.device != "cpu") if r not in self._told]
        self._told.update(replaced)
        if replaced:
            out.append(Finding(TAMPER, False, f"functions the harness relies on were changed {when}: "
                               + ", ".join(replaced[:6]) + (f" and {len(replaced) - 6} more" if len(replaced) > 6
                                                            else ""), case))
        now = snapshot_state(cuda=not (hot_only and self.device == "cpu"))  # a CPU block: CUDA's settings aside
        changes = [c for c in state_changes({k: self.state0.get(k) for k in now}, now) if c not in self._told]
        self._told.update(changes)
        if changes:
            out.append(Finding(GLOBAL_STATE, False, f"settings that change numerics or speed were changed {when}: "
                               + "; ".join(changes[:6]), case))
        return out

    def inputs(self, params: Mapping[str, Any], seed: int, threads: Optional[int] = None) -> Tuple[Any, ...]:
        return preflight.build_inputs(self.factory, params, seed, self.device, self.lm, threads)

    # -- preflight ------------------------------------------------------------------------
    def trial_inputs(self, params: Mapping[str, Any], seed: int, probe: bool = False) -> Dict[str, Any]:
        """Build one trial's inputs; the candidate's are placed in shared memory and exported.
        ``probe``: the value probe's inputs; ``probed`` in the reply lists the inputs it shifted."""
        self._drop_trial(keep_held=self.hold_previous)
        args = self.inputs(params, seed)
        probed = preflight.signed_probe(args) if probe else ()
        if self.role == CANDIDATE:
            args = tuple(self.exporter.place(a) for a in args)
        self.trial_inputs_ = args
        descs = self.exporter.export([a for a in args if _is_tensor(a)])
        return {"inputs": descs, "positions": [i for i, a in enumerate(args) if _is_tensor(a)],
                "probed": list(probed)}

    def trial_call(self, case: str, params: Mapping[str, Any], poison: bool = True) -> Dict[str, Any]:
        """One checked call on this trial's inputs; the outputs exported for the judge."""
        found: List[Finding] = []
        args = self.trial_inputs_ if self.role == CANDIDATE else preflight.clone_inputs(self.trial_inputs_)
        state_before = snapshot_state() if self.defended else None
        active_before = activity() if self.defended else None
        try:
            with (preflight.poisoned_allocations() if poison and self.defended else contextlib.nullcontext()):
                out = preflight.call_synced(self.witness if self.role == CANDIDATE else self.fn, args)
        except Exception as e:
            oom = isinstance(e, torch.OutOfMemoryError)
            return {"raised": preflight.short_error(e), "oom": oom, "findings": []}
        if self.defended:
            grown = new_activity(active_before, activity())
            if grown:
                found.append(Finding(THREADS, False, grown, case))
            changed = state_changes(state_before, snapshot_state())
            if changed:
                found.append(Finding(GLOBAL_STATE, False, f"the {self.role} changed settings that change numerics "
                                     "or speed: " + "; ".join(changed[:6]), case))
        defect = preflight.output_defects(out, self.trial_inputs_, (), harness=self.held)
        if defect:
            return {"defect": defect, "findings": [asdict(f) for f in found]}
        outs = oracles.flatten(out)
        self.held = tuple(t for t in self.trial_inputs_ if _is_tensor(t)) + tuple(outs)
        self.trial_outputs = out
        return {"outputs": self.exporter.export(list(outs)), "structure": structure(out),
                "findings": [asdict(f) for f in found]}

    def rerun(self) -> Dict[str, Any]:
        """The call again on a copy of the trial's inputs, without poison, after handing the
        allocator zero-filled blocks of the sizes in play (see ``uninitialised``)."""
        outs = oracles.flatten(self.trial_outputs) if self.trial_outputs is not None else ()
        sizes = {(tuple(t.shape), t.dtype, t.device) for t in list(outs) + [v for v in self.trial_inputs_ if _is_tensor(v)]}
        scrub = [torch.zeros(shape, dtype=dtype, device=dev) for shape, dtype, dev in sizes for _ in range(8)]
        del scrub
        try:
            again = preflight.call_synced(self.fn, preflight.clone_inputs(self.trial_inputs_))
        except Exception as e:
            return {"raised": preflight.short_error(e)}
        self._rerun = again  # kept alive until the next trial
        return {"outputs": self.exporter.export(list(oracles.flatten(again)))}

    def profile(self, case: str, params: Mapping[str, Any], seed: int) -> Dict[str, Any]:
        """One call under the profiler, after one unprofiled call on other inputs of the
        same shapes (steady state: a compiled side has compiled, lazy initialisation is
        done, and nothing the profiled call computes was computed before), as a
        plain-data trace."""
        fn = self.witness if self.role == CANDIDATE else self.fn
        warm = self.inputs(params, preflight.derive_seed(seed, "warm"))  # a factory's error is the user's
        try:
            preflight.call_synced(self.fn, warm)
            del warm  # before the profiled call's inputs: one input set at a time
            args = self.inputs(params, seed)
            _, tr = recording.capture(lambda: fn(*args), cuda=self.device == "cuda")
            del args
        except Exception as e:
            return {"raised": f"{type(e).__name__}: {e}", "oom": isinstance(e, torch.OutOfMemoryError)}
        swallowed = list(getattr(self.witness, "swallowed", ())) if self.role == CANDIDATE else []
        return {"trace": trace_to_dict(tr), "swallowed": [list(s) for s in swallowed]}

    def watch(self, op_names: List[str]) -> Dict[str, Any]:
        """Watch the torch callables the baseline's trace reaches, as they are now (where the
        two sides share a process, a patch of one the baseline alone uses is then tamper)."""
        odd = self.funcs0.watch(torch_callables_for(op_names))
        found = [Finding(TAMPER, False, "torch callables the baseline uses are not torch's own: " + ", ".join(odd[:6]))
                 ] if odd and self.defended else []
        return {"findings": [asdict(f) for f in found]}

    def end_trials(self) -> None:
        """Drop the trials' tensors (inputs, outputs, those held, a rerun's): a case's profiled
        calls come next, and with them alive KernelBench's 38_L1Norm (8 GiB of input) ran
        the candidate out of memory in its profiled call on an H100."""
        self._drop_trial(keep_held=False)

    def _drop_trial(self, keep_held: bool) -> None:
        """Drop the last trial's tensors (the previous trial's too unless ``keep_held``); the
        judge has closed its views by now (its ``release`` comes before the next trial's
        inputs), and :func:`..processes.transport.collect_sent` frees any a late close left behind."""
        self.exporter.release_exports()
        self.trial_outputs, self.trial_inputs_, self._rerun = None, (), None
        if not keep_held:
            self.held = ()
        collect_sent()

    def finish_preflight(self) -> Dict[str, Any]:
        self.end_trials()
        found = self.tamper_findings("during the preflight", None) if self.defended else []
        return {"findings": [asdict(f) for f in found]}

    # -- memory ---------------------------------------------------------------------------
    def probe(self, params: Mapping[str, Any], seed: int) -> Dict[str, Any]:
        """One plain call of this side: bytes of inputs and outputs, peak bytes above the
        starting point, and the device's free memory (the memory plan's evidence)."""
        return measure_call(self.fn, lambda: self.inputs(params, seed), self.device)

    # -- measurement ----------------------------------------------------------------------
    def prepare(self, case_name: str, run_seed: int, salt_seed: int, input_sets: int,
                keep_pristine: bool = True, share: int = 1) -> Dict[str, Any]:
        """A case's input sets and timer; ``share``: the workers building theirs at once, each
        on its share of the host cores (an OpenMP pool per worker on every core made the
        pools wait on each other: evidence/README.md)."""
        case = next(c for c in self.lm.manifest.cases if c.name == case_name)
        self.exporter.release_exports()
        if self.case is not None:  # a case that raised before it finished
            self.case.close()
        threads = max(1, (os.cpu_count() or 1) // max(1, share))
        self.case = CaseState(self, case, run_seed, salt_seed, input_sets, keep_pristine, threads)
        info = getattr(self.case.timer, "info", None)
        return {"method": self.case.timer.method, "info": info.to_dict() if info is not None else None}

    def warm_up(self, seconds: float) -> None:
        assert self.case is not None
        self.case.warm_up(seconds)

    def call(self) -> None:
        assert self.case is not None
        self.case.begin(None)
        self.case.before()
        self.case.call()

    def block(self, number: int, seed: Optional[int] = None, *, opened: Any = None,
              last: bool = True) -> Dict[str, Any]:
        """Time ``number`` calls and check them; plain data for the parent. Blocks of one
        request share ``opened`` (:func:`..defences.block_checks.opening`), checked after the ``last``.

        The reply's parts of the worker's wall time: ``timed`` (the calls), ``untimed``
        (fresh inputs, per-call checks), ``checks`` (before and after), ``commit`` (the
        digests), held by the parent against its clock (:mod:`..defences.outside_clock`). ``seed``:
        the block's salts, from the parent. ``commits``: every call's output digested as
        the block ends (:mod:`..defences.commit`), before the parent picks which to check."""
        cs = self.case
        assert cs is not None
        w0 = CLOCK()
        before, children = opened or opening(self.defended) or (None, frozenset())
        cs.begin(seed)
        if cs.account is not None:
            settle(cs.account.reader)  # the harness's own OpenMP pool, still spinning, is not the side's
            cs.account.begin()
        s0 = CLOCK()
        per_call = cs.timer.sample(cs.call, number)
        s1 = CLOCK()
        used = cs.account.end() if cs.account is not None else None
        timed = per_call * number
        untimed = getattr(cs.timer, "last_untimed", None)
        if untimed is None:  # the GPU timer: host and device overlap, so the rest of the span is untimed
            untimed = max(0.0, (s1 - s0) - timed)
        found: List[Finding] = [used] if used is not None else []
        c0 = CLOCK()
        if cs.committing:
            cs.commit_pending()
        commits = cs.commits.seal() if cs.committing and cs.commits is not None else None
        s2 = CLOCK()
        if commits is not None and self.role != CANDIDATE:
            # Only the candidate's calls are ever picked: the baseline's worker digests its
            # outputs like the candidate's (the parent's clock calibrates on that work) and
            # drops them now, outside the digests' time as the candidate's drop is, so a
            # recheck's rebuilt inputs and reference are all it holds beside its input sets.
            cs.commits.open_request()
        if before is not None and last:  # threads, child processes, tamper (.block_checks)
            found += after_block(self, cs, before, children)
        fresh = cs.unreported(found)
        c1 = CLOCK()
        timing = getattr(cs.timer, "last_timing", None)
        return {"seconds": per_call, "number": number, "timed": timed, "untimed": untimed, "recheck": 0.0,
                "checks": (s0 - w0) + (c1 - s1) - (s2 - c0), "commit": s2 - c0, "wall": c1 - w0, "t0": w0, "t1": c1,
                "method": cs.timer.method, "timing": timing.to_dict() if timing is not None else None,
                "findings": [asdict(f) for f in fresh], "commits": commits,
                "launches": getattr(cs.timer, "last_launches", None)}

    def reveal(self, block: int, call: int) -> Dict[str, Any]:
        """Export a call of the last block request, which the parent picked after the reply."""
        cs = self.case
        out = cs.commits.output(block, call) if cs is not None and cs.commits is not None else None
        defect = preflight.output_defects(out, cs.args, (), harness=cs.owned()) if out is not None else None
        if out is None or defect:
            return {"missing": True} if out is None else {"defect": defect}
        return {"outputs": self.exporter.export(list(oracles.flatten(out))), "structure": structure(out)}

    def release(self) -> None:
        """Drop exported copies (the judge has closed its views); keep placed input sets."""
        keep: List[Any] = []
        if self.case is not None:
            keep = [t for s in self.case.fresh.sets for t in s]
        self.exporter.release_exports(keep=keep)
        collect_sent()

    def finish_case(self) -> List[Finding]:
        cs, self.case = self.case, None
        if cs is not None:
            cs.close()
        self.exporter.release_exports()
        name, acct = (cs.name, cs.account) if cs is not None else (None, None)
        left = acct.close() if acct is not None else None  # a measurement whose blocks never filled a pool
        self.resources = acct.summary() if acct is not None else None
        out = [left] if left is not None else []
        out += self.tamper_findings(f"while the {self.role}'s case was measured", name) if self.defended else []
        if cs is not None and not cs.fresh.salted:
            out.append(Finding("fresh-inputs", False, "no floating-point input with two or more elements to salt: timed"
                               " calls repeat their inputs (use defences.fresh=regenerate)", name, severity=WARNING))
        return out

    def close(self) -> None:
        if self.case is not None:
            self.case.close()
        self.exporter.release()


class CaseState:
    """One case's timing state inside a side: input sets, timer, recheck slot."""

    def __init__(self, bench: SideBench, case: Any, run_seed: int, salt_seed: int, input_sets: int,
                 keep_pristine: bool, threads: Optional[int] = None) -> None:
        self.bench, self.name = bench, case.name
        device, s = bench.device, bench.settings
        # Both sides time on inputs in the same kind of memory, made by the factory: the
        # candidate's placed in shared memory (to export a kept call's with no copy) made
        # honest KernelBench matmuls on CPU read 0.4-0.8x, three times slower in some
        # processes (evidence/README.md).
        sets = [bench.inputs(case.params, preflight.derive_seed(run_seed, case.name, "time", k), threads)
                for k in range(max(1, input_sets))]
        rebuild = lambda seed: bench.inputs(case.params, seed)  # noqa: E731
        mode = s.defences.fresh if bench.defended else "off"
        self.fresh = FreshInputs(sets, mode, random.Random(salt_seed), rebuild)
        self.args: Tuple[Any, ...] = ()
        self.calls = self._threads = 0
        #: Each call's output, committed (:mod:`..defences.commit`); one a block where the memory plan has no room.
        self.commits = Commitments(COMMIT_BYTES if keep_pristine else 0) if bench.defended else None
        self.committing = False
        self.pending: Optional[Tuple[int, Any]] = None  # (call, output) not yet committed
        self.leaked_threads = 0
        self.pool_threads = 0  # new parked threads excused so far (block_checks.after_block)
        self.reported: set = set()
        self.timer = timer_factory.side_timer(device, s.measure, self.before, self.after, CLOCK)
        self.per_call_hook = bool(self.timer.per_call_hook)
        # The cores a block's calls use (CPU): more than measure.cpu_threads allows is a
        # count of cores, not a speedup (checks.activity.ResourceAccount).
        self.account = (ResourceAccount(s.measure.cpu_threads, role=bench.role, case=case.name)
                        if device == "cpu" and bench.defended else None)
        self.call = self._make_call()

    def inputs_of(self, seed: int, call: int) -> Tuple[Any, ...]:
        """The inputs call ``call`` of a block seeded ``seed`` had in either side's worker
        (same sets, salts from ``seed``: :meth:`..defences.fresh.FreshInputs.replay`); a warm GPU
        block refreshes once, so every call had the first's."""
        f = self.fresh
        takes = call + 1 if self.per_call_hook else 1
        return FreshInputs.replay(f.sets if f.mode != "regenerate" else f._initial, f.mode, seed, takes,
                                  undo=f._log if f.mode == "salt" else (), rebuild=f.rebuild)

    def close(self) -> None:
        """The timer's blocks are done (its recorder keeps CUPTI's kinds enabled until then)."""
        getattr(self.timer, "close", lambda: None)()

    def unreported(self, found: List[Finding]) -> List[Finding]:
        """Those of ``found`` this case has not reported yet (one per check and subject)."""
        key = lambda f: (f.check, f.message.split(":")[0])  # noqa: E731
        fresh = [f for f in found if key(f) not in self.reported]
        self.reported.update(map(key, found))
        return fresh

    def owned(self) -> List[Any]:
        return [t for s in self.fresh.sets for t in s if _is_tensor(t)]

    def before(self) -> None:
        # On the GPU there is no hook after a call: a thread the previous call left
        # running shows up here, before the next one.
        n = thread_count()
        if n > self._threads:
            self.leaked_threads += 1
        self._threads = n
        self.commit_pending()
        self.args, _ = self.fresh.take()

    def after(self) -> None:
        self.commit_pending()
        n = thread_count()
        self.leaked_threads += n > self._threads
        self._threads = n  # counted once: the next call's before() starts from this count

    def commit_pending(self) -> None:
        """The last call's output to the commitments, outside the timed span (a CPU call's
        ``after``; a cold GPU call's is the next one's ``before``, or the block's end). A small
        CPU output is copied (:data:`..defences.commit.COPY_BYTES`): held, each call of a tiny op wrote
        to memory no earlier call freed, and processes disagreed by more than their noise. A
        large one, and any on a GPU (a copy there is a kernel between calls), is held."""
        if self.pending is not None:
            call, out = self.pending
            self.pending = None
            self.commits.keep(call, out, copy=self.bench.device == "cpu" and nbytes(out) <= COPY_BYTES)  # type: ignore[union-attr]

    def _make_call(self) -> Callable[[], None]:
        fn = self.bench.fn

        def call() -> None:
            out = fn(*self.args)
            if self.committing:  # inside the timed span: a reference only (a warm GPU block's is kept)
                if self.per_call_hook:
                    self.pending = (self.calls, out)
                else:
                    self.commits.keep(self.calls, out, copy=False)  # type: ignore[union-attr]
            self.calls += 1
        return call

    def begin(self, seed: Optional[int]) -> None:
        """A block's start, its salts from ``seed`` (None: warm-up and plain calls, not committed)."""
        self.calls, self.pending = 0, None
        self.committing = seed is not None and self.commits is not None
        if seed is not None:
            self.fresh.begin_block(seed)
            if self.commits is not None:
                self.commits.open_block()
        self._threads = thread_count()
        if not self.per_call_hook:
            self.args, _ = self.fresh.take()

    def warm_up(self, seconds: float) -> None:
        self.begin(None)

        def one() -> None:
            self.before()
            self.call()
            self.after()

        warm_up(one, seconds, CLOCK)  # each call drained: nothing left queued for the first block
        rehearse = getattr(self.timer, "rehearse", None)
        if rehearse is not None:  # the GPU timer's first-use costs, paid outside every timed block
            rehearse(self.call)  # not committing (begin(None)): its output is not kept
        self.leaked_threads = 0  # a pool started lazily starts here in a replicate's fresh process


def _is_tensor(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def _no_factory(params: Mapping[str, Any], generator: Any, device: str) -> Tuple[Any, ...]:
    raise RuntimeError("this side was given without an input factory")
