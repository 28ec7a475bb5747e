"""One correctness trial of the preflight, driven from the parent (:meth:`.pair.Pair.preflight`).

The candidate builds the trial's inputs from the trial's seed and exports them; the
baseline builds the same ones and its expected output (before the candidate runs, or
after it on odd trials when defences are on, so that a recycled buffer cannot pass);
the candidate runs once under poisoned allocations; the baseline's worker judges. A
failure made only of the poison is run again without it, to name it ``uninitialised``.

On the **value probe** trial (:func:`~expkit.checks.preflight.signed_probe`) every
input the factory drew all >= 0 is shifted to both signs first, on both sides. Where
the baseline itself raises or gives values that are not finite there (a log, a square
root), the probe is a warning, not judged; otherwise it is judged like any trial, and
its failures say what was shifted and how to switch the probe off. What was shifted is
the baseline's worker's word: the candidate's worker cannot make the probe a plain trial.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Tuple

from ...checks import preflight
from ...checks.preflight import UNINITIALISED, CaseRun
from ...core.errors import ExpkitError
from ...core.findings import WARNING, Finding, finding_from


def findings_of(reply: Mapping[str, Any]) -> List[Finding]:
    """The findings a worker's reply carries."""
    return [finding_from(f) for f in reply.get("findings", ())]


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
        out.findings += findings_of(rep)
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
    out.findings += findings_of(cc)
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
    judged = findings_of(j)
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
