"""The price list: every figure cited and dated, unknown stays unknown, and the cost arithmetic."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from expkit.manifest import prices
from expkit.manifest.catalog import load_catalog
from expkit.core.errors import ExpkitError
from expkit.manifest.prices import Price, PriceError, PriceList, load_prices, price_for, run_cost

PRICES_FILE = Path(prices.__file__).resolve().parents[2] / "conf" / "prices" / "default.yaml"


@pytest.fixture(scope="module")
def pl() -> PriceList:
    return load_prices()


def test_default_path_is_the_shipped_file():
    assert prices.default_prices_path().resolve() == PRICES_FILE


def test_every_price_is_cited_dated_and_names_a_catalog_gpu(pl):
    gpus = set(load_catalog())
    assert len(pl.prices) >= 5 and len(pl.providers) >= 3
    for (provider, gpu), price in pl.prices.items():
        assert (price.provider, price.gpu) == (provider, gpu)
        assert gpu in gpus, f"{provider}/{gpu} is not a catalog key"
        assert 0 < price.usd_per_hour < 50, (provider, gpu)
        assert "https://" in price.source or "seed" in price.source, (provider, gpu)
        assert dt.date(2024, 1, 1) <= price.as_of <= dt.date(2026, 12, 31), (provider, gpu)


def test_the_seeds_l4_price(pl):
    p = pl.price_for("l4", "gcp")
    assert p.usd_per_hour == 0.60 and "gpu-session-report-l4.txt" in p.source and p.as_of == dt.date(2025, 10, 12)
    # the seed's own arithmetic: "3 hours x $0.60/hour = $1.80"
    assert run_cost(3 * 3600, p) == pytest.approx(1.80)


def test_unknown_is_none_never_a_guess(pl):
    assert pl.price_for("mi300x", "runpod") is None  # GPU nobody priced
    assert pl.price_for("l4", "azure") is None       # provider not listed
    assert pl.price_for("t4", "gcp") is None         # provider listed, GPU not at that provider
    assert pl.default_provider is None
    assert pl.price_for("l4") is None                # no provider given, none by default


def test_catalog_aliases_find_their_row(pl):
    assert pl.price_for("NVIDIA L4", "gcp") == pl.price_for("l4", "gcp")
    assert pl.price_for("H100", "lambda").gpu == "h100-sxm"


def test_cpu_costs_nothing_by_default(pl):
    for provider in (None, "aws", "nowhere"):
        p = pl.price_for("cpu", provider)
        assert p is not None and p.usd_per_hour == 0.0
        assert run_cost(7200, p) == 0.0


def test_module_level_price_for_uses_the_default_list(pl):
    assert price_for("l4", "gcp") == pl.price_for("l4", "gcp")
    assert price_for("l4", None) is None


def test_all_for_lists_every_provider(pl):
    rows = pl.all_for("l4")
    assert {r.provider for r in rows} >= {"gcp"} and all(r.gpu == "l4" for r in rows)
    assert [r.provider for r in rows] == sorted(r.provider for r in rows)


def test_run_cost_arithmetic():
    p = Price("x", "l4", 2.0, "test figure", dt.date(2026, 1, 1))
    assert run_cost(0, p) == 0.0
    assert run_cost(90, p) == pytest.approx(0.05)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            run_cost(bad, p)


def test_price_checks_itself():
    with pytest.raises(ValueError):
        Price("x", "l4", -1.0, "src", dt.date(2026, 1, 1))
    with pytest.raises(ValueError):
        Price("x", "l4", 1.0, "  ", dt.date(2026, 1, 1))


# --- loader errors ---------------------------------------------------------------------------


def _write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(PRICES_FILE.read_text())
    mutate(data)
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("key", ["source", "as_of", "usd_per_hour"])
def test_a_price_without_its_figure_source_or_date_is_refused(tmp_path, key):
    path = _write(tmp_path, lambda d: d["prices"]["gcp"]["l4"].pop(key))
    with pytest.raises(PriceError, match=rf"prices\.gcp\.l4\.{key}: required key is missing"):
        load_prices(path)


def test_bad_date_and_unknown_key_are_refused(tmp_path):
    path = _write(tmp_path, lambda d: d["prices"]["gcp"]["l4"].update(as_of="last week"))
    with pytest.raises(PriceError, match="as_of: expected a date"):
        load_prices(path)
    path = _write(tmp_path, lambda d: d["prices"]["gcp"]["l4"].update(usd_per_hr=1))
    with pytest.raises(ExpkitError, match="usd_per_hr: unknown key"):
        load_prices(path)


def test_default_provider_is_used_when_none_is_named(tmp_path):
    pl = load_prices(_write(tmp_path, lambda d: d.update(default_provider="gcp")))
    assert pl.price_for("l4").usd_per_hour == 0.60
    assert pl.price_for("l4", "runpod").provider == "runpod"
