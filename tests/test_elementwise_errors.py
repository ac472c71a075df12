"""The bad-input matrix of the elementwise operators: each mistake raises InfiniError with its
exact Status (and a message naming the operand), and nothing is written when it does: every
output buffer is canary-filled before the call and compared byte for byte after it."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import CANARY, assert_exact, raises
from numpy.lib.stride_tricks import as_strided

import infiniop
from infiniop import DType, InfiniError, Status, TensorDescriptor

F32, F16, F64, BF16 = DType.F32, DType.F16, DType.F64, DType.BF16
I8, I32, U8, U32, BOOL = DType.I8, DType.I32, DType.U8, DType.U32, DType.BOOL
DTYPE, SHAPE, STRIDES = Status.BAD_TENSOR_DTYPE, Status.BAD_TENSOR_SHAPE, Status.BAD_TENSOR_STRIDES
PARAM, NULL = Status.BAD_PARAM, Status.NULL_POINTER


def td(shape, strides=None, dtype=F32):
    return TensorDescriptor(dtype, shape, strides)


def canary(shape, dtype=np.float32) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.full(n, CANARY, np.uint8).view(dtype).reshape(shape)


def untouched(buf) -> bool:
    raw = buf.view(np.uint8) if isinstance(buf, np.ndarray) else buf.view(torch.uint8).numpy()
    return bool((raw == CANARY).all())


# ---------------------------------------------------------------------------------------------
# create: dtype, shape and stride errors
# ---------------------------------------------------------------------------------------------

S = (3, 4)
CREATE_ERRORS = [  # id, operator, out descriptor, input descriptors, status, operand named
    # dtypes: output dtype not supported by the operator
    ("div-int", "div", td(S, dtype=I32), [td(S, dtype=I32)] * 2, DTYPE, "out"),
    ("abs-unsigned", "abs", td(S, dtype=U8), [td(S, dtype=U8)], DTYPE, "out"),
    ("relu-unsigned", "relu", td(S, dtype=U32), [td(S, dtype=U32)], DTYPE, "out"),
    ("sub-bool", "sub", td(S, dtype=BOOL), [td(S, dtype=BOOL)] * 2, DTYPE, "out"),
    ("add-f8", "add", td(S, dtype=DType.F8), [td(S, dtype=DType.F8)] * 2, DTYPE, "out"),
    ("where-bool-out", "where", td(S, dtype=BOOL), [td(S, dtype=BOOL)] * 3, DTYPE, "out"),
    # dtypes: an input differs from the output
    ("sub-a-f16", "sub", td(S), [td(S, dtype=F16), td(S)], DTYPE, "'a'"),
    ("sub-b-f64", "sub", td(S), [td(S), td(S, dtype=F64)], DTYPE, "'b'"),
    ("add-signedness", "add", td(S, dtype=U32), [td(S, dtype=I32)] * 2, DTYPE, "'a'"),
    ("mul-bf16-f16", "mul", td(S, dtype=BF16), [td(S, dtype=BF16), td(S, dtype=F16)], DTYPE,
     "'b'"),
    ("clip-max", "clip", td(S), [td(S), td(S), td(S, dtype=F16)], DTYPE, "'max'"),
    ("clip-min-int", "clip", td(S, dtype=I8), [td(S, dtype=I8), td(S, dtype=U8), td(S, dtype=I8)],
     DTYPE, "'min'"),
    ("where-cond-float", "where", td(S), [td(S), td(S), td(S)], DTYPE, "'cond'"),
    ("where-a-bool", "where", td(S), [td(S, dtype=BOOL), td(S, dtype=BOOL), td(S)], DTYPE, "'a'"),
    ("neg-x", "neg", td(S, dtype=I8), [td(S, dtype=U8)], DTYPE, "'x'"),
    # shapes: the output is not exactly the broadcast shape
    ("out-transposed-shape", "sub", td((4, 3)), [td(S)] * 2, SHAPE, "out"),
    ("out-smaller", "sub", td((1, 4)), [td(S)] * 2, SHAPE, "out"),
    ("out-larger", "sub", td(S), [td((4,)), td((4,))], SHAPE, "out"),
    ("out-extra-dim", "add", td((2, 3, 4)), [td(S)] * 2, SHAPE, "out"),
    ("out-0d", "add", td(()), [td((1,)), td(())], SHAPE, ""),
    ("out-empty", "add", td((0, 4)), [td(S)] * 2, SHAPE, ""),
    ("clip-out-larger", "clip", td((2, 3, 4)), [td(S), td((1,)), td(())], SHAPE, "out"),
    # shapes: an input does not broadcast
    ("b-not-broadcastable", "sub", td(S), [td(S), td((3, 5))], SHAPE, "'b'"),
    ("a-rows", "sub", td(S), [td((2, 4)), td(S)], SHAPE, "'a'"),
    ("a-more-dims", "mul", td((4,)), [td((1, 4)), td((4,))], SHAPE, "'a'"),
    ("a-empty-vs-3", "mul", td(S), [td((0, 4)), td(S)], SHAPE, "'a'"),
    ("clip-min", "clip", td(S), [td(S), td((4, 1)), td(S)], SHAPE, "'min'"),
    ("where-cond", "where", td(S), [td((3, 2), dtype=BOOL), td(S), td(S)], SHAPE, "'cond'"),
    # strides: the output broadcasts or overlaps itself
    ("out-zero-stride", "sub", td((4,), (0,)), [td((4,))] * 2, STRIDES, "out"),
    ("out-zero-row-stride", "sub", td(S, (0, 1)), [td(S)] * 2, STRIDES, "out"),
    ("out-zero-inner-stride", "sub", td(S, (4, 0)), [td(S)] * 2, STRIDES, "out"),
    # InfiniCore's hasBroadcastDim missed these (it stops at the first size-1 dim)
    ("out-(1,4)/(4,0)", "sub", td((1, 4), (4, 0)), [td((1, 4))] * 2, STRIDES, "out"),
    ("out-(4,1,4)/(4,4,0)", "sub", td((4, 1, 4), (4, 4, 0)), [td((4, 1, 4))] * 2, STRIDES, "out"),
    ("out-(2,1,3)/(3,3,0)", "clip", td((2, 1, 3), (3, 3, 0)), [td((2, 1, 3))] * 3, STRIDES, "out"),
    ("out-overlap", "sub", td((3, 3), (1, 1)), [td((3, 3))] * 2, STRIDES, "out"),
    ("out-overlap-2", "add", td((2, 3), (2, 1)), [td((2, 3))] * 2, STRIDES, "out"),
    ("out-overlap-negative", "add", td((3, 3), (-1, 1)), [td((3, 3))] * 2, STRIDES, "out"),
    ("out-overlap-3d", "neg", td((2, 2, 2), (2, 1, 1)), [td((2, 2, 2))], STRIDES, "out"),
]


@pytest.mark.parametrize("name, out, ins, status, operand",
                         [pytest.param(*c[1:], id=c[0]) for c in CREATE_ERRORS])
def test_create_errors(handle, name, out, ins, status, operand):
    create = getattr(infiniop, f"create_{name}_descriptor")
    raises(status, create, handle, out, *ins, match=operand or None)


VALID_LAYOUTS = [  # legal corner cases that must not raise (and must compute correctly)
    ("size1-dim-zero-stride", td((1, 4), (0, 1)), [td((1, 4)), td((1, 4))]),
    ("size1-inner-zero-stride", td((4, 1), (1, 0)), [td((4, 1)), td((4, 1))]),
    ("column-major", td((3, 4), (1, 3)), [td(S), td(S)]),
    ("gaps", td(S, (9, 2)), [td(S), td(S)]),
    ("negative", td(S, (-4, -1)), [td(S), td(S)]),
    ("infinicore-broadcast", td(S), [td(S, (0, 0)), td(S, (0, 1))]),
    ("numpy-broadcast", td(S), [td((3, 1)), td((4,))]),
    ("scalar-input", td(S), [td(()), td(S, (1, 3))]),
    ("size1-input", td((1, 1)), [td(()), td((1, 1))]),
    ("0d", td(()), [td(()), td(())]),
    ("empty", td((0, 4)), [td((0, 4)), td((4,))]),
    ("empty-zero-stride-input", td((0, 4)), [td((0, 4), (0, 0)), td((1, 4))]),
]


@pytest.mark.parametrize("out, ins", [pytest.param(*c[1:], id=c[0]) for c in VALID_LAYOUTS])
def test_create_accepts_legal_layouts(handle, out, ins):
    rng = np.random.default_rng(0)

    def array(d):  # a buffer holding exactly what the descriptor reaches
        lo, hi = d.reach
        base = rng.standard_normal(max(hi - lo + 1, 1)).astype(np.float32)
        if d.is_empty:
            return np.empty(d.shape, np.float32)
        return as_strided(base[-lo:], d.shape, [s * 4 for s in d.strides])

    with infiniop.create_sub_descriptor(handle, out, *ins) as desc:
        o, a, b = array(out), array(ins[0]), array(ins[1])
        want = np.subtract(a, b)
        desc.calculate(None, o.ctypes.data, a, b)  # out as an address (it may be a 0-stride view)
        np.testing.assert_array_equal(o, want)


def test_create_argument_errors(handle):
    d = td(S)
    raises(PARAM, infiniop.create_sub_descriptor, handle, d, d)  # one input missing
    raises(PARAM, infiniop.create_sub_descriptor, handle, d, d, d, d)  # one too many
    raises(PARAM, infiniop.create_neg_descriptor, handle, d)
    raises(NULL, infiniop.create_sub_descriptor, None, d, d, d)
    raises(NULL, infiniop.create_sub_descriptor, handle, None, d, d, match="out")
    raises(NULL, infiniop.create_sub_descriptor, handle, d, d, None, match="'b'")
    raises(PARAM, infiniop.create_sub_descriptor, "cpu", d, d, d)
    raises(PARAM, infiniop.create_sub_descriptor, handle, d, (3, 4), d, match="'a'")
    raises(PARAM, infiniop.create_sub_descriptor, handle, np.zeros(S, np.float32), d, d)


# ---------------------------------------------------------------------------------------------
# calculate: bad buffers (outputs canary-filled, checked untouched)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sub34(handle):
    """sub on (3, 4) float32, contiguous everywhere."""
    return infiniop.create_sub_descriptor(handle, td(S), td(S), td(S))


def ok_inputs():
    return np.ones(S, np.float32), np.full(S, 0.5, np.float32)


def test_calculate_succeeds_with_good_buffers(sub34):
    out = canary(S)
    a, b = ok_inputs()
    sub34.calculate(None, out, a, b)
    assert (out == 0.5).all()


# An array must be laid out as its descriptor says (issue 10): a (3, 2), (6,), transposed or
# strided array handed to a contiguous (2, 3) descriptor used to be computed from its memory and
# give a wrong answer (or write a strided out's gaps).

D23 = td((2, 3))


def _wrong_layouts(m):
    """Views of ``m`` (a (4, 6) float32 buffer) that are not a contiguous (2, 3) tensor."""
    flat = m.reshape(-1)
    return {
        "(3, 2)": (flat[:6].reshape(3, 2), SHAPE),
        "(6,)": (flat[:6], SHAPE),
        "(1, 2, 3)": (flat[:6].reshape(1, 2, 3), SHAPE),
        "(2, 3, 1)": (flat[:6].reshape(2, 3, 1), SHAPE),
        "(2, 4) holding it": (m[:2, :4], SHAPE),
        ".T of (3, 2)": (flat[:6].reshape(3, 2).T, STRIDES),
        "base[:, ::2]": (m[:2, ::2], STRIDES),
        "rows padded": (m[:2, :3], STRIDES),
        "reversed": (flat[:6][::-1].reshape(2, 3), STRIDES),
        "0-stride rows": (as_strided(flat, (2, 3), (0, 4)), STRIDES),
    }


def _as(kind: str, x: np.ndarray):
    """``x`` handed over as a NumPy array (fast path), a subclass (general path), a torch tensor,
    a DLPack-only or an array-interface-only object."""
    if kind == "numpy":
        return x
    if kind == "subclass":
        return x.view(_Sub)
    if kind == "torch":
        return torch.from_numpy(x)
    if kind == "dlpack":
        return _DLPackOnly(x)
    return _ArrayInterfaceOnly(x)


class _Sub(np.ndarray):
    pass


class _DLPackOnly:
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class _ArrayInterfaceOnly:
    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self._keep = a


KINDS = ["numpy", "subclass", "torch", "dlpack", "array_interface"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["out", "a", "b"])
def test_array_must_be_laid_out_as_its_descriptor(handle, where, kind):
    """Every wrong layout, in every position, through every array kind: the exact status, a
    message with both layouts and the fix, and nothing written (every operand is a view of one
    canary buffer)."""
    desc = infiniop.create_sub_descriptor(handle, D23, D23, D23)
    m = canary((4, 6))
    for label, (bad, status) in _wrong_layouts(m).items():
        if kind == "torch" and any(s < 0 for s in bad.strides):
            continue  # torch.from_numpy refuses negative strides
        ops = {"out": m[2, :6].reshape(2, 3), "a": m[3, :3], "b": m[3, 3:]}
        ops["a"], ops["b"] = ops["a"].reshape(1, 3).repeat(2, 0), ops["b"].reshape(1, 3).repeat(2, 0)
        ops[where] = bad
        if where == "out" and not bad.flags.writeable:
            continue  # read-only: refused as such (test_readonly_output)
        args = [_as(kind, ops[k]) for k in ("out", "a", "b")]
        e = raises(status, desc.calculate, None, *args, match=f"'{where}'")
        assert "TensorDescriptor.from_array(x)" in str(e) and str(D23.strides) in str(e), label
        assert untouched(m), label
    # the same arrays, described as they are, compute the right answer
    for label, (x, _) in _wrong_layouts(canary((4, 6))).items():
        if not x.flags.writeable or (kind == "torch" and any(s < 0 for s in x.strides)):
            continue
        x[...] = np.arange(x.size, dtype=np.float32).reshape(x.shape)
        d = infiniop.TensorDescriptor.from_array(x)
        with infiniop.create_neg_descriptor(handle, td(x.shape), d) as neg:
            out = np.empty(x.shape, np.float32)
            neg.calculate(None, _as(kind, out), _as(kind, x))
            np.testing.assert_array_equal(out, -x, err_msg=label)


def test_a_strided_out_view_is_refused_not_written_in_its_gaps(handle):
    """The issue's example: a (2, 3) ``base[:, ::2]`` out for a contiguous descriptor used to
    overwrite all of ``base``'s row 0; through torch views too."""
    desc = infiniop.create_sub_descriptor(handle, D23, D23, D23)
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 0.5, np.float32)
    base = canary((2, 6))
    raises(STRIDES, desc.calculate, None, base[:, ::2], a, b, match="'out'")
    assert untouched(base)
    tb = torch.from_numpy(base)
    raises(STRIDES, desc.calculate, None, tb[:, ::2], torch.from_numpy(a), torch.from_numpy(b),
           match="'out'")
    raises(STRIDES, desc.calculate, None, tb[:, :3], a, b, match="'out'")
    raises(SHAPE, desc.calculate, None, tb, a, b, match="'out'")
    assert untouched(base)


def test_extent_one_strides_do_not_matter(handle):
    """A dim of extent 1 moves to no element: its stride may be anything (as NumPy and torch
    leave it after slicing), on the fast and the general path."""
    d = td((1, 3))
    desc = infiniop.create_add_descriptor(handle, d, d, d)
    x = np.zeros((5, 3), np.float32)[::4][:1]  # strides (48, 4) bytes
    x[...] = [1, 2, 3]
    for wrap in (lambda v: v, lambda v: v.view(_Sub), torch.from_numpy):
        out = np.zeros((5, 3), np.float32)[2:3]
        desc.calculate(None, wrap(out), wrap(x), wrap(np.ones((1, 3), np.float32)))
        np.testing.assert_array_equal(out, [[2, 3, 4]])
    raises(STRIDES, desc.calculate, None, np.zeros((1, 6), np.float32)[:, ::2], x, x)


def test_raw_addresses_stay_trusted(handle, sub34):
    """A plain int address carries no layout: it is used as the descriptor says (unchecked)."""
    out, (a, b) = canary(S), ok_inputs()
    sub34.calculate(None, out.ctypes.data, a.ctypes.data, b.ctypes.data)
    assert (out == 0.5).all()


@pytest.mark.parametrize("where, dtype", [("out", np.float64), ("a", np.int32),
                                          ("b", np.float16), ("out", np.complex64),
                                          ("a", np.bool_)])
def test_wrong_dtype_buffer(sub34, where, dtype):
    out, (a, b) = canary(S), ok_inputs()
    bufs = {"out": out, "a": a, "b": b}
    bufs[where] = np.zeros(S, dtype)
    raises(DTYPE, sub34.calculate, None, bufs["out"], bufs["a"], bufs["b"], match=f"'{where}'")
    assert untouched(out)
    tb = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in bufs.items()}
    raises(DTYPE, sub34.calculate, None, tb["out"], tb["a"], tb["b"], match=f"'{where}'")
    assert untouched(out)


def test_readonly_output(sub34):
    out, (a, b) = canary(S), ok_inputs()
    out.setflags(write=False)
    raises(PARAM, sub34.calculate, None, out, a, b, match="'out'")
    assert untouched(out)
    ro = np.broadcast_to(canary((4,)), S)  # read-only (and broadcast) view
    raises(PARAM, sub34.calculate, None, ro, a, b, match="'out'")
    # read-only through the functional form too
    raises(PARAM, infiniop.sub, a, b, out=out)
    assert untouched(out)


def test_readonly_output_through_dlpack(sub34):
    src = canary(S)
    src.setflags(write=False)

    class Wrapped:
        def __dlpack__(self, **kw):
            return src.__dlpack__(**kw)

        def __dlpack_device__(self):
            return src.__dlpack_device__()

    a, b = ok_inputs()
    raises(PARAM, sub34.calculate, None, Wrapped(), a, b, match="'out'")
    assert untouched(src)


def _shared(n=40):
    return canary((n,))


@pytest.mark.parametrize("case", ["shifted-a", "shifted-b", "transposed", "broadcast-b",
                                  "clip-max", "reversed"])
def test_partial_overlap_is_refused(handle, case):
    buf = _shared()
    a, b = ok_inputs()
    if case in ("shifted-a", "shifted-b"):
        desc = infiniop.create_sub_descriptor(handle, td(S), td(S), td(S))
        out = buf[1:13].reshape(S)
        alias = buf[0:12].reshape(S)
        args = (out, alias, b) if case == "shifted-a" else (out, a, alias)
        name = "'a'" if case == "shifted-a" else "'b'"
    elif case == "transposed":  # same memory, different element order
        desc = infiniop.create_sub_descriptor(handle, td((4, 4), (1, 4)), td((4, 4)), td((4, 4)))
        out = buf[:16].reshape(4, 4).T
        args, name = (out, buf[:16].reshape(4, 4), np.ones((4, 4), np.float32)), "'a'"
    elif case == "broadcast-b":  # b (4,) broadcast over rows, stored in out's first row
        desc = infiniop.create_sub_descriptor(handle, td(S), td(S), td((4,)))
        out = buf[:12].reshape(S)
        args, name = (out, a, buf[:4]), "'b'"
    elif case == "clip-max":
        desc = infiniop.create_clip_descriptor(handle, td(S), td(S), td(S), td(S))
        out = buf[2:14].reshape(S)
        args, name = (out, a, b, buf[:12].reshape(S)), "'max'"
    else:  # out reversed over the same 12 elements as a
        desc = infiniop.create_sub_descriptor(handle, td((12,), (-1,)), td((12,)), td((12,)))
        out = buf[:12][::-1]
        args, name = (out, buf[:12], np.ones(12, np.float32)), "'a'"
    raises(PARAM, desc.calculate, None, *args, match=name)
    assert untouched(buf)
    # raw addresses are checked for overlap too
    raises(PARAM, desc.calculate, None, *[x.ctypes.data for x in args], match=name)
    assert untouched(buf)


def test_exact_aliasing_is_in_place(handle, sub34):
    x = np.arange(12, dtype=np.float32).reshape(S)
    y = np.full(S, 2.0, np.float32)
    sub34.calculate(None, x, x, x)  # every operand the same buffer
    assert (x == 0).all()
    x = np.arange(12, dtype=np.float32).reshape(S)
    sub34.calculate(None, y, x, y)  # out is b
    np.testing.assert_array_equal(y, np.arange(12, dtype=np.float32).reshape(S) - 2)
    # strided in-place: out and a are the same padded view
    desc = infiniop.create_sub_descriptor(handle, td(S, (5, 1)), td(S, (5, 1)), td((4,)))
    buf = np.arange(15, dtype=np.float32)
    view = as_strided(buf, S, (20, 4))
    desc.calculate(None, view, view, np.ones(4, np.float32))
    np.testing.assert_array_equal(buf, [i - 1 if i % 5 < 4 else i for i in range(15)])


def test_interleaved_buffers_do_not_overlap(handle):
    """Ranges overlap but no element is shared: allowed, and computed correctly."""
    desc = infiniop.create_sub_descriptor(handle, td((6,), (2,)), td((6,), (2,)), td((6,)))
    buf = np.arange(12, dtype=np.float32)
    out, a = buf[0::2], buf[1::2]
    desc.calculate(None, out, a, np.ones(6, np.float32))
    np.testing.assert_array_equal(buf[0::2], np.arange(1, 12, 2) - 1)
    np.testing.assert_array_equal(buf[1::2], np.arange(1, 12, 2))


def test_where_condition_aliasing_an_int8_output(handle):
    """cond (bool) and out (int8) share memory exactly: each element is read before written."""
    cond = np.array([True, False, True, True], np.bool_)
    a, b = np.array([5, 6, 7, 8], np.int8), np.array([-1, -2, -3, -4], np.int8)
    d = td((4,), dtype=I8)
    desc = infiniop.create_where_descriptor(handle, d, td((4,), dtype=BOOL), d, d)
    out = cond.view(np.int8)
    desc.calculate(None, out, cond, a, b)
    np.testing.assert_array_equal(out, [5, -2, 7, 8])


def test_destroyed_descriptor(handle):
    desc = infiniop.create_sub_descriptor(handle, td(S), td(S), td(S))
    out, (a, b) = canary(S), ok_inputs()
    desc.destroy()
    raises(PARAM, desc.calculate, None, out, a, b)
    raises(PARAM, desc.calculate, None, out.ctypes.data, a.ctypes.data, b.ctypes.data)
    assert untouched(out)
    with infiniop.create_sub_descriptor(handle, td(S), td(S), td(S)) as d2:
        d2.calculate(None, out, a, b)
    out2 = canary(S)
    raises(PARAM, d2.calculate, None, out2, a, b)
    assert untouched(out2)


def test_wrong_number_of_inputs(sub34):
    out, (a, b) = canary(S), ok_inputs()
    raises(PARAM, sub34.calculate, None, out, a, match="takes 4 arguments, got 3")
    raises(PARAM, sub34.calculate, None, out, a, b, b, match="got 5")
    raises(PARAM, sub34.calculate, None, out)
    raises(PARAM, sub34.calculate, None)
    e = raises(PARAM, sub34.calculate)  # an InfiniError, not Python's TypeError
    assert "calculate(workspace, out, a, b)" in str(e)
    assert untouched(out)


def test_forgotten_workspace_is_named(handle, sub34):
    """``calculate(c, a, b)``: the message says that the first argument is the workspace."""
    out, (a, b) = canary(S), ok_inputs()
    e = raises(PARAM, sub34.calculate, out, a, b)
    assert "the first argument is the workspace" in str(e) and "calculate(None, out, a, b)" in str(e)
    neg = infiniop.create_neg_descriptor(handle, td(S), td(S))
    e = raises(PARAM, neg.calculate, out, a, match="the first argument is the workspace")
    assert untouched(out)
    e = raises(PARAM, sub34.calculate, None, out, a)  # a real count mistake: no such hint
    assert "workspace (" not in str(e)


@pytest.mark.parametrize("where", ["out", "a", "b"])
def test_null_buffers(sub34, where):
    out, (a, b) = canary(S), ok_inputs()
    bufs = {"out": out, "a": a, "b": b}
    bufs[where] = None
    raises(NULL, sub34.calculate, None, bufs["out"], bufs["a"], bufs["b"], match=f"'{where}'")
    bufs[where] = 0  # a null raw address
    raises(NULL, sub34.calculate, None, bufs["out"], bufs["a"], bufs["b"], match=f"'{where}'")
    assert untouched(out)


@pytest.mark.parametrize("bad", [[[1.0] * 4] * 3, "buffer", 1.5, object()],
                         ids=["list", "str", "float", "object"])
def test_not_a_buffer(sub34, bad):
    out, (_, b) = canary(S), ok_inputs()
    raises(PARAM, sub34.calculate, None, out, bad, b, match="'a'")
    assert untouched(out)


def test_buffer_on_another_device(sub34):
    out, (_, b) = canary(S), ok_inputs()
    meta = torch.empty(S, dtype=torch.float32, device="meta")
    with pytest.raises(InfiniError) as ei:
        sub34.calculate(None, out, meta, b)
    assert ei.value.status in (PARAM, NULL)
    assert untouched(out)


def test_errors_checked_before_any_write_in_every_position(handle):
    """clip: a bad 'max' (last operand) must stop the call before 'out' is touched."""
    desc = infiniop.create_clip_descriptor(handle, td(S), td(S), td(S), td(S))
    out, (x, lo) = canary(S), ok_inputs()
    raises(DTYPE, desc.calculate, None, out, x, lo, np.ones(S, np.float64), match="'max'")
    raises(SHAPE, desc.calculate, None, out, x, lo, np.ones(11, np.float32), match="'max'")
    raises(STRIDES, desc.calculate, None, out, x, lo, np.ones((4, 3), np.float32).T, match="'max'")
    raises(NULL, desc.calculate, None, out, x, lo, None, match="'max'")
    assert untouched(out)


# ---------------------------------------------------------------------------------------------
# The functional front end
# ---------------------------------------------------------------------------------------------


def test_functional_errors():
    a = np.ones(S, np.float32)
    raises(SHAPE, infiniop.sub, a, np.ones((3, 5), np.float32))
    raises(DTYPE, infiniop.sub, a, np.ones(S, np.float64))
    raises(DTYPE, infiniop.div, np.ones(S, np.int32), np.ones(S, np.int32))
    raises(PARAM, infiniop.sub, a)
    raises(PARAM, infiniop.sub, a, a, a)
    raises(NULL, infiniop.sub, None, a)
    raises(NULL, infiniop.neg, None)
    raises(PARAM, infiniop.sub, [1.0, 2.0], [3.0, 4.0])
    raises(PARAM, infiniop.sub, 1.0, 2.0)  # no array operand to take the dtype from
    out = canary((4, 3))
    raises(SHAPE, infiniop.sub, a, a, out=out, match="out")
    out64 = np.zeros(S, np.float64)
    raises(DTYPE, infiniop.sub, a, a, out=out64)
    assert untouched(out)
    w = as_strided(canary((4,)), S, (0, 4))  # writable 0-stride output
    raises(STRIDES, infiniop.sub, a, a, out=w)
    buf = canary((20,))
    raises(PARAM, infiniop.sub, buf[:12].reshape(S), a, out=buf[1:13].reshape(S))
    assert untouched(buf)
    with pytest.raises(InfiniError):  # a bound that does not fit the dtype
        infiniop.clip(np.ones(4, np.uint8), -1, 300)
    raises(DTYPE, infiniop.sub, np.ones(3, np.complex64), np.ones(3, np.complex64))
    raises(DTYPE, infiniop.where, np.ones(3, np.float32), a[0, :3], a[0, :3])  # cond not bool


@pytest.mark.parametrize("case", ["add-int32-1.5", "clip-int32-0.5", "mul-torch-int64-2.5"])
def test_functional_lossy_scalar_is_an_error(case):
    """A Python float that the integer array's dtype cannot hold exactly must not be silently
    truncated (NumPy and torch promote and give 1.5, 0.5, 2.5 here; infiniop keeps the array's
    dtype, so the consistent answer is the error it already raises for inf, NaN and -1 as
    uint8). Found: the scalar is truncated toward zero and a wrong integer result returned."""
    if case == "add-int32-1.5":
        fn, args = infiniop.add, (np.arange(3, dtype=np.int32), 1.5)
    elif case == "clip-int32-0.5":
        fn, args = infiniop.clip, (np.arange(5, dtype=np.int32), 0.5, 3.7)
    else:
        fn, args = infiniop.mul, (torch.arange(3, dtype=torch.int64), 2.5)
    raises(PARAM, fn, *args)
    # integral floats and bools are exact: still accepted
    assert infiniop.add(np.arange(3, dtype=np.int32), 2.0).tolist() == [2, 3, 4]
    assert infiniop.add(np.arange(3, dtype=np.int32), True).tolist() == [1, 2, 3]


def test_functional_refuses_numpy_scalars_that_are_not_real_numbers():
    """NumPy scalars of other kinds were read as numbers: np.complex64(1+2j) lost its imaginary
    part (a Python complex was refused), np.str_('1') and np.bytes_(b'2') were parsed, a
    timedelta64 taken as its count. They are BAD_TENSOR_DTYPE now; real NumPy and ml_dtypes
    scalars still work."""
    x = np.zeros(3, np.float32)
    for bad in (np.complex64(1 + 2j), np.complex128(1), np.str_("1"), np.bytes_(b"2"),
                np.timedelta64(5, "s"), np.datetime64(5, "s")):
        raises(DTYPE, infiniop.add, x, bad)
    raises(PARAM, infiniop.add, x, 1 + 2j)
    for ok in (np.float16(1.5), np.int8(1), np.uint64(1), np.bool_(True),
               ml_dtypes.bfloat16(1.5), ml_dtypes.float8_e4m3fn(1.5)):
        assert_exact(infiniop.add(x, ok), x + np.float32(ok))


def test_masked_arrays_are_refused_not_unmasked():
    """A NumPy masked array input was read as its data and the result returned without the
    mask (NumPy's ufuncs keep it; the Dask path refused masked chunks): BAD_PARAM now, for the
    elementwise, row and rearrange front ends and the descriptor API. (As out=, a masked array
    is written and returned, like any ndarray subclass: test_rows_errors.)"""
    m = np.ma.array([[1.0, 2.0, 3.0]], mask=[[False, True, False]], dtype=np.float32)
    plain = np.ones((1, 3), np.float32)
    for call in (lambda: infiniop.add(m, m), lambda: infiniop.silu(m), lambda: infiniop.softmax(m),
                 lambda: infiniop.rearrange(m, "a b -> b a"), lambda: infiniop.copy_(plain.copy(), m)):
        raises(PARAM, call, match="masked array")
    d = TensorDescriptor(DType.F32, (1, 3))
    desc = infiniop.create_add_descriptor(infiniop.create_handle("cpu"), d, d, d)
    raises(PARAM, desc.calculate, None, plain.copy(), m, plain, match="masked array")
    assert infiniop.add(m.filled(0), plain).tolist() == [[2.0, 1.0, 4.0]]


def test_unsupported_dtypes_name_their_operand():
    """A big-endian array or a complex tensor gave "dtype('>f4') is not an infiniop DType"
    without saying which operand it was (the README promises every message names it)."""
    x = np.ones((2, 3), np.float32)
    raises(DTYPE, infiniop.add, x, x.astype(">f4"), match="operand 'b': dtype")
    raises(DTYPE, infiniop.add, torch.ones(3), torch.ones(3, dtype=torch.complex64),
           match="operand 'b': torch dtype")
    raises(DTYPE, infiniop.softmax, x.astype(">f4"), match="operand 'x': dtype")
    raises(DTYPE, infiniop.rms_norm, x, np.ones(3, ">f4"), match="operand 'w': dtype")


def test_definitions_that_cannot_work_are_refused_when_made():
    """Param('k', 'i32') was accepted and failed at the first call with KeyError: 'i32'; an
    empty ``dtypes`` with T signatures gave an operator whose every call failed with "expected
    here (T in {})". Both are refused where they are written now."""
    from infiniop.elementwise.spec import Param

    with pytest.raises(TypeError, match="dtype 'i32' is not one of f32, f64, i64"):
        Param("k", "i32")
    with pytest.raises(ValueError, match="no type signature"):
        infiniop.elementwise("test_no_dtypes", ("x",), (), lambda m, x: x, register=False)
    with pytest.raises(ValueError, match="no type signature"):
        infiniop.row_operator("test_no_dtypes", "y:out, x", lambda m, x: x, dtypes=(),
                              register=False)
    concrete = infiniop.elementwise("test_no_dtypes", ("x",), (), lambda m, x: x * 2,
                                    signatures="f32 -> f32", register=False)
    assert concrete(np.ones(2, np.float32)).tolist() == [2.0, 2.0]


def test_malformed_settings_name_their_variable(monkeypatch):
    """INFINIOP_PARALLEL_THRESHOLD=abc stopped the import with "invalid literal for int()";
    the message names the variable now, and 1e6-style values are read as whole numbers."""
    import subprocess
    import sys

    from infiniop.settings import env_int

    for raw, want in (("", 5), ("  ", 5), ("1e6", 10**6), ("1_000", 1000), ("0x10", 16), ("7", 7)):
        monkeypatch.setenv("INFINIOP_TEST_SETTING", raw)
        assert env_int("INFINIOP_TEST_SETTING", 5) == want
    for raw, why in (("abc", "is not a whole number"), ("1.5", "is not a whole number"),
                     ("-1", "is below 0")):
        monkeypatch.setenv("INFINIOP_TEST_SETTING", raw)
        with pytest.raises(ValueError, match=f"INFINIOP_TEST_SETTING='{raw}' {why}"):
            env_int("INFINIOP_TEST_SETTING", 5)
    for name in ("INFINIOP_PARALLEL_THRESHOLD", "INFINIOP_NT_THRESHOLD_BYTES", "INFINIOP_POOL_MIB"):
        p = subprocess.run([sys.executable, "-c", "import numpy as np, infiniop; "
                            "infiniop.sub(np.ones(2), np.ones(2))"],
                           env=dict(os.environ, **{name: "abc"}), capture_output=True, text=True,
                           timeout=300)
        assert p.returncode != 0 and f"{name}='abc' is not a whole number" in p.stderr, p.stderr


def test_wrong_layout_through_dlpack(sub34):
    out, (a, b) = canary(S), ok_inputs()
    raises(SHAPE, sub34.calculate, None, out, _DLPackOnly(a.ravel()[:11]), b, match="'a'")
    raises(SHAPE, sub34.calculate, None, out, _DLPackOnly(a.ravel()), b, match="'a'")
    raises(STRIDES, sub34.calculate, None, out, _DLPackOnly(np.ones((4, 3), np.float32).T), b,
           match="'a'")
    assert untouched(out)
    sub34.calculate(None, _DLPackOnly(out), _DLPackOnly(a), _DLPackOnly(b))
    assert (out == 0.5).all()


def _status_of(call):
    with pytest.raises(InfiniError) as e:
        call()
    return e.value.status


def test_last_layout_shortcut_keeps_every_check():
    """The functional form reruns an operator's last NumPy layouts without building a cache key
    (``functional._last_call``); a call that differs in anything (strides, dtype, a read-only
    or partially overlapping out, another shape) is checked and refused exactly as in a fresh
    process."""
    from infiniop.elementwise import functional

    a, b = ok_inputs()
    out = np.empty(S, np.float32)
    buf = _shared()
    ro = np.empty(S, np.float32)
    ro.setflags(write=False)
    bad_calls = [lambda: infiniop.sub(a, b, out=ro),                       # read-only out
                 lambda: infiniop.sub(buf[0:12].reshape(S), b, out=buf[1:13].reshape(S)),
                 lambda: infiniop.sub(a, b, out=np.empty((4, 3), np.float32))]
    functional.clear_cache()
    fresh = [_status_of(c) for c in bad_calls]
    cpu = functional._cpu_handle().device is infiniop.Device.CPU  # (the Triton suite: no shortcut)
    for call in bad_calls:
        functional.clear_cache()
        infiniop.sub(a, b, out=out)                                          # remembered
        assert (functional._last_call.get(infiniop.sub) is not None) == cpu
        assert _status_of(call) == fresh[bad_calls.index(call)]
    np.testing.assert_array_equal(out, a - b)
    # same shapes, other strides / dtype: right values through the keyed path
    infiniop.sub(a, b, out=out)
    at = np.ascontiguousarray(a.T).T
    np.testing.assert_array_equal(infiniop.sub(at, b, out=np.empty(S, np.float32)), a - b)
    r = infiniop.sub(a.astype(np.float64), b.astype(np.float64))
    assert r.dtype == np.float64 and np.array_equal(r, a.astype(np.float64) - b)
    # without out=: a new array each call, of the remembered shape and dtype
    first, second = infiniop.sub(a, b), infiniop.sub(a, b)
    assert first is not second and np.array_equal(first, second) and first.dtype == np.float32


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_array_launcher_checks_what_python_no_longer_does(handle, dt):
    """The descriptors' NumPy fast path tests only ``type(x) is ndarray`` in Python (a small call
    costs ~0.4 us less); the compiled launcher refuses the rest itself: another rank or a
    read-only output on entry (``checked_arrays``: TypeError, nothing read or written), another
    dtype of the same size in ``arrays.layout_end`` (a nonzero code). fp16/bf16 arrays enter as
    they are. Through ``calculate`` each bad call gets the status the general path gives."""
    from infiniop.backends.cpu import ndarray_abi
    from infiniop.dtype import as_dtype

    if handle.device is not infiniop.Device.CPU:
        pytest.skip("the CPU backend's launcher")
    npdt = np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)
    desc = infiniop.create_sub_descriptor(handle, *[td(S, dtype=as_dtype(npdt))] * 3)
    kern = desc._kernel
    assert kern.array_launcher_checked == ndarray_abi.verified() is True
    launch, meta = kern.array_launcher, kern.array_launcher_args[0]
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(S).astype(np.float32).astype(npdt) for _ in range(2))
    want = (a.astype(np.float32) - b.astype(np.float32)).astype(npdt)
    out = np.full(S, 7, npdt)
    ro_a = a.copy()
    ro_a.flags.writeable = False
    assert launch(out, ro_a, b, meta) == 0  # read-only inputs are fine
    assert out.tobytes() == want.tobytes()
    ro = np.full(S, 7, npdt)
    ro.flags.writeable = False
    same_size = {"float32": np.int32, "float16": np.uint16, "bfloat16": np.float16}[dt]
    fresh = np.full(S, 7, npdt)
    for args in [(ro, a, b), (fresh.reshape(-1), a, b), (fresh, a[None], b),
                 (fresh, a, b.reshape(S + (1,)))]:
        with pytest.raises(TypeError):
            launch(*args, meta)
    assert np.all(ro.astype(np.float32) == 7) and np.all(fresh.astype(np.float32) == 7)
    assert launch(fresh.view(same_size), a, b, meta) == 1
    assert launch(fresh, a, b.view(same_size), meta) == 3
    assert np.all(fresh.astype(np.float32) == 7)
    # the descriptor: the same statuses as without the fast path
    slow = infiniop.create_sub_descriptor(handle, *[td(S, dtype=as_dtype(npdt))] * 3)
    slow._fast = None
    for args in [(ro, a, b), (fresh.reshape(-1), a, b), (fresh, a, b.view(same_size)),
                 (fresh.view(same_size), a, b)]:
        assert _status_of(lambda d=desc, x=args: d.calculate(None, *x)) == \
            _status_of(lambda d=slow, x=args: d.calculate(None, *x))
    desc.calculate(None, fresh, a, b)
    assert fresh.tobytes() == want.tobytes()


def test_ndarray_fields_are_where_the_launchers_read_them():
    """``ndarray_abi``'s offsets against what NumPy reports, on arrays of every rank 0-5, dtype,
    sign of stride and writability (the launchers' entry checks read these fields)."""
    from infiniop.backends.cpu import ndarray_abi

    rng = np.random.default_rng(3)
    for k in range(200):
        nd = int(rng.integers(0, 6))
        shape = tuple(int(v) for v in rng.integers(0, 4, nd))
        dt = [np.float32, np.float16, np.int8, np.float64, ml_dtypes.bfloat16][k % 5]
        a = np.zeros(shape, dt)
        if nd and a.size:
            a = np.flip(a, int(rng.integers(0, nd)))
        a.flags.writeable = bool(k % 3)
        got, want = ndarray_abi._fields(a), ndarray_abi._expected(a)
        assert got[:5] == want[:5] and got[5] & 0x401 == want[5], (shape, dt)


def test_a_dtype_mismatch_names_the_operands_that_decided_it():
    """A functional call's wrong ``out=`` fixes T first (C order: outputs first), so the input
    is reported as the mismatch: the message must name the out operand that decided it."""
    a = np.ones((2, 3), np.float32)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.sub, a, a, out=np.empty((2, 3), np.float64),
           match="operand 'a' has dtype float32, expected float64 here (with 'out' float64)")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.softmax, a, out=np.empty((2, 3), np.float16),
           match="(with 'y' float16)")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.rope, np.ones((1, 1, 4), np.float16),
           np.zeros(1, np.int32), np.ones((1, 2), np.float32), np.ones((1, 2), np.float32),
           out=np.empty((1, 1, 4), np.float32), algo=0,
           match="operand 'x' has dtype float16, expected float32 here (with 'y' float32)")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.sub, a, a.astype(np.int32),  # no out=: an input decided
           match="operand 'b' has dtype int32, expected float32 here (with 'a' float32) (accepted")
