"""The preflight, driven from the parent between the two workers (:meth:`.pair.Pair.preflight`).

:func:`run_preflight` runs every case's correctness trials, then each passing case's
profiled call (:func:`profiled_identity`). What a worker does for a request is
:mod:`.side` and :mod:`.judge`; what both processes share, :mod:`expkit.checks.preflight`.

**A trial** (:func:`correctness_trial`): the candidate builds the trial's inputs from the
trial's seed and exports them; the baseline builds the same ones and its expected output
(before the candidate runs, or after it on odd trials when defences are on, so that a
recycled buffer cannot pass); the candidate runs once under poisoned allocations; the
baseline's worker judges. A failure made only of the poison is run again without it, to
name it ``uninitialised``.

On the **value probe** trial (:func:`~expkit.checks.preflight.signed_probe`) every
input the factory drew all >= 0 is shifted to both signs first, on both sides. Where
the baseline itself raises or gives values that are not finite there (a log, a square
root), the probe is a warning, not judged; otherwise it is judged like any trial, and
its failures say what was shifted and how to switch the probe off. What was shifted is
the baseline's worker's word: the candidate's worker cannot make the probe a plain trial.

**The profiled call**: both sides drop their trials' tensors, then each is profiled once,
one after the other, and held against ``expect:`` and the target.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Optional, Tuple

from ...checks import expectations, preflight
from ...checks.identity import kernel_row, target_findings
from ...checks.preflight import UNINITIALISED, CaseRun, IdentitySummary, PreflightResult
from ...core.errors import ExpkitError
from ...core.findings import WARNING, Finding, findings_in
from ..defences.fallback import FALLBACK
from ..processes.traces import trace_from_dict
from .launches import as_launches


class Trial:
    """What one trial found; ``failed`` ends the case's trials, ``skip`` leaves the case unchecked."""

    def __init__(self) -> None:
        self.findings: List[Finding] = []
        self.failed = False
        self.skip = False
        self.probed: Tuple[int, ...] = ()  # on the value probe: the inputs it shifted


def correctness_trial(pair: Any, run: CaseRun, trial: int, run_seed: int, defended: bool,
                      probe: bool = False) -> Trial:
    """Trial ``trial`` of the case run ``run`` between ``pair``'s two workers (``probe``: the
    value probe; its failures start by saying so, what it shifted and how to switch it off)."""
    out = _trial(pair, run, trial, run_seed, defended, probe)
    if out.probed:
        lead = (f"on the value probe (inputs {list(out.probed)}, drawn all >= 0 by the factory, shifted to both "
                "signs: x -> 2x - max x; if the claim covers non-negative inputs only, set expect.value_probe: "
                "false): ")
        out.findings = [replace(f, message=lead + f.message) if not f.ok and f.invalidates else f
                        for f in out.findings]
    return out


def _trial(pair: Any, run: CaseRun, trial: int, run_seed: int, defended: bool, probe: bool) -> Trial:
    b, c = pair.b, pair.c
    seed = preflight.derive_seed(run_seed, run.name, trial)
    params = dict(run.params)
    cand_first = defended and trial % 2 == 1
    out = Trial()
    ci = c.request("trial_inputs", params=params, seed=seed, probe=probe)
    where = f"(trial {trial}{', candidate ran first' if cand_first else ''}, params {params})"

    def expect() -> bool:
        rep = b.request("expect", case=run.name, params=params, seed=seed, first=trial == 0,
                        cand_inputs=ci["inputs"], probe=probe)
        out.findings += findings_in(rep)
        # What the probe shifted is the baseline's worker's word, never the candidate's: a
        # candidate that said "nothing" would otherwise turn the probe into a plain trial.
        # Nothing shifted (every floating input already took both signs): a plain trial.
        out.probed = tuple(rep.get("probed") or ()) if probe else ()
        if out.probed and ("raised" in rep or not rep.get("finite", True)):
            # Outside the baseline's own domain (a log, a square root, a loss of
            # probabilities): nothing to hold the candidate to there.
            why = f"raised {rep['raised']}" if "raised" in rep else "gave values that are not finite"
            out.findings.append(Finding(preflight.VALUE_PROBE, True, f"not judged: on inputs {list(out.probed)} "
                                        f"shifted to both signs the baseline itself {why}", run.name,
                                        severity=WARNING))
            out.probed = ()  # not judged: its failures are not the probe's
            return False  # the case stays checked: its other trials were judged
        if "raised" in rep:
            if run.declared:
                raise ExpkitError(f"{pair.lm.path}: the baseline raised {rep['raised']} on its own inputs for case "
                                  f"{run.name!r} (params {params}): the reference must run on the cases it "
                                  "declares; fix the baseline or the case")
            out.findings.append(Finding("edge-case", True, f"skipped: the baseline itself raised {rep['raised']} at "
                                        f"params {params}, so these sizes are outside what it computes",
                                        run.name, severity=WARNING))
            out.skip = True
            return False
        return True

    if not cand_first and not expect():
        return out
    cc = c.request("trial_call", case=run.name, params=params, poison=True)
    out.findings += findings_in(cc)
    if "raised" in cc:
        if probe and cand_first:  # before the baseline's word: the candidate's own list, for the message only
            out.probed = tuple(ci.get("probed") or ())
        if cc.get("oom"):
            out.findings.append(pair.oom_finding(run, f"{cc['raised']} {where}"))
        else:
            out.findings.append(Finding("crash", False, f"candidate raised {cc['raised']} {where}", run.name))
        out.failed = True
        b.request("release")
        return out
    if cand_first and not expect():
        return out
    if any(not f.ok and f.invalidates for f in out.findings):
        out.failed = True
    if "defect" in cc:
        out.findings.append(Finding("output", False, cc["defect"], run.name))
        out.failed = True
        b.request("release")
        return out
    j = b.request("judge", case=run.name, params=params, trial=trial, declared=run.declared,
                  calibrate=pair.settings.oracle.calibrate, inputs=ci["inputs"], outputs=cc["outputs"],
                  where=where)
    judged = findings_in(j)
    if j.get("poison_only") and defended:
        rr = c.request("rerun")
        if "outputs" in rr and b.request("poison_check", outputs=rr["outputs"],
                                         first_outputs=cc["outputs"])["uninitialised"]:
            judged = [_uninitialised(f, where) if f.check.startswith("oracle:") and not f.ok else f
                      for f in judged]
    out.findings += judged
    if any(not f.ok and f.invalidates for f in judged):
        out.failed = True
    elif out.probed:
        out.findings.append(Finding(preflight.VALUE_PROBE, True, f"the candidate matched the baseline with inputs "
                                    f"{list(out.probed)} shifted to both signs", run.name))
    b.request("release")
    return out


def _uninitialised(f: Finding, where: str) -> Finding:
    return Finding(UNINITIALISED, False,
                   "NaN where the baseline is finite, within the oracle everywhere else, and not NaN when run again "
                   "without poison: new allocations are NaN-filled while the candidate runs, so these elements were "
                   f"never written or were computed from uninitialised memory; {f.message}", f.case,
                   figure=f.figure, threshold=f.threshold)


def run_preflight(pair: Any, run_seed: int, identity: bool = True) -> PreflightResult:
    """Every case's correctness trials (and each awkward size's one), the value probe among
    them, then, where a case passed, its profiled call on each side (:func:`profiled_identity`);
    ``identity=False`` leaves the profiled calls out."""
    m, s = pair.lm.manifest, pair.settings.oracle
    defended = pair.settings.defences.enabled
    findings: List[Finding] = []
    identities: List[IdentitySummary] = []
    runs = preflight.expand_cases(m.cases, m.inputs.free, s.edge_cases)
    checked: List[str] = []
    # The value probe (preflight.signed_probe) is the first case's last trial, or a trial
    # of its own when there is only one: it costs no extra call where trials >= 2.
    probe_trial = (max(s.trials, 2) - 1) if m.expect.value_probe else -1
    for run in runs:
        trials = s.trials if run.declared else 1
        if run is runs[0] and probe_trial >= trials:
            trials = probe_trial + 1
        failed = False
        skipped = False
        for trial in range(trials):
            probe = run is runs[0] and trial == probe_trial
            verdict = correctness_trial(pair, run, trial, run_seed, defended, probe)
            findings += verdict.findings
            if verdict.skip:
                skipped = True
                break
            if verdict.failed:
                failed = True
                break
        if not skipped:
            checked.append(run.name)
        if identity and not failed and not skipped:
            got, summary = profiled_identity(pair, run, run_seed)
            findings += got
            if summary is not None:
                identities.append(summary)
    for ep in (pair.b, pair.c):
        findings += findings_in(ep.request("finish_preflight"))
    return PreflightResult(tuple(findings), tuple(checked), tuple(identities))


def profiled_identity(pair: Any, run: CaseRun, run_seed: int) -> Tuple[List[Finding], Optional[IdentitySummary]]:
    """One profiled call per side, one after the other, held against ``expect:`` and the target;
    a GPU run keeps the candidate's kernel launches for the timed calls to match."""
    seed = preflight.derive_seed(run_seed, run.name, "identity")
    params = dict(run.params)
    # Both sides first drop their trials' tensors, then profile one at a time, each giving
    # its device cache back after (two at once ran KernelBench's HuberLoss, 8 GiB of
    # inputs, out of memory on an H100; the trials' tensors kept alive, its L1Norm).
    for ep in (pair.c, pair.b):
        ep.request("end_trials")
    cp = pair.c.request("profile", case=run.name, params=params, seed=seed)
    bp = pair.b.request("profile", case=run.name, params=params, seed=seed)
    if "raised" in cp:
        if cp.get("oom"):
            return [pair.oom_finding(run, f"{cp['raised']}, while profiled")], None
        return [Finding("crash", False, f"candidate raised {cp['raised']} while profiled", run.name)], None
    if "raised" in bp:
        return [Finding("baseline", False, f"baseline raised {bp['raised']} while profiled", run.name)], None
    ct, bt = trace_from_dict(cp["trace"]), trace_from_dict(bp["trace"])
    if ct.on_gpu:
        pair.launches[run.name] = as_launches([kernel_row(k) for k in ct.kernels])
    watched: List[Finding] = []
    if not pair.isolated:  # one process: the candidate's side watches what the baseline calls
        watched = findings_in(pair.c.request("watch", names=sorted({o.name for o in bt.ops})))
    found = expectations.check_expectations(pair.lm.manifest.expect, ct, bt, harness_stream=ct.harness_stream)
    out = [Finding(f.check, f.ok, f.message, run.name, severity=getattr(f, "severity", "invalid"))
           for f in found if not f.ok or run.declared]
    out += list(target_findings(pair.lm, ct, run.name, (pair.gpu or {}).get("name"))) + watched
    swallowed = cp.get("swallowed") or []
    if swallowed and any(not f.ok and f.check in ("identity", "forbidden") for f in out):
        name, msg, fname, line = swallowed[0]
        out.append(Finding(FALLBACK, False, f"the candidate caught {name}({msg!r}) raised at {fname}:{line} and "
                           "went on without the intended kernel: a silent fallback", run.name))
    summary = IdentitySummary(run.name, tuple(o.name for o in ct.top_level_ops()),
                              tuple(o.name for o in bt.top_level_ops()),
                              tuple(kernel_row(k) for k in ct.kernels), tuple(kernel_row(k) for k in bt.kernels))
    return out, summary
