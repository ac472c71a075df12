"""Fuzz targets (hypothesis) over the descriptor constructors (issue #7).

1. ``TensorDescriptor`` / ``create_tensor_descriptor`` on random junk: either a descriptor whose
   invariants hold, or an ``InfiniError``; any other exception type is a bug.
2. ``create_<op>_descriptor`` / ``create_rearrange_descriptor`` on random descriptors (any
   dtype, shape, strides: broadcast, overlapping, negative, mismatched): either a descriptor or an
   ``InfiniError``; when valid and small, a run on canaried buffers matches NumPy and writes no
   byte outside the output, and a run with one operand's array laid out otherwise than its
   descriptor raises exactly BAD_TENSOR_SHAPE / BAD_TENSOR_STRIDES and writes nothing.

Brief in CI (about 300 examples in all); ``--long`` (or INFINIOP_LONG=1) runs 50x more, every
operator and dtype executed (CI executes a fixed few, to bound JIT compilation time).
"""

from __future__ import annotations

import os
from math import prod

import numpy as np
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_robustness import Buffer

import infiniop
from infiniop import DType, InfiniError
from infiniop import TensorDescriptor as TD
from infiniop.ops import ALL as OPS
from infiniop.rearrange import create_rearrange_descriptor

LONG = os.environ.get("INFINIOP_LONG") == "1"
H = infiniop.create_handle("cpu")
INT64_MAX = 2**63 - 1


def budget(ci: int):
    return settings(max_examples=ci * 50 if LONG else ci, deadline=None,
                    suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------------------------------
# 1. TensorDescriptor on junk
# ---------------------------------------------------------------------------------------------

EDGE_INTS = [0, 1, 2, -1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, -(2**63), 2**64, 2**64 + 1,
             -(2**64), 10**30]
junk_scalar = st.one_of(
    st.integers(-3, 8), st.sampled_from(EDGE_INTS), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), st.text(max_size=3),
    st.binary(max_size=3), st.sampled_from([np.int64(3), np.uint8(2), np.int8(-1), np.float32(2),
                                            np.bool_(True), np.uint64(2**63), object(), [2], ()]),
)
int_like = st.one_of(st.integers(0, 6), st.integers(-3, 2**65), st.sampled_from(EDGE_INTS),
                     st.sampled_from([np.int64(4), np.uint64(3), np.int32(-2)]))


@st.composite
def junk_sequence(draw, allow_none: bool):
    kind = draw(st.sampled_from(["ints", "ints", "ints", "mixed", "scalar", "other"]))
    if kind == "ints":
        items = draw(st.lists(int_like, max_size=9))
    elif kind == "mixed":
        items = draw(st.lists(st.one_of(int_like, junk_scalar), max_size=9))
    elif kind == "scalar":
        return draw(st.one_of(int_like, junk_scalar))
    else:
        return draw(st.sampled_from(["abc", b"\x02\x03", {1: 2}, {3, 4}, np.array([[2, 3]]),
                                     np.array(3), np.array([2, 3]), range(3), None]))
    container = draw(st.sampled_from([tuple, list, np.array, iter]))
    if container is np.array:
        try:
            return np.array(items)
        except (ValueError, OverflowError, TypeError):
            return tuple(items)
    return container(items) if (items or container is not iter) else ()


dtypes = st.one_of(
    st.sampled_from(list(DType)), st.sampled_from(list(DType)), st.integers(-3, 25),
    st.sampled_from(["float32", "f4", "bfloat16", "float16", "complex64", "", "F16", "int",
                     "bool", "uint8", "byte", "BF16", None, np.float32, np.complex64, np.void,
                     np.dtype(">f4"), np.dtype("V4"), torch.float32, torch.complex64,
                     torch.bfloat16, object(), 3.5, True, b"f4"]),
    st.text(max_size=8),
)


def check_descriptor_invariants(d: TD) -> None:
    assert isinstance(d.dtype, DType)
    assert isinstance(d.shape, tuple) and isinstance(d.strides, tuple)
    assert all(type(n) is int and 0 <= n <= INT64_MAX for n in d.shape), d.shape
    assert all(type(s) is int for s in d.strides), d.strides
    assert len(d.strides) == len(d.shape) == d.ndim
    assert d.numel == prod(d.shape) and d.numel * d.dtype.itemsize <= INT64_MAX
    lo, hi = d.reach
    if d.is_empty:
        assert (lo, hi) == (0, 0)
    else:
        assert lo == sum((n - 1) * s for n, s in zip(d.shape, d.strides) if s < 0)
        assert hi == sum((n - 1) * s for n, s in zip(d.shape, d.strides) if s > 0)
        assert (hi - lo + 1) * d.dtype.itemsize <= INT64_MAX
        if d.numel <= 4096:  # brute force: every element's offset lies in [lo, hi]
            idx = np.indices(d.shape).reshape(d.ndim, -1).T if d.ndim else np.zeros((1, 0), int)
            offs = idx @ np.array(d.strides, dtype=object) if d.ndim else np.array([0])
            assert min(offs) == lo and max(offs) == hi
    again = TD(d.dtype, d.shape, d.strides)
    assert again == d and hash(again) == hash(d)
    repr(d)
    d.is_contiguous()
    d.has_broadcast()


@budget(150)
@given(dtype=dtypes, shape=junk_sequence(False),
       strides=st.one_of(st.none(), junk_sequence(True)), c_api=st.booleans())
def test_fuzz_tensor_descriptor(dtype, shape, strides, c_api):
    try:
        d = (infiniop.create_tensor_descriptor(shape, strides, dtype) if c_api
             else TD(dtype, shape, strides))
    except InfiniError as e:
        event(f"refused {e.status.name}")
        return
    event("valid")
    check_descriptor_invariants(d)


# ---------------------------------------------------------------------------------------------
# 2. create_* on random descriptors, and a canaried run when valid
# ---------------------------------------------------------------------------------------------

# Executed in CI (kernel variants are JIT-compiled on first use: ~0.5 s each): every arity, the
# bool operand, and an integer type. --long executes everything.
CI_EXECUTED = {("neg", DType.F32), ("add", DType.F32), ("where", DType.F32), ("clip", DType.I16),
               ("rearrange", DType.F32), ("rearrange", DType.U8)}
TARGETS = [s.name for s in OPS] + ["rearrange"]
SPEC = {s.name: s for s in OPS}


@st.composite
def operand_descriptor(draw, dtype: DType, out_shape: tuple[int, ...], is_output: bool):
    """A descriptor related to ``out_shape``: equal, NumPy-broadcastable, or unrelated; strides
    row-major, permuted/stepped/flipped, zero, or junk small ints."""
    how = draw(st.sampled_from(["same", "same", "broadcast", "random"]))
    if how == "same":
        shape = out_shape
    elif how == "broadcast":
        lead = draw(st.integers(0, len(out_shape)))
        shape = tuple(1 if draw(st.booleans()) else n for n in out_shape[lead:])
    else:
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    nd = len(shape)
    style = draw(st.sampled_from(["contiguous", "dense", "junk", "zero"] if not is_output
                                 else ["contiguous", "dense", "dense", "junk"]))
    if style == "contiguous":
        return TD(dtype, shape)
    if style == "zero":
        return TD(dtype, shape, (0,) * nd)
    if style == "junk":
        return TD(dtype, shape, tuple(draw(st.lists(st.integers(-5, 5), min_size=nd, max_size=nd))))
    perm = draw(st.permutations(range(nd)))
    steps = draw(st.lists(st.integers(1, 2), min_size=nd, max_size=nd))
    strides, step = [0] * nd, 1
    for d in reversed(perm):
        strides[d] = step * steps[d] * (-1 if draw(st.booleans()) else 1)
        step *= max(shape[d], 1) * steps[d]
    return TD(dtype, shape, tuple(strides))


@st.composite
def create_call(draw):
    if not LONG and draw(st.integers(0, 3)):  # CI: mostly the executed (operator, dtype) pairs
        name, dtype = draw(st.sampled_from(sorted(CI_EXECUTED)))
    else:
        name = draw(st.sampled_from(TARGETS))
        dtype = draw(st.sampled_from([d for d in DType if d is not DType.F8]
                                     if draw(st.integers(0, 9)) == 0 else
                                     [DType.F32, DType.F16, DType.I16, DType.U8, DType.BF16]))
    out_shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    out = draw(operand_descriptor(dtype, out_shape, True))
    if name == "rearrange":
        ins_dtypes = [dtype if draw(st.integers(0, 9)) else DType.F64]
    else:
        spec = SPEC[name]
        ins_dtypes = [spec.input_dtype(k, dtype) if draw(st.integers(0, 15)) else DType.I64
                      for k in range(spec.arity)]
        if draw(st.integers(0, 20)) == 0:  # a wrong operand count now and then
            ins_dtypes = ins_dtypes[:-1] if draw(st.booleans()) else ins_dtypes + [dtype]
    ins = [draw(operand_descriptor(d, out.shape, False)) for d in ins_dtypes]
    j = draw(st.integers(0, len(ins)))  # an operand handed over as an array of another layout
    like = (out, *ins)[j]
    mislaid = (j, draw(operand_descriptor(like.dtype, like.shape, j == 0).filter(lambda d: d != like)))
    return name, out, ins, draw(st.integers(0, 2**32 - 1)), mislaid


def small_values(dtype: DType, n: int, rng) -> np.ndarray:
    """Small integers: exact in every float type, no overflow for the operators' arithmetic."""
    if dtype is DType.BOOL:
        return rng.random(n) < 0.5
    v = rng.integers(-8, 9, n)
    if not dtype.is_float and dtype not in (DType.I8, DType.I16, DType.I32, DType.I64):
        v = np.abs(v)
    v[v == 0] = 3  # no division by zero
    return v.astype(dtype.numpy)


NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
         "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "abs": np.abs,
         "relu": lambda x: np.maximum(x, 0), "where": np.where, "rearrange": lambda x: x,
         "clip": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)}


def reference(name: str, dtype: DType, inputs: list[np.ndarray]) -> np.ndarray:
    fn = NUMPY[name]
    with np.errstate(all="ignore"):
        if dtype.is_float:
            xs = [x if x.dtype == bool else x.astype(np.float64) for x in inputs]
            r = np.asarray(fn(*xs), np.float64)
            return (r if dtype is DType.F64 else r.astype(np.float32)).astype(dtype.numpy)
        return np.asarray(fn(*inputs)).astype(dtype.numpy)


def fill(bufs: list[Buffer], rng) -> None:
    """Every byte an input can reach (gaps included) gets a small value."""
    for b in bufs:
        lo, hi = b.desc.reach
        region = np.ndarray((hi - lo + 1,), b.desc.dtype.numpy, buffer=b.raw,
                            offset=b.origin + lo * b.isz)
        region[...] = small_values(b.desc.dtype, hi - lo + 1, rng)
        b.snapshot()


def offsets(d: TD) -> np.ndarray:
    """The element offset of every index in C order: what a layout means."""
    if not d.ndim:
        return np.zeros(1, np.int64)
    idx = np.indices(d.shape, dtype=np.int64).reshape(d.ndim, -1)
    return (np.array(d.strides, np.int64).reshape(-1, 1) * idx).sum(axis=0)


def run_mislaid(name, desc, out: TD, ins: list[TD], mislaid, seed: int) -> None:
    """Operand j handed over as an array laid out as ``other``: refused with the exact status
    (an independent oracle: same shape and the same offset for every index, or not), nothing
    written; skipped when the two layouts address the same elements in the same order."""
    j, other = mislaid
    descs = [out, *ins]
    if other.shape != descs[j].shape:
        want = infiniop.Status.BAD_TENSOR_SHAPE
    elif np.array_equal(offsets(other), offsets(descs[j])):
        event("mislaid: an equivalent layout")
        return
    else:
        want = infiniop.Status.BAD_TENSOR_STRIDES
    bufs = [Buffer("out", out)] + [Buffer("in", d) for d in ins]
    bufs[j] = Buffer("mislaid", other)
    fill(bufs[1:] if j else bufs[1:] + [bufs[0]], np.random.default_rng(seed))
    for b in bufs:
        b.snapshot()
    views = [b.view() for b in bufs]
    try:
        if name == "rearrange":
            desc.calculate(*views)
        else:
            desc.calculate(None, *views)
    except InfiniError as e:
        assert e.status is want, f"{name} operand {j} as {other}: {e!r}, want {want.name}"
    else:
        raise AssertionError(f"{name} operand {j} laid out as {other}, descriptor "
                             f"{descs[j]}: no error (want {want.name})")
    for b in bufs:
        assert not b.changed().any(), "a refused call wrote bytes"
    event(f"mislaid: refused {want.name}")


def run_canaried(name, desc, out: TD, ins: list[TD], seed: int) -> None:
    rng = np.random.default_rng(seed)
    bufs = [Buffer("in", d) for d in ins]
    fill(bufs, rng)
    o = Buffer("out", out)
    views = [np.broadcast_to(b.view(), out.shape) for b in bufs]
    want = reference(name, out.dtype, [np.array(v) for v in views])
    if name == "rearrange":
        desc.calculate(o.view(), bufs[0].view())
    else:
        desc.calculate(None, o.view(), *[b.view() for b in bufs])
    got = o.view()
    ok = np.array_equal(got, want, equal_nan=out.dtype.is_float)
    assert ok, f"{name} {out} {ins}: got\n{got}\nwant\n{want}"
    stray = o.changed() & ~o.covered()
    assert not stray.any(), "bytes outside the output were written"
    for b in bufs:
        assert not b.changed().any(), "an input was written"


@budget(120)
@given(call=create_call())
def test_fuzz_create_and_run(call):
    name, out, ins, seed, mislaid = call
    try:
        if name == "rearrange":
            desc = create_rearrange_descriptor(H, out, *ins)
        else:
            desc = SPEC[name].create_descriptor(H, out, *ins)
    except InfiniError as e:
        event(f"refused {e.status.name}")
        return
    assert desc.workspace_size == 0
    # run: the operators of the form (out, *inputs) with a NumPy reference here (the
    # catalogue's are run on random views by test_property_layouts.py)
    executed = (LONG and name in NUMPY) or (name, out.dtype) in CI_EXECUTED
    if executed and out.numel <= 4096 and all(d.numel <= 4096 for d in ins):
        event("valid, executed")
        run_canaried(name, desc, out, ins, seed)
        if mislaid[1].numel <= 4096:
            run_mislaid(name, desc, out, ins, mislaid, seed)
    else:
        event("valid, not executed")
    desc.destroy()
