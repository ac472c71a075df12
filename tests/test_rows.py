"""Row operators (rms_norm, add_rms_norm, layer_norm, softmax, causal_softmax, logsoftmax, rope
and user-defined ones) against float64 references and an independent NumPy model of the fixed
reduction order; every layout gives the same bits; so does every thread count.

Also run on the Triton interpreter (tests/test_triton_suite.py); there ``test_same_bits_as_cpu``
compares the two backends directly.
"""

from __future__ import annotations

import functools
import os
import re

import ml_dtypes
import numpy as np
import pytest
from conftest import CANARY, assert_canary, assert_exact, place, raises

import infiniop
from infiniop import DType, Status, TensorDescriptor
from infiniop.backends.cpu import runtime
from infiniop.rows.spec import LANES, lanes_for

BF16 = ml_dtypes.bfloat16
FLOATS = [np.float16, BF16, np.float32, np.float64]
TD = TensorDescriptor.from_array
IN_TRITON = os.environ.get("INFINIOP_TRITON_WORKER") == "1"
# (rtol, atol) of a result rounded to the dtype, against a float64 reference
TOL = {np.float16: (2e-3, 1e-4), BF16: (1.6e-2, 1e-3), np.float32: (2e-5, 1e-6),
       np.float64: (1e-12, 1e-14)}


def draw(rng, dtype, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def f64(x):
    return np.asarray(x).astype(np.float64)


def assert_close(got, want, dtype):
    rtol, atol = TOL[dtype]
    got, want = f64(got), f64(want)
    both_nan = np.isnan(got) & np.isnan(want)
    err = np.abs(got - want)
    bad = ~both_nan & ~(err <= atol + rtol * np.abs(want))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} off; worst {err[bad].max()}"


def run(handle, name, outs, ins, **scalars):
    create = getattr(infiniop, f"create_{name}_descriptor")
    descs = [TD(a) for a in outs] + [None if a is None else TD(a) for a in ins]
    with create(handle, *descs, **scalars) as d:
        d.calculate(None, *outs, *ins)
    return outs


# ---------------------------------------------------------------------------------- references

def ref_softmax(x, axis=-1):
    x = f64(x)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def ref_logsoftmax(x, axis=-1):
    x = f64(x)
    d = x - x.max(axis, keepdims=True)
    return d - np.log(np.exp(d).sum(axis, keepdims=True))


def ref_rms(x, w, eps):
    x = f64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(eps)) * f64(w)


def ref_layer_norm(x, w, b, eps):
    x = f64(x)
    d = x - x.mean(-1, keepdims=True)
    std = np.sqrt((d * d).mean(-1) + np.float32(eps))
    z = d / std[..., None]
    return z * f64(w) + (0 if b is None else f64(b)), z, std


def causal_mask(shape):
    r, n = shape[-2:]
    i, j = np.arange(r)[:, None], np.arange(n)[None, :]
    return np.broadcast_to(j > i + n - r, shape)


def ref_causal(x):
    x = np.where(causal_mask(x.shape), -np.inf, f64(x))
    return ref_softmax(x)


def ref_rope(x, pos, sin, cos, algo):
    x = f64(x)
    s, c = f64(sin)[pos][..., None, :], f64(cos)[pos][..., None, :]
    h = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if algo == 0 else (x[..., :h], x[..., h:])
    y = np.empty_like(x)
    o1, o2 = a * c - b * s, a * s + b * c
    if algo == 0:
        y[..., 0::2], y[..., 1::2] = o1, o2
    else:
        y[..., :h], y[..., h:] = o1, o2
    return y


# ------------------------------------------------ an independent model of the reduction order

def ordered(v, op="sum"):
    """The contract of rows/spec.py in NumPy: L lanes walked in steps of L, then halved."""
    n = v.shape[-1]
    L = lanes_for(n)
    acc = np.full(v.shape[:-1] + (L,), -0.0 if op == "sum" else -np.inf, v.dtype)

    def comb(a, b):
        return a + b if op == "sum" else np.where((a > b) | np.isnan(a), a, b)

    for c in range(0, n, L):
        m = min(L, n - c)
        acc[..., :m] = comb(acc[..., :m], v[..., c:c + m])
    h = L // 2
    while h:
        acc[..., :h] = comb(acc[..., :h], acc[..., h:2 * h])
        h //= 2
    return acc[..., 0]


def model_rms(x, w, eps):
    t = np.float32 if x.dtype != np.float64 else np.float64
    xf, wf = x.astype(t), w.astype(t)
    ss = ordered(xf * xf)
    r = t(1) / np.sqrt(ss / t(x.shape[-1]) + t(np.float32(eps)))
    return ((xf * r[..., None]) * wf).astype(x.dtype)


def model_layer_norm(x, w, b, eps):
    t = np.float32 if x.dtype != np.float64 else np.float64
    xf = x.astype(t)
    n = t(x.shape[-1])
    d = xf - (ordered(xf) / n)[..., None]
    std = np.sqrt(ordered(d * d) / n + t(np.float32(eps)))
    z = d * (t(1) / std)[..., None]
    y = z * w.astype(t) + (0 if b is None else b.astype(t))
    return y.astype(x.dtype), z.astype(x.dtype), std.astype(x.dtype)


def test_lanes_contract():
    assert [lanes_for(n) for n in (0, 1, 2, 3, 5, 1024, 1025, 50257)] == [1, 1, 2, 4, 8, LANES,
                                                                           LANES, LANES]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64],
                         ids=["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("n", [7, 2500, 4100])
def test_norms_follow_the_reduction_order_bit_for_bit(handle, dtype, n):
    """rms_norm, layer_norm and add_rms_norm give exactly the bits of the NumPy model of the
    fixed order (lanes, chunks with a tail, pairwise halving) and IEEE float32 arithmetic
    (fp16/bf16 rows sum their whole chunks in vectors, intrinsics.row_sum*: 2500 and 4100 have
    two and four of them, and a tail)."""
    rng = np.random.default_rng(n)
    x, b = draw(rng, dtype, (3, n), 3), draw(rng, dtype, (3, n))
    w, bias = draw(rng, dtype, (n,)), draw(rng, dtype, (n,))
    y = np.empty_like(x)
    run(handle, "rms_norm", [y], [x, w], epsilon=1e-6)
    assert_exact(y, model_rms(x, w, 1e-6))
    outs = [np.empty_like(x), np.empty_like(x), np.empty(3, dtype)]
    run(handle, "layer_norm", outs, [x, w, bias], eps=1e-5)
    for got, want in zip(outs, model_layer_norm(x, w, bias, 1e-5)):
        assert_exact(got, want)
    y, res = np.empty_like(x), np.empty_like(x)
    run(handle, "add_rms_norm", [y, res], [x, b, w], epsilon=1e-6)
    t = np.float32 if dtype != np.float64 else np.float64
    s = x.astype(t) + b.astype(t)
    assert_exact(res, s.astype(dtype))
    ss = ordered(s * s)
    want = (s * (t(1) / np.sqrt(ss / t(n) + t(np.float32(1e-6))))[:, None]) * w.astype(t)
    assert_exact(y, want.astype(dtype))


@pytest.mark.parametrize("n", [1, 6, 1001])
def test_bf16_rows_read_and_written_as_words(handle, n):
    """Light bf16 epilogues (rms_norm, layer_norm) run two elements per 32-bit word of every
    operand (``row_outputs``' paired loop): rows and weights starting at odd elements (words at
    2 mod 4 bytes), an odd last element, an output slice, in place; bits of the model."""
    rng = np.random.default_rng(n + 3)
    x = draw(rng, BF16, (5, n + 1), 3)[:, 1:]
    w, bias = draw(rng, BF16, (n + 1,))[1:], draw(rng, BF16, (n + 1,))[1:]
    y = np.full((5, n + 1), np.nan, BF16)[:, 1:]
    run(handle, "rms_norm", [y], [x, w], epsilon=1e-6)
    assert_exact(y, model_rms(x, w, 1e-6))
    outs = [np.empty((5, n + 1), BF16)[:, 1:], np.empty_like(x), np.empty(5, BF16)]
    run(handle, "layer_norm", outs, [x, w, bias], eps=1e-5)
    for got, want in zip(outs, model_layer_norm(x, w, bias, 1e-5)):
        assert_exact(got, want)
    xi = x.copy()
    run(handle, "rms_norm", [xi], [xi, w], epsilon=1e-6)
    assert_exact(xi, model_rms(x, w, 1e-6))


ROW_MAX = infiniop.row_operator("test_row_max", "y:out, mx:out:stat, x",
                                lambda m, x: (x - m.max(x), m.max(x)), axis="axis")
# one maximum reduction (ROW_MAX traces two): the stage row_max_* runs in vectors
ONE_MAX = infiniop.row_operator("test_one_max", "y:out, mx:out:stat, x",
                                lambda m, x: (lambda mx: (x - mx, mx))(m.max(x)))


EXP_NONPOSITIVE = infiniop.elementwise("test_exp_nonpositive", ("x",), [DType.F32],
                                      lambda m, x: m.exp_nonpositive(x), register=False)
LOG = infiniop.elementwise("test_log", ("x",), [DType.F32], lambda m, x: m.log(x), register=False)
EXP_SUM = infiniop.row_operator("test_exp_sum", "y:out, s:out:stat, x",
                               lambda m, x: (x, m.sum(m.exp_nonpositive(x - m.max(x)))))


@pytest.mark.parametrize("n", [20, 1500, 2500, 4096])
def test_softmax_family_follows_the_reduction_order_bit_for_bit(handle, n):
    """softmax, logsoftmax and causal_softmax (float32) give exactly the bits of the fixed order
    over mathlib's exp (the same function as an elementwise operator): lanes, chunks (whole
    ones two at a time: 1500 has none, 2500 one pair and a tail, 4096 two pairs, the second's
    order visible), halving; causal rows of every length from n - 15 to n."""
    rng = np.random.default_rng(n)
    x = draw(rng, np.float32, (16, n), 3)
    # rows 4 on: one lane (5) carries the sum, so the order of its chunks decides the last bits
    # (over all lanes, a lane's rounding is far below the sum's last bit)
    x[4:] = -40.0
    x[4:, 5::LANES] = rng.uniform(-1, 0, x[4:, 5::LANES].shape)
    d = x - ordered(x, "max")[:, None]
    e = EXP_NONPOSITIVE(d)
    s = ordered(e)
    assert_exact(EXP_SUM(x)[1], s)  # the sum itself (1/s and log s could hide its last bit)
    assert_exact(run(handle, "softmax", [np.empty_like(x)], [x])[0], e * (np.float32(1) / s)[:, None])
    assert_exact(run(handle, "logsoftmax", [np.empty_like(x)], [x])[0], d - LOG(s)[:, None])
    want = np.zeros_like(x)
    for i in range(16):
        v = i + n - 15
        ei = EXP_NONPOSITIVE(x[i, :v] - ordered(x[i, :v], "max"))
        want[i, :v] = ei * (np.float32(1) / ordered(ei))
    assert_exact(run(handle, "causal_softmax", [np.empty_like(x)], [x])[0], want)


@pytest.mark.parametrize("n", [7, 1024, 2500, 3000, 5000])
def test_max_follows_the_reduction_order_bit_for_bit(handle, n, monkeypatch):
    """The row maximum (lanes in two alternating halves on the CPU) gives exactly the bits of
    the fixed order, zeros of both signs and NaN included, along a contiguous axis (row kind)
    and a strided one (col kind: lanes updated an odd or even number of times), serial and
    parallel."""
    rng = np.random.default_rng(n)
    x = draw(rng, np.float32, (5, n), 3)
    x[rng.random(x.shape) < 0.3] = -0.0
    x[1] = rng.choice(np.float32([0.0, -0.0]), n)
    x[2, n // 2] = np.nan
    x[3] = -np.inf
    for threshold in (1 << 40, 1):
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", threshold)
        for v, axis in ((x, 1), (np.ascontiguousarray(x.T), 0)):
            y, mx = ROW_MAX(v, axis=axis)
            want = ordered(x, "max")
            assert_exact(mx, want)
            with np.errstate(invalid="ignore"):
                assert_exact(y, v - (want[:, None] if axis == 1 else want[None, :]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("n", [5, 16, 33, 64, 100, 120, 4099])
def test_vector_maximum_keeps_the_lane_orders_bits(handle, dtype, n):
    """A row's plain maximum runs in explicit vectors from 16 elements on (intrinsics.row_max_*:
    64 elements a step, then 16 at a time, then a scalar tail) and falls back to the fixed lane
    order where that decides the bits: a zero maximum (its sign follows the order) and a NaN
    anywhere (in a vector step, a single vector or the tail). Every row gives the order's bits,
    in each dtype the vectors load."""
    rng = np.random.default_rng(n)
    x = draw(rng, dtype, (10, n), 3)
    x[8, max(0, n - 30)] = np.nan                        # a single vector's (n = 100, 120)
    x[9] = -np.abs(x[9])
    x[9, max(0, n - 30)] = 7.0                           # the maximum alone there
    x[1, min(3, n - 1)] = np.nan                         # in the first vector step (or the tail)
    x[2, n - 1] = np.nan                                 # the last element: the tail for n % 64
    x[3] = rng.choice(np.array([0.0, -0.0, -1.5], dtype), n)  # a zero maximum, signs mixed
    x[3, 0] = -0.0
    x[4] = -0.0
    x[4, n - 1] = 0.0                                    # one +0 last
    x[5] = -np.abs(x[5])
    x[5, n - 1] = 7.0                                    # the maximum alone in the tail
    x[6] = -np.inf
    x[7] = np.abs(x[7])                                  # positive: the vectors decide
    y, mx = ONE_MAX(x)
    assert_exact(mx, ordered(x.astype(np.float32), "max").astype(dtype))
    sm = run(handle, "softmax", [np.empty_like(x)], [x])[0]
    want = run(handle, "softmax", [np.empty_like(x)], [x[:, ::-1].copy()])[0][:, ::-1]
    assert np.isnan(f64(sm[[1, 2, 6, 8]])).all()        # NaN rows and the -inf row
    assert_close(sm[[0, 3, 4, 5, 7, 9]], want[[0, 3, 4, 5, 7, 9]], dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("square", [False, True], ids=["sum", "sumsq"])
def test_row_sum_intrinsics_keep_each_lanes_order(dtype, square):
    """row_sum*/row_sumsq* give each lane's sum over the whole chunks in chunk order, bit for
    bit: compared lane by lane (a lane's own rounding is visible there, unlike in a row's total),
    with values spread over 12 binades so that another order rounds differently."""
    from numba import njit

    from infiniop.backends.cpu import intrinsics as intr

    fn = getattr(intr, f"row_sum{'sq' if square else ''}_{'f16' if dtype is np.float16 else 'bf16'}")

    @njit
    def lanes_of(addr, nchunks, L, out):
        fn(addr, nchunks, L, out)

    rng = np.random.default_rng(7)
    L, nchunks = LANES, 5
    x = (rng.standard_normal(L * nchunks + 9) * 2.0 ** rng.integers(-6, 6, L * nchunks + 9)).astype(dtype)
    got = np.full(L, np.nan, np.float32)
    lanes_of(x.ctypes.data, nchunks, L, got.ctypes.data)
    v = x[:L * nchunks].astype(np.float32).reshape(nchunks, L)
    want = np.full(L, -0.0, np.float32)
    for c in range(nchunks):
        want = want + (v[c] * v[c] if square else v[c])
    assert_exact(got, want)
    other = np.full(L, -0.0, np.float32)  # the test can see an order: the reverse one differs
    for c in reversed(range(nchunks)):
        other = other + (v[c] * v[c] if square else v[c])
    assert (other.view(np.uint32) != want.view(np.uint32)).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_lanes_sum_halves_in_the_lane_order(dtype):
    """lanes_sum_* (a sum's last lanes halved in registers) adds lane l and lane l + m/2, then
    again, for every m the row kernels hand it (1 to LANES_SUM_MAX), bit for bit: values over
    24 binades (another pairing rounds differently), and lanes holding -0.0, inf and NaN."""
    from numba import njit

    from infiniop.backends.cpu import intrinsics as intr
    from infiniop.backends.cpu import row_kernels

    assert row_kernels._LANES_SUM_MAX == intr.LANES_SUM_MAX
    fn = intr.lanes_sum_f32 if dtype is np.float32 else intr.lanes_sum_f64

    @njit
    def total(addr, m):
        return fn(addr, m)

    def halved(v):
        while v.size > 1:
            v = v[:v.size // 2] + v[v.size // 2:]
        return v[0]

    rng = np.random.default_rng(8)
    orders = 0
    for m in [2 ** i for i in range(6)]:
        for trial in range(20):
            v = (rng.standard_normal(m) * 2.0 ** rng.integers(-12, 12, m)).astype(dtype)
            if trial == 1:
                v[rng.integers(0, m)] = -0.0
            if trial == 2 and m > 1:
                v[:] = -0.0
            if trial == 3:
                v[rng.integers(0, m)] = np.inf
            if trial == 4:
                v[rng.integers(0, m)] = np.nan
            got, want = np.array([total(v.ctypes.data, m)], dtype), np.array([halved(v.copy())], dtype)
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)) \
                or (np.isnan(got[0]) and np.isnan(want[0])), (m, trial, got, want)
            orders += m > 2 and halved(v[::-1].copy()) != want[0]
    assert orders > 0  # the test can see a pairing: the reversed one differs somewhere


# --------------------------------------------------------------------------------- values

@pytest.mark.parametrize("dtype", FLOATS, ids=["f16", "bf16", "f32", "f64"])
def test_values(handle, dtype):
    rng = np.random.default_rng(1)
    shape = (3, 4, 37)
    x, w, b = draw(rng, dtype, shape, 2), draw(rng, dtype, shape[-1:]), draw(rng, dtype, shape[-1:])
    y = run(handle, "rms_norm", [np.empty_like(x)], [x, w], epsilon=1e-5)[0]
    assert_close(y, ref_rms(x, w, 1e-5), dtype)
    outs = run(handle, "layer_norm", [np.empty_like(x), np.empty_like(x), np.empty(shape[:-1], dtype)],
               [x, w, b], eps=1e-5)
    for got, want in zip(outs, ref_layer_norm(x, w, b, 1e-5)):
        assert_close(got, want, dtype)
    for name, ref in [("softmax", ref_softmax), ("logsoftmax", ref_logsoftmax),
                      ("causal_softmax", ref_causal)]:
        got = run(handle, name, [np.empty_like(x)], [x])[0]
        assert_close(got, ref(x), dtype)
    a2 = draw(rng, dtype, shape)
    y, res = run(handle, "add_rms_norm", [np.empty_like(x), np.empty_like(x)], [x, a2, w])
    s = (x.astype(np.float64) + a2.astype(np.float64))
    assert_close(res, s, dtype)
    assert_close(y, ref_rms(s, w, 1e-5), dtype)


@pytest.mark.parametrize("wdt", [np.float16, BF16], ids=["w16", "wbf16"])
def test_rms_norm_weight_dtypes(handle, wdt):
    """float32 activations with a half weight (the reference tables cover half activations with
    every weight dtype)."""
    rng = np.random.default_rng(2)
    x, w = draw(rng, np.float32, (5, 64)), draw(rng, wdt, (64,))
    y = infiniop.rms_norm(x, w, epsilon=1e-6)
    assert y.dtype == np.float32
    assert_close(y, ref_rms(x, w, 1e-6), np.float32)


def test_logsoftmax_wider_output(handle):
    """InfiniCore's mixed case: f16/bf16 input, f32 output (no rounding to the input dtype)."""
    rng = np.random.default_rng(3)
    for dt in (np.float16, BF16):
        x = draw(rng, dt, (4, 300), 3)
        y = run(handle, "logsoftmax", [np.empty(x.shape, np.float32)], [x])[0]
        assert_close(y, ref_logsoftmax(x), np.float32)
        assert infiniop.logsoftmax(x).dtype == np.dtype(dt)  # the first signature: same dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_softmax_and_logsoftmax_on_every_axis(handle, dtype):
    """Every axis (negative too) of a 4-d tensor; each gives the bits of the contiguous call on
    that axis moved last."""
    rng = np.random.default_rng(4)
    x = draw(rng, dtype, (3, 5, 17, 40), 4)
    for axis in range(-4, 4):
        moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
        for name, ref, key in [("softmax", ref_softmax, "axis"), ("logsoftmax", ref_logsoftmax, "dim")]:
            got = run(handle, name, [np.empty_like(x)], [x], **{key: axis})[0]
            assert_close(got, ref(x, axis), dtype)
            flat = run(handle, name, [np.empty_like(moved)], [moved])[0]
            assert_exact(got, np.moveaxis(flat, -1, axis))


@pytest.mark.parametrize("n", [1, 2, 3, 1023, 1024, 1025, 50257])
def test_long_and_short_rows(handle, n):
    rng = np.random.default_rng(n)
    for dt in (np.float32, BF16):
        x = draw(rng, dt, (2, n), 5)
        got = infiniop.softmax(x)
        assert_close(got, ref_softmax(x), dt)
        assert_close(infiniop.logsoftmax(x), ref_logsoftmax(x), dt)
        if n == 1:
            assert (f64(got) == 1).all()


def test_stability(handle):
    """No overflow for inputs in the hundreds; equal inputs are uniform; -inf gives 0; NaN
    poisons its row only."""
    x = np.array([[300.0, 299.0, -400.0, 250.0], [88.0, 88.0, 88.0, 88.0],
                  [1.0, -np.inf, 2.0, -np.inf], [1.0, np.nan, 2.0, 3.0]], np.float32)
    for dt in (np.float16, np.float32):
        xs = x.astype(dt)
        y = infiniop.softmax(xs)
        assert np.isfinite(f64(y[:3])).all() and np.isnan(f64(y[3])).all()
        assert_close(y[:3], ref_softmax(xs[:3]), dt)
        assert (f64(y[1]) == 0.25).all() and f64(y[2, 1]) == 0 and f64(y[2, 3]) == 0
        ls = infiniop.logsoftmax(xs)
        assert np.isfinite(f64(ls[[0, 1]])).all()
        assert_close(ls[:2], ref_logsoftmax(xs[:2]), dt)
        assert f64(ls[2, 1]) == -np.inf
    big = np.full((2, 8), 500.0, np.float32)
    y, z, s = infiniop.layer_norm(big, np.ones(8, np.float32))
    assert (y == 0).all() and (s == np.sqrt(np.float32(1e-5))).all()
    r = infiniop.rms_norm(np.full((1, 6), 1e19, np.float32), np.ones(6, np.float32))
    assert (r == 0).all()  # x*x overflows the float32 accumulator: 1/sqrt(inf) = 0 (as torch)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 9), (2, 5, 7), (2, 1, 300), (1, 3, 1200)])
def test_causal_softmax(handle, shape):
    rng = np.random.default_rng(6)
    for dt in (np.float16, BF16, np.float32):
        x = draw(rng, dt, shape, 3)
        y = infiniop.causal_softmax(x)
        mask = causal_mask(shape)
        assert (np.ascontiguousarray(y).view(np.uint16 if dt != np.float32 else np.uint32)[mask]
                == 0).all()  # exactly +0.0
        assert_close(y, ref_causal(x), dt)


@pytest.mark.parametrize("dt", [np.float16, BF16, np.float32], ids=["f16", "bf16", "f32"])
def test_causal_zeros_stored_as_blocks(handle, monkeypatch, dt):
    """A causal row's elements past its v are stored as zeros without being computed: whole
    blocks of them when streamed (row_kernels' ``masked_block``), a plain loop otherwise. Rows
    of 1 to 700 of 700 columns, streamed and not, into an output 2 bytes past a line (a peeled
    head) and in place (blocks staged): exactly +0.0 where masked, the same bits either way,
    close to the float64 softmax."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    x = draw(np.random.default_rng(14), dt, (1, 700, 700), 3)
    base = infiniop.causal_softmax(x)
    mask = causal_mask(x.shape)
    bits = np.uint32 if dt == np.float32 else np.uint16
    assert (base.view(bits)[mask] == 0).all()
    assert_close(base, ref_causal(x), dt)
    inplace = x.copy()  # not streamed: the row staged through the stack (``in_place``)
    assert_exact(run(handle, "causal_softmax", [inplace], [inplace])[0], base)
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    buf = infiniop.empty_aligned((700 * 704 + 1,), dt)
    for out in (infiniop.empty_aligned(x.shape, dt), buf[1:].reshape(1, 700, 704)[:, :, :700]):
        out[...] = np.nan  # every element is written
        assert_exact(run(handle, "causal_softmax", [out], [x])[0], base)
        out[...] = x  # in place: blocks staged through the stack (aliasing_risk)
        assert_exact(run(handle, "causal_softmax", [out], [out])[0], base)


def test_rows_with_every_layout(handle):
    """Padded rows, transposed inputs, negative strides, strided outputs, in place: the bits of
    the contiguous call, and nothing outside an output view is written."""
    rng = np.random.default_rng(7)
    shape = (6, 5, 70)
    x, w, b = draw(rng, np.float32, shape, 2), draw(rng, np.float32, (70,)), draw(rng, np.float32, (70,))
    cases = {  # softmax: a cached last stage; layer_norm: col operands and a stat output
        "softmax": ([np.empty(shape, np.float32)], [x], {}),
        "layer_norm": ([np.empty(shape, np.float32), np.empty(shape, np.float32),
                        np.empty(shape[:-1], np.float32)], [x, w, b], {}),
        "causal_softmax": ([np.empty(shape, np.float32)], [x], {}),
    }
    layouts = [dict(pad=3), dict(perm=(2, 0, 1)), dict(perm=(1, 2, 0), pad=1), dict(flip=True),
               dict(steps=(1, 2, 3))]
    for name, (outs, ins, kw) in cases.items():
        want = run(handle, name, outs, ins, **kw)
        for lay in layouts if name != "causal_softmax" else layouts[-2:]:
            xin, _, _ = place(x, **lay)
            new_ins = [xin] + ins[1:]
            placed = [place(np.zeros_like(o), **lay) for o in outs[:2]] + [
                place(np.zeros_like(o)) for o in outs[2:]]
            got = run(handle, name, [p[0] for p in placed], new_ins, **kw)
            for g, wnt, (_, buf, cov) in zip(got, want, placed):
                assert_exact(g, wnt)
                assert_canary(buf, cov)
        # in place: the output is the input
        xi = x.copy()
        run(handle, name, [xi] + outs[1:], [xi] + ins[1:], **kw)
        assert_exact(xi, want[0])


def test_softmax_broadcast_input_and_strided_columns(handle):
    """A row input broadcast over rows (0 stride) and a weight read with a stride."""
    rng = np.random.default_rng(8)
    row = draw(rng, np.float32, (1, 50))
    x = np.broadcast_to(row, (4, 50))
    y = run(handle, "softmax", [np.empty((4, 50), np.float32)], [x])[0]
    assert_exact(y, np.broadcast_to(infiniop.softmax(row), (4, 50)))
    wide = draw(rng, np.float32, (100,))
    xr = draw(rng, np.float32, (4, 50))
    y = run(handle, "rms_norm", [np.empty_like(xr)], [xr, wide[::2]])[0]
    assert_exact(y, infiniop.rms_norm(xr, wide[::2].copy()))


def test_layer_norm_bias_and_in_place(handle):
    rng = np.random.default_rng(9)
    x, w = draw(rng, BF16, (7, 96), 2), draw(rng, BF16, (96,))
    y, z, s = infiniop.layer_norm(x, w)  # no bias
    want = ref_layer_norm(x, w, None, 1e-5)
    for g, r in zip((y, z, s), want):
        assert_close(g, r, BF16)
    xi = x.copy()
    outs = [xi, np.empty_like(x), np.empty(7, BF16)]
    run(handle, "layer_norm", outs, [xi, w, None])
    assert_exact(xi, y)


def test_add_rms_norm_normalises_the_float32_sum(handle):
    """residual_out is a + b rounded once; y is computed from the unrounded float32 sum."""
    a = np.full((1, 4), 1.0, np.float16)
    b = np.array([[2.0 ** -11, 0, 0, 0]], np.float16)  # 1 + 2**-11 rounds to 1 in fp16
    w = np.ones(4, np.float16)
    y, res = infiniop.add_rms_norm(a, b, w, epsilon=0.0)
    assert (f64(res) == 1).all()
    s = np.array([1 + 2.0 ** -11, 1, 1, 1], np.float32)
    assert_exact(y, model_rms(s[None], np.ones(4, np.float32), 0.0).astype(np.float16))


def test_empty_and_degenerate(handle):
    x = np.empty((0, 5), np.float32)
    assert infiniop.softmax(x).shape == (0, 5)
    y, z, s = infiniop.layer_norm(np.empty((3, 0), np.float32), np.empty(0, np.float32))
    assert y.shape == (3, 0) and s.shape == (3,) and np.isnan(s).all()  # mean of no values
    assert infiniop.softmax(np.empty((3, 0), np.float32)).shape == (3, 0)
    one = infiniop.softmax(np.array([5.0], np.float32))
    assert_exact(one, np.array([1.0], np.float32))


def test_threads_and_parallel_kernels_give_the_same_bits(handle, monkeypatch):
    """Serial, parallel with 1 and 2 threads, the row kind and the col kind: the same bits."""
    if IN_TRITON:
        pytest.skip("CPU threads")
    rng = np.random.default_rng(10)
    x = draw(rng, np.float32, (64, 3000), 3)
    w = draw(rng, np.float32, (3000,))
    base = [infiniop.softmax(x), infiniop.softmax(x, axis=0), *infiniop.layer_norm(x, w, w)]
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    before = runtime.num_threads()
    try:
        for threads in {1, before}:
            runtime.set_num_threads(threads)
            got = [run(handle, "softmax", [np.empty_like(x)], [x])[0],
                   run(handle, "softmax", [np.empty_like(x)], [x], axis=0)[0],
                   run(handle, "layer_norm", [infiniop.empty_aligned(x.shape, np.float32),
                                              infiniop.empty_aligned(x.shape, np.float32),
                                              np.empty(64, np.float32)], [x, w, w])]
            got = got[:2] + got[2]  # layer_norm's outputs, both streamed (equally aligned)
            for g, b in zip(got, base):
                assert_exact(g, b)
    finally:
        runtime.set_num_threads(before)


def test_user_row_operator_without_reductions_streams(handle, monkeypatch):
    """A user's row operator need not reduce: streamed and parallel, its kernel asks for no
    next row (its output pass used to open an empty ``if`` there: IndentationError at create)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    op = infiniop.row_operator("scale_rows", "y:out, x, w:col", lambda m, x, w: x * w + 1.0,
                               register=False)
    rng = np.random.default_rng(13)
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16):
        x = draw(rng, dt, (8, 1030), 3)
        w = draw(rng, dt, (1030,))
        f32 = x.astype(np.float32) * w.astype(np.float32) + np.float32(1.0)  # as computed
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
        monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
        got = op(x, w, out=infiniop.empty_aligned(x.shape, dt))
        monkeypatch.undo()
        assert_exact(got, f32.astype(dt))
        assert_exact(op(x, w), f32.astype(dt))


def test_streamed_fp16_rows_are_exact(handle, monkeypatch):
    """fp16 row outputs streamed element by element as computed (row_kernels'
    ``direct_block``; through a stack chunk where stores would alias loads, see the next test):
    rows of odd length (a partial block and a tail), outputs starting 2 bytes past a 64-byte
    line (a peeled head), two outputs at once (layer_norm) and causal rows; the same bits as
    the serial loop with ordinary stores. The generated block stores fp16 elements directly."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    rng = np.random.default_rng(12)
    x = draw(rng, np.float16, (6, 2051), 3)
    w = draw(rng, np.float16, (2051,))

    def calls(out):
        return [run(handle, "rms_norm", [out()], [x, w], epsilon=1e-6)[0],
                run(handle, "softmax", [out()], [x])[0],
                run(handle, "causal_softmax", [out()], [x])[0],
                *run(handle, "layer_norm", [out(), out(), np.empty(6, np.float16)], [x, w, w])]

    base = calls(lambda: np.empty_like(x))
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)

    def offset_out():  # 64-byte aligned rows of 2051 + 29 elements, starting 2 bytes in
        buf = infiniop.empty_aligned((6 * 2080 + 1,), np.float16)
        return buf[1:].reshape(6, 2080)[:, :2051]

    for out in (lambda: infiniop.empty_aligned(x.shape, np.float16), offset_out):
        for got, want in zip(calls(out), base):
            assert_exact(got, want)
    from infiniop.backends.cpu import row_kernels

    d = infiniop.create_rms_norm_descriptor(handle, *(TensorDescriptor.from_array(a)
                                                      for a in (x, x, w)), 1e-6)
    src = row_kernels.source(d.info.program, d.info.kind, d.info.pattern, "", True)
    d.destroy()
    assert "nt_store(h0, 2 * i0 + u, f32_to_f16(" in src


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32], ids=["f16", "bf16", "f32"])
def test_streamed_rows_stage_where_stores_would_alias(handle, monkeypatch, dtype):
    """Row outputs stream straight from the compute loop, except a block whose
    output row starts 1-80 bytes ahead of an input of its size mod 4096 (row_kernels'
    ``aliasing_risk``: 4K aliasing), which goes through a stack chunk. Inputs at 16 bytes into
    a page, the output swept over every 64-byte offset of a page: rms_norm, and layer_norm's
    and add_rms_norm's two row outputs (every row operator streams through the same code; two
    outputs at one offset mod 4096 are stored one loop each, ``_store_loops``, so
    add_rms_norm's also run 1024 bytes apart) give the serial loop's bits, and nothing outside
    the outputs is written."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    rng = np.random.default_rng(13)
    isz = np.dtype(dtype).itemsize
    rows, n = 5, 2048 + 16 // isz + 3   # a partial block and a tail

    def at_page(a, page_offset):
        raw = np.zeros(a.nbytes + 8192, np.uint8)
        start = (-raw.ctypes.data) % 4096 + page_offset
        out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        out[...] = a
        return out

    x = at_page(draw(rng, dtype, (rows, n), 3), 16)
    x2 = at_page(draw(rng, dtype, (rows, n), 3), 16)
    w = at_page(draw(rng, dtype, (n,)), 16)

    def calls(out, apart=None):
        return [run(handle, "rms_norm", [out()], [x, w], epsilon=1e-6)[0],
                *run(handle, "layer_norm", [out(), out(), np.empty(rows, dtype)], [x, w, w])[:2],
                *run(handle, "add_rms_norm", [out(), out()], [x, x2, w], epsilon=1e-6),
                *run(handle, "add_rms_norm", [out(), (apart or out)()], [x, x2, w], epsilon=1e-6)]

    base = calls(lambda: np.empty_like(x))
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    for page_offset in range(0, 4096, 64):
        bufs = []

        def out(page_offset=page_offset, bufs=bufs):
            raw = np.full(x.nbytes + 8192, CANARY, np.uint8)
            start = (-raw.ctypes.data) % 4096 + page_offset
            bufs.append((raw, start))
            return raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)

        apart = functools.partial(out, (page_offset + 1024) % 4096)
        for got, want in zip(calls(out, apart), base, strict=True):
            assert_exact(got, want)
        for raw, start in bufs:
            assert (raw[:start] == CANARY).all() and (raw[start + x.nbytes:] == CANARY).all()


@pytest.mark.parametrize("op, axis", [("softmax", "axis"), ("logsoftmax", "dim")])
def test_rows_stream_during_the_next_rows_exp_pass(handle, monkeypatch, op, axis):
    """A streamed float32 softmax or logsoftmax row of at least 4 chunks leaves its output to
    the next row of its task, whose exp pass stores it a block at a time (row_kernels'
    ``deferral``; softmax's two scratch rows alternate, logsoftmax reads its input row again).
    Rows of whole lines, rows with a tail past the chunk pairs and a partial last line, output
    rows alternating between aligned (deferred) and not (stored at once), outputs swept over a
    page against the input (logsoftmax's within 80 bytes ahead are stored at once), in place,
    serial and on the pool: the bits of the unstreamed kernel, nothing outside the output
    written."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    rng = np.random.default_rng(21)
    cases = []
    for rows, n in ((9, 4096), (9, 5000), (9, 4100)):
        x = infiniop.empty_aligned((rows, n), np.float32)
        x[...] = draw(rng, np.float32, (rows, n), 4)
        cases.append((x, run(handle, op, [np.empty_like(x)], [x], **{axis: -1})[0]))
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    for threshold in (1 << 40, 1):  # one task of every row; tasks of a few rows on the pool
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", threshold)
        for x, want in cases:
            for page_offset in (0, 16, 64, 256, 2048, 4032):
                raw = np.full(x.nbytes + 8192, CANARY, np.uint8)
                start = (x.ctypes.data - raw.ctypes.data + page_offset) % 4096
                y = raw[start:start + x.nbytes].view(np.float32).reshape(x.shape)
                assert_exact(run(handle, op, [y], [x], **{axis: -1})[0], want)
                assert (raw[:start] == CANARY).all() and (raw[start + x.nbytes:] == CANARY).all()
            inplace = infiniop.empty_aligned(x.shape, np.float32)
            inplace[...] = x
            d = getattr(infiniop, f"create_{op}_descriptor")(
                handle, *(TensorDescriptor.from_array(inplace),) * 2, **{axis: -1})
            d.calculate(None, inplace, inplace)
            d.destroy()
            assert_exact(inplace, want)

    if op == "logsoftmax":  # fp16 rows in, float32 out: the deferred row reads its fp16 input
        x = infiniop.empty_aligned((9, 5000), np.float16)
        x[...] = draw(rng, np.float16, x.shape, 4)
        monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 1 << 40)
        want = run(handle, op, [np.empty(x.shape, np.float32)], [x], dim=-1)[0]
        monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
        y = infiniop.empty_aligned(x.shape, np.float32)
        assert_exact(run(handle, op, [y], [x], dim=-1)[0], want)

    def source(op, dtype, **kw):
        a = np.empty((4, 4096), dtype)
        d = getattr(infiniop, f"create_{op}_descriptor")(
            handle, *(TensorDescriptor.from_array(v) for v in (a, a)), **kw)
        src = row_kernels.source(d.info.program, d.info.kind, d.info.pattern, "", True)
        d.destroy()
        return src

    assert "dq = 1" in source(op, np.float32, **{axis: -1})
    # masked rows and 2-byte outputs are stored at once
    assert "dq = 1" not in source("causal_softmax", np.float32)
    assert "dq = 1" not in source(op, np.float16, **{axis: -1})


@pytest.mark.parametrize("dtype, fn", [(np.float32, "prefetch_l2"), (np.float64, "prefetch_l2"),
                                       (np.float16, "prefetch"), (BF16, "prefetch")],
                         ids=["f32", "f64", "f16", "bf16"])
def test_streamed_rows_prefetch_the_next_row(handle, dtype, fn):
    """A streamed row's last pass asks for the next row's input lines: 4-byte and wider rows
    into L2 only (asked into L1 as well, float32 row operators at DRAM sizes ran 20-35% slower
    on an AMD EPYC), 2-byte rows into L1 too."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    x, w = np.empty((4, 4096), dtype), np.empty(4096, dtype)
    d = infiniop.create_rms_norm_descriptor(
        handle, *(TensorDescriptor.from_array(a) for a in (x, x, w)), 1e-6)
    info = d.info
    src = row_kernels.source(info.program, info.kind, info.pattern, "", True)
    calls = [line.strip() for line in src.splitlines() if "(qn" in line]
    assert calls and all(line.startswith(f"{fn}(qn") for line in calls), calls
    d.destroy()


def test_row_lanes_live_on_the_stack(handle):
    """A row-kind task's reduction lanes are 64-byte aligned stack chunks, not heap arrays
    (whose addresses varied, and with heap lanes layer_norm bfloat16 (2048, 4096) ran at
    1.55 ms in one hour and 2.10 in another, where the stack version ran at 1.53)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    x = np.empty((4, 4096), np.float32)
    d = infiniop.create_layer_norm_descriptor(
        handle, *(TensorDescriptor.from_array(a) for a in (x, x, x[:, 0], x, x[0], x[0])))
    src = row_kernels.source(d.info.program, d.info.kind, d.info.pattern, "", True)
    d.destroy()
    assert "acc0_at = stack_scratch(4096)" in src and "acc1_at = stack_scratch(4096)" in src
    assert "np.empty(lp" not in src and "np.empty(2 * lp" not in src


def test_row_kernels_run_on_a_shared_pool_driver(handle, monkeypatch):
    """A row kernel's module holds ``serial`` only (tasks t0 to t1); a large call runs it
    through ``row_kernels.row_driver``, shared by every row kernel of its kind with as many
    slots and parameters (each compiled its own prange function before, about twice as long
    as ``serial``). Many tasks (small ones forced), row and col kinds: the bits of the serial
    call."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels
    from infiniop.backends.cpu import rows as cpu_rows

    x = np.empty((4, 300), np.float32)
    drivers = {}
    for op in ("softmax", "logsoftmax"):
        d = getattr(infiniop, f"create_{op}_descriptor")(
            handle, *(TensorDescriptor.from_array(a) for a in (x, x)))
        info = d.info
        src = row_kernels.source(info.program, info.kind, info.pattern, "", False)
        assert "def serial(" in src and "prange(" not in src and "def parallel" not in src
        fns = row_kernels.kernel_functions(info.program, info.kind, info.pattern, "", False,
                                           [0, 1], [])
        drivers[op] = fns["parallel"]
        d.destroy()
    assert drivers["softmax"] is drivers["logsoftmax"]
    rng = np.random.default_rng(21)
    x = draw(rng, np.float32, (96, 250), 3)
    w = draw(rng, np.float32, (250,))
    calls = [lambda: infiniop.softmax(x), lambda: infiniop.softmax(x, axis=0),
             lambda: infiniop.layer_norm(x, w, w), lambda: infiniop.rms_norm(x, w)]
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1 << 40)
    want = [call() for call in calls]
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(cpu_rows, "TASK_ELEMS", 500)  # tasks of 2 rows (col kind: blocks)
    for call, base in zip(calls, want):
        for got, exp in zip(*(r if isinstance(r, tuple) else (r,) for r in (call(), base))):
            assert_exact(got, exp)


@pytest.mark.parametrize("op", ["softmax", "logsoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_streamed_softmax_prefetches_during_its_exp_pass(handle, monkeypatch, dtype, op):
    """softmax and logsoftmax ask for the next row's lines in their exp pass (the heaviest per
    element: logsoftmax's log of the sum is computed once a row and does not weigh on its output
    pass), not in the output pass, in blocks of a lane chunk: the same bits as the unstreamed
    kernel, ragged rows too. (logsoftmax float32 (4096, 4096), 2026-11-28: 4.1-4.7 -> 3.4 ms.)"""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    create = getattr(infiniop, f"create_{op}_descriptor")
    x = np.empty((4, 4096), dtype)
    d = create(handle, *(TensorDescriptor.from_array(a) for a in (x, x)))
    info = d.info
    src = row_kernels.source(info.program, info.kind, info.pattern, "", True)
    lines = [line.strip() for line in src[src.index("def serial"):].splitlines()]
    asks = [i for i, line in enumerate(lines) if "(qn" in line]
    exp_pass = [i for i, line in enumerate(lines) if re.match(r"pa1\[l\] = \(pa1\[l\] \+", line)]
    assert asks and all(i < exp_pass[-1] for i in asks), asks   # none in the output pass
    d.destroy()
    rng = np.random.default_rng(12)
    x = draw(rng, dtype, (64, 3000), 3)
    base = getattr(infiniop, op)(x)
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    got = run(handle, op, [infiniop.empty_aligned(x.shape, dtype)], [x])[0]
    assert_exact(got, base)
    assert_close(got, {"softmax": ref_softmax, "logsoftmax": ref_logsoftmax}[op](x), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_streamed_rows_of_one_chunk(handle, monkeypatch, dtype):
    """Streamed rows of at most L elements take their exp pass without the chunk loop (each
    lane its element, row_kernels' ``single_chunk`` with ``prefetch``), asking for the next
    row's lines: softmax and logsoftmax rows of 1000, 1024 and 37, causal rows of every length
    1-300; the bits of the unstreamed kernels."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    rng = np.random.default_rng(31)
    xs = [draw(rng, dtype, shape, 3) for shape in ((24, 1000), (24, 1024), (24, 37))]
    causal = draw(rng, dtype, (2, 300, 300), 3)

    def calls():
        out = [run(handle, op, [np.empty_like(x)], [x])[0] for x in xs
               for op in ("softmax", "logsoftmax")]
        return out + [run(handle, "causal_softmax", [np.empty_like(causal)], [causal])[0]]

    base = calls()
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    for got, want in zip(calls(), base):
        assert_exact(got, want)


def _rms_norm_source(handle, dtype, streamed: bool) -> str:
    """The CPU kernel module rms_norm (4, 1000) of ``dtype`` compiles to."""
    from infiniop.backends.cpu import row_kernels

    x = np.empty((4, 1000), dtype)
    d = infiniop.create_rms_norm_descriptor(
        handle, *(TensorDescriptor.from_array(a) for a in (x, x, np.empty(1000, dtype))))
    src = row_kernels.source(d.info.program, d.info.kind, d.info.pattern, "", streamed)
    d.destroy()
    return src


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_streamed_rows_in_place_are_staged(handle, monkeypatch, dtype):
    """Streamed rows updated in place (``out=x``) go through the stack chunk, as where 4K
    aliasing threatens: streamed straight from the compute loop, bf16 rms_norm (4096, 4096) in
    place took 805 ms against 2 out of place. The condition as generated; the bits in place
    against out of place (odd lengths, two outputs, softmax's cached exp)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    src = _rms_norm_source(handle, dtype, streamed=True)
    if dtype is np.float16:  # fp16 rows always stream through the stack chunk
        assert "stack_scratch(" in src
    else:
        assert "pointer_address(q0) == pointer_address(q1)" in src
    rng = np.random.default_rng(16)
    x, w = draw(rng, dtype, (6, 2051), 3), draw(rng, dtype, (2051,))
    want = [infiniop.rms_norm(x, w), infiniop.softmax(x), *infiniop.layer_norm(x, w, w)]
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    got = [x.copy() for _ in range(3)]
    run(handle, "rms_norm", [got[0]], [got[0], w])
    run(handle, "softmax", [got[1]], [got[1]])
    z, std = np.empty_like(x), np.empty(6, dtype)
    run(handle, "layer_norm", [got[2], z, std], [got[2], w, w])
    for g, ref in zip(got + [z, std], want):
        assert_exact(g, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_rows_in_place_below_streaming_are_staged(handle, dtype):
    """Rows updated in place below the streaming size are computed a block at a time into a
    stack chunk and copied out (``row_kernels._Gen.in_place``): with one array behind two
    pointers LLVM ran the scalar output loop (layer_norm (64, 1024) in place 3-5x the time).
    The condition as generated; in-place bits against out of place (odd lengths over two
    blocks, bf16 word pairs, two outputs, causal rows)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    src = _rms_norm_source(handle, dtype, streamed=False)
    assert "if pointer_address(q0) == pointer_address(q1):" in src
    rng = np.random.default_rng(17)
    for n in (7, 300, 517):
        x, w = draw(rng, dtype, (5, n), 3), draw(rng, dtype, (n,))
        want = [infiniop.rms_norm(x, w), infiniop.softmax(x), infiniop.causal_softmax(x),
                infiniop.layer_norm(x, w, w)[0]]
        got = [x.copy() for _ in want]
        infiniop.rms_norm(got[0], w, out=got[0])
        infiniop.softmax(got[1], out=got[1])
        infiniop.causal_softmax(got[2], out=got[2])
        infiniop.layer_norm(got[3], w, w, out=(got[3], np.empty_like(x), np.empty(5, dtype)))
        for g, ref in zip(got, want):
            assert_exact(g, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_streamed_rows_store_whole_lines_only(handle, dtype):
    """A streamed row stores its whole cache lines non-temporally and its last, partial line
    as its head (ordinary stores): a line written partly by non-temporal stores and partly by
    the next row's head cost 2-4x on rows of 512-1024 elements into NumPy's 16-byte aligned
    outputs. The words loop as generated; the bits where rows leave partial lines:
    test_streamed_fp16_rows_are_staged_exactly, test_streamed_rows_stage_where_stores_would_
    alias (odd lengths, offset outputs)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    x = np.empty((4, 1000), dtype)
    for op in ("softmax", "rms_norm"):
        args = [x, x] + ([np.empty(1000, dtype)] if op == "rms_norm" else [])
        d = getattr(infiniop, f"create_{op}_descriptor")(
            handle, *(TensorDescriptor.from_array(a) for a in args))
        info = d.info
        src = row_kernels.source(info.program, info.kind, info.pattern, "", True)
        d.destroy()
        line, k = 64 // x.itemsize, 4 // x.itemsize
        assert f"words = (v - head) // {line} * {line // k}" in src, op
        assert f"for j in range(head + words * {k}, v):" in src, op


@pytest.mark.parametrize("streamed", [False, True])
def test_softmax_exp_pass_takes_its_constants_from_task_variables(handle, streamed):
    """The sum passes' float constants are defined once per task through ``opaque`` (kept in
    registers, not reloaded from the constant pool in every iteration), and the exp pass
    itself names no literal. The bits are the tables' (every softmax test)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    x = np.empty((4, 4096), np.float32)
    d = infiniop.create_softmax_descriptor(handle, *(TensorDescriptor.from_array(a) for a in (x, x)))
    info = d.info
    src = row_kernels.source(info.program, info.kind, info.pattern, "", streamed)
    d.destroy()
    lines = [line.strip() for line in src[src.index("def serial"):].splitlines()]
    task = next(i for i, line in enumerate(lines) if line.startswith("for t in range(t0, t1)"))
    defined = {line.split(" = ")[0]: i for i, line in enumerate(lines)
               if re.fullmatch(r"kc\d+ = opaque\(_cf32_[0-9a-f]+\)", line)}
    assert len(defined) >= 10 and all(i > task for i in defined.values()), defined
    exp_pass = [line for line in lines if line.startswith("s1_")]
    assert exp_pass and not any("_cf32_" in line for line in exp_pass)
    used = set(re.findall(r"\bkc\d+\b", " ".join(exp_pass)))
    assert used == set(defined)


def test_streamed_light_bf16_rows_read_inputs_as_words(handle):
    """A streamed light bf16 epilogue (rms_norm, layer_norm) reads its bf16 operands as 32-bit
    words, two lanes each, where they start like the output (``pok``; else element loads);
    softmax (heavy) keeps element loads. The bits: test_streamed_rows_stage_where_stores_would_
    alias, whose odd-length rows take both ways."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    x, w = np.empty((4, 4096), BF16), np.empty(4096, BF16)
    for make, descs, words in [(infiniop.create_rms_norm_descriptor, (x, x, w), True),
                               (infiniop.create_layer_norm_descriptor,
                                (x, x, np.empty(4, BF16), x, w, w), True),
                               (infiniop.create_softmax_descriptor, (x, x), False)]:
        d = make(handle, *(TensorDescriptor.from_array(a) for a in descs))
        info = d.info
        src = row_kernels.source(info.program, info.kind, info.pattern, "", True)
        assert ("if pok:" in src) is words
        assert bool(re.search(r"wd\d+ = pd\d+\[i\]", src)) is words
        d.destroy()


def test_bf16_rounding_without_the_nan_select_matches_where_no_nan():
    """``f32_to_bf16_finite`` gives ``f32_to_bf16``'s bits for every float32 that is not NaN
    (ties, the largest finite values rounding to inf, infinities, subnormals, signed zeros, 2^20
    random patterns), and the NaNs it must not see do go wrong (why it needs a NaN-free row)."""
    from numba import njit

    from infiniop.backends.cpu.intrinsics import f32_to_bf16, f32_to_bf16_finite

    @njit
    def both(v, a, b):
        for i in range(v.size):
            a[i] = f32_to_bf16(v[i])
            b[i] = f32_to_bf16_finite(v[i])

    rng = np.random.default_rng(3)
    bits = np.concatenate([rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                           np.array([0, 0x80000000, 1, 0x8000FFFF, 0x00018000, 0x00028000,
                                     0x3F808000, 0x3F818000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,
                                     0xFF7FFFFF, 0x7F800000, 0xFF800000], np.uint32)])
    v = bits.view(np.float32)
    a, b = np.empty(v.size, np.uint16), np.empty(v.size, np.uint16)
    both(v, a, b)
    ok = ~np.isnan(v)
    assert_exact(a[ok], b[ok])
    assert_exact(a[ok], v[ok].astype(BF16).view(np.uint16))
    nan = np.array([0x7FFFFFFF, 0x7F800001], np.uint32).view(np.float32)
    a, b = np.empty(2, np.uint16), np.empty(2, np.uint16)
    both(nan, a, b)
    assert a.tolist() == [0x7FFF, 0x7FC0] and b.tolist() == [0x8000, 0x7F80]  # -0, inf


def test_bf16_rows_skip_the_nan_select_only_where_no_nan_can_reach(handle, monkeypatch):
    """Row operators that declare ``nan_free_if_finite`` round a streamed bf16 row without the
    NaN select where the row's statistics and every column operand are finite
    (row_kernels' ``finite_or_not``), and with it elsewhere: a float32 weight NaN whose low bits
    would carry (0x7FFFFFFF: -0 without the select) or round to inf (0x7F800001) leaves NaN in
    its column, streamed straight and staged (the output 0 and 48 bytes ahead of x mod 4096),
    on one thread and on the pool, and not streamed (bf16 weights: the paired loops); rows with
    inf, NaN or a zero statistic (epsilon 0) give the model's NaNs; finite rows its bits."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import row_kernels

    rng = np.random.default_rng(29)
    rows, n = 6, 2048 + 5
    x = draw(rng, BF16, (rows, n), 3)
    x[1, 7], x[2, 0], x[3] = np.inf, np.nan, 0.0
    w = draw(rng, np.float32, (n,))
    w_nan = w.copy()
    w_nan.view(np.uint32)[[9, 100, 2000]] = [0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001]

    def at_page(shape, offset):
        raw = np.zeros(int(np.prod(shape)) * 2 + 8192, np.uint8)
        start = (-raw.ctypes.data) % 4096 + offset
        return raw[start:start + int(np.prod(shape)) * 2].view(BF16).reshape(shape)

    xp = at_page(x.shape, 16)
    xp[...] = x
    with np.errstate(invalid="ignore"):
        w16 = w_nan.astype(BF16)  # bf16 operands: the paired loops when not streamed
    for nt, threshold in [(64, 1 << 40), (64, 1), (1 << 40, 1 << 40)]:
        monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", nt)
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", threshold)
        for weight in (w, w_nan, w16):
            for eps in (1e-6, 0.0):
                with np.errstate(invalid="ignore", divide="ignore"):
                    want = model_rms(xp, weight, eps)
                for offset in (16, 64):  # straight from the compute loop, staged
                    y = run(handle, "rms_norm", [at_page(x.shape, offset)], [xp, weight],
                            epsilon=eps)[0]
                    nan = np.isnan(f64(want))
                    assert (np.isnan(f64(y)) == nan).all()
                    assert_exact(np.where(nan, 0, y), np.where(nan, 0, want))
    assert np.isnan(f64(y[:, [9, 100, 2000]])).all()
    d = infiniop.create_rms_norm_descriptor(handle, TD(xp), TD(xp), TD(w))
    src = row_kernels.source(d.info.program, d.info.kind, d.info.pattern, "", True)
    d.destroy()
    assert "row_finite = cols_finite and (st0 - st0) == 0" in src
    assert "f32_to_bf16_finite(" in src and "f32_to_bf16(" in src


def test_large_rows_parallel(handle):
    """Over the parallel threshold, with streamed (non-temporal) stores: (2048, 4096) rms_norm
    and a strided-axis softmax against the references."""
    rng = np.random.default_rng(11)
    x, w = draw(rng, BF16, (2048, 4096)), draw(rng, BF16, (4096,))
    assert_exact(infiniop.rms_norm(x, w), model_rms(x, w, 1e-5))
    x = draw(rng, np.float32, (700, 300), 3)
    assert_close(infiniop.softmax(x, axis=0), ref_softmax(x, 0), np.float32)


# ------------------------------------------------------------------------------------- rope

def _tables(rng, max_pos, half, dtype):
    ang = rng.random((max_pos, half)) * 10
    return np.sin(ang).astype(dtype), np.cos(ang).astype(dtype)


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64],
                         ids=["f16", "bf16", "f32", "f64"])
def test_rope(handle, algo, dtype):
    """Random positions (not arange), both algorithms, 3-d and 4-d with per-batch positions,
    transposed seq/head layout, in place, float32 tables with half inputs."""
    rng = np.random.default_rng(12 + algo)
    x = draw(rng, dtype, (7, 4, 24))
    pos = rng.permutation(40)[:7].astype(np.int32)
    sin, cos = _tables(rng, 40, 12, dtype)
    y = run(handle, "rope", [np.empty_like(x)], [x, pos, sin, cos], algo=algo)[0]
    assert_close(y, ref_rope(x, pos, sin, cos, algo), dtype)
    xt = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)  # heads outermost
    assert_exact(run(handle, "rope", [np.empty_like(x)], [xt, pos, sin, cos], algo=algo)[0], y)
    xi = x.copy()
    run(handle, "rope", [xi], [xi, pos, sin, cos], algo=algo)
    assert_exact(xi, y)
    xb = draw(rng, dtype, (2, 5, 3, 24))
    pb = rng.integers(0, 40, (2, 5)).astype(np.int32)
    assert_close(infiniop.rope(xb, pb, sin, cos, algo=algo), ref_rope(xb, pb, sin, cos, algo), dtype)
    if dtype is np.float16:
        s32, c32 = _tables(rng, 40, 12, np.float32)
        assert_close(infiniop.rope(x, pos, s32, c32, algo=algo), ref_rope(x, pos, s32, c32, algo),
                     dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64],
                         ids=["f16", "bf16", "f32", "f64"])
def test_rope_gptj_pairs_at_constant_steps(handle, dtype):
    """GPT-J rows whose pairs are adjacent are read and written as elements at constant steps
    (``rope.adjacent_pairs``: ``2 * i``, ``2 * i + 1``), a loop LLVM vectorises (with the step
    a variable it did not: fp16 4.6x slower; as words since, 1.3x). The loop as generated;
    rows starting mid-pair (x or y one element past a pair's boundary), in place and with
    float32 tables: the same bits, close to the reference."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import rope as cpu_rope

    rng = np.random.default_rng(15)
    x = draw(rng, dtype, (9, 4, 34))
    pos = rng.permutation(40)[:9].astype(np.int64)
    sin, cos = _tables(rng, 40, 17, dtype)
    d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                  (x, x, pos, sin, cos)), 0)
    src = cpu_rope.source(d.info.program, "22-11")
    d.destroy()
    assert "h1[2 * i + 1]" in src and "i * 2 + xb" in src  # the constant steps; the others

    def shifted(a):  # a copy starting one element past a pair's boundary
        buf = np.empty(a.size + 1, a.dtype)
        out = buf[1:].reshape(a.shape)
        out[...] = a
        return out

    want = infiniop.rope(shifted(x), pos, sin, cos, algo=0, out=shifted(np.zeros_like(x)))
    assert_close(want, ref_rope(x, pos, sin, cos, 0), dtype)
    assert_exact(infiniop.rope(x, pos, sin, cos, algo=0), want)
    assert_exact(infiniop.rope(x, pos, sin, cos, algo=0, out=shifted(np.zeros_like(x))), want)
    xi = x.copy()
    infiniop.rope(xi, pos, sin, cos, algo=0, out=xi)
    assert_exact(xi, want)
    if dtype in (np.float16, BF16):
        s32, c32 = _tables(rng, 40, 17, np.float32)
        assert_exact(infiniop.rope(x, pos, s32, c32, algo=0),
                     infiniop.rope(shifted(x), pos, s32, c32, algo=0))


def _rope_f32_roundings(x, pos, sin, cos):
    """GPT-J in float32 with the contract's roundings: RN(RN(a c) - RN(b s)), RN(RN(a s) +
    RN(b c)), rounded once to x's dtype."""
    a, b = x[..., 0::2].astype(np.float32), x[..., 1::2].astype(np.float32)
    s = sin.astype(np.float32)[pos][..., None, :]
    c = cos.astype(np.float32)[pos][..., None, :]
    y = np.empty(x.shape, np.float32)
    y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    return y.astype(x.dtype)


@pytest.mark.parametrize("algo", [0, 1])
def test_rope_bf16_rounds_without_the_nan_select_only_with_bf16_tables(handle, monkeypatch, algo):
    """bf16 rope with bf16 tables rounds without f32_to_bf16's NaN select (rope's
    ``nan_low_bits_zero``: every NaN reaching the rounding is a bf16 one or the default NaN,
    its low 16 bits zero), giving the select's bits for quiet and signalling NaNs and
    infinities in x and the tables; with float32 tables it keeps the select: a table NaN
    0x7FFFFFFF (-0 without it) leaves NaN in its pairs. Small and streamed calls."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import rope as cpu_rope

    rng = np.random.default_rng(41 + algo)
    x = draw(rng, BF16, (8, 4, 64))
    xb = x.reshape(-1).view(np.uint16)
    xb[[5, 77, 300, 901]] = [0x7F81, 0xFFC1, 0x7F80, 0xFF80]  # sNaN, -qNaN, +-inf
    pos = rng.permutation(16)[:8].astype(np.int32)
    sin32, cos32 = _tables(rng, 16, 32, np.float32)
    sin32.view(np.uint32)[pos[2], 3], cos32.view(np.uint32)[pos[5], 7] = 0x7FFFFFFF, 0xFFFF8001
    sin16, cos16 = sin32.astype(BF16), cos32.astype(BF16)
    sin16.view(np.uint16)[pos[1], 0] = 0x7F81
    for sin, cos, plain in ((sin16, cos16, True), (sin32, cos32, False)):
        d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                      (x, x, pos, sin, cos)), algo)
        src = cpu_rope.source(d.info.program, "22-11")
        d.destroy()
        assert ("f32_to_bf16_finite(" in src) is plain and ("f32_to_bf16(" in src) is not plain
        a, b = (x[..., 0::2], x[..., 1::2]) if algo == 0 else (x[..., :32], x[..., 32:])
        a, b = a.astype(np.float32), b.astype(np.float32)
        sn = sin.astype(np.float32)[pos][:, None, :]
        cs = cos.astype(np.float32)[pos][:, None, :]
        want = np.empty(x.shape, np.float32)  # the contract's float32 roundings
        with np.errstate(invalid="ignore"):
            o1, o2 = a * cs - b * sn, a * sn + b * cs
        if algo == 0:
            want[..., 0::2], want[..., 1::2] = o1, o2
        else:
            want[..., :32], want[..., 32:] = o1, o2
        nan = np.isnan(want)
        want = np.where(nan, 0, want).astype(BF16)
        for nt in (1 << 40, 64):  # the pair loops; streamed rows
            monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", nt)
            got = infiniop.rope(x, pos, sin, cos, algo=algo, out=infiniop.empty_aligned(x.shape, BF16))
            assert (np.isnan(f64(got)) == nan).all()
            assert_exact(np.where(nan, 0, got).astype(BF16), want)
            if plain:  # the select's bits, NaN payloads included (x86 keeps a NaN's payload)
                bits = np.where(np.isnan(f64(got)), got.view(np.uint16), 0)
                assert ((bits == 0) | ((bits & 0x7FC0) == 0x7FC0)).all()


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32], ids=["f16", "bf16", "f32"])
@pytest.mark.parametrize("dh", [2, 16, 24, 34, 128])
def test_rope_gptj_swapped_pairs_keep_the_separate_roundings(handle, dtype, dh):
    """GPT-J rows of fp16 run as y = x c + swap(x) s in 16-element vectors
    (``intrinsics.rope_pairs_f16``, c = (cos, cos) and s = (-sin, sin) per pair, built once per
    position), the pairs past the last whole vector in the element loop: the bits of a cos -
    b sin and a sin + b cos rounded apart, out of place (NumPy's and 64-byte aligned outputs,
    one element past a pair's boundary) and in place, with NaN, infinities and signed zeros, the
    position changing between rows and repeating."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import rope as cpu_rope

    rng = np.random.default_rng(dh)
    x = draw(rng, dtype, (6, 5, dh))
    every13 = x.reshape(-1)[::13]
    every13[...] = np.resize(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0]), every13.size)
    pos = np.array([3, 3, 0, 7, 7, 1], np.int64)
    sin, cos = _tables(rng, 8, dh // 2, dtype)
    d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                  (x, x, pos, sin, cos)), 0)
    src = cpu_rope.source(d.info.program, "22-11")
    d.destroy()
    assert ("rope_pairs_f16(" in src) == (dtype == np.float16)  # float32/bf16: steps of 2
    want = _rope_f32_roundings(x, pos, sin, cos)
    shifted = np.empty(x.size + 1, dtype)[1:].reshape(x.shape)
    xi = x.copy()
    for got in (infiniop.rope(x, pos, sin, cos, algo=0),
                infiniop.rope(x, pos, sin, cos, algo=0, out=infiniop.empty_aligned(x.shape, dtype)),
                infiniop.rope(x, pos, sin, cos, algo=0, out=shifted),
                infiniop.rope(xi, pos, sin, cos, algo=0, out=xi)):
        assert_exact(got, want)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32], ids=["f16", "bf16", "f32"])
def test_rope_gptj_streamed_rows_keep_the_separate_roundings(handle, dtype):
    """The large call: rows stored non-temporally (fp16: ``rope_pairs_f16_nt``) where y starts on a
    line, through the stack chunk where it sits 48 bytes ahead of x, and in place."""
    if IN_TRITON:
        pytest.skip("CPU kernels: millions of elements")
    rng = np.random.default_rng(33)
    x = draw(rng, dtype, (2048, 16, 128))  # 16 MiB moved in fp16: streamed
    pos = rng.permutation(4096)[:2048].astype(np.int32)
    sin, cos = _tables(rng, 4096, 64, dtype)
    want = _rope_f32_roundings(x, pos, sin, cos)

    def at(ahead):  # y starting ``ahead`` bytes past x mod 4096
        buf = infiniop.empty_aligned(x.size + 4096 // x.itemsize, dtype)
        k = ((x.ctypes.data + ahead - buf.ctypes.data) % 4096) // x.itemsize
        return buf[k:k + x.size].reshape(x.shape)
    y = at(-(x.ctypes.data % 4096))  # on a page: streamed as computed
    assert y.ctypes.data % 4096 == 0
    xi = x.copy()
    for got in (infiniop.rope(x, pos, sin, cos, algo=0, out=y),
                infiniop.rope(x, pos, sin, cos, algo=0, out=at(48)),  # through the stack chunk
                infiniop.rope(xi, pos, sin, cos, algo=0, out=xi)):
        assert_exact(got, want)


@pytest.mark.parametrize("algo", [0, 1])
def test_rope_in_place_reads_and_writes_one_pointer(handle, algo):
    """In place (y is x, same steps), a row is read and written through x's pointer, which LLVM
    vectorises; through two pointers its overlap check sent every row to the scalar loop
    (fp16 NeoX (2048, 32, 128) 11.8 ms against 1.0 out of place). The loops as generated; the
    bits in place are test_rope's (equal to the out-of-place result)."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import rope as cpu_rope

    x = np.empty((4, 2, 16), np.float16)
    pos, table = np.arange(4, dtype=np.int32), np.empty((4, 8), np.float16)
    d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                  (x, x, pos, table, table)), algo)
    steps = "22-11" if algo == 0 else "11-11"
    src = cpu_rope.source(d.info.program, steps)
    d.destroy()
    assert "if s0 + g0 * 2 == s1 + g1 * 2 and yb == xb and st0 == st1:" in src
    if algo == 0:  # adjacent pairs at constant steps, else any steps
        assert "h1[2 * i + 1] = " in src and "q1[i * 2 + xb] = " in src
    else:
        assert "q1[i + xb] = " in src


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64],
                         ids=["f16", "bf16", "f32", "f64"])
def test_rope_streamed_rows(handle, monkeypatch, algo, dtype):
    """Large out-of-place calls compute each row whose y is one run of whole lines starting on
    a line into a stack chunk and store it from there non-temporally (``rope.source(...,
    stream=True)``; NeoX rows whose halves are whole lines each, and GPT-J rows not 1-80 bytes
    ahead of x mod 4096, stream as computed); other rows (y 16 bytes past a line, as NumPy
    allocates; padded rows, some on a line and some not; x one element past a pair), in-place
    calls and rows of partial lines store as before. The same bits in every case; the
    condition as generated."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    from infiniop.backends.cpu import rope as cpu_rope

    rng = np.random.default_rng(30 + algo)
    x = draw(rng, dtype, (33, 8, 64))  # rows enough for both threads to stage at once
    pos = rng.permutation(50)[:33].astype(np.int32)
    sin, cos = _tables(rng, 50, 32, dtype)
    d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                  (x, x, pos, sin, cos)), algo)
    steps = "22-11" if algo == 0 else "11-11"
    assert "nt_store(wo, i, ws[i])" in cpu_rope.source(d.info.program, steps, True)
    assert "nt_store(" not in cpu_rope.source(d.info.program, steps)
    d.destroy()
    want = infiniop.rope(x, pos, sin, cos, algo=algo)
    assert_close(want, ref_rope(x, pos, sin, cos, algo), dtype)
    x3 = x[..., :24].copy()  # rows of 48 bytes in fp16: not whole lines
    s3, c3 = sin[:, :12].copy(), cos[:, :12].copy()
    want3 = infiniop.rope(x3, pos, s3, c3, algo=algo)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)

    def at(offset, shape, dt):  # an output ``offset`` bytes past a line
        n = int(np.prod(shape)) * np.dtype(dt).itemsize
        buf = infiniop.empty_aligned((n + 64,), np.uint8)
        return buf[offset:offset + n].view(dt).reshape(shape)

    def rope(out, x, sin, cos):  # a new descriptor each time (planned with the thresholds)
        return run(handle, "rope", [out], [x, pos, sin, cos], algo=algo)[0]

    for out in (at(0, x.shape, dtype), at(16, x.shape, dtype),
                at(0, (33, 8, 80), dtype)[..., :64]):  # padded: rows on and off a line
        assert_exact(rope(out, x, sin, cos), want)
    d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                  (x, x, pos, sin, cos)), algo)
    for _ in range(100):  # each task stages in its own frame: threads sharing one chunk raced
        out = at(0, x.shape, dtype)
        d.calculate(None, out, x, pos, sin, cos)
        assert_exact(out, want)
    d.destroy()
    xi = x.copy()  # in place
    assert_exact(rope(xi, xi, sin, cos), want)
    assert_exact(rope(at(0, x3.shape, dtype), x3, s3, c3), want3)
    xs = infiniop.empty_aligned((x.size + 1,), dtype)[1:].reshape(x.shape)  # x's pairs split
    xs[...] = x
    assert_exact(rope(at(0, x.shape, dtype), xs, sin, cos), want)

    def at_page(offset, shape):  # ``offset`` bytes into a page
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = np.empty(n + 8192, np.uint8)
        start = (-raw.ctypes.data) % 4096 + offset
        return raw[start:start + n].view(dtype).reshape(shape)

    xp = at_page(16, x.shape)
    xp[...] = x
    for y_at in (64, 128, 16):  # y 48 bytes ahead of x mod 4096 (GPT-J: staged), 112, 0
        assert_exact(rope(at_page(y_at, x.shape), xp, sin, cos), want)
    if algo == 0:  # GPT-J rows on a line stream as computed, unless 4K aliasing threatens
        src = cpu_rope.source(d.info.program, steps, True)
        assert "nt_store(h0, 2 * i + 1, " in src
        assert "and not (0 < ((pointer_address(q0) - pointer_address(q1)) & 4095) <= 80" in src
    if algo == 1:  # NeoX halves of whole lines stream as computed (through ``qd``)
        assert "nt_store(qd, i, " in cpu_rope.source(d.info.program, steps, True)
        for dh in (32, 96, 128):  # halves of 32 to 512 bytes: whole lines or not, vector tails
            xd = draw(rng, dtype, (33, 8, dh))
            sd, cd = _tables(rng, 50, dh // 2, dtype)
            off_line = rope(at(16, xd.shape, dtype), xd, sd, cd)  # not streamed
            assert_close(off_line, ref_rope(xd, pos, sd, cd, algo), dtype)
            assert_exact(rope(at(0, xd.shape, dtype), xd, sd, cd), off_line)


def test_rope_rows_counted_across_dimensions(handle, monkeypatch):
    """A task steps from row to row like an odometer (carries across every dimension of a
    layout that does not coalesce: batch, seq and heads each permuted in memory, serial and
    in many parallel tasks that start mid-dimension): the bits of the contiguous call."""
    rng = np.random.default_rng(33)
    x = draw(rng, np.float32, (3, 5, 4, 32))
    pos = rng.integers(0, 40, (3, 5)).astype(np.int64)
    sin, cos = _tables(rng, 40, 16, np.float32)
    want = infiniop.rope(x, pos, sin, cos, algo=1)
    assert_close(want, ref_rope(x, pos, sin, cos, 1), np.float32)
    xp = np.ascontiguousarray(x.transpose(2, 0, 1, 3)).transpose(1, 2, 0, 3)  # heads outermost
    xq = np.ascontiguousarray(x.transpose(1, 2, 0, 3)).transpose(2, 0, 1, 3)  # batch innermost
    for threshold in (1 << 40, 1):
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", threshold)
        for v in (xp, xq):
            assert_exact(run(handle, "rope", [np.empty_like(x)], [v, pos, sin, cos], algo=1)[0],
                         want)
            out = np.empty_like(xq)  # a permuted output too
            assert_exact(run(handle, "rope", [out], [v, pos, sin, cos], algo=1)[0], want)


def test_rope_kernels_share_one_pool_driver(handle, monkeypatch):
    """On the pool a rope kernel runs through one compiled driver shared by every rope kernel
    (``rope.rope_driver``), which calls the kernel's own ``serial`` by address for runs of
    tasks after it has checked every position: float16 GPT-J and float32 NeoX share it, each
    with the bits of its serial call, through the descriptor's arrays and raw addresses."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    rng = np.random.default_rng(35)
    fns = set()
    for dtype, algo in ((np.float16, 0), (np.float32, 1)):
        x = draw(rng, dtype, (9, 4, 32))
        pos = rng.permutation(20)[:9].astype(np.int32)
        sin, cos = _tables(rng, 20, 16, dtype)
        want = infiniop.rope(x, pos, sin, cos, algo=algo)  # serial
        assert_close(want, ref_rope(x, pos, sin, cos, algo), dtype)
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
        d = infiniop.create_rope_descriptor(handle, *(TensorDescriptor.from_array(a) for a in
                                                      (x, x, pos, sin, cos)), algo)
        assert d._kernel.parallel
        fns.add(id(d._kernel._fn))
        out = np.empty_like(x)
        d.calculate(None, out, x, pos, sin, cos)
        assert_exact(out, want)
        out2 = np.empty_like(x)
        d.calculate(None, *(a.ctypes.data for a in (out2, x, pos, sin, cos)))
        assert_exact(out2, want)
        d.destroy()
        monkeypatch.undo()
    assert len(fns) == 1


def test_math_heavy_rows_use_the_pool_sooner(handle, monkeypatch):
    """Rows whose per-element work is math-heavy (the softmax family's exp) run on the pool from
    an eighth of runtime.PARALLEL_THRESHOLD elements (``rows.pool_threshold``), the norms only
    from all of it; on the pool they keep the serial call's bits."""
    if IN_TRITON:
        pytest.skip("CPU kernels")
    rng = np.random.default_rng(36)
    T = TensorDescriptor.from_array

    def kernels(x):
        w = np.ones(x.shape[-1], x.dtype)
        return {"softmax": infiniop.create_softmax_descriptor(handle, T(x), T(x), axis=-1),
                "logsoftmax": infiniop.create_logsoftmax_descriptor(handle, T(x), T(x), dim=-1),
                "causal_softmax": infiniop.create_causal_softmax_descriptor(handle, T(x), T(x)),
                "rms_norm": infiniop.create_rms_norm_descriptor(handle, T(x), T(x), T(w))}

    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 8 * 1024)
    on_pool = {name: d._kernel.parallel for name, d in kernels(np.empty((4, 256), np.float32)).items()}
    assert on_pool == {"softmax": True, "logsoftmax": True, "causal_softmax": True, "rms_norm": False}
    assert not any(d._kernel.parallel for d in kernels(np.empty((4, 255), np.float32)).values())
    x = draw(rng, np.float32, (16, 64, 96), 3)  # tasks of a few rows on the pool
    for op, kw in (("softmax", {"axis": -1}), ("logsoftmax", {"dim": -1}), ("causal_softmax", {})):
        pooled = run(handle, op, [np.empty_like(x)], [x], **kw)[0]
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1 << 40)
        assert_exact(pooled, run(handle, op, [np.empty_like(x)], [x], **kw)[0])
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 8 * 1024)


def test_rope_position_dtypes(handle):
    rng = np.random.default_rng(13)
    x = draw(rng, np.float32, (6, 2, 8))
    sin, cos = _tables(rng, 30, 4, np.float32)
    pos = rng.integers(0, 30, 6)
    want = infiniop.rope(x, pos.astype(np.int32), sin, cos, algo=1)
    for dt in (np.int64, np.uint8):
        assert_exact(infiniop.rope(x, pos.astype(dt), sin, cos, algo=1), want)


def test_rope_strided_tables_and_positions(handle):
    rng = np.random.default_rng(14)
    x = draw(rng, np.float32, (6, 2, 8))
    sin, cos = _tables(rng, 30, 4, np.float32)
    sin_t = np.asfortranarray(sin)
    pos = rng.integers(0, 30, 12)[::2].astype(np.int32)
    for algo in (0, 1):
        got = infiniop.rope(x, pos, sin_t, cos[:, ::1], algo=algo)
        assert_exact(got, infiniop.rope(x, pos.copy(), sin, cos, algo=algo))
        assert_close(got, ref_rope(x, pos, sin, cos, algo), np.float32)


def test_rope_functional_repeated_calls(handle):
    """The functional form's shortcut for a repeated call (the last NumPy descriptor's fast
    path) must give what a fresh descriptor gives whenever anything changed: new positions,
    in place, a same-shaped input of another dtype or layout, positions outside the tables."""
    from infiniop.rows import rope as rope_mod

    rng = np.random.default_rng(15)
    sin, cos = _tables(rng, 50, 8, np.float32)
    x = draw(rng, np.float32, (1, 4, 16))
    for step in range(5):  # a decode loop: one new position per call
        pos = np.array([3 * step + 1], np.int32)
        assert_exact(infiniop.rope(x, pos, sin, cos, algo=1),
                     run(handle, "rope", [np.empty_like(x)], [x, pos, sin, cos], algo=1)[0])
    if not IN_TRITON:  # the shortcut is the CPU fast path's (Triton: the keyed path)
        assert 1 in rope_mod._last_call
    pos = np.array([9], np.int32)
    want = run(handle, "rope", [np.empty_like(x)], [x, pos, sin, cos], algo=1)[0]
    out = np.full_like(x, np.nan)
    assert infiniop.rope(x, pos, sin, cos, algo=1, out=out) is out
    assert_exact(out, want)
    xi = x.copy()
    infiniop.rope(xi, pos, sin, cos, algo=1, out=xi)
    assert_exact(xi, want)
    x16 = x.astype(np.float16)  # same shape, another dtype: not the cached descriptor's
    s16, c16 = sin.astype(np.float16), cos.astype(np.float16)
    assert_exact(infiniop.rope(x16, pos, s16, c16, algo=1),
                 run(handle, "rope", [np.empty_like(x16)], [x16, pos, s16, c16], algo=1)[0])
    xt = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)  # same shape, strided
    infiniop.rope(x, pos, sin, cos, algo=1)
    assert_exact(infiniop.rope(xt, pos, sin, cos, algo=1), want)
    infiniop.rope(x, pos, sin, cos, algo=1)
    raises(Status.BAD_PARAM, lambda: infiniop.rope(x, np.array([50], np.int32), sin, cos, algo=1))
    assert_exact(infiniop.rope(x, pos, sin, cos, algo=1), want)
    assert_exact(infiniop.rope(x, pos, sin, cos, algo=0),
                 run(handle, "rope", [np.empty_like(x)], [x, pos, sin, cos], algo=0)[0])


def test_row_functional_repeated_calls(handle):
    """The functional form's shortcut for a repeated call (the operator's last NumPy call: its
    scalars and descriptor fast path) must give what a fresh descriptor gives whenever anything
    changed: scalars, shapes, dtypes, layouts, optional operands given or not, in place, tuples
    of outputs; and it must refuse what the general path refuses."""
    from infiniop.rows import functional

    rng = np.random.default_rng(16)
    x, w, b = draw(rng, np.float32, (2, 64)), draw(rng, np.float32, (64,)), draw(rng, np.float32, (64,))
    for eps in (1e-6, 1e-6, 0.5, 0.5):  # a decode loop, then other scalars
        want = run(handle, "rms_norm", [np.empty_like(x)], [x, w], epsilon=eps)[0]
        assert_exact(infiniop.rms_norm(x, w, epsilon=eps), want)
        out = np.full_like(x, np.nan)
        assert infiniop.rms_norm(x, w, out=out, epsilon=eps) is out
        assert_exact(out, want)
    if not IN_TRITON:  # the shortcut is the CPU fast path's (Triton: the keyed path)
        assert infiniop.rms_norm in functional._last_call
    want = run(handle, "rms_norm", [np.empty_like(x)], [x, w], epsilon=0.5)[0]
    xi = x.copy()
    infiniop.rms_norm(xi, w, out=xi, epsilon=0.5)
    assert_exact(xi, want)
    x3 = draw(rng, np.float32, (3, 64))  # another shape, then another dtype, then strided
    assert_exact(infiniop.rms_norm(x3, w, epsilon=0.5),
                 run(handle, "rms_norm", [np.empty_like(x3)], [x3, w], epsilon=0.5)[0])
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    assert_exact(infiniop.rms_norm(xh, wh, epsilon=0.5),
                 run(handle, "rms_norm", [np.empty_like(xh)], [xh, wh], epsilon=0.5)[0])
    xt = np.ascontiguousarray(x.T).T
    infiniop.rms_norm(x, w, epsilon=0.5)
    assert_exact(infiniop.rms_norm(xt, w, epsilon=0.5), want)
    infiniop.rms_norm(x, w, epsilon=0.5)
    raises(Status.BAD_PARAM, lambda: infiniop.rms_norm(x, w, w, epsilon=0.5))  # one too many
    raises(Status.BAD_TENSOR_SHAPE, lambda: infiniop.rms_norm(x, w[:32], epsilon=0.5))
    # three outputs, bias optional: without, then with, then without again
    outs = (np.empty_like(x), np.empty_like(x), np.empty(2, np.float32))
    for bias in (None, b, None):
        ins = [x, w] if bias is None else [x, w, bias]
        want = run(handle, "layer_norm", [np.empty_like(x), np.empty_like(x), np.empty(2, np.float32)],
                   [x, w, bias])
        got = infiniop.layer_norm(*ins)
        for g, e in zip(got, want):
            assert_exact(g, e)
        assert infiniop.layer_norm(*ins, out=outs) == outs
        for g, e in zip(outs, want):
            assert_exact(g, e)
    # scalars compare by type and value: a bool, a float or another zero is not the last call's
    infiniop.softmax(x, axis=1)
    raises(Status.BAD_PARAM, lambda: infiniop.softmax(x, axis=True))
    raises(Status.BAD_PARAM, lambda: infiniop.softmax(x, axis=1.0))
    assert_close(infiniop.softmax(x, axis=0), ref_softmax(x, 0), np.float32)
    pos, (sin, cos) = np.array([3], np.int32), _tables(rng, 8, 2, np.float32)
    xr = draw(rng, np.float32, (1, 2, 4))
    infiniop.rope(xr, pos, sin, cos, algo=1)
    raises(Status.BAD_PARAM, lambda: infiniop.rope(xr, pos, sin, cos, algo=True))
    raises(Status.BAD_PARAM, lambda: infiniop.rope(xr, pos, sin, cos, algo=1.0))


# ----------------------------------------------------------------------- user-defined operators

def test_user_defined_row_operator(handle):
    """A row operator with a stat output and a column operand, through both front ends."""
    l2 = infiniop.row_operator(
        "test_scaled_l2", "y:out, norm:out:stat, x, scale:col",
        lambda m, x, s: (x / m.sqrt(m.sum(x * x)) * s, m.sqrt(m.sum(x * x))),
        axis="axis", register=False)
    rng = np.random.default_rng(15)
    x, s = draw(rng, np.float32, (4, 9)), draw(rng, np.float32, (4,))
    y, norm = l2(x, s, axis=0)
    nrm = np.sqrt((f64(x) ** 2).sum(0))
    assert_close(norm, nrm, np.float32)
    assert_close(y, f64(x) / nrm * f64(s)[:, None], np.float32)
    d = l2.create_descriptor(handle, TD(y), TD(norm), TD(x), TD(s), 0)
    y2, n2 = np.empty_like(y), np.empty_like(norm)
    d.calculate(None, y2, n2, x, s)
    assert_exact(y2, y)
    assert_exact(n2, norm)
    assert d.params == {"axis": 0}
    for axis in (np.int64(0), np.int32(-2), np.uint8(0)):  # NumPy integers, as create takes
        y3, n3 = l2(x, s, axis=axis)                        # (the stat was sized for axis -1)
        assert_exact(y3, y)
        assert_exact(n3, norm)
    with pytest.raises(TypeError, match="one value per row"):
        infiniop.row_operator("test_bad_stat", "y:out, s:out:stat, x", lambda m, x: (x, x),
                              register=False)(x)


def test_a_row_of_negative_zeros_sums_to_negative_zero(handle):
    """Sums start from -0.0 (rows/spec.py), so a row of -0.0 sums to -0.0 and layer_norm's
    standardised input x - mean is +0.0. The Triton kernels started from +0.0 + -0.0 = +0.0
    and their pair tree summed through np.sum under the interpreter (+0.0 again): their
    z and output were -0.0 where the CPU's are +0.0."""
    x = np.full((3, 5), -0.0, np.float32)
    rowsum = infiniop.row_operator("test_negzero_sum", "y:out, s:out:stat, x",
                                   lambda m, x: (x, m.sum(x)), register=False)
    y, s = rowsum(x)
    assert np.signbit(s).all() and np.signbit(y).all()
    out, z, sd = infiniop.layer_norm(x, np.ones(5, np.float32), None)
    assert not np.signbit(z).any() and not np.signbit(out).any()
    assert_exact(sd, np.full(3, np.sqrt(np.float32(1e-5)), np.float32))


def test_descriptor_scalars_and_lifetime(handle):
    d = TensorDescriptor(DType.F32, (2, 3))
    w = TensorDescriptor(DType.F32, (3,))
    desc = infiniop.create_rms_norm_descriptor(handle, d, d, w, 1e-3)  # C order: positional
    assert desc.params == {"epsilon": np.float32(1e-3)} and desc.workspace_size == 0
    assert infiniop.create_softmax_descriptor(handle, d, d, 0).params == {"axis": 0}
    assert infiniop.create_logsoftmax_descriptor(handle, d, d, dim=-2).params == {"dim": 0}
    x = np.ones((2, 3), np.float32)
    y = np.empty_like(x)
    desc.calculate(None, y, x, np.ones(3, np.float32))
    desc.destroy()
    raises(Status.BAD_PARAM, desc.calculate, None, y, x, np.ones(3, np.float32))


def test_functional_torch(handle):
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    w = torch.randn(40, dtype=torch.float32)
    y = infiniop.rms_norm(x, w, epsilon=1e-6)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    ref = torch.nn.functional.rms_norm(x.float(), (40,), w, 1e-6)
    assert torch.allclose(y.float(), ref, rtol=1.6e-2, atol=1e-3)
    o = torch.empty(3, 40, dtype=torch.float32)
    infiniop.logsoftmax(x.float(), out=o)
    assert torch.allclose(o, torch.log_softmax(x.float(), -1), atol=1e-6)


# --------------------------------------------------------------------- CPU vs Triton, bit for bit


@pytest.mark.parametrize("name", ["rms_norm", "add_rms_norm", "layer_norm", "softmax",
                                  "causal_softmax", "logsoftmax", "rope"])
def test_same_bits_as_cpu(name):
    """On the Triton interpreter: the same bits as the CPU backend, on every dtype, with a long
    row (several chunks and a tail) and a strided axis (exp and log are mathlib's, written in
    the expression primitives: the same operations on both backends)."""
    if not IN_TRITON:
        pytest.skip("runs in the Triton interpreter worker (tests/test_triton_suite.py)")
    from infiniop.handle import create_handle as real

    cpu, gpu = real("cpu"), real("nvidia")
    rng = np.random.default_rng(16)
    for dt in (np.float16, BF16, np.float32, np.float64):
        x = draw(rng, dt, (3, 2100), 3)
        w, b = draw(rng, dt, (2100,)), draw(rng, dt, (2100,))
        if name == "rope":
            x = draw(rng, dt, (5, 3, 16))
            pos = rng.integers(0, 9, 5).astype(np.int32)
            sin, cos = _tables(rng, 9, 8, dt)
            cases = [([np.empty_like(x)], [x, pos, sin, cos], {"algo": a}) for a in (0, 1)]
        elif name in ("rms_norm",):
            cases = [([np.empty_like(x)], [x, w], {})]
        elif name == "add_rms_norm":
            cases = [([np.empty_like(x), np.empty_like(x)], [x, x[::-1], w], {})]
        elif name == "layer_norm":
            cases = [([np.empty_like(x), np.empty_like(x), np.empty(3, dt)], [x, w, b], {})]
        elif name == "softmax":
            cases = [([np.empty_like(x)], [x], {}), ([np.empty_like(x)], [x], {"axis": 0})]
        elif name == "logsoftmax":
            cases = [([np.empty_like(x)], [x], {})]
        else:
            c = draw(rng, dt, (2, 9, 1500))
            cases = [([np.empty_like(c)], [c], {})]
        for outs, ins, kw in cases:
            a = run(cpu, name, [np.zeros_like(o) for o in outs], ins, **kw)
            g = run(gpu, name, [np.zeros_like(o) for o in outs], ins, **kw)
            for p, q in zip(a, g):
                assert_exact(q, p)


def test_triton_grid_stride_loop(monkeypatch):
    """Tiny launch rows (16-element blocks, at most 3 programs): every program loops over
    several row tiles; the bits stay the CPU's."""
    if not IN_TRITON:
        pytest.skip("runs in the Triton interpreter worker (tests/test_triton_suite.py)")
    from dataclasses import replace

    from infiniop.backends.triton import vendors
    from infiniop.device import Device
    from infiniop.handle import create_handle as real

    row = replace(vendors.VENDORS[Device.NVIDIA], block=16, tile=4, max_grid=3)
    monkeypatch.setitem(vendors.VENDORS, Device.NVIDIA, row)
    monkeypatch.setattr(vendors, "INTERPRETER_BLOCK", 16)
    cpu, gpu = real("cpu"), real("nvidia")
    rng = np.random.default_rng(17)
    for n in (5, 40):
        x, w = draw(rng, np.float32, (2, 7, n), 2), draw(rng, np.float32, (n,))
        got = []
        for h in (cpu, gpu):
            got.append([run(h, "rms_norm", [np.empty_like(x)], [x, w])[0],
                        run(h, "layer_norm", [np.empty_like(x), np.empty_like(x),
                                              np.empty((2, 7), np.float32)], [x, w, w])[2]])
        for a, g in zip(*got):
            assert_exact(g, a)
        xr = draw(rng, np.float32, (11, 3, 2 * n))
        pos = rng.integers(0, 20, 11).astype(np.int32)
        sin, cos = _tables(rng, 20, n, np.float32)
        for algo in (0, 1):
            a = run(cpu, "rope", [np.empty_like(xr)], [xr, pos, sin, cos], algo=algo)[0]
            g = run(gpu, "rope", [np.empty_like(xr)], [xr, pos, sin, cos], algo=algo)[0]
            assert_exact(g, a)
        y = run(gpu, "softmax", [np.empty_like(x)], [x], axis=1)[0]
        assert_close(y, ref_softmax(x, 1), np.float32)


def test_row_math_knows_the_result_type():
    """``m.result_bits`` in a row operator is the significand of its narrowest float output, as
    in elementwise expressions: fp16/bf16 outputs let mathlib take its half forms."""
    seen = {}

    def fn(m, x):
        seen[x.dtype, len(seen)] = m.result_bits
        return m.exp_nonpositive(x - m.max(x))

    op = infiniop.row_operator("bits_probe", "y:out, x", fn,
                               signatures=["T -> T", "f16|bf16 -> f32"], register=False)
    for xdt, ydt, bits in ((np.float16, np.float16, 11), (ml_dtypes.bfloat16, ml_dtypes.bfloat16, 8),
                           (np.float32, np.float32, 24), (np.float64, np.float64, 53),
                           (np.float16, np.float32, 24), (ml_dtypes.bfloat16, np.float32, 24)):
        seen.clear()
        op(np.zeros((2, 3), xdt), out=np.empty((2, 3), ydt))
        assert list(seen.values()) == [bits], (xdt, ydt)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_half_softmax_within_one_ulp(dt):
    """softmax with fp16/bf16 outputs (its exp in the half form): every output within one ulp of
    the float64 softmax of the same inputs rounded once, >= 99.9% of them exactly that."""
    x = (np.random.default_rng(11).standard_normal((256, 4096)) * 2).astype(dt)
    d = x.astype(np.float64)
    e = np.exp(d - d.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True)).astype(dt).view(np.int16).astype(np.int64)
    got = infiniop.softmax(x).view(np.int16).astype(np.int64)  # positive: ordered as integers
    assert np.abs(got - ref).max() <= 1
    assert (got == ref).mean() >= 0.999


def test_functional_output_dtype_does_not_follow_the_last_out():
    """logsoftmax fp16 -> fp16 without out=; a call just before with a float32 out= (allowed)
    armed the functional shortcut, which then allocated float32 for the next call."""
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float16)
    want = infiniop.logsoftmax(x)
    assert want.dtype == np.float16
    wide = infiniop.logsoftmax(x, out=np.empty((3, 8), np.float32))
    assert wide.dtype == np.float32
    again = infiniop.logsoftmax(x)
    assert again.dtype == np.float16 and np.array_equal(again.view(np.uint16), want.view(np.uint16))
    again = infiniop.logsoftmax(x)  # the shortcut armed by an allocating call still allocates fp16
    assert again.dtype == np.float16
    for _ in range(2):  # dtype= (NumPy's ufunc keyword) allocates the wider output; twice: cached
        wide2 = infiniop.logsoftmax(x, dtype=np.float32)
        assert wide2.dtype == np.float32 and np.array_equal(wide2, wide)
    assert infiniop.logsoftmax(x).dtype == np.float16  # dtype= armed no shortcut for other calls
    raises(Status.BAD_PARAM, infiniop.logsoftmax, x, dtype=np.float32,
           out=np.empty((3, 8), np.float16), match="dtype=float32 but out= operand 'output'")
    raises(Status.BAD_TENSOR_DTYPE, infiniop.softmax, x, dtype=np.float32)  # no such signature


LONG_ROW_SCRIPT = r"""
import resource, sys
import numpy as np, infiniop
n = 1 << 24                                   # one float32 row of 64 MiB
x = np.linspace(-3, 3, n, dtype=np.float32).reshape(1, n)
y = np.empty_like(x)
import numba  # noqa: F401  (loaded before the limit: the kernels may need it to compile)
for rows in (64, 2):  # every kernel these calls take compiled (or loaded), before the limit
    warm = np.zeros((rows, (1 << 22) // rows), np.float32)
    infiniop.softmax(warm, out=warm)
    infiniop.logsoftmax(warm, out=warm)
del warm
with open("/proc/self/status") as f:
    mapped = next(int(v.split()[1]) * 1024 for v in f if v.startswith("VmSize:"))
room = mapped + (100 << 20)                   # one cached row fits, two do not
resource.setrlimit(resource.RLIMIT_AS, (room, room))
infiniop.softmax(x, out=y)
assert abs(float(y.sum(dtype=np.float64)) - 1) < 1e-3, y.sum()
infiniop.logsoftmax(x, out=y)
print("ok")
"""


@pytest.mark.skipif(IN_TRITON or not os.path.exists("/proc/self/status"),
                    reason="CPU kernels' scratch; Linux address-space limit")
def test_a_long_softmax_row_keeps_one_scratch_row():
    """softmax / logsoftmax keep a row's exps in a scratch row; rows deferred to the next row's
    exp pass keep two, which a long row does not gain from: one row of 2^28 float32 needed 2 GiB
    beside its operands and failed with Numba's bare MemoryError under a tight limit."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", LONG_ROW_SCRIPT], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
