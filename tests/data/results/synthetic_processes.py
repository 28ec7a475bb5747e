"""Write ``synthetic-processes/``: a result.json schema 3 fixture with five processes, for the renderer.

**Synthesised, not a measurement.** It takes the real run ``session/honest-win/`` (one
process, ``measure=quick``) and pretends its rounds came from five processes: the rounds
of each case are cut into five consecutive stretches, each stretch becomes one replicate
(rounds renumbered from 0 within it), and every figure the report reads is recomputed
from those samples by expkit's own functions (``verdict.stats.estimate_rounds``,
``verdict.rules.judge_case``, ``verdict.savings.savings``), as the runner would store them
with ``measure.processes=5``. Replace it with a real run once the runner measures replicates.

Run from the repository root: ``python tests/data/results/synthetic_processes.py``.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

import pandas as pd  # noqa: E402

from expkit.report import store  # noqa: E402
from expkit.verdict import stats  # noqa: E402
from expkit.verdict.rules import decide  # noqa: E402
from expkit.verdict.savings import savings  # noqa: E402

PROCESSES = 5


def main() -> None:
    src, dst = HERE / "session" / "honest-win", HERE / "synthetic-processes"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir()
    shutil.copy(src / store.ENV, dst / store.ENV)
    result = json.loads((src / store.RESULT).read_text())
    df = store.read_samples(src / store.SAMPLES)
    parts = []
    for case, g in df.groupby("case", sort=False):
        g = g.copy()
        n = int(g["round"].max()) + 1
        size = math.ceil(n / PROCESSES)
        g["replicate"] = g["round"] // size
        g["round"] = g["round"] % size
        parts.append(g)
    df = pd.concat(parts)
    rows = df.drop(columns=["schema_version"]).to_dict("records")
    for r in rows:  # empty fields of a CPU run, as the runner writes them
        r["call_seconds"] = None if pd.isna(r["call_seconds"]) else r["call_seconds"]
    store.write_samples(dst / store.SAMPLES, rows)

    conf = result["measured"]["confidence"]
    tolerance = result["claim"]["tolerance"]
    estimates, cases = {}, result["measured"]["cases"]
    for name in cases:
        g = df[df["case"] == name]
        rounds = stats.pair_rounds(zip(g["replicate"], g["round"], g["side"], g["seconds"]))
        estimates[name] = stats.estimate_rounds(rounds, confidence=conf, resamples=2000,
                                                seed=result["seed"] % (2**32))
    claims = {name: c["claimed"] for name, c in cases.items()}
    v = decide([], estimates, claims, tolerance, {n: c["stopped"] != "target interval reached"
                                                  for n, c in cases.items()})
    verdicts = {c.case: c for c in v.cases}
    for name, est in estimates.items():
        cases[name].update({"speedup": est.speedup, "ci_low": est.ci_low, "ci_high": est.ci_high,
                            "baseline": asdict(est.baseline), "candidate": asdict(est.candidate),
                            "verdict": verdicts[name].verdict, "warnings": list(est.warnings), **est.record()})
    ests = list(estimates.values())
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
    result["measured"]["overall"].update({"speedup": geo([e.speedup for e in ests]),
                                          "ci_low": geo([e.ci_low for e in ests]),
                                          "ci_high": geo([e.ci_high for e in ests])})
    result["verdict"], result["reasons"] = v.verdict, list(v.reasons)
    result["savings"] = savings(cases, result["cost"], {})
    result["timing"]["settings"]["processes"] = PROCESSES
    result["settings"]["overrides"] = list(result["settings"]["overrides"]) + [f"measure.processes={PROCESSES}"]
    result["schema_version"] = store.RESULT_SCHEMA_VERSION
    store.write_json(dst / store.RESULT, result)


if __name__ == "__main__":
    main()
