"""expkit's pytest plugin: kernel speed claims as tests (entry point ``pytest11``).

Loaded by pytest wherever expkit is installed. Two ways to write a claim:

* the ``expkit_claim`` fixture, a callable taking a manifest (a path, a dict with
  callables, a ``Manifest``) or its parts -- ``baseline``, ``candidate``, ``inputs``,
  ``speedup`` (and ``tolerance``, ``cases``, ``free``, ``oracles``, ``expect``, ``device``,
  any other manifest key) -- plus runner settings as keyword arguments
  (``measure="quick"``, see :mod:`expkit.api`); it returns the :class:`~expkit.api.Result`;
* the marker ``@pytest.mark.expkit(manifest, **settings)``: the claim runs in the test's
  call phase before its body, which receives the ``Result`` as the ``expkit_result``
  argument if it asks for it. A relative path is looked up beside the test file first.

Either way the test **fails** on ``refuted`` and ``invalid`` with the verdict's reasons
and the report's path as the message (no traceback), and on ``inconclusive`` fails or is
skipped as ``--expkit-inconclusive=fail|skip`` says (default ``fail``: the evidence did
not show the claim; ``inconclusive=`` on one claim overrides it). A manifest for
``device: cuda`` is **skipped** on a machine where torch sees no CUDA GPU. A manifest or
setting that is wrong fails the test with expkit's one-line message.

Every run goes into one session folder, ``--expkit-reports=DIR`` (default: a new
``reports/<stamp>-pytest`` under pytest's root folder), one run folder per claim named
after the test, with ``session.md`` re-rendered after each run (expkit's session report:
the verdicts, the claims against the measurements, what needs a human). The terminal
summary names it. ``--expkit-set KEY=VALUE`` (repeatable) adds a runner setting to every
claim, after the claim's own settings, so ``--expkit-set measure=quick`` makes a CI job
quick. The ini keys ``expkit_reports`` and ``expkit_inconclusive`` set the defaults.

Nothing heavy is imported until a claim runs: loading the plugin costs a test session
no torch import.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest

INCONCLUSIVE_CHOICES = ("fail", "skip")
MARKER = "expkit"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("expkit", "expkit: kernel speed claims as tests")
    group.addoption("--expkit-inconclusive", choices=INCONCLUSIVE_CHOICES, default=None,
                    help="what an inconclusive claim does to its test: fail (default) or skip")
    group.addoption("--expkit-reports", metavar="DIR", default=None,
                    help="session folder for the claims' run folders and session.md "
                         "(default: reports/<stamp>-pytest under the root folder)")
    group.addoption("--expkit-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a runner setting for every claim, after each claim's own (e.g. measure=quick)")
    parser.addini("expkit_inconclusive", "default of --expkit-inconclusive (fail or skip)", default="fail")
    parser.addini("expkit_reports", "default of --expkit-reports", default="")


@dataclass
class _State:
    """The plugin's state for one pytest session: options, the session folder, the verdicts seen."""

    inconclusive: str
    reports: Optional[Path]
    root: Path
    settings: Tuple[str, ...]
    session_dir: Optional[Path] = None
    verdicts: List[Tuple[str, str]] = field(default_factory=list)

    def session(self) -> Path:
        # lazy: pytest loads this plugin in every session; torch and the run machinery load only in a test that uses them
        from .report import session as sessions

        if self.session_dir is None:
            self.session_dir = sessions.open_session(self.reports) if self.reports is not None else \
                sessions.new_session(self.root / "reports", name="pytest")
        return self.session_dir


STATE = pytest.StashKey[_State]()
RESULT = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(manifest, **settings): hold the test to an expkit claim (a manifest path or dict); "
                   "fails on refuted/invalid, fails or skips on inconclusive (--expkit-inconclusive)")
    inconclusive = config.getoption("expkit_inconclusive") or config.getini("expkit_inconclusive") or "fail"
    if inconclusive not in INCONCLUSIVE_CHOICES:
        raise pytest.UsageError(f"expkit_inconclusive = {inconclusive!r}: expected fail or skip")
    reports = config.getoption("expkit_reports") or config.getini("expkit_reports") or None
    for s in config.getoption("expkit_set"):
        if "=" not in s:
            raise pytest.UsageError(f"--expkit-set {s!r}: expected KEY=VALUE, e.g. measure=quick")
    config.stash[STATE] = _State(inconclusive, Path(reports) if reports else None, Path(config.rootpath),
                                 tuple(config.getoption("expkit_set")))


def _run_name(nodeid: str) -> str:
    tail = nodeid.split("/")[-1].replace(".py::", "-").replace("::", "-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", tail).strip("-") or "claim"


def _cuda_available() -> bool:
    try:
        # lazy: pytest loads this plugin in every session; torch and the run machinery load only in a test that uses them
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # no torch, or a broken CUDA install: no GPU for expkit either
        return False


def _message(result: Any) -> str:
    return "expkit " + "\n".join(result.summary_lines())


def hold(state: _State, nodeid: str, manifest: Any, settings: dict, inconclusive: Optional[str] = None) -> Any:
    """Run one claim for the test ``nodeid`` and turn its verdict into the test's outcome."""
    # lazy: pytest loads this plugin in every session; torch and the run machinery load only in a test that uses them
    from . import api
    from .core.errors import ExpkitError

    mode = inconclusive or state.inconclusive
    if mode not in INCONCLUSIVE_CHOICES:
        pytest.fail(f"expkit: inconclusive={mode!r}: expected fail or skip", pytrace=False)
    try:
        prepared = api.prepare(manifest)
        if prepared.device == "cuda" and not _cuda_available():
            pytest.skip(f"expkit: {prepared.name} needs a CUDA GPU and torch sees none on this machine")
        overrides = [*api.settings_overrides(settings), *state.settings]
        result = api.run(manifest, session=state.session(), name=_run_name(nodeid), overrides=overrides)
    except ExpkitError as e:
        pytest.fail(f"expkit: {e}", pytrace=False)
    state.verdicts.append((nodeid, result.verdict))
    if result.verdict in ("refuted", "invalid"):
        pytest.fail(_message(result), pytrace=False)
    if result.verdict == "inconclusive":
        if mode == "skip":
            pytest.skip(_message(result))
        pytest.fail(_message(result), pytrace=False)
    return result


class Claim:
    """The value of the ``expkit_claim`` fixture: call it to hold the test to a claim."""

    def __init__(self, state: _State, nodeid: str, name: str) -> None:
        self._state, self._nodeid, self._name = state, nodeid, name

    def __call__(self, manifest: Any = None, /, *, baseline: Any = None, candidate: Any = None, inputs: Any = None,
                 speedup: Optional[float] = None, tolerance: Optional[float] = None, cases: Any = None,
                 free: Any = (), device: Optional[str] = None, oracles: Any = None, expect: Any = None,
                 name: Optional[str] = None, manifest_keys: Optional[dict] = None,
                 inconclusive: Optional[str] = None, **settings: Any) -> Any:
        """Run the claim; returns the :class:`~expkit.api.Result` when it is supported.

        Give ``manifest``, or ``baseline``, ``candidate``, ``inputs`` and ``speedup`` (with
        any of ``tolerance``, ``cases``, ``free``, ``device``, ``oracles``, ``expect``,
        ``name`` -- default: the test's name -- and further manifest keys in
        ``manifest_keys``). Other keyword arguments are runner settings.
        """
        # lazy: pytest loads this plugin in every session; torch and the run machinery load only in a test that uses them
        from . import api

        parts = {"baseline": baseline, "candidate": candidate, "inputs": inputs, "speedup": speedup}
        if manifest is not None:
            given = [k for k, v in parts.items() if v is not None]
            if given:
                pytest.fail(f"expkit_claim: give a manifest or its parts, not both (got a manifest and {given[0]})",
                            pytrace=False)
        else:
            missing = [k for k, v in parts.items() if v is None]
            if missing:
                pytest.fail(f"expkit_claim: give a manifest, or {', '.join(parts)} (missing: {', '.join(missing)})",
                            pytrace=False)
            manifest = api.claim_manifest(name=name or self._name, tolerance=tolerance, cases=cases, free=free,
                                          device=device, oracles=oracles, expect=expect, **parts,
                                          **(manifest_keys or {}))
        return hold(self._state, self._nodeid, manifest, settings, inconclusive)


@pytest.fixture
def expkit_claim(request: pytest.FixtureRequest) -> Claim:
    """Call it with a manifest or a claim's parts; the test fails unless the claim is supported."""
    return Claim(request.config.stash[STATE], request.node.nodeid, _run_name(request.node.name))


@pytest.fixture
def expkit_result() -> Any:
    """The :class:`~expkit.api.Result` of the test's ``@pytest.mark.expkit`` claim (filled in at call time)."""
    return None


def _marked_manifest(item: pytest.Item, manifest: Any) -> Any:

    if isinstance(manifest, (str, os.PathLike)) and not Path(manifest).is_absolute():
        beside = Path(item.path).parent / manifest
        if beside.exists():
            return beside
    return manifest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    if len(marker.args) != 1:
        pytest.fail(f"@pytest.mark.{MARKER} takes one manifest (a path or a dict), got {len(marker.args)} "
                    "positional arguments", pytrace=False)
    settings = dict(marker.kwargs)
    inconclusive = settings.pop("inconclusive", None)
    result = hold(pyfuncitem.config.stash[STATE], pyfuncitem.nodeid, _marked_manifest(pyfuncitem, marker.args[0]),
                  settings, inconclusive)
    pyfuncitem.stash[RESULT] = result
    if "expkit_result" in pyfuncitem.funcargs:
        pyfuncitem.funcargs["expkit_result"] = result
    return None  # the test body runs next, as usual


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.session_dir is None:
        return
    counts: dict = {}
    for _, verdict in state.verdicts:
        counts[verdict] = counts.get(verdict, 0) + 1
    words = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none finished"
    terminalreporter.write_sep("-", "expkit")
    terminalreporter.write_line(f"{len(state.verdicts)} claim(s): {words}")
    terminalreporter.write_line(f"session report: {state.session_dir / 'session.md'}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None and state.session_dir is not None:
        # lazy: pytest loads this plugin in every session; torch and the run machinery load only in a test that uses them
        from .report.session import render_session

        render_session(state.session_dir)
