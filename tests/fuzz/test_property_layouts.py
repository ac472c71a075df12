"""Property tests (hypothesis): every operator and rearrange on random strided views of up to 8
dims, against independent NumPy references (issue #7).

Shapes have 0 to 8 dims with extents 0, 1, 2, 3 (0 and 1 extents included); every operand is a
random view inside a CANARY-filled buffer: any memory order (transposes), steps, negative steps,
padding, 0-stride broadcast dims and NumPy broadcasting (size-1 and missing leading dims) for
inputs, and sometimes an output that aliases an input exactly (in place). Each call is compared
with NumPy (elementwise: the operator on float64 values rounded like the library promises, the
catalogue operators through tests/test_catalogue.py's references; rearrange: ``np.copyto``),
and no byte outside the outputs may change. Operands of their own shape (BLAS scalars,
rotm's param, the gating's heads, silu_and_mul's [..., 2d] input) keep it on a random view.

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
from test_catalogue import ENTRY as CATALOGUE
from test_catalogue import check_results
from test_catalogue import reference as catalogue_reference
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


def _signature(draw, spec, dtypes):
    """A signature whose first written operand has one of ``dtypes`` (CI: float32; where no
    signature writes float32, equal's bool, the one with the most float32 operands)."""
    w = next(k for k, o in enumerate(spec.operands) if o.writes)
    sigs = [s for s in spec.signatures if s.dtypes[w] in dtypes]
    if not sigs:
        return max(spec.signatures, key=lambda s: sum(d is DType.F32 for d in s.dtypes))
    return draw(st.sampled_from(sigs))


@st.composite
def elementwise_case(draw, spec, dtypes):
    """Per operand (C order): (dtype, shape, strides) of a random view; outputs get None and
    their own random strides; operands of their own shape (alpha, param, A_log...) keep it."""
    sig = _signature(draw, spec, dtypes)
    ops = spec.operands
    shape = draw(shapes())
    if spec.name == "silu_and_mul" and not shape:
        shape = (1,)  # the input is [..., 2d]: at least one dim
    own = CATALOGUE[spec.name].own_shapes(shape) if spec.name in CATALOGUE else {}
    plain = [k for k, o in enumerate(ops) if o.role == "in" and o.name not in own]
    keeps = any(o.role == "inout" for o in ops) or not plain
    full = None if keeps else draw(st.sampled_from(plain))  # one input has the output's shape
    operands = []
    for k, o in enumerate(ops):
        dt = sig.dtypes[k]
        if o.role == "out":
            operands.append((dt, shape, draw(strided(shape, broadcast_ok=False)), None))
            continue
        if o.name in own:
            in_shape = own[o.name]
        elif o.role == "in" and k != full and draw(st.booleans()):  # NumPy broadcasting
            lead = draw(st.integers(0, len(shape)))
            in_shape = tuple(1 if draw(st.booleans()) else n for n in shape[lead:])
        else:
            in_shape = shape
        operands.append((dt, in_shape, draw(strided(in_shape, broadcast_ok=o.role == "in")),
                         o.role))
    inplace = draw(st.sampled_from([None] + plain))
    return sig, shape, operands, inplace, draw(st.integers(0, 2**32 - 1))


def run_elementwise(spec, case):
    sig, shape, operands, inplace, seed = case
    ops = spec.operands
    rng = np.random.default_rng(seed)
    bufs = []
    for o, (dt, in_shape, st_, role) in zip(ops, operands):
        b = Buffer(o.name, TD(dt, in_shape, st_))
        if role is not None:
            b.view()[...] = small_values(dt, prod(in_shape), rng).reshape(in_shape)
            b.snapshot()
        bufs.append(b)
    out_k = [k for k, o in enumerate(ops) if o.role == "out"]
    if inplace is not None and out_k:  # an input that can be the output: same dtype, the
        dt, in_shape, st_, _ = operands[inplace]  # output's shape, no broadcast dim
        if dt is sig.dtypes[out_k[0]] and in_shape == shape and all(
                s != 0 or n <= 1 for s, n in zip(st_, shape)):
            bufs[out_k[0]] = bufs[inplace]
    reads = [k for k, o in enumerate(ops) if o.reads]
    logical = [np.array(bufs[k].view()) for k in reads]
    if spec.name in CATALOGUE:
        entry = CATALOGUE[spec.name]
        want = catalogue_reference(entry, sig, logical, {p.name: p.default for p in spec.params})
    else:
        out_dtype = sig.dtypes[out_k[0]]
        want = [reference(spec.name, out_dtype, [np.array(np.broadcast_to(x, shape))
                                                 for x in logical])]
    desc = spec.create_descriptor(H, *[b.desc for b in bufs])
    desc.calculate(None, *[b.view() for b in bufs])
    what = f"{spec.name} {[b.desc for b in bufs]}"
    if spec.name in CATALOGUE:
        check_results(entry, sig, [b.view() for b in bufs], want, logical[0])
    else:
        got = bufs[out_k[0]].view()
        assert np.array_equal(got, want[0], equal_nan=got.dtype.kind == "f"), \
            f"{what}:\n{got}\nwant\n{want[0]}"
    written = {id(bufs[k]) for k, o in enumerate(ops) if o.writes}
    for b in {id(b): b for b in bufs}.values():
        allowed = b.covered() if id(b) in written else np.zeros(b.raw.size, bool)
        assert not (b.changed() & ~allowed).any(), f"{what}: bytes of '{b.name}' outside " \
                                                   "the outputs changed"


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
