"""Bad input to the row operators and rope: every case raises its exact Status, and a call that
fails writes nothing. Also run on the Triton interpreter (tests/test_triton_suite.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import raises

import infiniop
from infiniop import DType, Status, TensorDescriptor

D = TensorDescriptor
F16, BF16, F32, F64, I32 = DType.F16, DType.BF16, DType.F32, DType.F64, DType.I32
TD = TensorDescriptor.from_array


def rope_descs(shape=(4, 2, 8), pos=(4,), table=(16, 4), dt=F32, pdt=I32, tdt=None):
    tdt = tdt or dt
    return (D(dt, shape), D(dt, shape), D(pdt, pos), D(tdt, table), D(tdt, table))


def test_weight_length_is_the_row_length(handle):
    x = D(F32, (3, 8))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rms_norm_descriptor, handle, x, x, D(F32, (7,)),
           match="the row length")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rms_norm_descriptor, handle, x, x, D(F32, (1, 8)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_layer_norm_descriptor, handle, x, x, D(F32, (3,)),
           x, D(F32, (8,)), D(F32, (9,)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_add_rms_norm_descriptor, handle, x, x, x, x,
           D(F32, (3,)))


def test_stat_output_shape(handle):
    x = D(F32, (3, 8))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_layer_norm_descriptor, handle, x, x, D(F32, (8,)),
           x, D(F32, (8,)), None, match="one value per row")


def test_axis_out_of_range(handle):
    x = D(F32, (3, 8))
    for axis in (2, -3, 100):
        raises(Status.BAD_PARAM, infiniop.create_softmax_descriptor, handle, x, x, axis,
               match="out of range")
        raises(Status.BAD_PARAM, infiniop.create_logsoftmax_descriptor, handle, x, x, dim=axis)
    for axis in (True, 1.0, "0", None):
        raises(Status.BAD_PARAM, infiniop.create_softmax_descriptor, handle, x, x, axis=axis)
    raises(Status.BAD_PARAM, infiniop.create_softmax_descriptor, handle, D(F32, ()), D(F32, ()))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rms_norm_descriptor, handle, D(F32, ()),
           D(F32, ()), D(F32, (1,)))
    with pytest.raises(infiniop.InfiniError) as e:
        infiniop.softmax(np.ones((2, 2), np.float32), axis=2)
    assert e.value.status is Status.BAD_PARAM


def test_dtypes(handle):
    x16, x32 = D(F16, (2, 4)), D(F32, (2, 4))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_softmax_descriptor, handle, x16, x32)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_softmax_descriptor, handle, D(I32, (2, 4)),
           D(I32, (2, 4)))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_rms_norm_descriptor, handle, D(F64, (2, 4)),
           D(F64, (2, 4)), D(F32, (4,)))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_rms_norm_descriptor, handle, x16, x16,
           D(I32, (4,)), match="'w'")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_logsoftmax_descriptor, handle, x16, D(BF16, (2, 4)))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_logsoftmax_descriptor, handle, x16, x32)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_layer_norm_descriptor, handle, x16, x16,
           D(F32, (2,)), x16, D(F16, (4,)), None)


def test_shapes(handle):
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_softmax_descriptor, handle, D(F32, (2, 4)),
           D(F32, (2, 5)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_add_rms_norm_descriptor, handle, D(F32, (2, 4)),
           D(F32, (3, 4)), D(F32, (2, 4)), D(F32, (2, 4)), D(F32, (4,)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_causal_softmax_descriptor, handle,
           D(F32, (5, 4)), D(F32, (5, 4)), match="shape[-1] >= shape[-2]")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_causal_softmax_descriptor, handle,
           D(F32, (4,)), D(F32, (4,)))


def test_broadcasting_and_self_overlapping_outputs(handle):
    x = D(F32, (3, 8))
    raises(Status.BAD_TENSOR_STRIDES, infiniop.create_softmax_descriptor, handle,
           D(F32, (3, 8), (0, 1)), x)
    raises(Status.BAD_TENSOR_STRIDES, infiniop.create_rms_norm_descriptor, handle,
           D(F32, (3, 8), (1, 1)), x, D(F32, (8,)))
    raises(Status.BAD_TENSOR_STRIDES, infiniop.create_layer_norm_descriptor, handle, x, x,
           D(F32, (3,), (0,)), x, D(F32, (8,)), None)
    raises(Status.BAD_TENSOR_STRIDES, infiniop.create_rope_descriptor, handle,
           D(F32, (4, 2, 8), (0, 8, 1)), *rope_descs()[1:])


def test_overlaps_at_calculate(handle):
    """Partial overlap of an output with an input, outputs sharing memory, an output over a
    weight: BAD_PARAM before anything is written. Exact in place works."""
    buf = np.zeros(64, np.float32)
    x = buf[:24].reshape(3, 8)
    y = buf[4:28].reshape(3, 8)
    d = TD(x)
    desc = infiniop.create_softmax_descriptor(handle, d, d)
    raises(Status.BAD_PARAM, desc.calculate, None, y, x, match="overlaps")
    desc.calculate(None, x, x)  # in place
    w = np.ones(8, np.float32)
    rd = infiniop.create_rms_norm_descriptor(handle, d, d, TD(w))
    raises(Status.BAD_PARAM, rd.calculate, None, buf[:24].reshape(3, 8), x, buf[:8])
    ln = infiniop.create_layer_norm_descriptor(handle, d, d, D(F32, (3,)), d, TD(w), None)
    big = np.zeros((3, 8), np.float32)
    raises(Status.BAD_PARAM, ln.calculate, None, big, big, np.zeros(3, np.float32),
           np.ones((3, 8), np.float32), w, None, match="share memory")
    xi = np.ones((3, 8), np.float32)
    raises(Status.BAD_PARAM, ln.calculate, None, xi, np.zeros((3, 8), np.float32), xi[0, :3], xi,
           w, None)


def test_rope_shapes_and_dtypes(handle):
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rope_descriptor, handle,
           *rope_descs(shape=(4, 2, 7), table=(16, 3)), match="odd")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_rope_descriptor, handle, *rope_descs(pdt=F32))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_rope_descriptor, handle, *rope_descs(tdt=F16))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.create_rope_descriptor, handle, *rope_descs(dt=I32))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rope_descriptor, handle, *rope_descs(table=(16, 8)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rope_descriptor, handle, *rope_descs(pos=(5,)))
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rope_descriptor, handle,
           *rope_descs(shape=(2, 8), pos=(1,)))
    y, x, p, s, c = rope_descs()
    raises(Status.BAD_TENSOR_SHAPE, infiniop.create_rope_descriptor, handle, y, x, p, s,
           D(F32, (15, 4)))
    for algo in (2, -1, True, 0.5):
        raises(Status.BAD_PARAM, infiniop.create_rope_descriptor, handle, *rope_descs(), algo=algo)
    raises(Status.NULL_POINTER, infiniop.create_rope_descriptor, handle, y, x, None, s, c)


@pytest.mark.parametrize("kind", ["numpy", "raw"])
def test_rope_positions_outside_the_table(handle, kind):
    """A position >= the table length (or negative) is BAD_PARAM at calculate; y is untouched."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2, 8)).astype(np.float32)
    s = c = np.zeros((16, 4), np.float32)
    desc = infiniop.create_rope_descriptor(handle, *rope_descs())
    for bad in ([0, 3, 16, 1], [0, -1, 2, 2]):
        pos = np.array(bad, np.int32)
        y = np.full_like(x, 7.0)
        args = [y, x, pos, s, c]
        if kind == "raw":
            if infiniop.create_handle("cpu").device.name != "CPU":
                pytest.skip("raw host addresses are trusted: positions are masked on a GPU")
            args = [a.ctypes.data for a in args]
        raises(Status.BAD_PARAM, desc.calculate, None, *args, match="outside the tables")
        assert (y == 7.0).all()
    ok = np.array([15, 0, 1, 2], np.int32)
    desc.calculate(None, np.empty_like(x), x, ok, s, c)


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_rope_checks_every_position_once(handle, monkeypatch, parallel):
    """The position check walks pos_ids, not the rows (a position serves every head): per-batch
    positions (2, 5) for x (2, 5, 3, 8), one bad entry anywhere is BAD_PARAM with y untouched,
    on the pool and on the calling thread; positions broadcast along the sequence (stride 0)
    are checked too."""
    if infiniop.create_handle("cpu").device.name != "CPU":
        pytest.skip("the CPU kernel's check")
    from infiniop.backends.cpu import runtime

    if parallel:
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)
    s = c = np.zeros((16, 4), np.float32)

    def call(pos, y):  # a descriptor of its own: the functional cache would keep one kernel
        descs = [TensorDescriptor.from_array(a) for a in (y, x, pos, s, c)]
        return infiniop.create_rope_descriptor(handle, *descs).calculate(None, y, x, pos, s, c)

    for k in range(10):
        pos = rng.integers(0, 16, (2, 5)).astype(np.int32)
        pos.reshape(-1)[k] = 16 if k % 2 else -1
        y = np.full_like(x, 7.0)
        raises(Status.BAD_PARAM, call, pos, y, match="outside the tables")
        assert (y == 7.0).all()
    for bad in (False, True):
        pos = np.broadcast_to(np.array([[3], [16 if bad else 15]], np.int32), (2, 5))
        y = np.full_like(x, 7.0)
        if bad:
            raises(Status.BAD_PARAM, call, pos, y, match="outside the tables")
            assert (y == 7.0).all()
        else:
            call(pos, y)
            assert (y == 0.0).all()  # zero tables


def test_rope_overlaps(handle):
    x = np.zeros((4, 2, 8), np.float32)
    s = np.zeros((16, 4), np.float32)
    desc = infiniop.create_rope_descriptor(handle, *rope_descs())
    pos = np.zeros(4, np.int32)
    raises(Status.BAD_PARAM, desc.calculate, None, x, x, pos, x.reshape(-1)[:64].reshape(16, 4), s)
    desc.calculate(None, x, x, pos, s, s)  # in place


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_scalars(handle):
    x, w = D(F32, (2, 4)), D(F32, (4,))
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, eps=1e-5,
           match="unknown parameter")
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, "1e-5")
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, 1e-5, 2)
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, 1e-5,
           epsilon=1e-6, match="twice")
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, 1e300)
    raises(Status.BAD_PARAM, infiniop.create_softmax_descriptor, handle, x, x, 0, 1)
    # a NaN or negative epsilon made every row / the rows below it NaN: refused; 0 and inf work
    for bad in (float("nan"), -1e-6, -np.inf):
        raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, w, epsilon=bad,
               match="must be >= 0")
        raises(Status.BAD_PARAM, infiniop.create_add_rms_norm_descriptor, handle, x, x, x, x, w,
               epsilon=bad, match="must be >= 0")
        raises(Status.BAD_PARAM, infiniop.create_layer_norm_descriptor, handle, x, x,
               D(F32, (2,)), x, w, None, eps=bad, match="must be >= 0")
    for ok in (0.0, -0.0, np.inf):
        infiniop.create_rms_norm_descriptor(handle, x, x, w, epsilon=ok)


def test_handles_descriptors_and_buffers(handle):
    x, w = D(F32, (2, 4)), D(F32, (4,))
    raises(Status.NULL_POINTER, infiniop.create_softmax_descriptor, None, x, x)
    raises(Status.NULL_POINTER, infiniop.create_softmax_descriptor, handle, None, x)
    raises(Status.BAD_PARAM, infiniop.create_softmax_descriptor, handle, x)
    raises(Status.BAD_PARAM, infiniop.create_rms_norm_descriptor, handle, x, x, "w")
    desc = infiniop.create_rms_norm_descriptor(handle, x, x, w)
    a, wa = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    raises(Status.BAD_PARAM, desc.calculate, None, a, a)
    raises(Status.NULL_POINTER, desc.calculate, None, a, None, wa)
    raises(Status.BAD_TENSOR_DTYPE, desc.calculate, None, a, a.astype(np.float64), wa)
    raises(Status.BAD_TENSOR_SHAPE, desc.calculate, None, a, a, np.ones(3, np.float32))
    raises(Status.BAD_TENSOR_STRIDES, desc.calculate, None, a, np.ones((4, 2), np.float32).T, wa)
    raises(Status.BAD_PARAM, desc.calculate, a, a, wa, match="workspace")  # no workspace given
    ro = np.ones((2, 4), np.float32)
    ro.flags.writeable = False
    raises(Status.BAD_PARAM, desc.calculate, None, ro, a, wa)
    ln = infiniop.create_layer_norm_descriptor(handle, x, x, D(F32, (2,)), x, w, None)
    raises(Status.BAD_PARAM, ln.calculate, None, a.copy(), a.copy(), np.ones(2, np.float32), a, wa,
           wa, match="None at create")
    raises(Status.BAD_PARAM, infiniop.rms_norm, np.ones((2, 4), np.float32))
    raises(Status.NULL_POINTER, infiniop.rms_norm, np.ones((2, 4), np.float32), None)
    bf = np.ones((2, 4), ml_dtypes.bfloat16)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.softmax, bf, out=np.empty((2, 4), np.float16))


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize("bad", [np.float32(0), 2.0, [0.0] * 8, "y"])
def test_functional_out_that_is_no_array(bad):
    """out= that is not an array (a NumPy scalar, a number, a list) is BAD_PARAM naming the
    operand, before and after a call has armed the fast path; it was an AttributeError."""
    x, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    pos, table = np.arange(2, dtype=np.int32), np.ones((2, 2), np.float32)
    one = None if isinstance(bad, list) else "operand 'y'"  # a list: that many outputs
    for _ in range(2):
        raises(Status.BAD_PARAM, infiniop.softmax, x, out=bad, match=one)
        raises(Status.BAD_PARAM, infiniop.rms_norm, x, w, out=bad, match=one)
        raises(Status.BAD_PARAM, infiniop.layer_norm, x, w, w,
               out=(np.empty_like(x), np.empty_like(x), bad), match="'input_std_deviation'")
        raises(Status.BAD_PARAM, infiniop.rope, x.reshape(2, 1, 4), pos, table, table, out=bad,
               match="operand 'y'")
        infiniop.softmax(x, out=np.empty_like(x))
        infiniop.rms_norm(x, w, out=np.empty_like(x))
        infiniop.rope(x.reshape(2, 1, 4), pos, table, table)


@pytest.mark.parametrize("kind", ["subclass", "memmap", "masked"])
def test_functional_out_subclasses_are_written_and_returned(kind, tmp_path):
    """An ndarray subclass as out= (np.memmap, a masked array, a user subclass) is computed into
    and returned as given, with the values a plain array gets; it was an AttributeError."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    pos = np.array([2, 0, 1], np.int32)
    sin, cos = rng.standard_normal((2, 3, 4)).astype(np.float32)

    def make(shape, name):
        if kind == "memmap":
            return np.memmap(tmp_path / name, np.float32, "w+", shape=shape)
        return np.zeros(shape, np.float32).view(_Sub if kind == "subclass" else np.ma.MaskedArray)

    for _ in range(2):  # the general path, then with the fast path armed
        y = make(x.shape, "softmax")
        assert infiniop.softmax(x, out=y, axis=1) is y
        np.testing.assert_array_equal(np.asarray(y), infiniop.softmax(x, axis=1))
        outs = (make(x.shape, "ln0"), np.empty_like(x), make(x.shape[:-1], "ln2"))
        got = infiniop.layer_norm(x, w, None, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        for g, ref in zip(got, infiniop.layer_norm(x, w, None)):
            np.testing.assert_array_equal(np.asarray(g), ref)
        y = make(x.shape, "rope")
        assert infiniop.rope(x, pos, sin, cos, algo=1, out=y) is y
        np.testing.assert_array_equal(np.asarray(y), infiniop.rope(x, pos, sin, cos, algo=1))


def test_a_scalar_passed_positionally_names_its_keyword():
    """rms_norm(x, w, 1e-6) said only "takes 2 operands, got 3": the scalar's keyword is named."""
    x, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    raises(Status.BAD_PARAM, infiniop.rms_norm, x, w, 1e-6,
           match="rms_norm takes 2 operands (x, w), got 3; scalars are keywords: epsilon=...")
    raises(Status.BAD_PARAM, infiniop.softmax, x, 1, match="scalars are keywords: axis=...")
    raises(Status.BAD_PARAM, infiniop.hardtanh, x, 0.0, 2.0,
           match="scalars are keywords: min_val=..., max_val=...")
    e = raises(Status.BAD_PARAM, infiniop.sub, x, x, x, match="sub takes 2 operands (a, b), got 3")
    assert "keywords" not in str(e)
