"""Runner settings: a typed schema registered with Hydra, composed from ``conf/``.

``@hydra.main`` cannot take ``expkit run PATH``, so the CLI parses its own arguments
and composes settings through Hydra's Compose API. Precedence, lowest first: the
schema's defaults, ``conf/expkit.yaml`` and its preset files, the manifest's own
``measure:`` section, then ``key=value`` overrides from the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field, replace
from typing import Any, List, Optional, Sequence

from ..core.errors import ConfigError
from .paths import conf_dir


#: ``measure.timer``: what a GPU sample's seconds are (``expkit/timing/factory.py``).
TIMER_CHOICES = ("kernel", "events")


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how hard to measure one case.

    Sampling goes on in rounds (one block of baseline and one of candidate each, in a
    random order) until the ``confidence`` interval on the speedup is within
    ``±target_ci`` (relative), after at least ``min_rounds`` rounds and ``min_seconds``
    of timed work, and stops at ``max_seconds`` of timed work whatever it shows.

    ``timer`` (GPU only): ``kernel`` judges each call by its kernels' span in the GPU's
    own record (CUPTI; CUDA events when CUPTI is unavailable, and the result says
    why), ``events`` by CUDA events around the call; both figures are reported either way.

    ``processes``: how many fresh worker pairs measure every case (replicates, see
    ``timing/measure.py``); the interval then covers the spread between processes as
    well as within one (``verdict/stats.py``). ``min_rounds`` holds in each process;
    ``min_seconds``, ``max_seconds`` and ``max_rounds`` are split across them.
    """

    name: str = "default"
    warmup_seconds: float = 0.2
    min_rounds: int = 10
    max_rounds: int = 5000
    min_seconds: float = 0.5
    max_seconds: float = 30.0
    target_ci: float = 0.01
    confidence: float = 0.95
    min_block_seconds: float = 0.005
    input_sets: int = 4
    bootstrap: int = 2000
    cold: bool = True
    cpu_threads: Optional[int] = 1
    timer: str = "kernel"
    processes: int = 5

    def __post_init__(self) -> None:
        if self.timer not in TIMER_CHOICES:
            raise ConfigError(f"measure.timer: {self.timer!r} is not a timer; use one of "
                              + ", ".join(TIMER_CHOICES) + " (e.g. measure.timer=events)")
        if self.processes < 1:
            raise ConfigError(f"measure.processes: {self.processes} measures nothing; give at least 1 "
                              "(e.g. measure.processes=5)")


@dataclass(frozen=True)
class OracleSettings:
    """Correctness trials: fresh inputs each trial from the per-run seed."""

    trials: int = 3
    edge_cases: bool = True
    calibrate: bool = True


@dataclass(frozen=True)
class CostSettings:
    """Price of the machine. ``usd_per_hour`` overrides the price list."""

    provider: Optional[str] = None
    usd_per_hour: Optional[float] = None


@dataclass(frozen=True)
class LauncherSettings:
    """Where and how the manifests of a suite run (``expkit run FOLDER``; see ``suites/suite.py``).

    ``name`` picks the launcher: ``local`` (worker processes on this machine, one per
    GPU at a time, CPU manifests one at a time unless ``parallel_cpu``) or ``slurm``
    (one submitit job per manifest; ``cluster=local`` runs those jobs through
    submitit's local executor instead, for tests). ``timeout_seconds`` limits each
    manifest's worker, start-up included; ``time_minutes`` is the SLURM job's own
    limit and must leave the worker's room to report. ``start`` is how local workers
    start: ``forkserver`` (forked from a process that has imported torch and expkit
    once) or ``spawn`` (a fresh interpreter each: slower, shares nothing).
    """

    name: str = "local"
    timeout_seconds: float = 1800.0
    partition: Optional[str] = None
    account: Optional[str] = None
    gpus_per_task: int = 1
    time_minutes: int = 60
    cluster: str = "slurm"
    cpus_per_task: int = 8
    mem_gb: Optional[int] = None
    poll_seconds: float = 10.0
    start: str = "forkserver"
    parallel_cpu: bool = False
    cpu_workers: Optional[int] = None


@dataclass(frozen=True)
class DefenceSettings:
    """Defences against faked and fooled speedups (``expkit/bench/``, ``docs/threat-model.md``).

    ``enabled=false`` is the undefended harness, kept only to measure what the defences
    cost (evidence/README.md); never judge a claim with it. ``isolate``:
    baseline and candidate run in a worker process that reports over a private,
    authenticated channel. ``fresh``: how each timed call's inputs are made new
    (``salt``: one element of one floating input rewritten at a secret position;
    ``regenerate``: the whole set rebuilt by the factory; ``off``). ``recheck_budget``:
    fraction of the timed seconds that re-checking timed outputs may cost, at least
    ``min_rechecks`` blocks a case (shared by its processes, at least one in each). A
    speedup above ``max_plausible_speedup`` (unless the manifest's
    ``expect.max_plausible_speedup`` allows more) is never ``supported``.
    ``envelope_abs_s`` / ``envelope_rel``: how far the worker's clock may fall short of
    the parent's before a block is flagged. ``start_method``: ``auto`` (fork the parent
    when that is safe, else the fork server), ``forkserver`` (workers fork from a server
    that has torch imported), ``spawn`` (a fresh interpreter each) or ``fork`` (for a
    parent known to have run no torch op and started no thread); see ``bench/sides/endpoint.py``.
    ``pin_cores``: on the CPU, while a case's blocks are timed, the parent and both workers
    wait on the same ``measure.cpu_threads`` cores, so that handing a block from one process
    to the next is not a wake-up on another core, and the workers' main threads relay as
    ``SCHED_BATCH`` threads, which do not preempt the parent when its request wakes them
    (``bench/processes/cores.py``). ``confine``: the
    candidate's worker enters a Landlock domain before its code is imported, so that it can
    neither trace, open the memory of, nor (Linux 6.12+) signal any process outside it
    (``bench/defences/confine.py``); off only to test what the watch sees without it, or to debug.
    ``freeze``: while one side's blocks are timed, the other side's worker is stopped
    (``SIGSTOP``), so that nothing of it runs beside them (``bench/defences/freeze.py``); off only to
    test what the watch sees without it.
    """

    enabled: bool = True
    isolate: bool = True
    fresh: str = "salt"
    recheck_budget: float = 0.03
    min_rechecks: int = 3
    max_plausible_speedup: float = 10.0
    envelope_abs_s: float = 0.002
    envelope_rel: float = 0.25
    start_method: str = "auto"
    timeout_seconds: float = 600.0
    pin_cores: bool = True
    confine: bool = True
    freeze: bool = True


@dataclass(frozen=True)
class Settings:
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    oracle: OracleSettings = field(default_factory=OracleSettings)
    cost: CostSettings = field(default_factory=CostSettings)
    launcher: LauncherSettings = field(default_factory=LauncherSettings)
    defences: DefenceSettings = field(default_factory=DefenceSettings)
    seed: Optional[int] = None
    overrides: tuple = ()


_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    # lazy: hydra and omegaconf load only where settings are composed
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="expkit_schema", node=_schema_node())
    _registered = True


def _schema_node() -> Any:
    # Hydra wants mutable dataclasses (it writes into them while composing); derive
    # them from the frozen ones so the fields are declared once.

    def thaw(cls: type) -> type:
        fields = []
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
                sub = thaw(f.default_factory)  # type: ignore[arg-type]
                fields.append((f.name, sub, dataclasses.field(default_factory=sub)))
            elif f.name == "overrides":
                continue
            else:
                fields.append((f.name, hints[f.name], dataclasses.field(default=f.default)))
        return dataclasses.make_dataclass(cls.__name__ + "Schema", fields)

    return thaw(Settings)


#: The settings' sections that are Hydra config groups: a preset file each, ``conf/<group>/<name>.yaml``.
GROUPS = ("measure", "launcher")


def presets(group: str) -> List[str]:
    """The presets of a config group: the YAML files of ``conf/<group>/``, by name."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def nearest(name: str, choices: Sequence[str]) -> str:
    """``did you mean `x`? `` for the choice nearest ``name`` (difflib), or nothing."""
    near = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f"did you mean `{near[0]}`? " if near else ""


def check_preset(group: str, name: str, where: str) -> None:
    """A preset of ``group`` that has no file is a :class:`ConfigError` naming ``where`` it
    was asked for, the nearest preset and every one there is."""
    if name not in presets(group):
        raise ConfigError(f"{where}: no preset `{name}` for {group} ({nearest(name, presets(group))}"
                          f"the {group} presets, in conf/{group}/, are {', '.join(presets(group))})")


def check_override(override: str) -> None:
    """Names in a ``key=value`` override that the settings do not have, caught before Hydra
    composes (whose words name neither the nearest name nor the choices): a misspelt section
    (``mesure=quick``), preset (``measure=quik``) or key (``measure.target_cl=0.02``) is a
    :class:`ConfigError` naming the override, the nearest valid name and the valid ones.
    Values are Hydra's to check (a number, a bool), and it names them well."""

    key, value = override.split("=", 1)
    path = key.lstrip("+~").split("@", 1)[0].split(".")
    sections = {f.name: f for f in dataclasses.fields(Settings) if f.name != "overrides"}
    where = f"override `{override}`"
    top = path[0]
    if top not in sections:
        raise ConfigError(f"{where}: no setting `{top}` ({nearest(top, list(sections))}the settings are "
                          f"{', '.join(sections)}; the claim itself belongs in the manifest)")
    factory = sections[top].default_factory
    if not dataclasses.is_dataclass(factory):
        if len(path) > 1:
            raise ConfigError(f"{where}: `{top}` is one value, with no settings under it (give {top}=...)")
        return
    if len(path) == 1:
        bare = value.strip().strip("'\"")
        if top in GROUPS and bare not in ("", "null"):
            check_preset(top, bare, where)
        return
    keys = [f.name for f in dataclasses.fields(factory)]
    if path[1] not in keys:
        raise ConfigError(f"{where}: no setting `{path[1]}` in {top} ({nearest(path[1], keys)}the {top} settings "
                          f"are {', '.join(keys)})")
    if len(path) > 2:
        raise ConfigError(f"{where}: `{top}.{path[1]}` is one value, with no settings under it "
                          f"(give {top}.{path[1]}=...)")


def load_settings(overrides: Sequence[str] = (), manifest_measure: Any = None) -> Settings:
    """Compose settings from ``conf/`` and ``overrides`` (``key=value`` strings).

    ``manifest_measure`` (a :class:`expkit.manifest.Measure`) sits between the preset
    and the command line: the manifest may pick a preset and tighten its numbers, and
    the command line still has the last word.
    """
    # lazy: hydra and omegaconf load only where settings are composed
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _register()
    overrides = list(overrides)
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"override {o!r}: expected key=value, e.g. measure=quick")
        check_override(o)
    cli_keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if manifest_measure is not None and manifest_measure.preset and "measure" not in cli_keys:
        check_preset("measure", manifest_measure.preset, "the manifest's measure.preset")
        overrides = [f"measure={manifest_measure.preset}"] + overrides
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="expkit"):
            cfg = compose(config_name="expkit", overrides=overrides)
        data = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        first = str(e).strip().splitlines()[0]
        cause = str(e.__cause__ or "").strip().splitlines()
        if cause:  # what was wrong with the value or key (a bool, a number, a known key)
            first = f"{first}: {cause[0]}"
        raise ConfigError(f"configuration ({conf_dir()}): {first}; overrides were {overrides}") from None
    assert isinstance(data, dict)
    measure = MeasureSettings(**data["measure"])
    if manifest_measure is not None:
        updates = {k: getattr(manifest_measure, k) for k in ("target_ci", "max_seconds", "min_rounds", "timer")
                   if getattr(manifest_measure, k) is not None and f"measure.{k}" not in cli_keys}
        measure = replace(measure, **updates)
    return Settings(
        measure=measure,
        oracle=OracleSettings(**data["oracle"]),
        cost=CostSettings(**data["cost"]),
        launcher=LauncherSettings(**data["launcher"]),
        defences=DefenceSettings(**data.get("defences", {})),
        seed=data.get("seed"),
        overrides=tuple(overrides),
    )


def as_dict(settings: Settings) -> dict:

    return dataclasses.asdict(settings)
