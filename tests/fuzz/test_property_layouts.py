"""Property tests (hypothesis): every operator and rearrange on random strided views of up to 8
dims, against independent NumPy references (issue #7).

Shapes have 0 to 8 dims with extents 0, 1, 2, 3 (0 and 1 extents included); every operand is a
random view inside a CANARY-filled buffer: any memory order (transposes), steps, negative steps,
padding, 0-stride broadcast dims and NumPy broadcasting (size-1 and missing leading dims) for
inputs, and sometimes an output that aliases an input exactly (in place). Each call is compared
with NumPy (elementwise: the operator on float64 values rounded like the library promises;
rearrange: ``np.copyto``), and no byte outside the output may change.

test_elementwise.py covers layouts up to 3 dims for two operators; test_rearrange.py up to 6
dims. In CI each operator runs a few float32 examples (each new layout class JIT-compiles a
kernel, ~0.5 s); ``--long`` (INFINIOP_LONG=1) runs 200 examples per operator over all its
dtypes.
"""

from __future__ import annotations

import os
from math import prod

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_descriptors import reference, small_values
from test_robustness import Buffer

import infiniop
from infiniop import DType
from infiniop import TensorDescriptor as TD
from infiniop.ops import ALL as OPS
from infiniop.rearrange import create_rearrange_descriptor

LONG = os.environ.get("INFINIOP_LONG") == "1"
H = infiniop.create_handle("cpu")
MAX_NUMEL = 2000


@st.composite
def shapes(draw):
    nd = draw(st.integers(0, 8))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 1, 2, 2, 3]), min_size=nd, max_size=nd)))
    while prod(shape) > MAX_NUMEL:
        shape = tuple(min(n, 2) for n in shape) if max(shape) > 2 else shape[1:]
    return shape


@st.composite
def strided(draw, shape, *, broadcast_ok: bool):
    """Element strides of a random view of ``shape``: a dense layout in a random memory order,
    then steps, padding and flips; inputs may also get 0 strides (broadcast)."""
    nd = len(shape)
    perm = draw(st.permutations(range(nd)))
    strides, step = [0] * nd, 1
    for d in reversed(perm):  # perm[0] is outermost in memory
        strides[d] = step * draw(st.sampled_from([1, 1, 2]))  # a step
        step = strides[d] * max(shape[d], 1) + draw(st.sampled_from([0, 0, 1]))  # padding
    for d in range(nd):
        if draw(st.integers(0, 3)) == 0:
            strides[d] = -strides[d]
        if broadcast_ok and shape[d] > 1 and draw(st.integers(0, 4)) == 0:
            strides[d] = 0
    return tuple(strides)


@st.composite
def elementwise_case(draw, spec, dtypes):
    out_dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes())
    ins = []
    full = draw(st.integers(0, spec.arity - 1))  # one input has the output's shape
    for k in range(spec.arity):
        dt = spec.input_dtype(k, out_dtype)
        kind = "view" if k == full else draw(st.sampled_from(["view", "numpy_broadcast"]))
        if kind == "numpy_broadcast":
            lead = draw(st.integers(0, len(shape)))
            in_shape = tuple(1 if draw(st.booleans()) else n for n in shape[lead:])
        else:
            in_shape = shape
        ins.append((dt, in_shape, draw(strided(in_shape, broadcast_ok=True))))
    out_strides = draw(strided(shape, broadcast_ok=False))
    inplace = draw(st.sampled_from([None] + list(range(spec.arity))))
    return out_dtype, shape, out_strides, ins, inplace, draw(st.integers(0, 2**32 - 1))


def run_elementwise(spec, case):
    out_dtype, shape, out_strides, ins, inplace, seed = case
    rng = np.random.default_rng(seed)
    bufs = []
    for k, (dt, in_shape, st_) in enumerate(ins):
        b = Buffer(spec.inputs[k], TD(dt, in_shape, st_))
        b.view()[...] = small_values(dt, prod(in_shape), rng).reshape(in_shape)
        b.snapshot()
        bufs.append(b)
    logical = [np.array(np.broadcast_to(b.view(), shape)) for b in bufs]
    want = reference(spec.name, out_dtype, logical)
    alias = None
    if inplace is not None:  # only an input that can be the output: same dtype, full shape,
        dt, in_shape, st_ = ins[inplace]  # no broadcast dim
        if dt is out_dtype and in_shape == shape and all(
                s != 0 or n <= 1 for s, n in zip(st_, shape)):
            alias = inplace
    if alias is not None:
        o = bufs[alias]
        out_desc = o.desc
    else:
        out_desc = TD(out_dtype, shape, out_strides)
        o = Buffer("out", out_desc)
    desc = spec.create_descriptor(H, out_desc, *[b.desc for b in bufs])
    desc.calculate(None, o.view(), *[b.view() for b in bufs])
    got = o.view()
    assert np.array_equal(got, want, equal_nan=out_dtype.is_float), \
        f"{spec.name} {out_desc} {[b.desc for b in bufs]}:\n{got}\nwant\n{want}"
    for b in bufs + ([o] if alias is None else []):
        writable = b is o
        stray = b.changed() & ~(b.covered() if writable else np.zeros(b.raw.size, bool))
        assert not stray.any(), f"bytes of '{b.name}' outside the output changed"


def _budget(ci, long):
    return settings(max_examples=long if LONG else ci, deadline=None, derandomize=not LONG,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("spec", OPS, ids=lambda s: s.name)
@_budget(ci=4, long=200)
@given(data=st.data())
def test_every_operator_on_random_views_up_to_8_dims(spec, data):
    dtypes = sorted(spec.dtypes) if LONG else [DType.F32]
    case = data.draw(elementwise_case(spec, dtypes))
    run_elementwise(spec, case)


@_budget(ci=40, long=2000)
@given(dtype=st.sampled_from([np.uint8, np.float16, np.float32, np.float64]),
       shape=shapes(), data=st.data())
def test_rearrange_on_random_views_up_to_8_dims(dtype, shape, data):
    src_st = data.draw(strided(shape, broadcast_ok=True))
    dst_st = data.draw(strided(shape, broadcast_ok=False))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    from infiniop.dtype import from_numpy

    dt = from_numpy(dtype)
    src = Buffer("src", TD(dt, shape, src_st))
    src.raw[...] = rng.integers(0, 256, src.raw.size, dtype=np.uint8)
    src.snapshot()
    dst = Buffer("dst", TD(dt, shape, dst_st))
    expected = Buffer("expected", TD(dt, shape, dst_st))
    np.copyto(expected.view(), src.view())
    with create_rearrange_descriptor(H, dst.desc, src.desc) as r:
        r.calculate(dst.view(), src.view())
    assert np.array_equal(dst.raw, expected.raw), f"{shape} dst {dst_st} src {src_st}"
    assert not src.changed().any()
