"""The reference library's (InfiniCore) test tables for rms_norm, add_rms_norm, layer_norm,
softmax, causal_softmax, logsoftmax and rope, through the descriptor API with the harness's data,
references and tolerances (test/infiniop/<op>.py).

Harness conventions reproduced: data ``torch.rand`` (U[0, 1), times the script's scale), strided
operands stored with their strides (a buffer of the span, filled through ``as_strided``), the
descriptors dropped before ``calculate``, in-place modes and their skip rules, the reference
computed by the script's torch formula, ``torch.allclose`` with the script's atol/rtol.

Sizes: cases over 16M elements (softmax's (12, 16, 512, 512), causal_softmax's (28, 1024+,
1024+)) run with ``--long`` (INFINIOP_LONG=1), except one real-size case per operator; case ids
of more than 1M elements contain "large" (left out on the Triton interpreter).
"""

from __future__ import annotations

import os
from math import prod

import pytest
import torch

import infiniop
from infiniop import DType, TensorDescriptor

F16, BF16, F32 = DType.F16, DType.BF16, DType.F32
TORCH = {F16: torch.float16, BF16: torch.bfloat16, F32: torch.float32, DType.I32: torch.int32}
LONG = os.environ.get("INFINIOP_LONG") == "1"
BIG = 16 << 20


def strided(t: torch.Tensor, strides) -> torch.Tensor:
    """TestTensor's storage: ``t`` copied into a buffer laid out with ``strides``."""
    if strides is None:
        return t.clone()
    span = sum((n - 1) * s for n, s in zip(t.shape, strides)) + 1
    buf = torch.zeros(span, dtype=t.dtype)
    v = buf.as_strided(t.shape, strides)
    v.copy_(t)
    return v


def desc(t: torch.Tensor, dt: DType) -> TensorDescriptor:
    return TensorDescriptor(dt, tuple(t.shape), tuple(t.stride()))


def close(got: torch.Tensor, want: torch.Tensor, atol, rtol):
    assert torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol), \
        f"max diff {(got.float() - want.float()).abs().max()}"


def calc(create, outs, ins, *scalars, handle):
    d = create(handle, *[desc(t, dt) for t, dt in outs],
               *[None if t is None else desc(t, dt) for t, dt in ins], *scalars)
    d.calculate(None, *[t for t, _ in outs], *[t for t, _ in ins])
    d.destroy()


def ids(case, extra=""):
    n = max(prod(s) for s in case if isinstance(s, tuple) and all(isinstance(v, int) for v in s))
    tag = "large-" if n > 1 << 20 else ""
    return tag + "-".join(str(c).replace(" ", "") for c in case) + extra


def size_gate(n: int, keep: bool = False):
    if n > BIG and not LONG and not keep:
        pytest.skip("over 16M elements: runs with --long (INFINIOP_LONG=1)")


# ------------------------------------------------------------------------- rms_norm, add_rms_norm

RMS_CASES = [
    ((1, 4), None, None), ((2, 4), None, None), ((2, 2, 4), None, None),
    ((2, 2, 4), (12, 8, 1), (12, 8, 1)), ((16, 2048), None, None),
    ((16, 2048), (4096, 1), (4096, 1)), ((15, 3584), None, None), ((4, 4, 2048), None, None),
    ((4, 4, 2048), (2048, 8192, 1), (2048, 8192, 1)),
    ((4, 4, 2048), (16384, 4096, 1), (16384, 4096, 1)), ((15, 8192), None, None),
]
W_DTYPES = [None, F32, F16, BF16]
RMS_TOL = {F16: (2e-3, 2e-3), BF16: (1e-2, 1e-2)}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("wdt", W_DTYPES, ids=["w_same", "w_f32", "w_f16", "w_bf16"])
@pytest.mark.parametrize("case", RMS_CASES, ids=[ids(c) for c in RMS_CASES])
def test_rms_norm_table(handle, case, wdt, dtype):
    shape, y_stride, x_stride = case
    wdt = wdt or dtype
    g = torch.Generator().manual_seed(1)
    x = torch.rand(shape, generator=g).to(TORCH[dtype]) * 0.01
    w = torch.rand(shape[-1:], generator=g).to(TORCH[wdt])
    eps = 1e-6
    h = x.to(torch.float32)
    want = (h * h.pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * w).to(TORCH[dtype])
    y = strided(torch.ones(shape, dtype=TORCH[dtype]), y_stride)
    xs = strided(x, x_stride)
    calc(infiniop.create_rms_norm_descriptor, [(y, dtype)], [(xs, dtype), (w, wdt)], eps,
         handle=handle)
    close(y, want, *RMS_TOL[dtype])


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("wdt", W_DTYPES, ids=["w_same", "w_f32", "w_f16", "w_bf16"])
@pytest.mark.parametrize("case", RMS_CASES, ids=[ids(c) for c in RMS_CASES])
def test_add_rms_norm_table(handle, case, wdt, dtype):
    shape, y_stride, ab_stride = case  # the script passes a_stride for a, b and residual_out
    wdt = wdt or dtype
    g = torch.Generator().manual_seed(2)
    a = torch.rand(shape, generator=g).to(TORCH[dtype]) * 0.01
    b = torch.rand(shape, generator=g).to(TORCH[dtype]) * 0.01
    w = torch.rand(shape[-1:], generator=g).to(TORCH[wdt])
    eps = 1e-6
    s = a.float() + b.float()
    want = (s * s.pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * w.float()).to(TORCH[dtype])
    y = strided(torch.ones(shape, dtype=TORCH[dtype]), y_stride)
    res = strided(torch.ones(shape, dtype=TORCH[dtype]), ab_stride)
    calc(infiniop.create_add_rms_norm_descriptor, [(y, dtype), (res, dtype)],
         [(strided(a, ab_stride), dtype), (strided(b, ab_stride), dtype), (w, wdt)], eps,
         handle=handle)
    close(y, want, *RMS_TOL[dtype])
    close(res, s.to(TORCH[dtype]), *RMS_TOL[dtype])


# --------------------------------------------------------------------------------- layer_norm

LN_CASES = [
    ((5, 4), True, 1e-5, None, None, None), ((5, 4, 32, 2048), True, 1e-5, None, None, None),
    ((13, 4, 4), True, 1e-5, (30, 4, 1), (50, 4, 1), (2,)),
    ((16, 5, 563), True, 1e-4, None, None, None), ((5, 16, 563), False, 1e-5, None, None, (10,)),
    ((4, 4, 563), True, 1e-5, None, None, None),
    ((40, 40, 56), True, 1e-5, (3600, 56, 1), None, None),
    ((40, 40, 56), False, 1e-5, (3600, 56, 1), None, None),
]
LN_TOL = {F16: (5e-2, 5e-2), F32: (1e-3, 1e-3), BF16: (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", [F16, F32, BF16], ids=["f16", "f32", "bf16"])
@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("case", LN_CASES, ids=[ids(c) for c in LN_CASES])
def test_layer_norm_table(handle, case, inplace, dtype):
    shape, bias_exist, eps, in_strides, out_strides, w_strides = case
    if inplace and out_strides != in_strides:
        pytest.skip("the script skips in place when the strides differ")
    g = torch.Generator().manual_seed(3)
    t = TORCH[dtype]
    x = torch.zeros(shape, dtype=t)  # the script's input is all zeros (mode="zeros")
    w = torch.rand(shape[-1:], generator=g).to(t)
    b = torch.rand(shape[-1:], generator=g).to(t) if bias_exist else None
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    std = torch.sqrt(xf.var(-1, correction=0) + eps)
    want_z = ((xf - mean) / std.unsqueeze(-1)).to(t)
    want_std = std.to(t)
    want_y = torch.nn.functional.layer_norm(xf, shape[-1:], w.float(),
                                            b.float() if bias_exist else None, eps).to(t)
    xs = strided(x, in_strides)
    y = xs if inplace else strided(torch.rand(shape, generator=g).to(t), out_strides)
    z = torch.rand(shape, generator=g).to(t)
    sd = torch.rand(shape[:-1], generator=g).to(t)
    ws = strided(w, w_strides)
    calc(infiniop.create_layer_norm_descriptor, [(y, dtype), (z, dtype), (sd, dtype)],
         [(xs, dtype), (ws, dtype), (b, dtype)], eps, handle=handle)
    for got, want in ((y, want_y), (z, want_z), (sd, want_std)):
        close(got, want, *LN_TOL[dtype])


def test_layer_norm_table_random_input(handle):
    """The scripts' layer_norm input is zeros; the same shapes with random data."""
    g = torch.Generator().manual_seed(4)
    for shape in ((5, 4), (16, 5, 563), (40, 40, 56)):
        x = torch.rand(shape, generator=g) * 4 - 2
        w, b = torch.rand(shape[-1:], generator=g), torch.rand(shape[-1:], generator=g)
        y, z, sd = infiniop.layer_norm(x, w, b, eps=1e-5)
        close(y, torch.nn.functional.layer_norm(x, shape[-1:], w, b, 1e-5), 1e-5, 1e-5)
        close(sd, torch.sqrt(x.var(-1, correction=0) + 1e-5), 1e-6, 1e-6)


# ----------------------------------------------------------------------------------- softmax

SOFTMAX_CASES = [((4, 4), 0)] + [((b, 16, 512, 512), a) for b in (12, 1) for a in range(4)]
SOFTMAX_TOL = {F16: (1e-3, 1e-2), F32: (3e-5, 1e-5)}


@pytest.mark.parametrize("dtype", [F16, F32], ids=["f16", "f32"])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "out"])
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=[ids(c) for c in SOFTMAX_CASES])
def test_softmax_table(handle, case, inplace, dtype):
    shape, axis = case
    size_gate(prod(shape), keep=(shape[0] == 12 and axis == 3 and dtype is F16 and inplace))
    g = torch.Generator().manual_seed(5)
    x = torch.rand(shape, generator=g).to(TORCH[dtype])
    want = torch.softmax(x, axis)
    y = x if inplace else torch.empty_like(x)
    calc(infiniop.create_softmax_descriptor, [(y, dtype)], [(x, dtype)], axis, handle=handle)
    close(y, want, *SOFTMAX_TOL[dtype])


CAUSAL_CASES = [
    ((3, 3), None), ((32, 512), None), ((32, 512), (1024, 1)), ((32, 5, 5), None),
    ((32, 20, 512), None), ((32, 20, 512), (20480, 512, 1)), ((28, 15, 15), None),
    ((28, 1024, 1024), None), ((28, 1025, 1025), None), ((28, 1031, 1031), None),
]
CAUSAL_TOL = {F16: (1e-3, 1e-2), BF16: (5e-3, 5e-2), F32: (3e-5, 1e-5)}


@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=["f16", "bf16", "f32"])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "out"])
@pytest.mark.parametrize("case", CAUSAL_CASES, ids=[ids(c) for c in CAUSAL_CASES])
def test_causal_softmax_table(handle, case, inplace, dtype):
    shape, x_stride = case  # the script lays y out with x_stride too
    size_gate(prod(shape), keep=(shape[1] == 1025 and dtype is BF16 and not inplace))
    g = torch.Generator().manual_seed(6)
    t = TORCH[dtype]
    x0 = torch.rand(shape, generator=g).to(t)
    mask = torch.tril(torch.ones_like(x0), diagonal=-1).flip(dims=[-2, -1])
    want = torch.nn.functional.softmax(torch.where(mask == 1, -torch.inf, x0.float()), dim=-1,
                                       dtype=t)
    x = strided(x0, x_stride)
    y = x if inplace else strided(torch.zeros(shape, dtype=t), x_stride)
    calc(infiniop.create_causal_softmax_descriptor, [(y, dtype)], [(x, dtype)], handle=handle)
    close(y, want, *CAUSAL_TOL[dtype])


LOGSOFTMAX_CASES = [(3, 3), (32, 512), (32, 5, 5), (32, 20, 512), (28, 15, 15), (1, 1000),
                    (16, 50257), (4, 8, 256), (2, 16, 1024)]
LOGSOFTMAX_TOL = {F16: (1e-3, 1e-2), BF16: (5e-3, 1e-2), F32: (1e-5, 1e-5)}
MIXED = [(F16, F32), (BF16, F32), (F16, F16), (BF16, BF16), (F32, F32)]


@pytest.mark.parametrize("dtypes", MIXED, ids=["f16-f32", "bf16-f32", "f16", "bf16", "f32"])
@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "out"])
@pytest.mark.parametrize("shape", LOGSOFTMAX_CASES, ids=[ids((c,)) for c in LOGSOFTMAX_CASES])
def test_logsoftmax_table(handle, shape, inplace, dtypes):
    """The script's plain cases (x and y of one dtype) and its mixed-precision cases."""
    xdt, ydt = dtypes
    if inplace and xdt is not ydt:
        pytest.skip("the script skips in place across dtypes")
    g = torch.Generator().manual_seed(7)
    x = torch.rand(shape, generator=g).to(TORCH[xdt])
    want = torch.nn.functional.log_softmax(x.float(), dim=-1).to(TORCH[ydt])
    y = x if inplace else torch.empty(shape, dtype=TORCH[ydt])
    calc(infiniop.create_logsoftmax_descriptor, [(y, ydt)], [(x, xdt)], -1, handle=handle)
    close(y, want, *LOGSOFTMAX_TOL[ydt])


# -------------------------------------------------------------------------------------- rope

ROPE_CASES = [
    ((1, 32, 128), None, None), ((10, 32, 64), None, None), ((4, 1, 32), (64, 64, 1), None),
    ((11, 33, 128), None, (8000, 200, 1)), ((3, 32, 128), (8000, 200, 1), (7000, 128, 1)),
    ((8, 1, 32, 128), None, None), ((8, 10, 32, 64), None, None),
    ((8, 20, 32, 64), (40960, 64, 1280, 1), (40960, 64, 1280, 1)),
    ((8, 20, 4, 64), (1048576, 64, 262144, 1), (1048576, 64, 262144, 1)),
]
ROPE_TOL = {F16: (1e-3, 1e-2), BF16: (5e-3, 5e-2), F32: (1e-4, 1e-3)}


@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=["f16", "bf16", "f32"])
@pytest.mark.parametrize("algo", [0, 1], ids=["gptj", "neox"])
@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("case", ROPE_CASES, ids=[ids(c) for c in ROPE_CASES])
def test_rope_table(handle, case, inplace, algo, dtype):
    shape, x_strides, y_strides = case
    if inplace and x_strides != y_strides:
        pytest.skip("the script skips in place when the strides differ")
    g = torch.Generator().manual_seed(8)
    t = TORCH[dtype]
    x0 = torch.rand(shape, generator=g).to(t)
    seq, dh = shape[-3], shape[-1]
    pos = torch.arange(0, seq, dtype=torch.int32)
    freqs = 1.0 / (1e5 ** (torch.arange(0, dh, 2)[: dh // 2].float() / dh))
    angles = torch.outer(pos.float(), freqs)
    sin, cos = torch.sin(angles).to(t), torch.cos(angles).to(t)
    s, c = sin.float().unsqueeze(1), cos.float().unsqueeze(1)
    want = torch.empty(shape, dtype=t)
    xf = x0.float()
    if algo == 0:
        a, b = xf[..., 0::2], xf[..., 1::2]
        want[..., 0::2], want[..., 1::2] = (a * c - b * s).to(t), (a * s + b * c).to(t)
    else:
        h = dh // 2
        a, b = xf[..., :h], xf[..., h:]
        want[..., :h], want[..., h:] = (a * c - b * s).to(t), (a * s + b * c).to(t)
    x = strided(x0, x_strides)
    y = x if inplace else strided(torch.zeros(shape, dtype=t), y_strides)
    calc(infiniop.create_rope_descriptor, [(y, dtype)],
         [(x, dtype), (pos, DType.I32), (sin, dtype), (cos, dtype)], algo, handle=handle)
    close(y, want, *ROPE_TOL[dtype])
