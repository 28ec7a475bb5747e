"""Python manifests: a dict (callables allowed) or a ``Manifest``, as the data of a YAML manifest.

:func:`manifest_dict` turns either into plain data checked against schema v1, with each
callable at a reference key (``baseline``, ``candidate``, ``inputs.factory``,
``oracles[].function``, ``end_to_end.workload``, ...) written as the name a worker imports
it by (:mod:`.references`); :func:`write_manifest` writes it as ``manifest.yaml`` into the
run folder, which then runs like any manifest file. :func:`claim_manifest` builds the dict
from a claim's parts (the pytest plugin's short form); :func:`prepare` says what a
manifest argument of :func:`expkit.run` will run.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from ..core.errors import ManifestError
from ..manifest.spec import LoadedManifest, Manifest, load as load_file
from .references import DICT_SOURCE, reference
from ..manifest.schema import SchemaError, build
from ..report.store import atomic_write

#: What :func:`expkit.run` accepts as a manifest.
ManifestLike = Union[str, "os.PathLike[str]", Mapping[str, Any], Manifest, LoadedManifest]

__all__ = ["ManifestLike", "Prepared", "prepare", "manifest_dict", "claim_manifest", "write_manifest"]


#: Keys whose values are references (``module:function``), by path in the manifest.
_REF_KEYS = {("baseline",), ("candidate",), ("inputs", "factory"), ("oracles", "*", "function"),
             ("oracles", "*", "model"), ("oracles", "*", "dataset"), ("end_to_end", "workload"),
             ("end_to_end", "oracles", "*", "function"), ("end_to_end", "oracles", "*", "model"),
             ("end_to_end", "oracles", "*", "dataset")}


def _plain(value: Any, path: Tuple[str, ...], source: str, stray: List[str]) -> Any:
    """A YAML-ready copy: callables at reference keys as references, tuples as lists, paths as strings.

    A callable anywhere else is noted in ``stray`` (by key) and left as its repr, so that
    the schema's own complaint about the key (an unknown one, say) is reported first."""
    pattern = tuple("*" if p.isdigit() else p for p in path)
    if pattern in _REF_KEYS and value is not None:
        return reference(value, _key_text(path), source)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, path + (str(k),), source, stray) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, path + (str(i),), source, stray) for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if callable(value):
        stray.append(_key_text(path))
        return repr(value)
    return value


def _key_text(path: Sequence[str]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out


def manifest_dict(manifest: Union[Mapping[str, Any], Manifest], source: str = DICT_SOURCE) -> Dict[str, Any]:
    """A dict or :class:`Manifest` as the plain data of a YAML manifest, checked against schema v1.

    Callables become ``module:qualname`` references (:func:`reference`); ``kernelbench``
    file paths become absolute (a dict has no folder to be relative to). Raises
    :class:`ManifestError` naming the key at fault.
    """

    if isinstance(manifest, Manifest):
        raw: Dict[str, Any] = dataclasses.asdict(manifest)
        if manifest.kernelbench is not None:
            raw.pop("inputs", None)  # filled in from the pair by the loader; not the user's key
            raw.pop("baseline", None)
            raw.pop("candidate", None)
        raw = {k: v for k, v in raw.items() if v is not None}
    elif isinstance(manifest, Mapping):
        raw = dict(manifest)
    else:
        raise ManifestError(source, "", f"expected a mapping, got {type(manifest).__name__}")
    stray: List[str] = []
    data = _plain(raw, (), source, stray)
    kb = data.get("kernelbench")
    if isinstance(kb, dict):
        for k in ("problem", "solution"):
            if isinstance(kb.get(k), str):
                kb[k] = str(Path(kb[k]).resolve())
    try:
        build(Manifest, data)
    except SchemaError as e:
        raise ManifestError(source, e.key, e.problem, e.fix) from None
    if stray:
        raise ManifestError(source, stray[0], "a callable is not allowed here (only `module:function` keys take one)",
                            "give the value the manifest reference asks for")
    return data


def claim_manifest(*, name: str, baseline: Any, candidate: Any, inputs: Any, speedup: float,
                   tolerance: Optional[float] = None, cases: Any = None, free: Sequence[str] = (),
                   device: Optional[str] = None, oracles: Optional[Sequence[Mapping[str, Any]]] = None,
                   expect: Optional[Mapping[str, Any]] = None, **keys: Any) -> Dict[str, Any]:
    """A manifest dict from its parts: the short form the pytest plugin's ``expkit_claim`` takes.

    ``cases`` is a list of case mappings, a mapping of case name to its ``params``, or
    None for one case named ``default`` with no parameters. ``inputs`` is the input
    factory (a callable or a ``module:function`` string) and ``free`` its free
    dimensions. Further manifest keys (``description``, ``target``, ``aggregate``, ...)
    pass through ``keys`` unchanged.
    """
    if cases is None:
        case_list: List[Any] = [{"name": "default"}]
    elif isinstance(cases, Mapping):
        case_list = [{"name": str(k), "params": dict(v or {})} for k, v in cases.items()]
    else:
        case_list = list(cases)
    claim: Dict[str, Any] = {"speedup": speedup}
    if tolerance is not None:
        claim["tolerance"] = tolerance
    data: Dict[str, Any] = {"name": name, "claim": claim, "baseline": baseline, "candidate": candidate,
                            "inputs": {"factory": inputs, "free": list(free)}, "cases": case_list}
    for key, value in (("device", device), ("oracles", oracles), ("expect", expect)):
        if value is not None:
            data[key] = value
    data.update(keys)
    return data


def write_manifest(data: Mapping[str, Any], path: Path) -> Path:
    """Write a manifest dict (from :func:`manifest_dict`) as YAML; returns ``path``."""


    header = ("# Written by expkit.run from a Python manifest: callables are written as the\n"
              "# module:qualname the worker process imports them by.\n")
    atomic_write(Path(path), header + yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True))
    return Path(path)


@dataclass(frozen=True)
class Prepared:
    """A manifest ready to run: a file to run, or data to write into the run folder first."""

    name: str
    device: str
    path: Optional[Path] = None
    data: Optional[Mapping[str, Any]] = None


def prepare(manifest: ManifestLike) -> Prepared:
    """Check ``manifest`` and say what will run (see :func:`run`); raises :class:`ManifestError`."""

    if isinstance(manifest, LoadedManifest):
        return Prepared(manifest.manifest.name, manifest.manifest.device, path=manifest.path)
    if isinstance(manifest, (str, os.PathLike)):
        lm = load_file(manifest)
        return Prepared(lm.manifest.name, lm.manifest.device, path=Path(manifest))
    data = manifest_dict(manifest)
    return Prepared(str(data["name"]), str(data.get("device", "cpu")), data=data)
