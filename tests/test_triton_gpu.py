"""The Triton backend on a real CUDA GPU: device memory, raw device addresses, streams, and the
same bits as the CPU backend.

Skipped without a CUDA GPU (``torch.cuda.is_available()``) and under the interpreter. The rest
of the GPU coverage is the whole CPU suite run on the device:
``python -m pytest tests/test_triton_suite.py tests/test_triton_gpu.py --gpu``.
"""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("triton/torch not installed", allow_module_level=True)
import torch  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (and no TRITON_INTERPRET)", allow_module_level=True)
if os.environ.get("INFINIOP_TRITON_STAGED") == "1":
    pytest.skip("staged mode: the GPU handle takes host memory here", allow_module_level=True)

from conftest import assert_exact, raises, to_numpy  # noqa: E402

import infiniop  # noqa: E402
from infiniop import Status, TensorDescriptor  # noqa: E402
from infiniop.rearrange import create_rearrange_descriptor  # noqa: E402

CPU = infiniop.create_handle("cpu")
GPU = infiniop.create_handle("nvidia")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "f64": torch.float64, "i32": torch.int32}


def _values(shape, dt, seed):
    """Random values with the awkward ones mixed in: NaN, +-inf, -0.0, subnormals, extremes."""
    g = torch.Generator().manual_seed(seed)
    if not dt.is_floating_point:
        return torch.randint(-1000, 1000, shape, generator=g, dtype=dt)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dt)
    flat = x.view(-1)
    info = torch.finfo(dt)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0,
                             info.tiny / 4, -info.tiny / 2, info.max, -info.max], dtype=dt)
    idx = torch.randint(0, flat.numel(), (min(flat.numel(), 64),), generator=g)
    flat[idx] = specials[torch.arange(idx.numel()) % specials.numel()]
    return x


def _td(t):
    return TensorDescriptor.from_array(t)


def _run(handle, op, out, *ins, extra_outs=()):
    outs = (out, *extra_outs)
    d = getattr(infiniop, f"create_{op}_descriptor")(handle, *[_td(t) for t in (*outs, *ins)])
    d.calculate(None, *outs, *ins)


LAYOUTS = ["contiguous", "broadcast", "transposed", "inplace"]
BINARY = ["sub", "add", "mul", "div", "minimum", "maximum"]


def _operands(layout, dt, shape=(67, 300)):
    a, b = _values(shape, dt, 1), _values(shape, dt, 2)
    if layout == "broadcast":
        b = _values(shape[-1:], dt, 2).expand(shape)
    elif layout == "transposed":
        a = _values(shape[::-1], dt, 1).t()
    return a, b


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", BINARY)
def test_binary_on_cuda_tensors_has_the_cpu_bits(op, dtype, layout):
    if op == "div" and dtype == "i32":
        pytest.skip("div takes floats only")
    dt = DTYPES[dtype]
    a, b = _operands(layout, dt)
    want = torch.empty(a.shape, dtype=dt)
    _run(CPU, op, want, a, b)
    ga, gb = a.cuda(), b.cuda()
    if layout == "transposed":
        ga = a.t().contiguous().cuda().t()  # keep the device copy transposed too
    if layout == "inplace":
        _run(GPU, op, ga, ga, gb)
        got = ga
    else:
        got = torch.empty(a.shape, dtype=dt, device="cuda")
        _run(GPU, op, got, ga, gb)
    assert_exact(to_numpy(got.cpu()), to_numpy(want))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_clip_and_where_have_the_cpu_bits(dtype):
    dt = DTYPES[dtype]
    x = _values((129, 257), dt, 3)
    lo, hi = _values((257,), dt, 4).expand(129, 257), _values((129, 1), dt, 5).expand(129, 257)
    want = torch.empty_like(x)
    _run(CPU, "clip", want, x, lo, hi)
    got = torch.empty_like(x, device="cuda")
    _run(GPU, "clip", got, x.cuda(), lo.cuda(), hi.cuda())
    assert_exact(to_numpy(got.cpu()), to_numpy(want))
    cond = _values((129, 257), torch.float32, 6) > 0
    _run(CPU, "where", want, cond, x, lo)
    _run(GPU, "where", got, cond.cuda(), x.cuda(), lo.cuda())
    assert_exact(to_numpy(got.cpu()), to_numpy(want))


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "f64"])
@pytest.mark.parametrize("case", ["transpose", "nchw_to_nhwc", "strided_slice"])
def test_rearrange_on_cuda_tensors_has_the_cpu_bits(case, dtype):
    dt = DTYPES[dtype]
    if case == "transpose":
        src = _values((300, 517), dt, 7)
        make_dst = lambda dev: torch.empty((517, 300), dtype=dt, device=dev).t()  # noqa: E731
    elif case == "nchw_to_nhwc":
        src = _values((2, 19, 13, 11), dt, 8)
        make_dst = lambda dev: torch.empty((2, 13, 11, 19), dtype=dt,  # noqa: E731
                                           device=dev).permute(0, 3, 1, 2)
    else:
        src = _values((64, 90), dt, 9)[::3, 1::2]
        make_dst = lambda dev: torch.empty((22, 90), dtype=dt, device=dev)[:, ::2]  # noqa: E731
    want = make_dst("cpu")
    create_rearrange_descriptor(CPU, _td(want), _td(src)).calculate(want, src)
    gsrc = src.cuda() if case != "strided_slice" else _values((64, 90), dt, 9).cuda()[::3, 1::2]
    got = make_dst("cuda")
    create_rearrange_descriptor(GPU, _td(got), _td(gsrc)).calculate(got, gsrc)
    assert_exact(to_numpy(got.cpu()), to_numpy(want))


def test_raw_cuda_addresses():
    """What a C caller passes: data_ptr() integers, descriptors made from shapes and strides."""
    a, b = _values((1000, 33), torch.float32, 10), _values((1000, 33), torch.float32, 11)
    want = a - b
    ga, gb = a.cuda(), b.cuda()
    full = torch.full((1000, 66), 7.0, device="cuda")
    out = full[:, ::2]  # a strided output: the gaps must stay 7
    desc = lambda t: infiniop.create_tensor_descriptor(t.shape, t.stride(), "float32")  # noqa: E731
    d = infiniop.create_sub_descriptor(GPU, desc(out), desc(ga), desc(gb))
    d.calculate(None, out.data_ptr(), ga.data_ptr(), gb.data_ptr())
    assert_exact(to_numpy(out.cpu().contiguous()), to_numpy(want))
    assert bool((full.cpu()[:, 1::2] == 7.0).all())


def test_host_buffers_are_refused_on_the_gpu():
    a = np.ones(16, np.float32)
    d = infiniop.create_sub_descriptor(GPU, _td(a), _td(a), _td(a))
    raises(Status.BAD_PARAM, d.calculate, None, a, a, a, match="lives on cpu")
    g = torch.ones(16, device="cuda")
    raises(Status.BAD_PARAM, d.calculate, None, g, g, a, match="lives on cpu")


@pytest.mark.parametrize("how", ["torch_stream", "raw_handle"])
def test_work_on_a_stream_is_ordered_with_torch_work_on_it(how):
    """torch fills ``a`` on stream s after a long sleep; our sub on s must see the filled ``a``,
    and torch work queued on s after it must see our output. On the default stream (the bug
    this catches) the sub would read ``a`` before the fill."""
    n = 1 << 22
    a = torch.zeros(n, device="cuda")
    b = torch.ones(n, device="cuda")
    out = torch.empty(n, device="cuda")
    after = torch.empty(n, device="cuda")
    d = infiniop.create_sub_descriptor(GPU, _td(out), _td(a), _td(b))
    d.calculate(None, out, a, b)  # compile and warm up outside the timed part
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time
        a.fill_(5.0)
    d.calculate(None, out, a, b, stream=s if how == "torch_stream" else s.cuda_stream)
    with torch.cuda.stream(s):
        torch.mul(out, 2.0, out=after)
    s.synchronize()
    assert bool((out == 4.0).all()), "our kernel did not run after torch's fill on the stream"
    assert bool((after == 8.0).all())


def test_functional_front_end_on_cuda_tensors():
    x = _values((5, 7, 9), torch.float16, 12)
    y = _values((9,), torch.float16, 13)
    got = infiniop.sub(x.cuda(), y.cuda())
    assert isinstance(got, torch.Tensor) and got.is_cuda
    want = infiniop.sub(x, y)
    assert_exact(to_numpy(got.cpu()), to_numpy(want))


def test_bf16_arrays_round_trip():
    """bf16 through ml_dtypes on the host and torch on the device give the same bits."""
    x = _values((333,), torch.bfloat16, 14)
    y = _values((333,), torch.bfloat16, 15)
    want = infiniop.mul(to_numpy(x), to_numpy(y))
    assert want.dtype == ml_dtypes.bfloat16
    got = infiniop.mul(x.cuda(), y.cuda())
    assert_exact(to_numpy(got.cpu()), want)


MATH = ["silu", "gelu", "gelutanh", "quickgelu", "sigmoid", "tanh", "hardswish", "softplus",
        "reciprocal", "log10", "log1p", "atanh", "erf", "erfc", "erfinv"]


def _every_input(dtype):
    """fp16/bf16: all 65536 bit patterns; f32: 2^20 random bit patterns (every exponent, NaNs,
    infinities, subnormals) and f64: 2^16, each plus 16K evenly spaced values in [-12, 12]
    (where the functions change regime)."""
    dt = DTYPES[dtype]
    if dt.itemsize == 2:
        return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dt)
    g = torch.Generator().manual_seed(16)
    idt = torch.int32 if dt == torch.float32 else torch.int64
    n = 1 << 20 if dt == torch.float32 else 1 << 16
    bits = torch.randint(torch.iinfo(idt).min, torch.iinfo(idt).max, (n,), generator=g, dtype=idt)
    dense = torch.linspace(-12, 12, 1 << 14, dtype=torch.float64).to(dt)
    return torch.cat([bits.view(dt), dense])


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("op", MATH)
def test_math_has_the_cpu_bits_on_every_input(op, dtype):
    """The promise of the math library: the same bits on the CPU and the GPU, for every fp16/bf16
    input and a million float32 ones (the kernels are basic float operations, no libdevice)."""
    x = _every_input(dtype)
    want = torch.empty_like(x)
    _run(CPU, op, want, x)
    got = torch.empty_like(x, device="cuda")
    _run(GPU, op, got, x.cuda())
    assert_exact(to_numpy(got.cpu()), to_numpy(want))


def _swiglu_operands(dtype):
    """b: every input of ``_every_input``; a: 3 (a b / 2 and a b are ties of the result type for
    half of all b: the exact split decides them), -5, and random values in turn."""
    b = _every_input(dtype)
    a = _values(b.shape, torch.float32, 19).to(b.dtype)
    a[0::3], a[1::3] = 3, -5
    return a, b


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("op", ["swiglu", "silu_and_mul"])
def test_swiglu_has_the_cpu_bits_on_every_input(op, dtype):
    """swiglu's exact head + rest rounded to odd (bit operations) on both backends; silu_and_mul
    is the same expression over two views of one input."""
    a, b = _swiglu_operands(dtype)
    ins = (a, b) if op == "swiglu" else (torch.cat([b, a]),)  # input [2d]: gate, up
    outs = []
    for h, dev in ((CPU, "cpu"), (GPU, "cuda")):
        y = torch.empty_like(b, device=dev)
        _run(h, op, y, *[t.to(dev) for t in ins])
        outs.append(y.cpu())
    assert_exact(to_numpy(outs[1]), to_numpy(outs[0]))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_gating_has_the_cpu_bits(dtype):
    """fused_gated_delta_net_gating: exp, softplus and sigmoid together, two float32 outputs."""
    x = _every_input(dtype).reshape(-1, 16)
    a_log = _values((16,), torch.float32, 20).clamp(-8, 8).nan_to_num(0.5).to(x.dtype)
    bias = _values((16,), torch.float32, 21).clamp(-8, 8).nan_to_num(-0.5).to(x.dtype)
    outs = []
    for h, dev in ((CPU, "cpu"), (GPU, "cuda")):
        g, beta = (torch.empty(x.shape, dtype=torch.float32, device=dev) for _ in range(2))
        ins = [t.to(dev) for t in (a_log, x, x.flip(0), bias)]
        _run(h, "fused_gated_delta_net_gating", g, *ins, extra_outs=(beta,))
        outs.append((g.cpu(), beta.cpu()))
    for got, want in zip(outs[1], outs[0]):
        assert_exact(to_numpy(got), to_numpy(want))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("op", ["rms_norm", "softmax", "causal_softmax", "logsoftmax"])
def test_rows_have_the_cpu_bits(op, dtype):
    """Row operators with the same expression and reduction order on both backends: same bits
    (row lengths that are not a power of two, and one long row)."""
    dt = DTYPES[dtype]
    for shape in [(3, 5, 77), (2, 4096 + 3), (1, 50257)]:
        x = _values(shape, torch.float32, 17).clamp(-60, 60).nan_to_num(0.0).to(dt)
        extra = ()
        if op == "rms_norm":
            extra = (_values(shape[-1:], torch.float32, 18).clamp(-4, 4).nan_to_num(1.0).to(dt),)
        outs = []
        for h, dev in ((CPU, "cpu"), (GPU, "cuda")):
            ins = [t.to(dev) for t in (x, *extra)]
            y = torch.empty(shape, dtype=dt, device=dev)
            _run(h, op, y, *ins)
            outs.append(y.cpu())
        assert_exact(to_numpy(outs[1]), to_numpy(outs[0]))


def test_row_and_rope_calls_take_the_device_fast_path():
    """CUDA tensors laid out as described skip the general checks (30-110 us of host time per
    call on an H200 machine, against kernels of 1.5-43 us) and give the CPU's bits."""
    g = torch.Generator().manual_seed(22)
    x, w = torch.randn(6, 40, generator=g), torch.randn(40, generator=g)
    pos = torch.tensor([5, 0, 3], dtype=torch.int32)
    ang = torch.rand(8, 4, generator=g)
    q = torch.randn(3, 2, 8, generator=g)
    cases = [("rms_norm", [torch.empty(6, 40), x, w], {"epsilon": 1e-6}),
             ("layer_norm", [torch.empty(6, 40), torch.empty(6, 40), torch.empty(6), x, w, None],
              {"eps": 1e-5}),
             ("rope", [torch.empty(3, 2, 8), q, pos, ang.sin(), ang.cos()], {"algo": 1})]
    for op, bufs, kw in cases:
        outs = []
        for h, dev in ((CPU, "cpu"), (GPU, "cuda")):
            b = [None if t is None else t.to(dev) for t in bufs]
            create = getattr(infiniop, f"create_{op}_descriptor")
            d = create(h, *[None if t is None else _td(t) for t in b], **kw)
            if dev == "cuda":
                assert d._fast_device(b, None)
                torch.cuda.synchronize()
            else:
                d.calculate(None, *b)
            outs.append([t.cpu() for t in b if t is not None])
        for got, want in zip(*outs[::-1]):
            assert_exact(to_numpy(got), to_numpy(want))
