"""The GPU catalog: its data file, name lookup, and reconciling it with a (fake or real) device."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from expkit.manifest import catalog
from expkit.manifest.catalog import (CC_FIELDS, PRODUCT_FIELDS, CatalogError, DeviceProps, device_props, load_catalog,
                            lookup, match_device, reconcile)
from expkit.core.errors import ExpkitError

REQUIRED = ("t4", "a10g", "l4", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "rtx-4090")
CATALOG_FILE = Path(catalog.__file__).resolve().parents[2] / "conf" / "catalog" / "gpus.yaml"


def _no_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


# String condition: evaluated only when a GPU test is set up, so CPU runs do not import torch.
gpu = pytest.mark.skipif("_no_cuda()", reason="needs a CUDA device")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# --- the data file -------------------------------------------------------------------------


def test_default_path_is_the_shipped_file():
    assert catalog.default_catalog_path().resolve() == CATALOG_FILE


def test_the_shipped_data_files_read_the_same_with_the_fast_loader_as_with_the_pure_python_one():
    """Data files are read with libyaml's safe loader where PyYAML has it; from every shipped
    file it reads, that builds the same data as PyYAML's pure-Python safe loader."""
    from expkit.manifest import paths, prices

    for path, version in ((CATALOG_FILE, catalog.CATALOG_SCHEMA_VERSION),
                          (prices.default_prices_path(), prices.PRICES_SCHEMA_VERSION)):
        got = paths.read_versioned_yaml(path, schema_version=version, what="data", error=CatalogError)
        assert got == yaml.load(path.read_text(), Loader=yaml.SafeLoader), path
    if getattr(yaml, "__with_libyaml__", False):  # PyYAML's wheels are built with it
        assert paths.SAFE_LOADER is yaml.CSafeLoader


def test_catalog_has_the_required_gpus(cat):
    assert set(REQUIRED) <= set(cat)


@pytest.mark.parametrize("key", REQUIRED)
def test_every_field_present_and_every_number_sourced(cat, key):
    spec = cat[key]
    for f in CC_FIELDS:
        v = getattr(spec, f)
        assert isinstance(v, int) and (v > 0 or f == "reserved_shared_memory_per_block"), (key, f)
    for f in CC_FIELDS + PRODUCT_FIELDS:
        source = spec.sources.get(f, "")
        assert isinstance(source, str) and len(source.strip()) > 10, f"{key}.{f} has no real source"
    # A null figure must say why: the chip lacks the unit, or nobody could source it.
    for f in PRODUCT_FIELDS:
        if getattr(spec, f) is None:
            assert any(w in spec.sources[f].lower() for w in ("none on this chip", "unknown")), (key, f)


def test_raw_file_gives_every_product_field_explicitly():
    # The loader would refuse a missing key, but check the file itself too: null must be written.
    text = CATALOG_FILE.read_text()
    for key, entry in yaml.safe_load(text)["gpus"].items():
        assert set(PRODUCT_FIELDS) <= set(entry), key
        assert set(PRODUCT_FIELDS) <= set(entry["sources"]), key
    assert "Peak rates are DENSE" in text


@pytest.mark.parametrize("key", REQUIRED)
def test_figures_are_self_consistent(cat, key):
    s = cat[key]
    assert s.shared_memory_per_block == 48 * 1024
    assert s.shared_memory_per_block_optin + s.reserved_shared_memory_per_block <= s.shared_memory_per_sm
    assert s.max_threads_per_block <= s.max_threads_per_sm
    assert s.registers_per_sm >= s.max_registers_per_block
    # Dense tensor rates double as the operand width halves (tf32 -> 16-bit -> fp8); a sparse
    # figure left unhalved in one column would break this chain.
    if s.bf16_tflops and s.tf32_tflops:
        assert s.bf16_tflops == pytest.approx(2 * s.tf32_tflops, rel=0.02)
    if s.fp8_tflops and s.fp16_tflops:
        assert s.fp8_tflops == pytest.approx(2 * s.fp16_tflops, rel=0.02)
    if s.sm_count is not None:
        assert 20 <= s.sm_count <= 200


def test_seed_l4_limits(cat):
    # The L4 seed hit "48 KB max on L4"; the opt-in path allows 99 KiB (cc 8.9).
    l4 = cat["l4"]
    assert (l4.compute_capability, l4.shared_memory_per_block, l4.shared_memory_per_block_optin) == \
        ((8, 9), 49152, 101376)


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, key", [
    ("h100-sxm", "h100-sxm"),
    ("H100", "h100-sxm"),
    ("h100 sxm", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("nvidia l4", "l4"),
    ("NVIDIA L4", "l4"),
    ("Tesla T4", "t4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("rtx4090", "rtx-4090"),
    ("NVIDIA L40S", "l40s"),
])
def test_lookup_accepts_keys_aliases_and_loose_spellings(cat, name, key):
    assert lookup(name, cat).key == key


@pytest.mark.parametrize("name, nearest", [
    ("a100", ["a100-40gb", "a100-80gb"]),  # ambiguous: both A100s start so
    ("l40", ["l40s"]),                     # a different card, not a typo of the L40S
    ("h300", ["h200"]),
])
def test_lookup_refuses_unknown_names_and_suggests_keys(cat, name, nearest):
    with pytest.raises(CatalogError) as e:
        lookup(name, cat)
    msg = str(e.value)
    assert repr(name) in msg and all(k in msg for k in nearest)
    assert isinstance(e.value, ExpkitError)


def test_match_device_takes_only_declared_names(cat):
    assert match_device("NVIDIA H100 80GB HBM3", cat).key == "h100-sxm"
    assert match_device("NVIDIA H100 NVL", cat) is None
    assert match_device("NVIDIA L40", cat) is None


# --- loader errors (a copy of the shipped file, broken one way each) ------------------------


def _write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(CATALOG_FILE.read_text())
    mutate(data)
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_loader_refuses_a_figure_without_source(tmp_path):
    path = _write(tmp_path, lambda d: d["gpus"]["l4"]["sources"].pop("l2_bytes"))
    with pytest.raises(CatalogError, match=r"gpus\.l4.*no source for l2_bytes"):
        load_catalog(path)


def test_loader_refuses_a_missing_product_field(tmp_path):
    path = _write(tmp_path, lambda d: d["gpus"]["t4"].pop("fp8_tflops"))
    with pytest.raises(CatalogError, match=r"gpus\.t4\.fp8_tflops: required key is missing"):
        load_catalog(path)


def test_loader_refuses_an_alias_shared_by_two_gpus(tmp_path):
    path = _write(tmp_path, lambda d: d["gpus"]["h100-pcie"]["aliases"].append("H100"))
    with pytest.raises(CatalogError, match="also names"):
        load_catalog(path)


def test_loader_refuses_an_unknown_compute_capability(tmp_path):
    path = _write(tmp_path, lambda d: d["gpus"]["l4"].update(compute_capability="12.0"))
    with pytest.raises(CatalogError, match="12.0"):
        load_catalog(path)


# --- the device ----------------------------------------------------------------------------


def _props(**over) -> DeviceProps:
    base = dict(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132, warp_size=32,
                max_threads_per_sm=2048, registers_per_sm=65536, shared_memory_per_block=49152,
                shared_memory_per_block_optin=232448, shared_memory_per_sm=233472, l2_bytes=50 << 20)
    base.update(over)
    return DeviceProps(**base)


def test_reconcile_agreeing_device_changes_nothing(cat):
    spec = cat["h100-sxm"]
    out, notes = reconcile(spec, _props(l2_bytes=spec.l2_bytes))
    assert out is spec and notes == ()


def test_reconcile_device_wins_and_says_so(cat):
    spec = dataclasses.replace(cat["h100-sxm"], l2_bytes=50 << 20)
    out, notes = reconcile(spec, _props(l2_bytes=60 << 20, sm_count=114))
    assert out.l2_bytes == 60 << 20 and out.sm_count == 114
    assert "catalog says 50 MiB L2 for h100-sxm, device reports 60 MiB" in notes
    assert "catalog says 132 SMs for h100-sxm, device reports 114" in notes
    assert "device" in out.sources["l2_bytes"] and out.sources["fp8_tflops"] == spec.sources["fp8_tflops"]
    assert len(notes) == 2


def test_reconcile_fills_unknowns_silently_and_ignores_unread_values(cat):
    spec = cat["l40s"]
    assert spec.l2_bytes is None
    out, notes = reconcile(spec, _props(name="NVIDIA L40S", compute_capability=(8, 9), sm_count=142,
                                        max_threads_per_sm=1536, shared_memory_per_block_optin=101376,
                                        shared_memory_per_sm=102400, l2_bytes=96 << 20, registers_per_sm=None))
    assert out.l2_bytes == 96 << 20 and notes == ()
    assert out.registers_per_sm == spec.registers_per_sm


def test_reconcile_flags_a_device_of_another_name(cat):
    _, notes = reconcile(cat["h100-sxm"], _props(name="NVIDIA H100 NVL", l2_bytes=cat["h100-sxm"].l2_bytes))
    assert len(notes) == 1 and "H100 NVL" in notes[0]


def test_reconcile_reports_compute_capability(cat):
    _, notes = reconcile(cat["l4"], _props(name="NVIDIA L4", compute_capability=(8, 6), sm_count=58,
                                           max_threads_per_sm=1536, shared_memory_per_block_optin=101376,
                                           shared_memory_per_sm=102400, l2_bytes=48 << 20))
    assert notes == ("catalog says compute capability 8.9 for l4, device reports 8.6",)


class _FakeCuda:
    def __init__(self, props, available=True):
        self._props, self._available = props, available

    def is_available(self):
        return self._available

    def device_count(self):
        return 1

    def get_device_properties(self, index):
        return self._props


def test_device_props_reads_the_torch_attribute_names():
    p = SimpleNamespace(name="NVIDIA L4", major=8, minor=9, multi_processor_count=58, warp_size=32,
                        max_threads_per_block=1024, max_threads_per_multi_processor=1536,
                        regs_per_multiprocessor=65536,
                        shared_memory_per_block=49152, shared_memory_per_block_optin=101376,
                        shared_memory_per_multiprocessor=102400, L2_cache_size=48 << 20,
                        total_memory=24 << 30)
    got = device_props(cuda=_FakeCuda(p))
    assert got == DeviceProps(name="NVIDIA L4", compute_capability=(8, 9), sm_count=58, warp_size=32,
                              max_threads_per_block=1024, max_threads_per_sm=1536, registers_per_sm=65536,
                              shared_memory_per_block=49152, shared_memory_per_block_optin=101376,
                              shared_memory_per_sm=102400, l2_bytes=48 << 20, total_memory_bytes=24 << 30)


def test_device_props_tolerates_an_older_torch():
    p = SimpleNamespace(name="Tesla T4", major=7, minor=5, multi_processor_count=40, total_memory=15 << 30)
    got = device_props(cuda=_FakeCuda(p))
    assert got.sm_count == 40 and got.l2_bytes is None and got.shared_memory_per_block_optin is None


def test_device_props_is_none_without_a_device():
    assert device_props(cuda=_FakeCuda(None, available=False)) is None


@pytest.mark.gpu
@gpu
def test_real_device_reconciles_with_its_catalog_entry():
    props = device_props()
    assert props is not None
    # torch of the version in use must expose the fields occupancy needs; getattr would hide it.
    for field in ("warp_size", "max_threads_per_block", "max_threads_per_sm", "registers_per_sm",
                  "shared_memory_per_block_optin", "shared_memory_per_sm", "l2_bytes"):
        assert getattr(props, field) is not None, field
    spec = match_device(props.name)
    if spec is None:
        pytest.skip(f"{props.name!r} is not in the catalog")
    merged, notes = reconcile(spec, props)
    out = os.environ.get("EXPKIT_DEVICE_PROPS_OUT")
    if out:  # lets a device run keep what it read, as evidence for the catalog's sources
        Path(out).write_text(json.dumps({"props": dataclasses.asdict(props), "catalog_key": spec.key,
                                         "mismatches": list(notes)}, indent=2))
    print("\n".join(notes) or f"{spec.key}: catalog agrees with the device")
    assert merged.compute_capability == spec.compute_capability, notes
    assert merged.sm_count == props.sm_count
