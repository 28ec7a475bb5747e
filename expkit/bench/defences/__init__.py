"""The defences: each mechanism that keeps a candidate from faking a speedup, one module each.

Each reports under a check name (docs/threat-model.md says what each stops and what none
can). In a side's worker, around its calls: the harness's clock, bound before any candidate
code runs (:mod:`.clock`); fresh inputs for every timed call (:mod:`.fresh`); every call's
output committed before the parent picks which to re-check (:mod:`.commit`); the functions the
harness relies on, found unchanged (:mod:`.tamper`, ``tamper``); the checks after each timed
block (:mod:`.block_checks`); a silent fallback named (:mod:`.fallback`, ``fallback``); the
candidate's worker confined (:mod:`.confine`) and the baseline's threads kept on their cores
(:mod:`.affinity_guard`, both ``interference``). In the parent: its envelope around every
block and the recheck policy (:mod:`.envelope`, ``timer``), its clock against the candidate's
own figures (:mod:`.outside_clock`, ``timer``), and the idle worker stopped while the other
side is timed (:mod:`.freeze`, ``interference``). None imports a side or the processes' plumbing;
the sides call them. Two checks that need a side's own objects sit with the sides: the
baseline's worker judging the candidate's outputs (:mod:`..sides.judge`, ``recheck`` and
``inputs``) and each timed call's kernels against the profiled call's (:mod:`..sides.launches`,
``launches``).
"""
