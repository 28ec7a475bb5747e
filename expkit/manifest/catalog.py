"""The GPU catalog: what a target GPU can hold and how fast it can go on paper.

Two sources of truth meet here. ``conf/catalog/gpus.yaml`` holds what vendors and the CUDA
documentation say, each figure with its source; the device in hand says what it really is.
:func:`reconcile` lets the device win and returns every disagreement as a sentence, so a report
can show "catalog says 50 MiB L2 for h100-sxm, device reports 60 MiB" instead of silently using
either number. A spec that nobody checked against a device is still useful before a run (can
this kernel launch on an L4 at all? see ``occupancy.py``) but is never a measurement.

Names: :func:`lookup` takes what people type ("H100", "nvidia l4", "h100 sxm") and
:func:`match_device` what drivers print ("NVIDIA H100 80GB HBM3"). Both compare a normalised
spelling: lower case, vendor and brand words ("nvidia", "geforce", "tesla") dropped, everything
but letters and digits removed, and both accept only a declared key or alias in that spelling.
Nothing closer to guessing is done, because a name that merely resembles one (an "H100 NVL" is
neither an SXM nor a PCIe H100; an "L40" is not an L40S) must not borrow another part's figures.
An unknown name gets the nearest valid keys in its error message instead.

Loading is plain ``yaml.safe_load``, independent of Hydra, so that tests stay fast.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Tuple


from . import paths
from ..core.errors import ExpkitError

CATALOG_SCHEMA_VERSION = 1

#: Fields every compute-capability block in the YAML must give (per-SM limits).
CC_FIELDS = (
    "warp_size",
    "max_threads_per_block",
    "max_threads_per_sm",
    "max_blocks_per_sm",
    "max_registers_per_thread",
    "max_registers_per_block",
    "registers_per_sm",
    "shared_memory_per_block",
    "shared_memory_per_block_optin",
    "shared_memory_per_sm",
    "reserved_shared_memory_per_block",
)
#: Product facts every GPU entry must give (null allowed, with a source saying why).
PRODUCT_FIELDS = (
    "sm_count",
    "l2_bytes",
    "memory_bandwidth_gbs",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp16_tflops",
    "fp8_tflops",
)
TFLOPS_FIELDS = ("fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops")
_FLOAT_FIELDS = frozenset(TFLOPS_FIELDS + ("memory_bandwidth_gbs",))


class CatalogError(ExpkitError):
    """An unknown GPU name or a catalog file that does not load."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as the catalog describes it. Sizes in bytes, bandwidth in GB/s, rates in TFLOP/s.

    Tensor rates are dense (no 2:4 sparsity). ``None`` means the chip lacks the unit or no figure
    could be sourced; ``sources[field]`` says which, and where every other figure comes from.
    """

    key: str
    name: str
    aliases: Tuple[str, ...]
    compute_capability: Tuple[int, int]
    sm_count: Optional[int]
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_registers_per_thread: int
    max_registers_per_block: int
    registers_per_sm: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    shared_memory_per_sm: int
    reserved_shared_memory_per_block: int
    l2_bytes: Optional[int]
    memory_bandwidth_gbs: Optional[float]
    fp32_tflops: Optional[float]
    tf32_tflops: Optional[float]
    bf16_tflops: Optional[float]
    fp16_tflops: Optional[float]
    fp8_tflops: Optional[float]
    sources: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        if self.max_threads_per_sm % self.warp_size or self.max_threads_per_block % self.warp_size:
            raise ValueError(f"{self.key}: thread limits must be whole warps")
        if self.shared_memory_per_block_optin < self.shared_memory_per_block:
            raise ValueError(f"{self.key}: opt-in shared memory below the default per-block limit")
        if self.shared_memory_per_block_optin + self.reserved_shared_memory_per_block > self.shared_memory_per_sm:
            raise ValueError(f"{self.key}: one opt-in block (plus its reserve) exceeds shared memory per SM")
        missing = [f for f in CC_FIELDS + PRODUCT_FIELDS if not self.sources.get(f)]
        if missing:
            raise ValueError(f"{self.key}: no source for " + ", ".join(missing))

    @property
    def cc(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def normalize_name(name: str) -> str:
    """The spelling names are compared in: "NVIDIA GeForce RTX 4090" -> "rtx4090"."""
    words = re.split(r"[^0-9a-z]+", name.lower())
    return "".join(w for w in words if w not in ("nvidia", "geforce", "tesla"))


# --- loading -------------------------------------------------------------------------------


def default_catalog_path() -> Path:
    return paths.conf_dir() / "catalog" / "gpus.yaml"


def load_catalog(path: Optional[Path] = None) -> Mapping[str, GpuSpec]:
    """All GPUs in the catalog file, by key. The default file is read once and cached."""
    return _load(str(Path(path) if path is not None else default_catalog_path()))


@functools.lru_cache(maxsize=8)
def _load(path_str: str) -> Mapping[str, GpuSpec]:
    path = Path(path_str)
    data = paths.read_versioned_yaml(path, schema_version=CATALOG_SCHEMA_VERSION, what="GPU catalog",
                                     error=CatalogError)
    ccs = {k: v for k, v in (data.get("compute_capabilities") or {}).items() if not str(k).startswith("_")}
    specs = {}
    for key, entry in (data.get("gpus") or {}).items():
        specs[str(key)] = _build(path, str(key), entry, ccs)
    _check_names_unique(path, specs)
    return MappingProxyType(specs)


def _build(path: Path, key: str, entry: Any, ccs: Mapping[str, Any]) -> GpuSpec:
    where = f"{path}: gpus.{key}"
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: expected a mapping")
    cc = str(entry.get("compute_capability", ""))
    if cc not in ccs:
        raise CatalogError(f"{where}.compute_capability: {cc!r} has no block under compute_capabilities "
                           f"(known: {', '.join(sorted(ccs))})")
    block = ccs[cc]
    values: dict = {}
    for f in CC_FIELDS:
        if f not in block:
            raise CatalogError(f"{path}: compute_capabilities.{cc}.{f}: required key is missing")
        values[f] = _number(f"{path}: compute_capabilities.{cc}.{f}", f, block[f], nullable=False)
    for f in PRODUCT_FIELDS:
        if f not in entry:
            raise CatalogError(f"{where}.{f}: required key is missing (write null, with a source "
                               "saying why, where no figure is known)")
        values[f] = _number(f"{where}.{f}", f, entry[f], nullable=True)
    sources = {**dict(block.get("sources") or {}), **dict(entry.get("sources") or {})}
    aliases = entry.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise CatalogError(f"{where}.aliases: expected a list of strings")
    major, minor = (int(p) for p in cc.split("."))
    try:
        return GpuSpec(key=key, name=str(entry.get("name") or key), aliases=tuple(aliases),
                       compute_capability=(major, minor), sources=sources, **values)
    except ValueError as e:
        raise CatalogError(f"{where}: {e}") from None


def _number(where: str, field: str, value: Any, *, nullable: bool) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: expected a number{' or null' if nullable else ''}, got {value!r}")
    if value < 0:
        raise CatalogError(f"{where}: must not be negative, got {value}")
    if field in _FLOAT_FIELDS:
        return float(value)
    if value != int(value):
        raise CatalogError(f"{where}: expected a whole number, got {value}")
    return int(value)


def _check_names_unique(path: Path, specs: Mapping[str, GpuSpec]) -> None:
    owner: dict = {}
    for spec in specs.values():
        for name in (spec.key, *spec.aliases):
            n = normalize_name(name)
            if owner.setdefault(n, spec.key) != spec.key:
                raise CatalogError(f"{path}: gpus.{spec.key}.aliases: {name!r} also names {owner[n]}")


# --- names ---------------------------------------------------------------------------------


def lookup(name: str, catalog: Optional[Mapping[str, GpuSpec]] = None) -> GpuSpec:
    """The spec for a key, an alias or a loose spelling of either; :class:`CatalogError` if none.

    A loose spelling is a case-, space- and punctuation-insensitive match of a key or alias
    ("nvidia l4", "h100 sxm"). A mere prefix is not enough, even of one GPU's names: "l40" is a
    different card from the l40s, so it is refused, with the names it starts as suggestions.
    """
    catalog = load_catalog() if catalog is None else catalog
    if name in catalog:
        return catalog[name]
    wanted = normalize_name(name)
    exact = _names(catalog).get(wanted)
    if exact is not None:
        return catalog[exact]
    prefixed = sorted({k for n, k in _names(catalog).items() if wanted and n.startswith(wanted)})
    near = prefixed[:3] or _nearest(wanted, catalog)
    hint = f"nearest: {', '.join(near)}" if near else f"known: {', '.join(sorted(catalog))}"
    raise CatalogError(f"unknown GPU {name!r} ({hint}); add it to {default_catalog_path()} "
                       "or name one of the catalog's keys")


def match_device(name: str, catalog: Optional[Mapping[str, GpuSpec]] = None) -> Optional[GpuSpec]:
    """The catalog entry whose key or alias is this device name, or None (no loose matching)."""
    catalog = load_catalog() if catalog is None else catalog
    key = _names(catalog).get(normalize_name(name))
    return catalog[key] if key is not None else None


def _names(catalog: Mapping[str, GpuSpec]) -> dict:
    return {normalize_name(n): s.key for s in catalog.values() for n in (s.key, *s.aliases)}


def _nearest(wanted: str, catalog: Mapping[str, GpuSpec]) -> list:
    names = _names(catalog)
    close = difflib.get_close_matches(wanted, list(names), n=6, cutoff=0.5)
    keys: list = []
    for n in close:
        if names[n] not in keys:
            keys.append(names[n])
    return keys[:3]


# --- the device in hand --------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProps:
    """What the driver reports for one device. ``None`` where this PyTorch build does not expose it."""

    name: str
    compute_capability: Tuple[int, int]
    sm_count: int
    warp_size: Optional[int] = None
    max_threads_per_block: Optional[int] = None
    max_threads_per_sm: Optional[int] = None
    registers_per_sm: Optional[int] = None
    shared_memory_per_block: Optional[int] = None
    shared_memory_per_block_optin: Optional[int] = None
    shared_memory_per_sm: Optional[int] = None
    l2_bytes: Optional[int] = None
    total_memory_bytes: Optional[int] = None


# DeviceProps field <- attribute of torch.cuda.get_device_properties(). Names checked against
# torch 2.11.0+cu130 on an H100 (dir() of the object); each is read with getattr so
# that an older build that lacks one (torch 2.0 has no L2_cache_size) yields None, not an error.
_TORCH_ATTRS = {
    "sm_count": "multi_processor_count",
    "warp_size": "warp_size",
    "max_threads_per_block": "max_threads_per_block",
    "max_threads_per_sm": "max_threads_per_multi_processor",
    "registers_per_sm": "regs_per_multiprocessor",
    "shared_memory_per_block": "shared_memory_per_block",
    "shared_memory_per_block_optin": "shared_memory_per_block_optin",
    "shared_memory_per_sm": "shared_memory_per_multiprocessor",
    "l2_bytes": "L2_cache_size",
    "total_memory_bytes": "total_memory",
}


def device_props(index: int = 0, *, cuda: Any = None) -> Optional[DeviceProps]:
    """Read device ``index`` through ``torch.cuda``; None where there is no CUDA device.

    ``cuda`` is the seam for tests: anything with ``is_available()``, ``device_count()`` and
    ``get_device_properties(i)`` (default: ``torch.cuda``, imported only when needed).
    """
    if cuda is None:
        try:
            # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
            import torch
        except ImportError:
            return None
        cuda = torch.cuda
    if not cuda.is_available() or index >= cuda.device_count():
        return None
    p = cuda.get_device_properties(index)
    values = {}
    for field, attr in _TORCH_ATTRS.items():
        v = getattr(p, attr, None)
        values[field] = int(v) if isinstance(v, int) and not isinstance(v, bool) else None
    if values["sm_count"] is None:
        return None
    return DeviceProps(name=str(p.name), compute_capability=(int(p.major), int(p.minor)), **values)


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _cc(v: Tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _plain(n: int) -> str:
    return str(n)


# field -> (what it is called in a sentence, how a value is written)
_RECONCILED: Mapping[str, Tuple[str, Callable[[Any], str]]] = {
    "compute_capability": ("compute capability", _cc),
    "sm_count": ("SMs", _plain),
    "warp_size": ("threads per warp", _plain),
    "max_threads_per_block": ("threads per block", _plain),
    "max_threads_per_sm": ("threads per SM", _plain),
    "registers_per_sm": ("registers per SM", _plain),
    "shared_memory_per_block": ("shared memory per block by default", _bytes),
    "shared_memory_per_block_optin": ("shared memory per block opt-in", _bytes),
    "shared_memory_per_sm": ("shared memory per SM", _bytes),
    "l2_bytes": ("L2", _bytes),
}


def reconcile(spec: GpuSpec, props: DeviceProps) -> Tuple[GpuSpec, Tuple[str, ...]]:
    """The spec with every value the device reports put in place of the catalog's, and the list
    of disagreements, one sentence each ("catalog says 50 MiB L2 for h100-sxm, device reports
    60 MiB"). A catalog ``None`` filled in by the device is not a disagreement; a device name
    that is not among the entry's names is (the figures may belong to another part).
    """
    changes: dict = {}
    notes = []
    if normalize_name(props.name) not in {normalize_name(n) for n in (spec.key, *spec.aliases)}:
        notes.append(f"device {props.name!r} is not among the names of catalog entry {spec.key}; "
                     "its figures may belong to another part")
    for field, (label, fmt) in _RECONCILED.items():
        measured = getattr(props, field)
        listed = getattr(spec, field)
        if measured is None or measured == listed:
            continue
        changes[field] = measured
        if listed is not None:
            quantity = f"{label} {fmt(listed)}" if fmt is _cc else f"{fmt(listed)} {label}"
            notes.append(f"catalog says {quantity} for {spec.key}, device reports {fmt(measured)}")
    if not changes:
        return spec, tuple(notes)
    sources = dict(spec.sources)
    for field in changes:
        sources[field] = f"read from the device ({props.name}) at run time"
    return dataclasses.replace(spec, sources=sources, **changes), tuple(notes)
