"""infiniop on Dask arrays: lazy graphs whose blocks run our kernels, checked bit for bit against
NumPy references; bad input gets the NumPy path's statuses when the graph is built; one small
two-process LocalCluster (for the whole module) checks that built-in and user-defined operators
run on dask.distributed workers."""

from __future__ import annotations

import pickle
import random
import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_exact, raises

import infiniop
from infiniop import Status, dask_arrays, memory
from infiniop.elementwise.spec import Param

da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(14)


def values(shape, dtype) -> np.ndarray:
    """Moderate values mixed with NaN, +-inf and +-0 (floats) or the full range (integers)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return np.frombuffer(RNG.bytes(n * dtype.itemsize), dtype).reshape(shape).copy()
    v = RNG.standard_normal(n) * 8
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    pick = RNG.integers(0, 10, n)
    v = np.where(pick == 0, special[RNG.integers(0, 5, n)], v)
    return v.astype(np.float32).astype(dtype).reshape(shape)


def promised(fn, dtype, *xs):
    """The library's promise: floats computed in float64 and rounded once through float32 (for
    + - and clip that is the IEEE float32 result; fp16/bf16 round once more, exactly as documented);
    integers computed by NumPy in their own type."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return fn(*xs)
    with np.errstate(all="ignore"):
        r = fn(*[np.asarray(x).astype(np.float64) if np.ndim(x) or not np.isscalar(x) else x
                 for x in xs])
    return np.asarray(r).astype(np.float32).astype(dtype)


def clip_ref(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def chunked(x, chunks):
    return da.from_array(x, chunks=chunks)


@pytest.fixture
def counted(monkeypatch):
    """How many blocks our kernels computed (elementwise and rearrange block functions)."""
    calls = []
    for name in ("_block", "_rearrange_block", "_row_block", "_rope_block"):
        real = getattr(dask_arrays, name)

        def wrapper(*a, real=real):
            calls.append(1)
            return real(*a)

        monkeypatch.setattr(dask_arrays, name, wrapper)
    return calls


# ---------------------------------------------------------------------------------------------
# Elementwise operators
# ---------------------------------------------------------------------------------------------

# (shape, chunks) per operand: chunks that do not line up, size-1 dims, missing dims, 0-d, empty.
LAYOUTS = {
    "misaligned": [((6, 10), (4, 3)), ((6, 10), (3, 4))],
    "row_vector": [((6, 10), (4, 3)), ((10,), 4)],
    "size1_both": [((5, 1), (2, 1)), ((1, 7), (1, 3))],
    "zero_d": [((6, 10), (4, 3)), ((), ())],
    "empty": [((0, 4), (0, 2)), ((4,), 3)],
}


SUB_RUNS = ([(layout, dt) for dt in (np.float32, BF16) for layout in LAYOUTS]
            + [("misaligned", np.float16), ("row_vector", np.int32)])  # few kernel variants


@pytest.mark.parametrize("layout,dtype", SUB_RUNS, ids=[f"{lay}-{np.dtype(d)}" for lay, d in SUB_RUNS])
def test_sub_matches_numpy_and_dasks_own_chunking(layout, dtype, counted):
    (sa, ca), (sb, cb) = LAYOUTS[layout]
    a, b = values(sa, dtype), values(sb, dtype)
    x, y = chunked(a, ca), chunked(b, cb)
    r = infiniop.sub(x, y)
    assert isinstance(r, da.Array) and not counted  # lazy: nothing computed yet
    assert r.chunks == (x - y).chunks  # aligned as Dask's own elementwise operations
    got = r.compute(scheduler="sync")
    assert len(counted) == max(1, np.prod(r.numblocks)) or r.size == 0
    assert_exact(got, promised(np.subtract, dtype, a, b))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_clip_with_scalars_and_broadcast_bounds(dtype):
    x = values((7, 9), dtype)
    dx = chunked(x, (3, 4))
    lo, hi = np.dtype(dtype).type(-1.5), np.dtype(dtype).type(2.25)
    assert_exact(infiniop.clip(dx, -1.5, 2.25).compute(), promised(clip_ref, dtype, x, lo, hi))
    lo_col = values((7, 1), dtype)  # per-row bounds from size-1 dims, in NumPy and Dask form
    hi_row = values((9,), dtype)
    got = infiniop.clip(dx, lo_col, chunked(hi_row, 5)).compute()
    assert_exact(got, promised(clip_ref, dtype, x, lo_col, hi_row))


def test_where_bool_condition_and_int_wraparound():
    c, a = values((8, 6), np.bool_), values((8, 6), np.int16)
    got = infiniop.where(chunked(c, (3, 6)), chunked(a, (8, 2)), np.int16(-7)).compute()
    assert_exact(got, np.where(c, a, np.int16(-7)))
    got = infiniop.add(chunked(a, 4), chunked(a, 3)).compute()
    assert_exact(got, a + a)  # wraps like NumPy


def test_zero_d_operands_give_zero_d_result():
    a, b = np.array(5.5, np.float32), np.array(-0.25, np.float32)
    r = infiniop.sub(da.from_array(a), da.from_array(b))
    assert r.shape == () and r.dtype == np.float32
    assert_exact(r.compute(), promised(np.subtract, np.float32, a, b))


def test_user_defined_operator_and_local_threads():
    softclamp = infiniop.elementwise(
        "dask_softclamp", ("x", "limit"), infiniop.FLOATS,
        lambda m, x, limit: m.where(m.abs(x) > limit, limit * 2 - x, x), register=False)
    x = values((40, 30), np.float32)
    got = softclamp(chunked(x, (16, 7)), 2.0).compute(scheduler="threads")
    limit = np.float32(2.0)
    assert_exact(got, np.where(np.abs(x) > limit, limit * np.float32(2) - x, x))


SUM_DIFF_GREATER = infiniop.elementwise(
    "sum_diff_greater", ("a", "b"), infiniop.FLOATS,
    lambda m, a, b, shift: (a + b + shift, a - b, a > b), outputs=("s", "d", "g"),
    signatures="T, T -> T, T, bool", params=(Param("shift", "f32", 0.0),), register=False)


def test_several_outputs_and_keyword_parameters():
    a, b = values((9, 8), np.float32), values((8,), np.float32)
    s, d, g = SUM_DIFF_GREATER(chunked(a, (4, 3)), chunked(b, 5), shift=0.5)
    assert (s.dtype, d.dtype, g.dtype) == (np.float32, np.float32, np.bool_)  # per-output dtype
    s, d, g = da.compute(s, d, g)
    assert_exact(s, (a + b) + np.float32(0.5))
    assert_exact(d, a - b)
    assert_exact(g, a > b)


def test_in_place_operators_return_new_arrays_and_leave_their_operands():
    """BLAS operators update operands in place on NumPy arrays; on Dask arrays (immutable)
    they return the updated values and the operand's blocks stay as they were."""
    x, y = values((40,), np.float32), values((40,), np.float32)
    dy = chunked(y, 7)
    got = infiniop.axpy(np.float32(2.5), chunked(x, 9), dy).compute(scheduler="threads")
    assert_exact(got, np.float32(2.5) * x + y)
    assert_exact(dy.compute(), y)
    gx, gy = da.compute(*infiniop.rot(chunked(x, 9), dy, np.float32(0.6), np.float32(0.8)))
    c, s_ = np.float32(0.6), np.float32(0.8)
    assert_exact(gx, c * x + s_ * y)
    assert_exact(gy, c * y - s_ * x)


def test_operands_read_as_views():
    """silu_and_mul splits its input's last dim in two (rows must be whole: rechunked);
    rotm's 5-element param is one block whatever its chunks."""
    x = values((6, 10), np.float32)
    got = infiniop.silu_and_mul(chunked(x, (4, 3)))
    assert got.shape == (6, 5)
    assert_exact(got.compute(), infiniop.silu_and_mul(x))
    p = np.array([-1.0, 1.2, -0.3, 0.4, 0.8], np.float32)
    a, b = values((12,), np.float32), values((12,), np.float32)
    want = infiniop.rotm(a.copy(), b.copy(), p)
    got = da.compute(*infiniop.rotm(chunked(a, 5), chunked(b, 5), chunked(p, 2)))
    assert_exact(got[0], want[0])
    assert_exact(got[1], want[1])


def test_bad_input_gets_the_numpy_statuses_when_the_graph_is_built():
    x = chunked(values((6, 4), np.float32), 3)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.sub, x, chunked(values((6, 4), np.float64), 3))
    raises(Status.BAD_TENSOR_DTYPE, infiniop.div, chunked(values((4,), np.int32), 2), 3)
    raises(Status.BAD_TENSOR_DTYPE, infiniop.where, x, x, x)  # condition must be bool
    raises(Status.BAD_TENSOR_SHAPE, infiniop.sub, x, chunked(values((5,), np.float32), 2))
    raises(Status.BAD_PARAM, infiniop.sub, x)  # arity
    raises(Status.NULL_POINTER, infiniop.sub, x, None)
    raises(Status.BAD_PARAM, infiniop.add, chunked(values((4,), np.int8), 2), 1000)  # does not fit
    raises(Status.BAD_PARAM, infiniop.add, chunked(values((4,), np.int32), 2), 1.5)
    raises(Status.BAD_PARAM, infiniop.sub, x, [1.0, 2.0, 3.0, 4.0], match="cannot mix")
    unknown = x[x > 0]  # chunk sizes depend on the data: NaN until computed
    raises(Status.BAD_TENSOR_SHAPE, infiniop.neg, unknown, match="compute_chunk_sizes")
    masked = da.ma.masked_equal(x, 0)  # chunks other than NumPy arrays (masked, CuPy...)
    raises(Status.BAD_PARAM, infiniop.neg, masked, match="MaskedArray chunks")
    raises(Status.BAD_PARAM, infiniop.rearrange, masked, "a b -> b a", match="MaskedArray chunks")


def test_out_is_refused_with_dask_operands():
    a = values((4, 4), np.float32)
    x = chunked(a, 2)
    raises(Status.BAD_PARAM, infiniop.sub, x, x, out=x, match="immutable")
    raises(Status.BAD_PARAM, infiniop.sub, x, x, out=np.empty_like(a), match="immutable")
    raises(Status.BAD_PARAM, infiniop.sub, a, a, out=x, match="immutable")


def test_numpy_operands_keep_the_numpy_path():
    a = values((4, 4), np.float32)
    assert type(infiniop.sub(a, a)) is np.ndarray


def test_missing_dask_says_what_to_install(monkeypatch):
    x = chunked(values((4,), np.float32), 2)
    monkeypatch.setitem(sys.modules, "dask.array", None)  # `import dask.array` now fails
    raises(Status.BAD_PARAM, infiniop.neg, x, match="pip install 'infiniop[dask]'")
    raises(Status.BAD_PARAM, infiniop.rearrange, x, "a -> a", match="pip install 'infiniop[dask]'")


def test_block_outputs_of_a_mebibyte_are_recycled():
    shape = (dask_arrays._POOL_MIN // 4 + 16,)  # pooled (above Dask's minimum size)
    x = dask_arrays.recycled_empty(shape, np.float32)
    assert x.ctypes.data % 64 == 0 and x.shape == shape and x.dtype == np.float32
    addr = x.ctypes.data
    del x
    y = dask_arrays.recycled_empty(shape, np.float32)
    assert y.ctypes.data == addr
    small = dask_arrays.recycled_empty((dask_arrays._POOL_MIN // 8,), np.float32)
    assert small.nbytes not in memory._pool  # below the minimum: malloc's
    del y


def test_results_kept_alive_are_not_overwritten_by_later_blocks():
    a = values((1024, 512), np.float32)  # 1 MiB blocks of 256 rows: pooled outputs
    x = chunked(a, (256, 512))
    kept = infiniop.neg(x).persist(scheduler="threads")  # its blocks live in pooled buffers
    single = infiniop.neg(chunked(a, -1)).compute()  # one block: the pooled array itself
    later = [infiniop.sub(x, x).compute(scheduler="sync") for _ in range(3)]
    assert_exact(kept.compute(), -a)
    assert_exact(single, -a)
    for b in later:
        assert_exact(b, promised(np.subtract, np.float32, a, a))


# ---------------------------------------------------------------------------------------------
# Pickling (what distributed does to an operator)
# ---------------------------------------------------------------------------------------------


def test_operators_round_trip_through_cloudpickle():
    assert pickle.loads(cloudpickle.dumps(infiniop.clip)) is infiniop.clip  # the registered one
    user = infiniop.elementwise("dask_pickled", ("x",), infiniop.FLOATS, lambda m, x: x * 3 - 1,
                                register=False)
    blob = cloudpickle.dumps(user)
    copy = pickle.loads(blob)
    assert copy.key == user.key and pickle.loads(blob) is copy  # one object per definition
    x = values((33,), np.float32)
    assert_exact(copy(x), user(x))


def test_registered_user_operators_reach_a_process_that_never_defined_them():
    """The README's form (``register=True``, the default) defined inside a function or a
    notebook cell: the receiving process has no such name, so it must get the definition."""
    import subprocess
    import sys

    c = float(np.float32(1.75))
    ew = infiniop.elementwise("dask_registered_ew", ("x",), infiniop.FLOATS, lambda m, x: x * c - 1)
    row = infiniop.row_operator("dask_registered_row", "y:out, x", lambda m, v: v - m.max(v) * c)
    assert pickle.loads(cloudpickle.dumps(ew)) is ew  # the defining process keeps its object
    x = values((3, 5), np.float32)
    code = ("import pickle, sys, numpy as np; ew, row, x = pickle.loads(sys.stdin.buffer.read()); "
            "sys.stdout.buffer.write(pickle.dumps((ew(x), row(x))))")
    r = subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps((ew, row, x)),
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    got_ew, got_row = pickle.loads(r.stdout)
    assert_exact(got_ew, ew(x))
    assert_exact(got_row, row(x))
    assert pickle.loads(cloudpickle.dumps(infiniop.softmax)) is infiniop.softmax  # built-ins: by name


# ---------------------------------------------------------------------------------------------
# Row operators and rope
# ---------------------------------------------------------------------------------------------

W12 = RNG.standard_normal(12).astype(np.float32)
B12 = RNG.standard_normal(12).astype(np.float32)
CENTRED = infiniop.row_operator("dask_centred", "y:out, x, w:col, s:out:stat",
                                lambda m, v, w: ((v - m.mean(v)) * w, m.max(v)), register=False)
ROW_CALLS = [  # (name, call on x and its weight/bias stand-ins, dtypes)
    ("softmax axis=1", lambda x, w, b: infiniop.softmax(x, axis=1)),
    ("softmax axis=0", lambda x, w, b: infiniop.softmax(x, axis=0)),
    ("logsoftmax", lambda x, w, b: infiniop.logsoftmax(x, dim=-1)),
    ("causal_softmax", lambda x, w, b: infiniop.causal_softmax(x)),
    ("rms_norm", lambda x, w, b: infiniop.rms_norm(x, w, epsilon=1e-5)),
    ("add_rms_norm",
     lambda x, w, b: infiniop.add_rms_norm(x, (x[:1] * 0.5).astype(x.dtype), w, epsilon=1e-5)),
    ("layer_norm", lambda x, w, b: infiniop.layer_norm(x, w, b, eps=1e-5)),
    ("layer_norm no bias", lambda x, w, b: infiniop.layer_norm(x, w, None, eps=1e-5)),
    ("user row operator", lambda x, w, b: CENTRED(x, w)),
]


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("chunks", [(4, 3, 5), (6, 10, 12), (1, 7, 2)], ids=str)
@pytest.mark.parametrize("name,call", ROW_CALLS, ids=[c[0] for c in ROW_CALLS])
def test_row_operators_on_dask_arrays(name, call, chunks, dtype, counted):
    """Lazy graphs whose blocks are whole rows (the reduced axis, causal_softmax's last two,
    rechunked to one chunk when split), weights as single chunks (given as Dask or NumPy),
    layer_norm's per-row std without the axis: the bits of the in-memory call."""
    x = values((6, 10, 12), dtype)
    w, b = W12.astype(dtype), B12.astype(dtype)
    want = call(x, w, b)
    got = call(chunked(x, chunks), chunked(w, 5), b)
    assert not counted  # nothing computed yet
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(gots) == len(wants)
    for g, v in zip(gots, wants):
        assert isinstance(g, da.Array) and g.shape == v.shape and g.dtype == v.dtype
        assert_exact(g.compute(scheduler="sync"), v)
    assert counted
    if "axis=0" not in name and "causal" not in name:  # rows stay split where the axis is not
        assert gots[0].chunks[0] == chunked(x, chunks).chunks[0]


def test_row_operators_on_dask_arrays_against_float64():
    """Independently of the in-memory path: softmax over a split axis and layer_norm's three
    outputs (std without the axis) against float64 NumPy."""
    x = RNG.standard_normal((6, 10, 12)).astype(np.float32)
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(axis=1, keepdims=True))
    got = infiniop.softmax(chunked(x, (4, 3, 5)), axis=1).compute(scheduler="sync")
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=0)  # ~8 ulp
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    std = np.sqrt(var + 1e-5)
    y, z, s = infiniop.layer_norm(chunked(x, (4, 3, 5)), W12, B12, eps=1e-5)
    assert s.shape == (6, 10) and s.chunks == ((4, 2), (3, 3, 3, 1))
    np.testing.assert_allclose(s.compute(), std[..., 0], rtol=1e-6)
    np.testing.assert_allclose(z.compute(), (xd - mu) / std, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.compute(), (xd - mu) / std * W12 + B12, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_rope_on_dask_arrays(algo, dtype, counted):
    x = values((9, 4, 8), dtype)
    pos = RNG.integers(0, 30, 9).astype(np.int64)
    ang = RNG.standard_normal((30, 4))
    sin, cos = np.sin(ang).astype(dtype), np.cos(ang).astype(dtype)
    want = infiniop.rope(x, pos, sin, cos, algo=algo)
    for xs, ps in (((4, 3, 8), None), ((2, 4, 3), 5), ((9, 4, 8), 9)):
        got = infiniop.rope(chunked(x, xs), pos if ps is None else chunked(pos, ps),
                            chunked(sin, 7), cos, algo=algo)
        assert not counted
        assert_exact(got.compute(scheduler="sync"), want)
        counted.clear()
    got = infiniop.rope(chunked(x, (4, 4, 8)), pos[:1], sin, cos, algo=algo)  # one position for all
    assert_exact(got.compute(scheduler="sync"), infiniop.rope(x, pos[:1], sin, cos, algo=algo))


def test_row_operator_and_rope_errors_on_dask_arrays_when_the_graph_is_built():
    x = chunked(values((6, 10, 12), np.float32), (4, 3, 5))
    raises(Status.BAD_PARAM, infiniop.softmax, x, axis=3, match="out of range")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.rms_norm, x, W12[:5], match="the row length")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.rms_norm, x, W12.astype(np.float64))
    raises(Status.BAD_PARAM, infiniop.softmax, x, out=x, match="immutable")
    raises(Status.NULL_POINTER, infiniop.rms_norm, x, None)
    raises(Status.BAD_PARAM, infiniop.rms_norm, x, [1.0] * 12, match="cannot mix a Dask array")
    xr = chunked(values((9, 4, 8), np.float32), 3)
    s = np.ones((30, 4), np.float32)
    raises(Status.BAD_TENSOR_SHAPE, infiniop.rope, xr, np.zeros(3, np.int32), s, s,
           match="operand 'pos_ids': shape (3,) cannot broadcast to output shape (9,)")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.rope, xr[..., :7], np.zeros(9, np.int32), s, s,
           match="odd")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.rope, xr, np.zeros(9, np.float32), s, s)
    raises(Status.BAD_PARAM, infiniop.rope, xr, np.zeros(9, np.int32), s, s, out=xr)
    raises(Status.BAD_PARAM, infiniop.rope, xr, np.zeros(9, np.int32), s, match="takes 4 operands")


def test_operators_of_one_name_do_not_share_graph_keys():
    """Dask computes a key once: two operators of one name (a notebook cell re-run with a fixed
    body), a default parameter changed, or an optional operand left out in another place got
    one key, and one graph handed the first one's blocks to the second."""
    x = np.array([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]], np.float32)
    X = chunked(x, 1)
    center_max = infiniop.row_operator("dask_center", "y:out, x", lambda m, x: x - m.max(x))
    center_mean = infiniop.row_operator("dask_center", "y:out, x", lambda m, x: x - m.mean(x))
    a, b = da.compute(center_max(X), center_mean(X))
    assert_exact(a, center_max(x))
    assert_exact(b, center_mean(x))  # was center_max's values
    aff = infiniop.row_operator("dask_affine", "y:out, x, w?:col, b?:col",
                                lambda m, x, w, b: (x if w is None else x * w) + (0.0 if b is None else b))
    v = np.array([10.0, 20.0, 30.0], np.float32)
    scaled, shifted = da.compute(aff(X, v), aff(X, None, v))
    assert_exact(scaled, x * v)
    assert_exact(shifted, x + v)
    double, triple = (infiniop.elementwise("dask_scale", ("x",), infiniop.FLOATS,
                                           lambda m, x, s: x * s, register=False,
                                           params=(Param("s", "f32", k),)) for k in (2.0, 3.0))
    y = np.arange(4, dtype=np.float32)
    got = da.compute(double(chunked(y, 2)), triple(chunked(y, 2)), triple(chunked(y, 2), s=2.0))
    assert_exact(got[0], y * 2)
    assert_exact(got[1], y * 3)  # was y * 2
    assert_exact(got[2], y * 2)
    assert triple(chunked(y, 2)).name == triple(chunked(y, 2), s=3.0).name  # a default is its value
    assert infiniop.sub(X, X).name == infiniop.sub(X, X).name  # keys stay deterministic


def test_shape_errors_of_in_place_and_split_operands_when_the_graph_is_built():
    """An operand updated in place is an output: NumPy refuses to broadcast it, and so does the
    graph (swap's x (1, 6) came back (4, 6)); silu_and_mul's odd last dim was a graph of shape
    (3, 2) that failed only at compute."""
    x, y = values((1, 6), np.float32), values((4, 6), np.float32)
    raises(Status.BAD_TENSOR_SHAPE, infiniop.swap, x.copy(), y.copy())  # NumPy's answer
    raises(Status.BAD_TENSOR_SHAPE, infiniop.swap, chunked(x, 1), chunked(y, 1),
           match="operand 'x' is updated in place but has shape (1, 6)")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.axpy, np.float32(2), chunked(y, 1), chunked(x, 1),
           match="operand 'y' is updated in place but has shape (1, 6)")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.silu_and_mul, chunked(values((3, 5), np.float32), 2),
           match="last dim of shape (3, 5) must be a multiple of 2")


def test_rope_pos_ids_broadcast_as_with_numpy():
    """pos_ids broadcast against x.shape[:-2] (README): (batch, seq), (batch, 1), 0-d."""
    x = values((2, 4, 3, 8), np.float32)
    ang = RNG.standard_normal((16, 4))
    sin, cos = np.sin(ang).astype(np.float32), np.cos(ang).astype(np.float32)
    for pos in (RNG.integers(0, 16, (2, 4)), RNG.integers(0, 16, (2, 1)),
                RNG.integers(0, 16, (1, 4)), np.int64(5)):
        pos = np.asarray(pos, np.int64)
        want = infiniop.rope(x, pos, sin, cos, algo=1)
        for ps in (pos, chunked(pos, 1) if pos.ndim else pos):
            assert_exact(infiniop.rope(chunked(x, (1, 3, 3, 8)), ps, sin, cos, algo=1).compute(),
                         want)
    raises(Status.BAD_TENSOR_SHAPE, infiniop.rope, chunked(x, 2), np.zeros((3, 4), np.int64),
           sin, cos, match="operand 'pos_ids': shape (3, 4) cannot broadcast to output shape (2, 4)")


def test_output_dtypes_chosen_by_dtype_keyword():
    """Dask arrays take no out=, so the signatures only out= chose (dequant to f16/bf16/f32,
    logsoftmax fp16 -> float32) were out of reach: dtype= (NumPy's ufunc keyword) reaches them."""
    q = RNG.integers(-128, 128, (6, 5)).astype(np.int8)
    scale = np.array([0.25], np.float32)
    for dt in (np.float16, BF16, np.float32):
        got = infiniop.per_tensor_dequant_int8(chunked(q, 2), scale, dtype=dt)
        assert got.dtype == dt
        assert_exact(got.compute(), infiniop.per_tensor_dequant_int8(q, scale, out=np.empty(q.shape, dt)))
    x = values((4, 8), np.float16)
    got = infiniop.logsoftmax(chunked(x, 2), dtype=np.float32)
    assert got.dtype == np.float32
    assert_exact(got.compute(), infiniop.logsoftmax(x, out=np.empty(x.shape, np.float32)))
    assert infiniop.logsoftmax(chunked(x, 2)).name != got.name  # the dtype is in the key


def test_dask_refusals_name_their_operand_as_numpy_ones_do():
    a = values((2, 3), np.float32)
    X = chunked(a, 1)
    for call in (lambda o: infiniop.softmax(a, out=o), lambda o: infiniop.sub(a, a, out=o)):
        raises(Status.BAD_PARAM, call, X, match="out=: Dask arrays are immutable")
    x3 = values((2, 3, 2), np.float32)
    t = np.zeros((4, 1), np.float32)
    raises(Status.BAD_PARAM, infiniop.rope, x3, np.zeros(2, np.int32), t, t,
           out=chunked(x3, 1), match="rope: out=: Dask arrays are immutable")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.copy_, np.empty((2, 4), np.float32), X,
           match="operand 'src': shape (2, 3) cannot broadcast to output shape (2, 4)")
    for bad in (np.complex64, ">f4"):  # refused when the graph is built, as a NumPy x is
        c = chunked(np.zeros((2, 3), bad), 1)
        raises(Status.BAD_TENSOR_DTYPE, infiniop.rearrange, c, "a b -> b a", match="operand 'x'")
        raises(Status.BAD_TENSOR_DTYPE, infiniop.copy_, np.zeros((2, 3), np.float32), c,
               match="operand 'src'")


# ---------------------------------------------------------------------------------------------
# rearrange and copy_
# ---------------------------------------------------------------------------------------------

A = np.arange(2 * 6 * 4 * 3, dtype=np.float32).reshape(2, 6, 4, 3)
# pattern, axis sizes, the einops result computed with NumPy reshape/transpose
PATTERNS = [
    ("n c h w -> n h w c", {}, A.transpose(0, 2, 3, 1)),
    ("n c h w -> (n c) h w", {}, A.reshape(12, 4, 3)),
    ("n c h w -> n (h w c)", {}, A.transpose(0, 2, 3, 1).reshape(2, 72)),
    ("n (g c) h w -> g n c (h w)", {"g": 2}, A.reshape(2, 2, 3, 4, 3).transpose(1, 0, 2, 3, 4)
     .reshape(2, 2, 3, 12)),
    ("n (c1 c2) h w -> (c2 n) c1 h w", {"c2": 3}, A.reshape(2, 2, 3, 4, 3)
     .transpose(2, 0, 1, 3, 4).reshape(6, 2, 4, 3)),
    ("n c ... -> ... n c 1", {}, A.transpose(2, 3, 0, 1)[..., None]),
    ("n c ... -> n (c ...)", {}, A.reshape(2, 72)),
    ("n c h w -> (n c h w)", {}, A.reshape(-1)),
    ("n c h (w 1) -> w () n c h", {}, A.transpose(3, 0, 1, 2)[:, None]),
]
CHUNKS = [(1, 4, 3, 2), (2, 6, 4, 3), (1, 5, 1, 3)]


@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
@pytest.mark.parametrize("pattern,sizes,want", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_rearrange_einops_semantics(pattern, sizes, want, chunks, counted):
    r = infiniop.rearrange(chunked(A, chunks), pattern, **sizes)
    assert isinstance(r, da.Array) and not counted
    got = r.compute(scheduler="sync")
    assert counted  # our kernel computed the blocks
    assert_exact(got, want)


def test_rearrange_rechunks_only_where_an_axis_is_merged_or_split():
    x = chunked(A, (1, 4, 3, 2))
    assert infiniop.rearrange(x, "n c h w -> w n h c").chunks == ((2, 1), (1, 1), (3, 1), (4, 2))
    # (n c): c is merged behind n, so c becomes one chunk; n keeps its chunks
    assert infiniop.rearrange(x, "n c h w -> (n c) h w").chunks == ((6, 6), (3, 1), (2, 1))
    # (g c) with c=3: chunk boundaries move to multiples of 3 (4 -> 3), c stays whole
    r = infiniop.rearrange(x, "n (g c) h w -> g n c h w", c=3)
    assert r.chunks == ((1, 1), (1, 1), (3,), (3, 1), (2, 1))


def test_rearrange_errors():
    x = chunked(A, 2)
    raises(Status.BAD_PARAM, infiniop.rearrange, x, "n c h -> c n h")  # 3 names, 4 dims
    raises(Status.BAD_PARAM, infiniop.rearrange, x, "n (g c) h w -> g n c h w", g=4)
    raises(Status.BAD_PARAM, infiniop.rearrange, x, "n c h w -> n c h")
    raises(Status.BAD_TENSOR_SHAPE, infiniop.rearrange, x[x > 3], "a -> a",
           match="compute_chunk_sizes")


def test_copy_from_a_dask_array():
    dst = np.zeros((4, 6), np.float32)
    src = values((6,), np.float32)
    assert infiniop.copy_(dst, chunked(src, 4)) is dst
    assert_exact(dst, np.broadcast_to(src, (4, 6)))
    x = chunked(src, 4)
    raises(Status.BAD_PARAM, infiniop.copy_, x, src, match="immutable")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.copy_, np.zeros(6, np.float64), x)
    raises(Status.BAD_TENSOR_SHAPE, infiniop.copy_, np.zeros(5, np.float32), x)
    raises(Status.NULL_POINTER, infiniop.copy_, None, x)


# ---------------------------------------------------------------------------------------------
# dask.distributed: two worker processes
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None, death_timeout=60) as cluster:
        with distributed.Client(cluster, timeout=60) as c:
            yield c


def test_distributed_builtin_operators_and_rearrange(client):
    a, b = values((64, 48), np.float32), values((48,), np.float32)
    x, y = chunked(a, (20, 16)), chunked(b, 20)
    r, c, t = client.compute([infiniop.sub(x, y), infiniop.clip(x, -1.0, y),
                              infiniop.rearrange(x, "(p q) c -> q (c p)", p=4)])
    assert_exact(r.result(timeout=120), promised(np.subtract, np.float32, a, b))
    assert_exact(c.result(timeout=120), clip_ref(a, np.float32(-1.0), b))
    assert_exact(t.result(timeout=120), a.reshape(4, 16, 48).transpose(1, 2, 0).reshape(16, 192))
    h = a.astype(BF16)
    got = client.compute(infiniop.sub(chunked(h, 24), chunked(h.T, 16).T)).result(timeout=120)
    assert_exact(got, promised(np.subtract, BF16, h, h))


def test_distributed_user_defined_operator_compiles_on_the_workers(client):
    # a constant of its own, so the workers cannot have this kernel loaded from another test,
    # nor from an earlier run's kernel cache (then no kernel module is imported)
    c = 0.75 + random.randrange(1 << 20) / (1 << 22)  # exact in float32
    axpb = infiniop.elementwise("dask_worker_axpb", ("x", "y"), infiniop.FLOATS,
                                lambda m, x, y: x * c + y, register=False)
    a = values((50, 40), np.float32)
    got = client.compute(axpb(chunked(a, (13, 40)), chunked(a, (50, 9)))).result(timeout=120)
    assert_exact(got, a * np.float32(c) + a)

    def loaded(key):
        from infiniop.backends.cpu import runtime
        return runtime.CACHE_DIR, any(key in m for m in sys.modules if m.startswith("infiniop_kernels."))

    from infiniop.backends.cpu import runtime

    seen = client.run(loaded, f"ew_{axpb.name}_")  # kernel modules are named after the op
    assert len(seen) == 2
    assert {d for d, _ in seen.values()} == {runtime.CACHE_DIR}  # from the environment
    assert any(k for _, k in seen.values())  # a worker compiled or loaded the kernel
