"""Triton backend internals, run inside the interpreter worker (see test_triton_suite.py).

What the CPU suite cannot reach: many programs and the grid-stride loop (tiny blocks and a tiny
grid forced through the vendor table), every vendor row, exact fp16/bf16 rounding over many
values, sign bits of -x, every expression function against the CPU backend, operands sharing a
start address with different extents, misaligned rearrange addresses, and "nothing is
recomputed per call".
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

if os.environ.get("INFINIOP_TRITON_WORKER") != "1":
    pytest.skip("runs in the Triton interpreter worker (tests/test_triton_suite.py)",
                allow_module_level=True)

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import infiniop  # noqa: E402
from infiniop import DType, InfiniError, Status, TensorDescriptor  # noqa: E402
from infiniop.backends import triton as tb  # noqa: E402
from infiniop.backends.triton import codegen, vendors  # noqa: E402
from infiniop.device import Device  # noqa: E402
from infiniop.handle import create_handle as real_create_handle  # noqa: E402
from infiniop.rearrange import create_rearrange_descriptor  # noqa: E402

BF16 = ml_dtypes.bfloat16
TD = TensorDescriptor.from_array


def assert_exact(got, want) -> None:
    """Same dtype, shape and bits; NaN matches NaN (any payload)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    if want.dtype.kind == "f" or want.dtype == BF16:
        u = np.dtype(f"u{want.dtype.itemsize}")
        gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
        bad = (gn != wn) | (~wn & (np.ascontiguousarray(got).view(u)
                                   != np.ascontiguousarray(want).view(u)))
    else:
        bad = got != want
    if bad.any():
        idx = [tuple(i) for i in np.argwhere(bad)[:5]]
        raise AssertionError(f"{int(bad.sum())} of {bad.size} differ: "
                             + ", ".join(f"{i}: got {got[i]!r} want {want[i]!r}" for i in idx))


def run(handle, name, out, *ins):
    create = getattr(infiniop, f"create_{name}_descriptor")
    with create(handle, TD(out), *[TD(x) for x in ins]) as d:
        d.calculate(None, out, *ins)
    return out


@pytest.fixture
def nv():
    assert tb.MEMORY_KIND == "cpu"  # the interpreter, or a GPU with host buffers staged
    return real_create_handle("nvidia")


@pytest.fixture
def tiny(monkeypatch):
    """Blocks of 16, 4x4 transpose tiles, at most 3 programs: every call loops over tiles."""
    row = replace(vendors.VENDORS[Device.NVIDIA], block=16, tile=4, max_grid=3)
    monkeypatch.setitem(vendors.VENDORS, Device.NVIDIA, row)
    monkeypatch.setattr(vendors, "INTERPRETER_BLOCK", 16)
    monkeypatch.setattr(vendors, "INTERPRETER_TILE", 4)
    return real_create_handle("nvidia")


def _layouts(rng, shape, dtype):
    """(name, array) views of random values with the given logical shape."""
    m = max(shape)
    if np.dtype(dtype).kind in "iu":
        base = rng.integers(-30000, 30000, (2 * m + 3, 2 * m + 3)).astype(dtype)
    else:
        base = rng.standard_normal((2 * m + 3, 2 * m + 3)).astype(dtype)
    yield "contiguous", np.ascontiguousarray(base[: shape[0], : shape[1]])
    yield "strided", base[: 2 * shape[0] : 2, 1 : 2 * shape[1] + 1 : 2]
    yield "transposed", np.ascontiguousarray(base[: shape[1], : shape[0]]).T
    yield "negative", base[shape[0] - 1 :: -1, shape[1] - 1 :: -1][: shape[0], : shape[1]]
    yield "broadcast_row", np.broadcast_to(base[0, : shape[1]], shape)
    yield "broadcast_col", np.broadcast_to(base[: shape[0], :1], shape)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int16])
def test_grid_stride_loop_and_many_programs(tiny, dtype):
    rng = np.random.default_rng(0)
    shape = (9, 21)
    views = list(_layouts(rng, shape, dtype))
    for k, (la, a) in enumerate(views):  # every layout once on each side
        for lb, b in (views[(k + 1) % len(views)], views[(k + 3) % len(views)]):
            out = np.empty((shape[1], shape[0]), dtype).T
            run(tiny, "sub", out, a, b)
            with np.errstate(all="ignore"):
                want = (a - b) if dtype is np.int16 else \
                    (a.astype(np.float32) - b.astype(np.float32)).astype(dtype)
            try:
                assert_exact(out, want)
            except AssertionError as e:
                raise AssertionError(f"a {la}, b {lb}: {e}") from None


def test_tiny_blocks_rank6_and_zero_d(tiny):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 2, 3, 2, 5)).astype(np.float32)
    xp = x.transpose(5, 3, 1, 0, 2, 4).copy().transpose(3, 2, 4, 1, 5, 0)  # same values, permuted
    assert np.array_equal(xp, x)
    out = np.empty_like(x)[..., ::-1][..., ::-1]
    lo, hi = np.float32(-0.5), rng.standard_normal((1, 3, 1, 1, 2, 1)).astype(np.float32)
    run(tiny, "clip", out, xp, np.full(x.shape, lo), np.broadcast_to(hi, x.shape))
    assert_exact(out, np.minimum(np.maximum(x, lo), hi))
    z = np.zeros((), np.float64)
    run(tiny, "add", z, np.array(1.5), np.array(2.25))
    assert z[()] == 3.75


@pytest.mark.parametrize("shape, perm", [((7, 5), (1, 0)), ((2, 7, 5), (0, 2, 1)),
                                         ((2, 5, 7, 5), (1, 0, 3, 2)), ((5, 2, 3), (2, 1, 0))])
@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.float64])
def test_tiled_kind_across_outer_indices(tiny, shape, perm, dtype):
    """The 'tiled' kernel (codegen.tiled_source): tiles over (dim ndim - 2, innermost) that end
    at every outer index, edges in both directions, and more tile slots than tiles (the grid-
    stride loop's last round): nothing outside the output is written."""
    rng = np.random.default_rng(3)
    a = rng.integers(-60, 60, [shape[p] for p in perm]).astype(dtype).transpose(np.argsort(perm))
    b = rng.integers(-60, 60, shape).astype(dtype)
    fenced = np.full((3 * shape[0],) + shape[1:], 99, dtype)
    out = fenced[shape[0]:2 * shape[0]]
    with infiniop.create_sub_descriptor(tiny, TD(out), TD(a), TD(b)) as d:
        launch = d._kernel.launch
        assert d.info.kind == "tiled" and "_tiled" in launch.source.stem
        tiles, _, _, per, nprog = launch.scalars[:5]
        assert per * nprog > tiles
        d.calculate(None, out, a, b)
    assert_exact(out, (a - b).astype(dtype))
    assert (fenced[:shape[0]] == 99).all() and (fenced[2 * shape[0]:] == 99).all()


@pytest.mark.parametrize("shape, perm", [((37, 29), (1, 0)), ((3, 9, 17), (2, 0, 1)),
                                         ((5, 4, 7, 3), (3, 1, 0, 2))])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float64])
def test_rearrange_tiny_tiles(tiny, shape, perm, dtype):
    rng = np.random.default_rng(2)
    src = rng.integers(0, 255, shape).astype(dtype)
    dst = np.empty([shape[p] for p in perm], dtype).transpose(np.argsort(perm))
    d = create_rearrange_descriptor(tiny, TD(dst), TD(src))
    d.calculate(dst, src)
    assert np.array_equal(dst, src)


@pytest.mark.parametrize("device", ["nvidia", "metax", "moore", "iluvatar", "kunlun", "hygon"])
def test_every_vendor_row(device):
    if device == "hygon" and not tb.INTERPRET:  # a real NVIDIA GPU is no HIP device
        with pytest.raises(InfiniError) as ei:
            real_create_handle(device)
        assert ei.value.status is Status.DEVICE_NOT_FOUND and "'hip'" in str(ei.value)
        return
    h = real_create_handle(device)
    assert h.device is Device[device.upper()]
    cfg = tb.launch_config(h.device)
    assert cfg.vendor == device
    a = np.arange(300, dtype=np.float32).reshape(20, 15)
    out = np.empty((15, 20), np.float32).T
    run(h, "mul", out, a, a[::-1])
    assert_exact(out, a * a[::-1])
    f64 = TensorDescriptor(DType.F64, (3,))
    if cfg.fp64:
        infiniop.create_add_descriptor(h, f64, f64, f64).destroy()
    else:
        with pytest.raises(InfiniError) as ei:
            infiniop.create_add_descriptor(h, f64, f64, f64)
        assert ei.value.status is Status.BAD_TENSOR_DTYPE and device in str(ei.value)


def test_the_cpu_suite_is_routed_here():
    """The worker hands the CPU backend's tests a Triton handle (test_triton_harness.py)."""
    from infiniop.elementwise import functional

    h = infiniop.create_handle("cpu")
    assert h.device is Device.NVIDIA and h.backend.NAME == "triton"
    assert functional._handle is h


@pytest.mark.skipif(not tb.INTERPRET, reason="on a GPU, device ids are the GPU's")
def test_device_id_under_the_interpreter():
    with pytest.raises(InfiniError) as ei:
        real_create_handle("nvidia", 1)
    assert ei.value.status is Status.DEVICE_NOT_FOUND and "TRITON_INTERPRET" in str(ei.value)


@pytest.mark.parametrize("np_dtype", [BF16, np.float16])
def test_products_round_to_nearest_even(nv, np_dtype):
    """64K products of random halves: every f32 product needs rounding (ties included)."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**16, 2**16, dtype=np.uint16)
    a = bits.view(np_dtype)
    b = rng.permutation(bits).view(np_dtype)
    out = np.empty_like(a)
    run(nv, "mul", out, a, b)
    with np.errstate(all="ignore"):
        want = (a.astype(np.float32) * b.astype(np.float32)).astype(np_dtype)
    assert_exact(out, want)
    # ties: exactly halfway between two bf16/f16 values, both parities
    one = np.ones(4, np_dtype)
    eps = 2.0 ** (-8 if np_dtype is BF16 else -11)  # half an ulp of 1.0
    h = np.array([eps, 3 * eps, -eps / 2, -3 * eps / 2], np.float32).astype(np_dtype)
    out = np.empty(4, np_dtype)
    run(nv, "add", out, one, h)
    assert out.astype(np.float32).tolist() == [1.0, 1.0 + 4 * eps, 1.0, 1.0 - 2 * eps]


def test_neg_flips_the_sign_bit_of_zero_and_nan(nv):
    for dt in (np.float32, np.float64, np.float16, BF16):
        x = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, 1.5], np.float64).astype(dt)
        out = np.empty_like(x)
        run(nv, "neg", out, x)
        u = np.dtype(f"u{x.itemsize}")
        want = np.negative(x.astype(np.float32)).astype(dt) if dt is BF16 else np.negative(x)
        assert out[:2].view(u).tolist() == want[:2].view(u).tolist(), dt
        assert np.isnan(out[2:4].astype(np.float32)).all()
        assert out[4] == -np.inf and out[5] == -1.5


def test_inputs_sharing_a_start_address(nv):
    """Two inputs starting at one address with different extents (the interpreter keys host
    storages by address: they must share one)."""
    x = np.arange(40, dtype=np.float32)
    a, b = x[0:10], x[0:20:2]
    out = np.empty(10, np.float32)
    run(nv, "add", out, a, b)
    assert_exact(out, a + b)
    run(nv, "add", x[20:30], x[0:10], x[0:20:2])  # output elsewhere in the same buffer
    assert_exact(x[20:30], np.arange(10, dtype=np.float32) * 3)


def test_misaligned_rearrange_falls_back_to_narrower_words(nv):
    raw = np.zeros(4 * 64 + 8, np.uint8)
    src = np.frombuffer(raw.data, np.float32, 64, offset=1).reshape(8, 8)  # 1-byte aligned
    src = np.array(src)  # writable copy of the right values
    buf = np.zeros(4 * 64 + 8, np.uint8)
    dst = np.frombuffer(buf.data, np.float32, 64, offset=2).reshape(8, 8).T
    vals = np.arange(64, dtype=np.float32).reshape(8, 8)
    src[...] = vals
    d = create_rearrange_descriptor(nv, TD(dst), TD(src))
    d.calculate(dst, src)
    assert np.array_equal(dst, vals)
    assert d._run.word == 4 and 2 in d._run._variants  # a 2-byte-word variant was built


def test_nothing_is_planned_per_call(nv, monkeypatch):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = a.T.copy().T
    d = infiniop.create_add_descriptor(nv, TD(a), TD(a), TD(b))

    def boom(*args, **kw):
        raise AssertionError("planned during calculate")

    for name in ("flat_source", "strided_source", "transpose_source", "load"):
        monkeypatch.setattr(codegen, name, boom)
    monkeypatch.setattr(tb, "config_for", boom)
    out = np.empty_like(a)
    for _ in range(3):
        d.calculate(None, out, a, b)
    assert_exact(out, a + a)


# ----------------------------------------------------------------- every expression function

F32 = np.float32
EXPRS = {  # name: (expression, NumPy reference in the compute type, kinds it applies to)
    "floordiv": (lambda m, a, b: a // b, lambda a, b, c: np.floor_divide(a, b), "fi"),
    "mod": (lambda m, a, b: a % b, lambda a, b, c: np.remainder(a, b), "fi"),
    "truediv": (lambda m, a, b: a / b, lambda a, b, c: np.true_divide(a, b), "f"),
    "cmp_where": (lambda m, a, b: m.where((a < b) | a.eq(b), a * 2 - 1, m.maximum(b, 3)),
                  lambda a, b, c: np.where((a < b) | (a == b), a * c(2) - c(1),
                                           np.maximum(b, c(3))), "fi"),
    "bits": (lambda m, a, b: (a & b) | (a ^ ~b), lambda a, b, c: (a & b) | (a ^ ~b), "i"),
    "consts_f": (lambda m, a, b: m.minimum(a, 1e30) + m.maximum(b, -7) * 0.5,
                 lambda a, b, c: np.minimum(a, c(1e30)) + np.maximum(b, c(-7)) * c(0.5), "f"),
    "consts_i": (lambda m, a, b: m.minimum(a, 100) - m.maximum(b, 7) * 3,
                 lambda a, b, c: np.minimum(a, c(100)) - np.maximum(b, c(7)) * c(3), "i"),
    "isnan_where": (lambda m, a, b: m.where(m.isnan(a), b, -a),
                    lambda a, b, c: np.where(np.isnan(a), b, -a), "f"),
    "floor_ceil": (lambda m, a, b: m.floor(a) + m.ceil(b),
                   lambda a, b, c: np.floor(a) + np.ceil(b), "f"),
    "sqrt_abs": (lambda m, a, b: m.sqrt(m.abs(a)) + b,
                 lambda a, b, c: np.sqrt(np.abs(a)) + b, "f"),
}
DTYPES = [np.float32, np.float64, BF16, np.float16, np.int8, np.int64, np.uint32]


def _draw(rng, dt, n):
    if np.dtype(dt).kind == "f" or dt is BF16:
        v = rng.standard_normal(n) * 4.0 ** rng.integers(-3, 4, n)
        for val, frac in ((0.0, 16), (-0.0, 32), (np.nan, 32), (np.inf, 32), (-np.inf, 64)):
            v[rng.integers(0, n, n // frac)] = val
        return v.astype(dt)
    ii = np.iinfo(dt)
    v = rng.integers(ii.min, ii.max, n, dtype=dt, endpoint=True)
    v[: n // 4] = rng.integers(-9, 10, n // 4).astype(dt)
    return v


def _compute(dt):
    """The CPU backend's compute type: float32 for halves, 64-bit integers."""
    if dt in (BF16, np.float16):
        return np.float32
    k = np.dtype(dt).kind
    return {"i": np.int64, "u": np.uint64}.get(k, dt)


@pytest.mark.parametrize("name", list(EXPRS))
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_expression_functions_match_numpy(nv, name, dt):
    fn, ref, kinds = EXPRS[name]
    kind = "f" if np.dtype(dt).kind == "f" or dt is BF16 else "i"
    if kind not in kinds:
        pytest.skip(f"{name} is not defined for {kind} outputs here")
    ddt = infiniop.dtype.from_numpy(dt)
    spec = infiniop.elementwise(f"t_{name}", ("a", "b"), [ddt], fn, register=False)
    rng = np.random.default_rng(abs(hash((name, np.dtype(dt).name))) % 2**32)
    a, b = _draw(rng, dt, 4096), _draw(rng, dt, 4096)
    ct = _compute(dt)
    with np.errstate(all="ignore"):
        want = np.asarray(ref(a.astype(ct), b.astype(ct), ct)).astype(ct).astype(dt)
    got = np.empty_like(a)
    with spec.create_descriptor(nv, TD(got), TD(a), TD(b)) as d:
        d.calculate(None, got, a, b)
    assert_exact(got, want)


MIX_F = infiniop.elementwise(
    "t_mix_f", ("a", "b"), [DType.F32],
    lambda m, a, b: m.where(m.isnan(a), a // b, m.where(a < 0, a % b, m.sqrt(a) / b)) - 0.25,
    register=False)
MIX_I = infiniop.elementwise(
    "t_mix_i", ("a", "b"), [DType.I32],
    lambda m, a, b: m.where(a < b, a // b, (a % b) * 7) ^ ~m.minimum(a, -b),
    register=False)


@pytest.mark.parametrize("spec, dt", [(MIX_F, np.float32), (MIX_I, np.int32)], ids=["f32", "i32"])
def test_same_bits_as_the_cpu_backend(nv, spec, dt):
    rng = np.random.default_rng(5)
    a, b = _draw(rng, dt, 4096), _draw(rng, dt, 4096)
    want, got = np.empty_like(a), np.empty_like(a)
    for h, out in ((real_create_handle("cpu"), want), (nv, got)):
        with spec.create_descriptor(h, TD(out), TD(a), TD(b)) as d:
            d.calculate(None, out, a, b)
    assert_exact(got, want)


def test_swiglu_bf16_has_the_cpu_bits(nv):
    """bf16 swiglu's float32 path (bit-level scaling by 2^k, rounding to odd, subnormal
    results): the CPU's bits for every bf16 b with a from tie-prone to extreme values. Where a
    and b are both NaN the result is NaN with either's payload (x86 keeps the first operand's,
    and LLVM orders a product's operands differently for AVX2 and AVX-512; GPUs return the
    canonical NaN): NaN there, the bits everywhere else."""
    bf16 = ml_dtypes.bfloat16
    a = np.array([3.0, -5.0, 3 * 2.0 ** -133, -(2.0 ** -126), 1e-30, 2.0 ** 127, -1e30, np.inf,
                  0.0, np.nan], np.float32).astype(bf16)
    b = np.arange(1 << 16, dtype=np.uint16).view(bf16)
    A, B = np.repeat(a, b.size), np.tile(b, a.size)
    want, got = np.empty_like(A), np.empty_like(A)
    for h, out in ((real_create_handle("cpu"), want), (nv, got)):
        with infiniop.create_swiglu_descriptor(h, TD(out), TD(A), TD(B)) as d:
            d.calculate(None, out, A, B)
    both = np.isnan(A.astype(np.float32)) & np.isnan(B.astype(np.float32))
    assert np.isnan(got[both].astype(np.float32)).all() and np.isnan(want[both].astype(np.float32)).all()
    assert np.array_equal(got.view(np.uint16)[~both], want.view(np.uint16)[~both])


@pytest.mark.parametrize("fn", ["exp", "log", "sin", "cos", "tanh"])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_transcendentals_are_within_a_few_ulp_of_numpy(nv, fn, dt):
    spec = infiniop.elementwise(f"t_{fn}", ("x",), [infiniop.dtype.from_numpy(dt)],
                                lambda m, x: getattr(m, fn)(x), register=False)
    x = np.concatenate([np.linspace(-20, 20, 2001), [0.0, -0.0, 1e-30, -1e-8, 3e-4, np.nan,
                                                      np.inf, -np.inf]]).astype(dt)
    if fn == "log":
        x = np.abs(x)
    got = np.empty_like(x)
    with spec.create_descriptor(nv, TD(got), TD(x)) as d:
        d.calculate(None, got, x)
    with np.errstate(all="ignore"):
        want = getattr(np, fn)(x)
    # exp/log/sin/cos are Triton's (NumPy's under the interpreter); tanh is ours (no libdevice)
    np.testing.assert_array_max_ulp(got, want, maxulp=8 if fn == "tanh" else 4)
