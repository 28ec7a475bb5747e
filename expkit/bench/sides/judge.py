"""The baseline's process judges: the candidate's outputs, seen through shared memory.

Correctness is decided in the process that holds the baseline and nothing of the
candidate's, so no candidate code can touch the reference it is held against (a
candidate that patches a torch function the baseline uses changes only its own
process). The candidate's worker exports its inputs and outputs (:mod:`..processes.transport`);
:class:`Judge` opens them and:

* digests the candidate's inputs with a key that never leaves this process
  (:mod:`expkit.checks.digest`): the same digest as the baseline's own pristine
  inputs before the candidate's first call (the two sides' factories gave the same
  inputs) and after every call (the candidate did not write to its inputs);
* computes the expected output (the baseline on the pristine inputs, or a copy of
  them, per the memory plan) and applies the manifest's oracles, with the null-output
  calibration on the first trial of each declared case;
* diagnoses a failure made only of NaN where the baseline is finite (``uninitialised``),
  with the candidate's unpoisoned re-run;
* re-checks a timed call the parent picked after its block: its output must be the one
  committed when the block ended, and is judged on the inputs this worker rebuilds for it.

Every method returns plain data.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import asdict, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ...checks import oracles, preflight
from ...checks.chunks import flat_chunks, max_abs, max_abs_diff
from ...checks.digest import digest
from ...checks.rounding import ReferenceLadder
from ...core.findings import WARNING, Finding
from ...manifest.spec import PER_CALL_ORACLE_KINDS, Oracle
from .side import SideBench
from ..defences.commit import sampled_digests
from ..processes.transport import Importer

RECHECK = "recheck"
INPUTS = "inputs"
#: On the CPU a recheck's oracles (a float64 reference of the baseline's work) use every
#: host core only where the baseline's call (with the copy of its inputs), on the timed
#: blocks' threads, took at least this long. Below it the cores save less than the
#: OpenMP pool's spin after them, which the baseline's next timed block waited out:
#: 2.1-6.6 ms after each of 23 rechecks of honest-win on the 2-core machine
#: (evidence/README.md).
WIDE_RECHECK_S = 0.005
#: ... or where its inputs and outputs hold at least this many bytes: the float64 reference
#: upcasts every input, work that grows with the data whatever the baseline's call took.
#: Upcasting 32 MiB and comparing it took 97.6 ms on one core and 58.7 ms on two
#: (evidence/README.md): at 4 MiB the second core saves about
#: what the pool's spin costs.
WIDE_RECHECK_BYTES = 4 << 20


def _tensors(values: Sequence[Any]) -> List[Any]:
    return [v for v in values if isinstance(v, torch.Tensor)]


class Judge:
    """Judging state in the baseline's worker (see the module docstring)."""

    def __init__(self, side: SideBench, clone_for_baseline: bool = True, reference: str = "device") -> None:
        self.side = side
        self.key = secrets.token_bytes(32)
        self.importer = Importer()
        self.per_call = [(i, o) for i, o in enumerate(side.lm.manifest.oracles) if o.kind in PER_CALL_ORACLE_KINDS]
        self.clone_for_baseline = clone_for_baseline
        self.reference = reference
        self.pristine: Tuple[Any, ...] = ()
        self.pristine_digest = ""
        self.expected: Any = None
        self._ref: Any = None  # (id of the pristine inputs, their reference, computed once)
        #: Cases whose declared oracle was found vacuous and the rounding rule took over
        #: (:meth:`_instead`): their later trials and rechecks are judged by it too.
        self.rounding_for: set = set()
        #: On the value probe's trial: the inputs it shifted (:meth:`_probe_beyond_tolerance`).
        self.probed: Tuple[int, ...] = ()

    def configure(self, clone_for_baseline: bool, reference: str) -> None:
        self.clone_for_baseline, self.reference = clone_for_baseline, reference

    def _reference64(self, pristine: Sequence[Any]) -> Any:
        """The oracle's float64 reference: the baseline on its inputs upcast, on the device or,
        where the memory plan says so, on the host (:class:`~expkit.checks.rounding.ReferenceLadder`
        says which rung ran, and what happens when none can)."""
        key = id(pristine)
        if self._ref is None or self._ref[0] != key:
            self._ref = (key, _Once(ReferenceLadder(self.side.fn, pristine, host=self.reference == "host")))
        return self._ref[1]

    # -- a trial ------------------------------------------------------------------------
    def expect(self, case: str, params: Mapping[str, Any], seed: int, first: bool,
               cand_inputs: Optional[Sequence[Mapping[str, Any]]] = None, probe: bool = False) -> Dict[str, Any]:
        """Build the trial's pristine inputs and the baseline's output on them (``probe``:
        the value probe's inputs; ``probed`` in the reply lists the inputs it shifted, and
        ``finite`` says whether every output is)."""
        self.release()  # a trial that ended without its release holds nothing into this one
        self.pristine = self.side.inputs(params, seed)
        probed = preflight.signed_probe(self.pristine) if probe else ()
        self.probed = tuple(probed)
        with preflight.harness_threads():
            self.pristine_digest = digest(_tensors(self.pristine), self.key)
        found: List[Finding] = []
        if first and cand_inputs is not None:
            theirs = self.importer.open(cand_inputs)
            if digest(theirs, self.key) != self.pristine_digest:
                found.append(Finding(INPUTS, False, "the two sides' input factory gave different inputs for the same "
                                     "seed: inputs.factory must draw every random value from the generator it is "
                                     "given (or the sides cannot be compared)", case))
        args = preflight.clone_inputs(self.pristine) if self.clone_for_baseline else self.pristine
        try:
            self.expected = preflight.call_synced(self.side.fn, args)
        except Exception as e:
            return {"raised": preflight.short_error(e), "oom": isinstance(e, torch.OutOfMemoryError),
                    "findings": [asdict(f) for f in found], "probed": list(probed)}
        if not self.clone_for_baseline and digest(_tensors(self.pristine), self.key) != self.pristine_digest:
            found.append(Finding("baseline", False, "the baseline wrote to its inputs, so it cannot run on the "
                                 "pristine inputs without a copy: give the run more memory or fix the baseline", case))
        reply: Dict[str, Any] = {"findings": [asdict(f) for f in found], "probed": list(probed)}
        if probe:
            reply["finite"] = all(math.isfinite(max_abs(t)) for t in oracles.flatten(self.expected)
                                  if t.is_floating_point() or t.is_complex())
        return reply

    def judge(self, case: str, params: Mapping[str, Any], trial: int, declared: bool, calibrate: bool,
              inputs: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]], where: str) -> Dict[str, Any]:
        """The candidate's trial outputs against the expected ones."""
        theirs = self.importer.open(inputs)
        found: List[Finding] = []
        if digest(theirs, self.key) != self.pristine_digest:
            found.append(Finding(INPUTS, False, "candidate modified its inputs in place", case))
        actual = tuple(self.importer.open(outputs))
        with preflight.harness_threads():
            return self._judge(case, trial, declared, calibrate, actual, where, found)

    def _judge(self, case: str, trial: int, declared: bool, calibrate: bool, actual: Tuple[Any, ...], where: str,
               found: List[Finding]) -> Dict[str, Any]:
        poison_only = False
        reported: List[Finding] = []
        specs = self._oracles(case)
        if trial > 0 and _own_bits(specs, self.expected, actual):
            # Later trials report nothing that passes, and calibrate nothing: the baseline's
            # own bits pass these oracles by definition, with no float64 reference to make.
            return {"findings": [asdict(f) for f in found], "poison_only": False}
        for idx, spec in specs:
            custom = self.side.custom.get(idx)
            f = oracles.check_outputs(spec, self.expected, actual, case=case, inputs=self.pristine,
                                      reference64=self._reference64(self.pristine), custom=custom)
            f = (self._probe_beyond_tolerance(spec, f, actual, case) or f) if not f.ok else f
            if not f.invalidates and not f.ok:  # the rounding rule passed the probe a tolerance could not judge
                found.append(replace(f, message=f"{f.message} {where}"))
                continue
            if not f.ok:
                poison_only = poison_only or _poison_only(spec, self.expected, actual, self.pristine, custom)
                found.append(Finding(f.check, False, f"{f.message} {where}", case, figure=f.figure,
                                     threshold=f.threshold))
            elif trial == 0 and declared:
                reported.append(f)
            if trial == 0 and declared and calibrate and f.ok and idx >= 0:
                found.extend(self._instead(c, spec, actual, case) for c in
                             _calibrate(spec, self.expected, self.pristine, case, custom,
                                        self._reference64(self.pristine)))
        return {"findings": [asdict(f) for f in found + reported], "poison_only": poison_only}

    def _probe_beyond_tolerance(self, spec: Any, failed: Finding, actual: Tuple[Any, ...],
                                case: str) -> Optional[Finding]:
        """On the value probe, a declared ``allclose`` the baseline itself cannot meet there.

        The probe shifts inputs the factory drew all >= 0 to both signs, where sums cancel:
        outputs near zero keep the rounding error of the large partial sums behind them,
        and a fixed ``atol`` chosen for the declared inputs (KernelBench's 1e-4 on a
        cumulative sum of 32,768 values) can be tighter than the baseline's own distance
        from its float64 reference. Two honest summation orders then fail it against each
        other. Where the baseline fails the declared tolerance against that reference, the
        tolerance cannot judge these inputs, and the rounding rule (whose allowance follows
        the size of what was summed) judges the probe: a candidate it passes gets a warning,
        one it fails keeps the failure, with the rule's word added. None where the failure
        stands as it is (not the probe, another kind of oracle, or a tolerance the baseline
        meets)."""
        if not self.probed or spec.kind != "allclose":
            return None
        ref = self._reference64(self.pristine)
        try:
            if oracles.within_tolerance(spec, self.expected, ref()):
                return None
        except Exception:  # no float64 reference here: the declared oracle's word stands
            return None
        r = self._rounding_rule(actual, case)
        if not r.ok:
            return replace(failed, message=f"{failed.message}; nor does the candidate pass the rounding rule "
                           f"there: {r.message}")
        return replace(failed, severity=WARNING, message=(
            f"on the value probe (inputs {list(self.probed)} shifted to both signs), {failed.message}; the "
            f"baseline's own output is farther than that from its float64 reference there, so this tolerance "
            f"cannot judge these inputs: the rounding rule judges the probe instead and passes the candidate: "
            f"{r.message}"))

    def _rounding_rule(self, actual: Tuple[Any, ...], case: str) -> Finding:
        """The rounding rule (the default oracle) on this trial's outputs, against the
        trial's float64 reference: what judges where a declared oracle cannot."""
        return oracles.check_outputs(Oracle(), self.expected, actual, case=case, inputs=self.pristine,
                                     reference64=self._reference64(self.pristine))

    def _oracles(self, case: str) -> List[Tuple[int, Any]]:
        """The per-call oracles for ``case``: the declared ones, and the rounding rule where
        it took over from a vacuous one (index -1: no custom function)."""
        return self.per_call + ([(-1, Oracle())] if case in self.rounding_for else [])

    def _instead(self, cal: Finding, spec: Any, actual: Tuple[Any, ...], case: str) -> Finding:
        """A declared oracle found vacuous here is not the end of the trial's judgement.

        Zeros pass KernelBench's ``atol`` of 1e-4 on a softmax over 393,216 columns
        (every output is about 2.5e-6): the declared oracle cannot judge these outputs,
        but the rounding rule, whose bound scales with the outputs, can. When it rejects
        every do-nothing output and the candidate passes it, the candidate has shown its
        correctness and the vacuous oracle is a warning; otherwise the finding stands,
        with the rounding rule's word added."""
        if not cal.invalidates or spec.kind == "rounding":
            return cal
        r = self._rounding_rule(actual, case)
        if not r.ok:
            return replace(cal, message=f"{cal.message}; nor does the candidate pass the rounding rule: {r.message}")
        if any(c.invalidates for c in _calibrate(Oracle(), self.expected, self.pristine, case, None,
                                                 self._reference64(self.pristine))):
            return cal
        self.rounding_for.add(case)
        return replace(cal, severity=WARNING, message=f"{cal.message}; the rounding rule judges this case instead "
                       f"(here and in every later trial and recheck): it rejects those outputs and passes the "
                       f"candidate: {r.message}")

    def poison_check(self, outputs: Sequence[Mapping[str, Any]], first_outputs: Sequence[Mapping[str, Any]]) -> bool:
        """Whether NaN the candidate returned under poisoned allocations went away without it.

        If some of the elements that were NaN (and finite in the baseline's output) are
        finite in the unpoisoned re-run, they came from memory nobody wrote: a NaN the
        candidate computes is NaN both times. A reader of uninitialised memory that
        happens to get poison-filled blocks back again is not recognised (its failure
        stays an oracle failure, which is still invalid)."""
        before = self.importer.open(first_outputs)
        again = self.importer.open(outputs)
        with preflight.harness_threads():
            for a, b, e in zip(before, again, oracles.flatten(self.expected)):
                if a.shape != b.shape or not (a.is_floating_point() or a.is_complex()):
                    continue
                poisoned = torch.isnan(a) & ~torch.isnan(e)
                if bool((poisoned & ~torch.isnan(b)).any()):
                    return True
        return False

    def release(self) -> None:
        """End a trial: close the candidate's tensors and drop this trial's pristine inputs,
        expected output and float64 reference. Kept until the next trial's ``expect``, they
        doubled the baseline's memory there (KernelBench's 6 GiB ReLU: 24 GiB allocated in
        ``expect`` and 36 GiB in ``judge`` on an H100, where one trial's own is 12 and 36)."""
        self.importer.close()
        self.pristine, self.expected, self._ref, self.probed = (), None, None, ()

    def finish(self) -> None:
        self.importer.close()
        self.pristine, self.expected, self._ref, self.probed = (), None, None, ()

    # -- a timed call, re-checked -------------------------------------------------------
    def recheck(self, case: str, kept: Mapping[str, Any], args: Sequence[Any]) -> List[Finding]:
        """A timed call's output against the baseline on that call's inputs, which this
        worker rebuilt (``args``: :meth:`.side.CaseState.inputs_of`), never the candidate's
        word for them. The output must first be the one committed when its block ended
        (``kept["digest"]``, drawn with ``kept["seed"]``, digested here): one made right
        after the pick is not the call's."""
        self._ref = None  # a reference is per set of inputs: an earlier recheck's tuple may have had this id
        actual = tuple(self.importer.open(kept["outputs"]))
        if sampled_digests([actual], int(kept["seed"]))[0] != kept["digest"]:
            self.importer.close()
            return [Finding(RECHECK, False, "a timed call's output is not the one committed when its block ended "
                            "(it changed after the harness chose it to be checked)", case)]
        pristine = tuple(args)
        found: List[Finding] = []
        t0 = time.perf_counter()
        try:
            expected = preflight.call_synced(self.side.fn, preflight.clone_inputs(pristine)
                                             if self.clone_for_baseline else pristine)
        except Exception as e:
            self.importer.close()
            return [Finding("baseline", False, f"baseline raised {preflight.short_error(e)} while re-checking a "
                            "timed call", case)]
        small = (self.side.device == "cpu" and time.perf_counter() - t0 < WIDE_RECHECK_S
                 and sum(t.numel() * t.element_size() for t in _tensors([*pristine, *actual])) < WIDE_RECHECK_BYTES)
        with preflight.harness_threads(wide=not small):
            # The baseline's own bits pass these oracles by definition: no float64 reference
            # (on the host, seconds a recheck for a 0.5 GiB output) to say so.
            specs = self._oracles(case)
            checked = [] if _own_bits(specs, expected, actual) else [
                oracles.check_outputs(spec, expected, actual, case=case, inputs=pristine,
                                      reference64=self._reference64(pristine), custom=self.side.custom.get(idx))
                for idx, spec in specs]
        for f in checked:
            if not f.ok:
                found.append(Finding(RECHECK, False, recheck_message(f), case, figure=f.figure, threshold=f.threshold))
        del expected, actual, pristine
        self._ref = None
        self.importer.close()
        return found


#: A recheck's error within this many times its oracle's allowance reads as numeric error
#: first: an honest fp32 sum of 10,000 normal values missed the rounding oracle's allowance by
#: 1.02x and 1.9x (issue 51), where a replayed or skipped output is off by the output's own size.
NEAR_ALLOWANCE = 10.0


def recheck_message(f: Finding) -> str:
    """Why a timed call's output failed its oracle, in words that fit the figures: what was
    compared, the error and the allowance, and the causes in order of likelihood. Near the
    allowance (:data:`NEAR_ALLOWANCE`), numeric error on inputs the preflight did not draw
    comes first; far from it, or with no figure, a replayed result or skipped work. The
    verdict is ``invalid`` either way: an output the oracle rejects is not a speedup."""
    compared = f"a timed call's output against the baseline's on that call's inputs fails {f.check} after timing"
    if f.figure is not None and f.threshold and math.isfinite(f.figure) and f.threshold > 0:
        ratio = f.figure / f.threshold
        figures = f" (error {f.figure:.3g}, allowed {f.threshold:.3g}: {ratio:.3g}x the allowance)"
        if ratio <= NEAR_ALLOWANCE:
            return (f"{compared}{figures}, having passed the preflight: an error this close to the allowance is "
                    "most likely numeric (these inputs round or cancel differently from the preflight's, in an order "
                    "the candidate sums in), less likely a replayed result or skipped work; if it is numeric, the "
                    f"oracle's allowance is too tight for this computation (see `oracles:`): {f.message}")
        return (f"{compared}{figures}, having passed the preflight: an error this far past the allowance is a replayed "
                f"result, a skipped computation or drift rather than rounding: {f.message}")
    return (f"{compared}, having passed the preflight (a replayed result, a skipped computation, drift, or numeric "
            f"error on these inputs?): {f.message}")


def _own_bits(specs: Sequence[Tuple[int, Any]], expected: Any, actual: Any) -> bool:
    """Whether ``actual`` is the baseline's own output bit for bit and every oracle of
    ``specs`` passes such an output by its definition (no float64 reference needed)."""
    return (all(spec.kind in oracles.PASSED_BY_THE_BASELINES_OWN_BITS for _, spec in specs)
            and oracles.same_bits(expected, actual))


def _poison_only(spec: Any, expected: Any, actual: Sequence[Any], inputs: Sequence[Any], custom: Any) -> bool:
    """True if the outputs fail only by NaN where the baseline is finite (see preflight)."""
    return preflight.poison_only(spec, expected, actual, inputs, custom)


def _calibrate(spec: Any, expected: Any, inputs: Sequence[Any], case: str, custom: Any,
               reference64: Any) -> List[Finding]:
    """Outputs that do no work, put through the oracle (check ``calibration:<kind>``).

    A do-nothing output that passes means one of two things, told apart by how far it
    is from the baseline's output compared with the baseline's own rounding error (its
    distance from the float64 reference):

    * it is far (the oracle's tolerance is wider than the outputs are large: zeros pass
      an ``atol`` of 0.05 on a softmax over 4096 columns): the oracle is vacuous, and the
      run is ``invalid`` until the tolerance or the inputs change;
    * it is within a few times that rounding error (a ReLU on inputs that are never
      negative *is* its input; the mean of a group-normalised tensor *is* zero up to
      rounding): no oracle can tell it from the right answer on these inputs. That is a
      property of the inputs, not a defect of the oracle or of the candidate, and it is
      reported as a warning: this case's correctness rests on the others and on the
      awkward sizes."""
    vacuous, undiscriminating = [], []
    noise: Any = None
    for label, make in oracles.iter_null_candidates(expected, inputs):
        null = make()
        if custom is not None:  # a custom oracle may want memory of its own (a view, a data pointer)
            null = tuple(n.contiguous() for n in oracles.flatten(null))
        f = oracles.check_outputs(spec, expected, null, case=case, inputs=inputs, custom=custom,
                                  reference64=reference64, first_failure=True)
        if not f.ok:
            continue
        if noise is None:
            noise = _rounding_error(expected, reference64)
        gap = max((_max_abs_diff(n, e) for n, e in zip(oracles.flatten(null), oracles.flatten(expected))),
                  default=0.0)
        (undiscriminating if gap <= 4 * noise else vacuous).append(label)
        del null
    out = []
    if vacuous:
        out.append(Finding(f"calibration:{spec.kind}", False,
                           f"oracle is vacuous: a candidate returning {' / '.join(vacuous)} passes it "
                           f"(outputs too small for its tolerance?); tighten the tolerance or change the inputs", case))
    if undiscriminating:
        out.append(Finding(f"calibration:{spec.kind}", False,
                           f"these inputs cannot tell the right answer from {' / '.join(undiscriminating)}: it is the "
                           "right answer here to within the baseline's own rounding error (an op that is the "
                           "identity, or zero, on these inputs); this case's correctness rests on the other cases",
                           case, severity=WARNING))
    return out


class _Once:
    """A reference computed on its first call and kept for the trial's other oracles and the
    calibration's do-nothing outputs (each would otherwise run the baseline again in float64)."""

    def __init__(self, ladder: Any) -> None:
        self.ladder, self._out, self._done = ladder, None, False

    @property
    def how(self) -> str:
        return getattr(self.ladder, "how", "")

    def __call__(self) -> Any:
        if not self._done:
            self._out, self._done = self.ladder(), True
        return self._out

    def magnitude(self) -> Any:
        """The ladder's reference on the inputs' absolute values (``checks.rounding``), also once."""
        if not hasattr(self, "_mag"):
            try:
                self._mag: Any = (self.ladder.magnitude(), None)
            except Exception as e:  # kept, and raised again to every caller
                self._mag = (None, e)
        if self._mag[1] is not None:
            raise self._mag[1]
        return self._mag[0]


def _max_abs_diff(a: Any, b: Any) -> float:
    """max |a - b| in float64, chunk by chunk (``checks.chunks``), on ``a``'s device."""
    out = 0.0
    for _, (x, y) in flat_chunks(a, b):
        out = max(out, max_abs_diff(x.double(), y.to(x.device)))
    return out


def _rounding_error(expected: Any, reference64: Any) -> float:
    """The baseline's largest distance from its float64 reference (its own rounding
    error), or, where no reference can be computed, one unit of its dtype's precision at
    the output's largest magnitude."""
    exp = oracles.flatten(expected)
    try:
        ref = oracles.flatten(reference64())
        return max((_max_abs_diff(e, r) for e, r in zip(exp, ref)), default=0.0)
    except Exception:
        out = 0.0
        for e in exp:
            if e.numel() and (e.is_floating_point() or e.is_complex()):
                out = max(out, float(torch.finfo(e.dtype).eps) * float(e.double().abs().max()))
        return out
