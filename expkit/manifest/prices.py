"""What a run costs: a dated price list per provider and GPU, and the arithmetic on it.

A report states a run's cost only from a cited entry of ``conf/prices/default.yaml`` (or a price
the user set). An unlisted GPU or provider gives ``None``, which the report prints as "unknown":
a guessed price would read exactly like a real one. Every :class:`Price` carries its source and
the date it was valid, because GPU prices move by the month and differ by provider, region and
commitment; the report shows them beside the cost.

A run is priced by its wall time on the GPU (``run_cost``): per-second billing, no minimum charge,
no storage or egress. That is a lower bound for hourly-billed machines and for machines held
between runs; a report should say "at least" where that matters.

Loading is plain ``yaml.safe_load``, independent of Hydra, so that tests stay fast.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Tuple


from . import paths
from ..core.errors import ExpkitError
from .catalog import CatalogError, lookup

PRICES_SCHEMA_VERSION = 1
CPU_KEY = "cpu"


class PriceError(ExpkitError):
    """A price list that does not load."""


@dataclass(frozen=True)
class Price:
    """One GPU-hour at one provider, with where the figure came from and when it held."""

    provider: str
    gpu: str
    usd_per_hour: float
    source: str
    as_of: dt.date
    note: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.usd_per_hour) or self.usd_per_hour < 0:
            raise ValueError(f"usd_per_hour must be a finite number >= 0, got {self.usd_per_hour}")
        if not self.source.strip():
            raise ValueError("a price needs a source")


@dataclass(frozen=True)
class PriceList:
    """All prices of one file. ``default_provider`` is used when a run names no provider."""

    prices: Mapping[Tuple[str, str], Price]
    cpu: Price
    default_provider: Optional[str] = None
    path: str = ""
    _by_gpu: Mapping[str, Tuple[Price, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        by_gpu: dict = {}
        for (_, gpu), price in sorted(self.prices.items()):
            by_gpu.setdefault(gpu, []).append(price)
        object.__setattr__(self, "_by_gpu", MappingProxyType({g: tuple(p) for g, p in by_gpu.items()}))

    @property
    def providers(self) -> Tuple[str, ...]:
        return tuple(sorted({p for p, _ in self.prices}))

    def price_for(self, gpu_key: str, provider: Optional[str] = None) -> Optional[Price]:
        """The price of ``gpu_key`` at ``provider`` (default: ``default_provider``), or None.

        ``gpu_key`` may be any name the GPU catalog accepts ("NVIDIA L4" finds the ``l4`` row).
        The CPU costs ``cpu.usd_per_hour`` (0 unless the file says otherwise) at any provider.
        """
        provider = provider if provider is not None else self.default_provider
        if gpu_key == CPU_KEY:
            return self.cpu if provider is None else Price(provider, CPU_KEY, self.cpu.usd_per_hour,
                                                          self.cpu.source, self.cpu.as_of, self.cpu.note)
        if provider is None:
            return None
        return self.prices.get((provider, _canonical(gpu_key)))

    def all_for(self, gpu_key: str) -> Tuple[Price, ...]:
        """Every listed provider's price for one GPU, by provider name (for "$0.60 to $0.80/h")."""
        return self._by_gpu.get(_canonical(gpu_key), ())


def _canonical(gpu_key: str) -> str:
    """The catalog key for any accepted spelling; the name itself where the catalog has none."""

    try:
        return lookup(gpu_key).key
    except CatalogError:
        return gpu_key


def run_cost(seconds: float, price: Price) -> float:
    """US dollars for ``seconds`` of one GPU at ``price``, billed per second with no minimum."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds}")
    return seconds / 3600.0 * price.usd_per_hour


# --- loading -------------------------------------------------------------------------------


def default_prices_path() -> Path:
    return paths.conf_dir() / "prices" / "default.yaml"


def load_prices(path: Optional[Path] = None) -> PriceList:
    """The price list in ``path`` (default ``conf/prices/default.yaml``), read once and cached."""
    return _load(str(Path(path) if path is not None else default_prices_path()))


def price_for(gpu_key: str, provider: Optional[str] = None,
              price_list: Optional[PriceList] = None) -> Optional[Price]:
    """:meth:`PriceList.price_for` on the default price list (or on ``price_list``)."""
    return (price_list or load_prices()).price_for(gpu_key, provider)


@functools.lru_cache(maxsize=8)
def _load(path_str: str) -> PriceList:
    path = Path(path_str)
    data = paths.read_versioned_yaml(path, schema_version=PRICES_SCHEMA_VERSION, what="price list",
                                     error=PriceError)
    default_provider = data.get("default_provider")
    if default_provider is not None and not isinstance(default_provider, str):
        raise PriceError(f"{path}: default_provider: expected a provider name or null")
    cpu = _price(path, "cpu", "any", CPU_KEY, data.get("cpu") or {
        "usd_per_hour": 0, "source": "expkit default (CPU machines are not priced)", "as_of": dt.date.min})
    prices = {}
    for provider, rows in (data.get("prices") or {}).items():
        if not isinstance(rows, dict):
            raise PriceError(f"{path}: prices.{provider}: expected a mapping of GPU keys to prices")
        for gpu, row in rows.items():
            prices[(str(provider), str(gpu))] = _price(path, f"prices.{provider}.{gpu}", str(provider), str(gpu), row)
    return PriceList(prices=prices, cpu=cpu, default_provider=default_provider, path=str(path))


def _price(path: Path, where: str, provider: str, gpu: str, row: Any) -> Price:
    if not isinstance(row, dict):
        raise PriceError(f"{path}: {where}: expected usd_per_hour, source and as_of")
    unknown = set(row) - {"usd_per_hour", "source", "as_of", "note"}
    if unknown:
        raise PriceError(f"{path}: {where}.{sorted(unknown)[0]}: unknown key "
                         "(valid keys: usd_per_hour, source, as_of, note)")
    for key in ("usd_per_hour", "source", "as_of"):
        if row.get(key) in (None, ""):
            raise PriceError(f"{path}: {where}.{key}: required key is missing "
                             "(every price needs its figure, the page it was read on, and its date)")
    value, as_of = row["usd_per_hour"], row["as_of"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PriceError(f"{path}: {where}.usd_per_hour: expected a number, got {value!r}")
    if isinstance(as_of, str):
        try:
            as_of = dt.date.fromisoformat(as_of)
        except ValueError:
            raise PriceError(f"{path}: {where}.as_of: expected a date written YYYY-MM-DD, got {as_of!r}") from None
    if not isinstance(as_of, dt.date):
        raise PriceError(f"{path}: {where}.as_of: expected a date written YYYY-MM-DD, got {as_of!r}")
    try:
        return Price(provider=provider, gpu=gpu, usd_per_hour=float(value), source=str(row["source"]),
                     as_of=as_of, note=str(row.get("note") or ""))
    except ValueError as e:
        raise PriceError(f"{path}: {where}: {e}") from None
