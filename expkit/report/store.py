"""On-disk formats of a run: ``result.json``, ``samples.csv``, ``env.json``.

Every file is written to a temporary name and renamed into place, so a run killed
mid-write leaves the previous file or none, never half of one. ``report.md`` is
rendered from these files alone (see ``run_report.py``), so it can be re-rendered later.

result.json history (``schema_version``):
  1 -- first version: verdict, reasons, claim, measured (per case and overall),
       checks, identity, timing, cost, environment summary, seed.
  2 -- adds ``savings`` (device time and dollars saved per million calls, and per day
       where the manifest declares a call rate; see ``verdict/savings.py``), ``roofline``
       (achieved fraction of the device's peak where the manifest declares work, else
       null; see ``verdict/roofline.py``) and ``telemetry`` (samples and flagged samples per
       case, clock summaries where NVML ran). Upgrading a 1 derives ``savings`` from the
       stored medians and price, sets ``roofline`` to null (no version-1 manifest
       declared work), keeps the version-1 telemetry note with the counts unknown, and
       records ``upgraded_from: 1``.
  3 -- adds, per case in ``measured.cases``, how the interval was made and over how many
       processes (issue 15, ``verdict/stats.py``): ``interval`` (the method, in words),
       ``processes`` (fresh worker pairs that measured it), ``per_process`` (each
       process's speedup, interval and rounds; null with one process before 3),
       ``process_spread`` ((max - min) of the per-process speedups over the estimate) and
       ``process_sd`` (standard deviation of their logs); both null under two processes.
       Upgrading a 2 records what those runs did: one process, sides resampled
       independently, no per-process figures.
  4 -- adds ``memory.measured`` (issue 19): per side (``baseline``, ``candidate``), each
       request's count, seconds and peak memory over the run's workers (``peaks``: the
       largest of each kind and the request it happened in; ``requests``: per request
       name), from ``bench/sides/ledger.py``; and ``memory`` in a run that ended before its
       plan (exit 5) holds the measured figures with null plan fields. Upgrading a 3
       sets ``memory.measured`` to null where ``memory`` is an object. Each request's
       ``held_allocated`` (GPU bytes allocated as it began, the largest over its
       counts) came later within 4, as an added key: files without it read as they are,
       and readers take its absence as not measured. So did ``waited_ms`` and
       ``blocks_ms`` in each side's ``defences.resources`` account (a CPU run's timing
       thread's wait for a CPU over its timed blocks, ``checks/contention.py``), and
       ``case_threads_ran`` there (threads each on a CPU for a tenth or more of the
       case's timed blocks, ``checks/activity.py``), and ``defences.relay_policy`` (a
       pinned CPU relay's worker policy, ``SCHED_BATCH`` or ``the parent's``; absent where
       nothing was pinned, ``bench/processes/cores.py``).
  5 -- adds ``measured.unmeasured`` (issue 51): every declared case with no estimate
       (every round lost a side to the telemetry's flags), case -> why. Such a case is
       judged ``inconclusive`` with that reason (``verdict.rules.decide``) and listed in the
       report's table. Upgrading a 4 sets it to ``{}``: before 5 such a case was left out.
       Also new in 5, optional: ``defences.commitments`` (per case: the candidate's judged
       blocks, those that held a reservoir, calls run and outputs held for the late pick,
       ``bench/defences/commit.py``) and ``defences.outside_clock`` (per case: the parent's clock
       against the candidate's figures, ``bench/defences/outside_clock.py``; absent on a GPU or
       undefended run, where nothing was bounded).
samples.csv history (column ``schema_version``):
  1 -- case, side, round, position, number, seconds, t_start, t_end, flagged.
  2 -- adds call_seconds (the call's CUDA-event time beside ``seconds`` when ``seconds``
       is kernel time; empty where a timer has one figure), source (which figure
       ``seconds`` is: kernel, events, envelope or cpu; empty if the timer did not
       say) and flags (what the block showed, ``;``-separated; see
       ``timing/kernel_time.py``). Reading a version-1 file fills them empty.
  3 -- adds replicate (the process, a fresh worker pair, that timed the sample; rounds
       are numbered within it). Reading an older file fills 0: one process.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping

import pandas as pd

from ..core.errors import ExpkitError
from .result import RESULT_SCHEMA_VERSION, RunResult
from ..verdict.savings import savings

SAMPLES_SCHEMA_VERSION = 3
#: Columns of samples.csv after ``schema_version``, in order (the current version's).
SAMPLE_COLUMNS = ["case", "side", "round", "position", "number", "seconds", "t_start", "t_end", "flagged",
                  "call_seconds", "source", "flags", "replicate"]
RESULT = "result.json"
SAMPLES = "samples.csv"
ENV = "env.json"
REPORT = "report.md"



def _upgrade_1_to_2(data: Dict[str, Any]) -> Dict[str, Any]:

    out = dict(data)
    cases = (data.get("measured") or {}).get("cases") or {}
    out["savings"] = savings(cases, data.get("cost") or {}, {})
    out["roofline"] = None
    out["telemetry"] = {"note": (data.get("environment") or {}).get("telemetry"), "samples": None,
                        "flagged": None, "cases": {}}
    out["schema_version"] = 2
    out["upgraded_from"] = int(data.get("schema_version", 1))
    return out


#: How the interval of a result.json before version 3 was made (``verdict.stats.INDEPENDENT``, one process).
BEFORE_3_INTERVAL = "percentile bootstrap, the two sides resampled independently, one process (before result.json 3)"


def _upgrade_2_to_3(data: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(data)
    measured = dict(data.get("measured") or {})
    cases = {}
    for name, case in (measured.get("cases") or {}).items():
        cases[name] = {**case, "interval": BEFORE_3_INTERVAL, "processes": 1, "per_process": None,
                       "process_spread": None, "process_sd": None}
    if "cases" in measured:
        measured["cases"] = cases
        out["measured"] = measured
    out["schema_version"] = 3
    out.setdefault("upgraded_from", int(data.get("schema_version", 2)))
    return out


def _upgrade_3_to_4(data: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(data)
    if isinstance(data.get("memory"), dict):
        out["memory"] = {**data["memory"], "measured": None}
    out["schema_version"] = 4
    out.setdefault("upgraded_from", int(data.get("schema_version", 3)))
    return out


def _upgrade_4_to_5(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 5 lists every declared case: ``measured.unmeasured`` (case -> why it has no
    estimate). Before it a case with none was left out; nothing records which, so empty."""
    out = dict(data)
    if isinstance(data.get("measured"), dict):
        out["measured"] = {**data["measured"], "unmeasured": {}}
    out["schema_version"] = 5
    out.setdefault("upgraded_from", int(data.get("schema_version", 4)))
    return out


# Upgrades from older result.json versions, applied in order on load: version -> function
# returning the next version's dict. Never edit one once released; add the next instead.
_UPGRADES: Dict[int, Any] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3, 3: _upgrade_3_to_4, 4: _upgrade_4_to_5}


def atomic_write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _json_default(o: Any) -> Any:
    if isinstance(o, Mapping):  # a RunResult: its document
        return dict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=_json_default, allow_nan=True) + "\n")


def write_samples(path: Path, rows: list[dict]) -> None:
    df = pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
    df["replicate"] = df["replicate"].fillna(0).astype(int)  # rows from one process may not say
    df.insert(0, "schema_version", SAMPLES_SCHEMA_VERSION)
    atomic_write(path, df.to_csv(index=False, float_format="%.9g"))


def read_samples(path: Path) -> pd.DataFrame:
    """samples.csv as a table with every current column (older versions' missing ones
    filled: ``call_seconds`` NaN, ``source`` and ``flags`` empty)."""
    if not path.is_file():
        return pd.DataFrame(columns=["schema_version"] + SAMPLE_COLUMNS)
    df = pd.read_csv(path, keep_default_na=False, na_values={"call_seconds": [""], "seconds": [""]},
                     dtype={"source": str, "flags": str})
    for col in ("source", "flags"):
        if col not in df.columns:
            df[col] = ""
    if "call_seconds" not in df.columns:
        df["call_seconds"] = float("nan")
    if "replicate" not in df.columns:
        df["replicate"] = 0
    return df


def run_folder(run_dir: Path) -> Path:
    """``run_dir`` as a run folder a command reads (it holds ``result.json``), else an
    :class:`~expkit.core.errors.ExpkitError` saying what the folder is instead; it creates
    nothing, so a mistyped path leaves no folder behind."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExpkitError(f"{run_dir}: no such folder (give the folder `expkit run` wrote: it holds {RESULT})")
    if not (run_dir / RESULT).is_file():
        inside = sorted(p.name for p in run_dir.iterdir() if (p / RESULT).is_file())
        hint = (f"it holds run folders ({', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}): give one of "
                "them, or use `expkit session` for the lot") if inside else \
            "give the folder `expkit run` wrote"
        raise ExpkitError(f"{run_dir}: not a run folder, no {RESULT} in it ({hint})")
    return run_dir


def make_folder(path: Path, what: str) -> Path:
    """Create the folder ``path`` (and its parents) that a command writes into; a path the
    user gave that cannot be a folder is one line naming it (:class:`ExpkitError`), not a
    failure of expkit's."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExpkitError(f"{path}: cannot create the {what} here ({e.strerror or e}); give a folder you can "
                          "write to") from None
    return path


def load_result(path: Path) -> RunResult:
    """Read a ``result.json`` of this or any older version, upgraded to the current one, as
    the run's :class:`~.result.RunResult`. A file that is not JSON (damaged, cut short) is
    an :class:`ExpkitError` naming it."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ExpkitError(f"{path}: not a result.json expkit can read ({e.msg} at line {e.lineno}): the file is "
                          "damaged; run the manifest again") from None
    return upgrade(data, path)


def upgrade(data: Mapping[str, Any], where: Any = "result") -> RunResult:
    """A ``result.json`` document of this or any older version as the current version's
    :class:`~.result.RunResult`; a version this expkit cannot read is an
    :class:`ExpkitError` naming ``where``."""
    if isinstance(data, RunResult):
        return data
    version = int(data.get("schema_version", 0))
    if version > RESULT_SCHEMA_VERSION:
        raise ExpkitError(f"{where}: schema_version {version} is newer than this expkit reads "
                          f"({RESULT_SCHEMA_VERSION}); upgrade expkit")
    while version < RESULT_SCHEMA_VERSION:
        if version not in _UPGRADES:
            raise ExpkitError(f"{where}: schema_version {version} is not one this expkit can read "
                              f"(it reads 1 to {RESULT_SCHEMA_VERSION})")
        data = _UPGRADES[version](data)
        version = int(data["schema_version"])
    try:
        return RunResult.of(data)
    except KeyError as e:
        raise ExpkitError(f"{where}: not a result.json expkit can read (key {e} missing): the file is damaged; "
                          "run the manifest again") from None
    except (TypeError, ValueError) as e:
        raise ExpkitError(f"{where}: not a result.json expkit can read ({e}): the file is damaged; "
                          "run the manifest again") from None


def load_env(path: Path) -> Dict[str, Any]:
    """``env.json`` of a run, or ``{}`` where it is missing (a report then says "not recorded")."""
    path = Path(path)
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


def is_run_dir(path: Path) -> bool:
    """A folder one run wrote into: it holds ``result.json``."""
    return (Path(path) / RESULT).is_file()
