"""The Python API: ``expkit.run(manifest, **settings) -> Result`` and ``expkit.load(run_dir)``.

The layer above the runner (``docs/architecture.md``): the command line, the pytest
plugin and a notebook all run a claim through :func:`run`, and read a finished run
folder through :func:`load`. Both return a :class:`Result`, a frozen value made from the
run's stored ``result.json`` alone, so a result read back later is the same value as
the one returned at the end of the run.

**The manifest** may be

* a path to a YAML manifest (references resolve beside it first, as on the command line);
* a :class:`~expkit.manifest.LoadedManifest` (its file is run);
* a plain ``dict`` with the keys of a YAML manifest, where any ``module:function``
  string may instead be the Python callable itself (``baseline``, ``candidate``,
  ``inputs.factory``, ``oracles[].function``, ``end_to_end.workload``, ...);
* a :class:`~expkit.manifest.Manifest` (treated as the dict of its fields).

A dict or a ``Manifest`` is checked here, its callables replaced by references, and it
is written as ``manifest.yaml`` into the run folder, which is then run like any other
manifest file: the run folder keeps the exact claim that was run.

**Callables must be importable by name.** The code under test runs in a worker process
(``defences.isolate``) that imports it afresh, so a callable is written down as the
``module:qualname`` it can be imported by, and checked to resolve back to the very same
object in this process, from a module that this process's ``sys.path`` finds (the
worker starts with the same ``sys.path``). Accepted: functions, classes and other
callables bound to a name at the top level of an importable module, including a
script run as ``python script.py`` (its module is the script's file name; the worker
imports it, so its top level must be guarded with ``if __name__ == "__main__":``, as
for :mod:`multiprocessing`). Refused, with a :class:`~expkit.ManifestError` naming the
key and the fix: lambdas and functions defined inside functions, callables defined in a
notebook cell or at the REPL (``__main__`` without a file), ``functools.partial``
objects and anything else no module binds to a name. There is no in-process fallback:
the defences depend on the worker, and a claim run without them is not one expkit will
judge. Move the code into a ``.py`` module (e.g. ``kernels.py`` beside the notebook)
and import it from there. Plain strings in a dict resolve on the import path (a dict
has no folder of its own).

**Settings** are the runner's Hydra settings (``conf/``, "Runner
settings" in docs/manifest.md), never the claim. As keyword arguments: ``measure="quick"`` is
``measure=quick``; a double underscore is a dot, ``measure__target_ci=0.02`` is
``measure.target_ci=0.02``; a dict nests, ``defences={"isolate": False}`` is
``defences.isolate=false``. Python values are written in Hydra's syntax (``True`` ->
``true``, ``None`` -> ``null``). ``overrides=["measure=quick"]`` passes override strings
as they are, before the keyword arguments (which therefore win).

Modules: :mod:`.result` (``Result`` and its parts), :mod:`.manifests` (Python manifests
as YAML data), :mod:`.references` (callables as ``module:qualname``), :mod:`.overrides`
(keyword settings as overrides); :func:`run` and :func:`load` live here.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ..core.errors import ExpkitError
from .manifests import ManifestLike, Prepared, claim_manifest, manifest_dict, prepare, write_manifest
from .references import DICT_SOURCE, reference
from .result import CaseResult, Overall, Result, SideTime
from .overrides import settings_overrides
from ..report import session as sessions, store
from ..suites.audit import run_audit

#: ``progress(case, rounds, width, budget_left)``, called once a round (``timing.measure.ProgressFn``).
ProgressFn = Callable[[str, int, Optional[float], float], None]
#: The file a dict or Manifest is written to, inside its run folder.
MANIFEST_FILE = "manifest.yaml"
#: The attribute under which :func:`run` leaves the run folder on an exception that
#: escapes it, so that the command line's boundary can write its details there.
RUN_DIR_ATTR = "expkit_run_dir"

__all__ = ["run", "load", "audit", "Result", "CaseResult", "SideTime", "Overall", "settings_overrides", "manifest_dict",
           "claim_manifest", "reference", "prepare", "write_manifest", "Prepared", "ManifestLike", "MANIFEST_FILE",
           "DICT_SOURCE", "RUN_DIR_ATTR", "ProgressFn"]


def _refuse_inside_worker() -> None:
    main = sys.modules.get("__main__")
    in_child = multiprocessing.parent_process() is not None and \
        multiprocessing.current_process().name.startswith("expkit")
    if in_child or getattr(main, "__name__", "") == "__mp_main__":
        raise ExpkitError("expkit.run was called while a worker process imported the code under test: the script "
                          "that defines the kernels runs expkit.run at its top level (guard that call with "
                          "`if __name__ == \"__main__\":`)")


def run(manifest: ManifestLike, *, out: Optional[Union[str, "os.PathLike[str]"]] = None,
        session: Optional[Union[str, "os.PathLike[str]"]] = None, name: Optional[str] = None,
        overrides: Sequence[str] = (), progress: Optional[ProgressFn] = None, plots: bool = True,
        **settings: Any) -> Result:
    """Run one manifest to a verdict and return its :class:`Result` (see the module docstring).

    ``out``: the run folder (default: a new folder under ``reports/``). ``session``: add
    the run to this session folder instead (created if missing; ``session.md`` is
    re-rendered), under the folder name ``name`` (default: the manifest's file name, or
    the manifest's ``name`` for a dict). ``progress`` is called once a round. ``plots``:
    draw the report's figures before returning (False leaves them to
    ``expkit.report.run_report.write(run_dir)``, as the CLI does after printing the verdict;
    until then the report says that ``expkit report`` draws them).

    Raises :class:`ExpkitError` (a subclass names file, key and fix) when the manifest or
    the settings are wrong and nothing ran; a run that went wrong is a ``Result`` with the
    verdict ``invalid``. Any other exception escapes with the run folder in its
    ``expkit_run_dir`` attribute.
    """
    # lazy: `import expkit` loads no torch; the runner, and torch with it, load with the first run
    from ..runner import default_out_dir

    _refuse_inside_worker()
    ovr = [*overrides, *settings_overrides(settings)]
    prepared = prepare(manifest)
    if session is not None and out is not None:
        raise ExpkitError("expkit.run: give out or session, not both (a session names its run folders)")
    if session is None:
        run_dir = Path(out) if out is not None else default_out_dir(prepared.name)
        return _run_into(prepared, run_dir, ovr, progress, plots)
    session_dir = sessions.open_session(Path(session))
    label = prepared.path if prepared.path is not None else Path(f"{prepared.name}.yaml")
    run_dir = sessions.register_run(session_dir, label, name=name or (None if prepared.path else prepared.name))
    sessions.mark(session_dir, run_dir, sessions.RUNNING)
    try:
        result = _run_into(prepared, run_dir, ovr, progress, plots)
    except BaseException as e:
        try:
            why = str(e)
        except Exception:  # an exception whose __str__ raises must not hide the first one
            why = "<str() failed>"
        sessions.mark(session_dir, run_dir, sessions.CRASHED, note=f"{type(e).__name__}: {why}")
        sessions.render_session(session_dir)
        raise
    sessions.mark(session_dir, run_dir, sessions.DONE)
    sessions.render_session(session_dir)
    return result


def _run_into(prepared: Prepared, run_dir: Path, overrides: Sequence[str], progress: Optional[ProgressFn],
              plots: bool = True) -> Result:
    # lazy: `import expkit` loads no torch; the runner, and torch with it, load with the first run
    from ..runner import run_manifest

    try:
        path = prepared.path
        if path is None:
            assert prepared.data is not None
            store.make_folder(run_dir, "run folder")
            path = write_manifest(prepared.data, run_dir / MANIFEST_FILE)
        outcome = run_manifest(path, list(overrides), run_dir, progress=progress, plots=plots)
    except BaseException as e:
        if not isinstance(e, ExpkitError):
            try:
                setattr(e, RUN_DIR_ATTR, run_dir)
            except AttributeError:  # an exception type that takes no attributes: the boundary uses a temp file
                pass
        raise
    return Result.from_result(outcome.result, outcome.out_dir)


def load(run_dir: Union[str, "os.PathLike[str]"]) -> Result:
    """Read a finished run folder (its ``result.json``, upgraded from older versions) as a :class:`Result`."""

    run_dir = Path(run_dir)
    path = run_dir / store.RESULT
    if not path.is_file():
        hint = "a session folder holds one run per subfolder" if (run_dir / "session.json").is_file() else \
            "give the folder `expkit run` wrote (it holds result.json)"
        raise ExpkitError(f"{run_dir}: no {store.RESULT} here ({hint})")
    return Result(store.load_result(path), run_dir)


def audit(paths: Union[str, Sequence[str]], **options: Any) -> Any:
    """Judge every candidate of a generation run: :func:`expkit.suites.audit.run_audit`.

    ``paths`` is a run's folder in KernelBench's layout, or manifests; ``options`` are
    ``run_audit``'s (``problems``, ``out``, ``overrides``, ``preset``, ``jobs``,
    ``retries``, ``budget``, ``claims``, ...). Returns its ``AuditOutcome``: the final
    record of each candidate, the audit folder and ``audit.md`` (docs/audit.md)."""

    return run_audit([paths] if isinstance(paths, (str, os.PathLike)) else list(paths), **options)
