import pytest
import torch

from expkit.checks import oracles
from expkit.manifest import Oracle


def ALLCLOSE(**kw):
    return Oracle(kind="allclose", **kw)


def t(*v, dtype=torch.float32):
    return torch.tensor(v, dtype=dtype)


def test_allclose_passes_within_and_fails_outside_default_fp32_tolerance():
    e = t(1.0, 2.0, 3.0)
    assert oracles.check_outputs(ALLCLOSE(), e, e + 1e-6, case="c").ok
    f = oracles.check_outputs(ALLCLOSE(), e, e + t(0, 0, 1e-3), case="c")
    assert not f.ok and "1 of 3 elements" in f.message and "index [2]" in f.message


def test_nan_never_passes():
    e = t(1.0, 2.0)
    f = oracles.check_outputs(ALLCLOSE(rtol=1.0, atol=1.0), e, t(1.0, float("nan")), case="c")
    assert not f.ok and "NaN" in f.message


def test_per_dtype_defaults():
    assert oracles.tolerance(ALLCLOSE(), torch.bfloat16) == (1.6e-2, 1e-5)
    assert oracles.tolerance(ALLCLOSE(rtol=0.1), torch.float16) == (0.1, 1e-5)
    with pytest.raises(ValueError, match="state rtol and atol"):
        oracles.tolerance(ALLCLOSE(), torch.float8_e4m3fn)


def test_shape_and_dtype_mismatch():
    f = oracles.check_outputs(ALLCLOSE(), t(1.0, 2.0), t(1.0), case="c")
    assert not f.ok and "expected (2,)" in f.message
    f = oracles.check_outputs(ALLCLOSE(), t(1.0), t(1.0, dtype=torch.float64), case="c")
    assert not f.ok and "float64" in f.message


def test_exact_is_bitwise():
    e = t(0.0, 1.0)
    assert oracles.check_outputs(Oracle(kind="exact"), e, e.clone(), case="c").ok
    assert not oracles.check_outputs(Oracle(kind="exact"), e, t(-0.0, 1.0), case="c").ok
    assert not oracles.check_outputs(Oracle(kind="exact"), e, e + 1e-7, case="c").ok


def test_relative_error_against_float64_reference():
    ref = torch.randn(100, dtype=torch.float64)
    spec = Oracle(kind="relative_error", max_error=1e-3)
    ok = oracles.check_outputs(spec, ref.float(), ref.float() * (1 + 1e-4), case="c", reference64=lambda: ref)
    bad = oracles.check_outputs(spec, ref.float(), ref.float() * 1.01, case="c", reference64=lambda: ref)
    assert ok.ok and not bad.ok and bad.figure == pytest.approx(0.01, rel=1e-3)


def test_relative_error_is_the_same_over_many_chunks(monkeypatch):
    from expkit.checks import chunks

    ref = torch.randn(10_000, dtype=torch.float64)
    spec = Oracle(kind="relative_error", max_error=1e-3)
    whole = oracles.check_outputs(spec, ref.float(), ref.float() * 1.01, case="c", reference64=lambda: ref)
    monkeypatch.setattr(chunks, "HOST_CHUNK", 997)  # eleven chunks, the last one short
    chunked = oracles.check_outputs(spec, ref.float(), ref.float() * 1.01, case="c", reference64=lambda: ref)
    assert chunked.figure == pytest.approx(whole.figure, rel=1e-9) and not chunked.ok


def test_custom_oracle_figure():
    spec = Oracle(kind="custom", function="m:f", max_error=0.5)
    f = oracles.check_outputs(spec, t(1.0), t(1.0), case="c", custom=lambda e, a, i: (False, 0.7))
    assert not f.ok and f.figure == 0.7


def test_null_candidates_include_passthrough():
    x = torch.randn(4)
    nulls = oracles.null_candidates(x * 2, (x,))
    assert set(nulls) == {"zeros", "a constant", "an input passed through"}
    # the constants take no memory of the output's size: one element, broadcast
    for label in ("zeros", "a constant"):
        (t,) = nulls[label]
        assert t.shape == x.shape and t.stride() == (0,) and t.untyped_storage().nbytes() == 4
