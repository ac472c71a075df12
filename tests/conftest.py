"""Shared test helpers: exact (bitwise) comparison, canary-filled strided buffers, Status checks."""

from __future__ import annotations

from math import prod

import ml_dtypes
import numpy as np
import pytest

import infiniop
from infiniop import InfiniError, Status

CANARY = 0xA5  # every byte of a buffer's gaps; must survive every call


@pytest.fixture(scope="session")
def handle():
    return infiniop.create_handle("cpu")


def raises(status: Status, fn, *args, match: str | None = None, **kw) -> InfiniError:
    """Call fn and assert it raises InfiniError with exactly ``status`` (and ``match`` in msg)."""
    with pytest.raises(InfiniError) as ei:
        fn(*args, **kw)
    assert ei.value.status is status, f"expected {status.name}, got {ei.value!r}"
    if match is not None:
        assert match in str(ei.value), f"{match!r} not in {str(ei.value)!r}"
    return ei.value


def to_numpy(x) -> np.ndarray:
    """A NumPy view/copy of an array or torch tensor (bf16 through ml_dtypes)."""
    if isinstance(x, np.ndarray):
        return x
    import torch

    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def assert_exact(got, want) -> None:
    """Same dtype, shape and bits; for floats NaN positions must match (any NaN payload)."""
    got, want = to_numpy(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f" or want.dtype == ml_dtypes.bfloat16:
        with np.errstate(invalid="ignore"):  # signalling NaNs
            gn = np.isnan(got.astype(np.float64))
            wn = np.isnan(want.astype(np.float64))
        bad = gn != wn
        ubits = np.dtype(f"u{want.dtype.itemsize}")
        bad |= ~wn & (np.ascontiguousarray(got).view(ubits) != np.ascontiguousarray(want).view(ubits))
    else:
        bad = got != want
    if bad.any():
        idx = np.argwhere(bad)[:5]
        detail = ", ".join(f"{tuple(i)}: got {got[tuple(i)]!r} want {want[tuple(i)]!r}" for i in idx)
        raise AssertionError(f"{int(bad.sum())} of {bad.size} elements differ: {detail}")


def place(values: np.ndarray, *, perm=None, steps=None, pad=0, flip=False):
    """Store ``values`` as a strided view inside a bigger buffer whose other bytes are CANARY.

    ``perm``: memory order of the dims (outermost first; default row-major); ``steps``: element
    step per dim; ``pad``: extra elements on every memory dim; ``flip``: negative strides on
    every dim. Returns ``(view, buffer, covered)`` where ``covered`` marks the buffer elements
    the view owns (the rest must stay CANARY)."""
    values = np.asarray(values)
    shape, nd = values.shape, values.ndim
    perm = tuple(range(nd)) if perm is None else tuple(perm)
    steps = (1,) * nd if steps is None else tuple(steps)
    ext = [max(shape[d], 1) * steps[d] + pad for d in perm]  # memory extents, outermost first
    size = prod(ext)
    buf = np.full(size * values.itemsize, CANARY, np.uint8).view(values.dtype)
    idx = np.arange(size)
    inv = np.argsort(perm)
    sl = tuple(slice(None, shape[d] * steps[d], steps[d]) for d in range(nd))

    def carve(a):
        v = a.reshape(ext).transpose(inv)[sl] if nd else a[:1].reshape(())
        return v[(slice(None, None, -1),) * nd] if flip and nd else v

    view = carve(buf)
    view[...] = values
    covered = np.zeros(size, bool)
    covered[carve(idx).ravel()] = True
    return view, buf, covered


def assert_canary(buf: np.ndarray, covered: np.ndarray) -> None:
    """The buffer's elements outside ``covered`` still hold the CANARY bytes."""
    raw = buf.view(np.uint8).reshape(buf.size, buf.itemsize)[~covered]
    assert (raw == CANARY).all(), "bytes outside the output view were written"


# ---- robustness tests (issue #7): opt-in long soak and fuzz runs ---------------------------
# `python -m pytest --long` (or INFINIOP_LONG=1) runs the long variants; `-m long` selects them.


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long soak and fuzz variants (same as INFINIOP_LONG=1)")
    parser.addoption("--gpu", action="store_true", default=False,
                     help="run the Triton suite on a real CUDA GPU instead of the interpreter, "
                          "and the GPU-only tests (same as INFINIOP_GPU=1)")


def pytest_configure(config):
    import os

    config.addinivalue_line("markers", "long: long soak/fuzz run; needs --long or INFINIOP_LONG=1")
    if config.getoption("--long"):
        os.environ["INFINIOP_LONG"] = "1"
    if config.getoption("--gpu"):
        os.environ["INFINIOP_GPU"] = "1"
# ---- end of the robustness block ----------------------------------------------------------
