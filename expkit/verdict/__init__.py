"""The verdict stage: what the numbers say, from estimates and findings alone.

* :mod:`.stats` -- samples to an :class:`~.stats.Estimate` (median, bootstrap interval, warnings).
* :mod:`.rules` -- the verdict rule (docs/decisions.md): claim + estimates + findings to a
  :class:`~.rules.Verdict`; re-exported here (``from expkit.verdict import decide``).
* :mod:`.load` -- a verdict the host's load could explain (a ``contention`` warning's case judged
  again with each side's wait for a CPU taken out).
* :mod:`.plausibility` -- speedups nobody should believe without a second look.
* :mod:`.pipeline` -- the run's verdict as one ordered list of rules over what was found.
* :mod:`.roofline`, :mod:`.savings` -- what a measured time means against the device's
  peak, and what a speedup is worth; pure over values stored in ``result.json``.
* :mod:`.wording` -- the words a report may use for a number, by the evidence behind it.

Nothing here runs code under test or reads a clock; it imports only
:mod:`expkit.manifest` (the catalog, the settings' types) and :mod:`expkit.core`.
"""

from .rules import (EXIT_CODES, INCONCLUSIVE, INVALID, REFUTED, SEVERITY, SUPPORTED, VERDICTS, CaseVerdict, Verdict,
                    decide, inconclusive_when, judge_case, worst)

__all__ = [
    "SUPPORTED", "REFUTED", "INCONCLUSIVE", "INVALID", "VERDICTS", "EXIT_CODES", "SEVERITY",
    "CaseVerdict", "Verdict", "judge_case", "decide", "inconclusive_when", "worst",
]
