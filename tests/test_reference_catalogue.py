"""InfiniCore's own test scripts for the catalogue operators (test/infiniop/<op>.py in its
repository), their tables run through our descriptor API with their tolerances.

Each table below is a script's ``_TEST_CASES``: shapes and strides, in-place modes with the
script's skip rules, dtypes, scalar values, tolerances, how its TestTensor fills each operand
(U[0, 1) unless the script sets scale/bias or a mode; 0-stride dims hold one logical element;
outputs created with mode="ones" or "zeros") and the torch reference it computes. As in the
harness, descriptors are dropped before calculate and float32 (and byte) buffers go as raw
``data_ptr()`` addresses, others as torch tensors (tests/test_reference_tables.py's
HarnessTensor: the gaps of strided buffers are canary bytes that must survive). Each run also
checks the promised values (tests/test_catalogue.py's reference: bits for the exact operators,
ulps for the others).

Capped: softplus's and relu's (32, 256, 112, 112) case (103M elements, ~1.6 GB with its torch
reference) runs as (2, 16, 112, 112) here; the full size is marked ``long`` (``--long``). Runs
of more than 2**19 elements carry ``large`` in their id (the Triton interpreter suite skips them:
~1 s each there).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from math import prod

import numpy as np
import pytest
import torch
from conftest import assert_exact
from test_catalogue import ENTRY, check_results, expected
from test_reference_tables import HarnessTensor

import infiniop
from infiniop import DType
from infiniop.dtype import to_torch

F16, BF16, F32, F64 = DType.F16, DType.BF16, DType.F32, DType.F64
I8, I16, I32, I64, U8, BOOL, BYTE = (DType.I8, DType.I16, DType.I32, DType.I64, DType.U8,
                                     DType.BOOL, DType.BYTE)
F = torch.nn.functional
OUT, INPLACE = "OUT_OF_PLACE", "INPLACE"
LARGE = 1 << 19

# ---------------------------------------------------------------------------------------------
# The scripts' tables
# ---------------------------------------------------------------------------------------------

# silu.py, hardswish.py: (shape, input_stride, output_stride)
S10 = [((13, 4), None, None), ((13, 4), (10, 1), (10, 1)), ((13, 4), (0, 1), None),
       ((13, 4, 4), None, None), ((13, 4, 4), (20, 4, 1), (20, 4, 1)),
       ((13, 4, 4), (4, 0, 1), None), ((16, 5632), None, None),
       ((16, 5632), (13312, 1), (13312, 1)), ((4, 4, 5632), None, None),
       ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1))]
# gelu.py, gelutanh.py: the same without the 0-stride rows
G8 = [c for c in S10 if 0 not in (c[1] or ())]
# sigmoid.py, quickgelu.py, log10.py: 0-stride rows with 0-stride outputs (skipped), one more
Q11 = [c if 0 not in (c[1] or ()) else (c[0], c[1], c[1]) for c in S10] + [
    ((4, 4, 56320), None, None)]
# tanh.py
T10 = [c if c[1] != (13312, 1) else ((16, 5632), (10240, 1), (10240, 1)) for c in S10]
# hardtanh.py (x 3 parameter pairs)
H4 = [((13, 4), None, None), ((13, 4), (10, 1), (10, 1)), ((16, 5632), None, None),
      ((4, 4, 5632), None, None)]
# reciprocal.py
R6 = [((13, 4), None, None), ((13, 4), (10, 1), (10, 1)), ((16, 5632), None, None),
      ((16, 5632), (13312, 1), (13312, 1)), ((13, 16, 2), (128, 4, 1), (64, 4, 1)),
      ((4, 4, 5632), None, None)]
# log1p.py
L4 = [((2, 3), None, None), ((1, 4, 8), (32, 8, 1), (32, 8, 1)), ((3, 2, 5, 7), None, None),
      ((1, 8, 9, 11), (792, 99, 11, 1), (792, 99, 11, 1))]
# atanh.py
A6 = [((13, 4), None, None), ((13, 4), (10, 1), (10, 1)), ((13, 4, 4), None, None),
      ((13, 4, 4), (20, 4, 1), (20, 4, 1)), ((16, 5632), None, None),
      ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1))]
# erf.py, erfc.py, erfinv.py (no in-place)
E3 = [((13, 4), None, None), ((13, 4), (10, 1), (10, 1)), ((13, 4, 4), None, None)]
# ones.py, zeros.py
O9 = [c for c in Q11 if c[0] != (4, 4, 56320) and c[1] != (4, 0, 1)]
ALL_DTYPES = (BYTE, BOOL, I8, I16, I32, I64, U8, F16, F32, F64, BF16)


def _u01(dtype):
    return lambda shape: torch.rand(shape, dtype=to_torch(dtype))


def _scaled(dtype, scale, bias):  # TestTensor(scale=, bias=): in the tensor's dtype
    return lambda shape: torch.rand(shape, dtype=to_torch(dtype)) * scale + bias


def _randint(lo, hi):
    return lambda shape: torch.randint(lo, hi, shape)


@dataclass(frozen=True)
class Unary:
    """A unary script: output first, input second (InfiniCore's argument order)."""

    cases: list
    dtypes: tuple
    tol: dict
    ref: object  # the script's torch reference on the input tensor
    inplace: tuple = (OUT, INPLACE)
    out: object = 1  # the output's TestTensor mode: 1 ("ones"), 0 ("zeros"), None (random)
    data: object = None  # data(dtype) -> the input's fill (default U[0, 1))
    prep: object = None  # prep(torch input) -> the values the script puts in it
    params: tuple = ({},)


IC3 = {F16: (1e-3, 1e-3), BF16: (1e-2, 1e-2)}
UNARY = {
    "silu": Unary(S10, (BF16, F16, F32), {**IC3, F32: (1e-7, 1e-7)}, F.silu),
    "gelu": Unary(G8, (BF16, F16, F32, F64), {**IC3, F32: (1e-5, 1e-5), F64: (1e-6, 1e-6)},
                  F.gelu),
    "gelutanh": Unary(G8, (BF16, F16, F32, F64), {BF16: (2e-2, 2e-2), F16: (2e-3, 2e-3),
                                                 F32: (1e-5, 1e-5), F64: (1e-6, 1e-6)},
                      lambda x: F.gelu(x, approximate="tanh")),
    "quickgelu": Unary(Q11, (F16, F32, BF16), {**IC3, F32: (1e-6, 1e-6)},
                       lambda x: x * torch.sigmoid(1.702 * x)),
    "sigmoid": Unary(Q11, (F16, F32, BF16), {**IC3, F32: (1e-7, 1e-7)}, torch.sigmoid),
    "tanh": Unary(T10, (F16, F32, BF16), {**IC3, F32: (1e-6, 1e-6)}, torch.tanh),
    "hardswish": Unary(S10, (BF16, F16, F32), {**IC3, F32: (1e-7, 1e-7)}, F.hardswish),
    "hardtanh": Unary(H4, (BF16, F16, F32), {**IC3, F32: (1e-7, 1e-7)},
                      lambda x, min_val, max_val: F.hardtanh(x, min_val, max_val),
                      params=({"min_val": -1.0, "max_val": 1.0}, {"min_val": 0.0, "max_val": 6.0},
                              {"min_val": -2.5, "max_val": 2.5})),
    "reciprocal": Unary(R6, (F16, F32, BF16), {**IC3, F32: (1e-5, 1e-5)}, torch.reciprocal,
                        out=None),
    "log10": Unary(Q11, (F16, F32, BF16), {**IC3, F32: (1e-6, 1e-6)}, torch.log10,
                   prep=lambda x: torch.abs(x) + 1e-6),
    "log1p": Unary(L4, (F16, F32), {F16: (1e-3, 1e-2), F32: (1e-6, 1e-6)}, torch.log1p),
    "atanh": Unary(A6, (F16, F32, BF16), {**IC3, F32: (1e-6, 1e-6)}, torch.atanh,
                   prep=lambda x: x.clamp(-0.99, 0.99)),
    "erf": Unary(E3, (F16, F32, BF16), {**IC3, F32: (1e-4, 1e-4)}, torch.erf, inplace=(OUT,),
                 out=None),
    "erfc": Unary(E3, (F16, F32, BF16), {**IC3, F32: (1e-4, 1e-4)}, torch.erfc, inplace=(OUT,),
                  out=None),
    "erfinv": Unary(E3, (F16, F32, BF16), {**IC3, F32: (1e-4, 1e-4)}, torch.erfinv,
                    inplace=(OUT,), out=None, data=lambda dt: _scaled(dt, 1.8, -0.9)),
    "ones": Unary(O9, ALL_DTYPES, {}, torch.ones_like,
                  data=lambda dt: _randint(0, 2 if dt is BOOL else 16) if not dt.is_float
                  else _u01(dt)),
    "zeros": Unary(O9, ALL_DTYPES, {}, torch.zeros_like,
                   data=lambda dt: (lambda s: torch.zeros(s)) if not dt.is_float else _u01(dt)),
}


def _unary_runs():
    for op, u in UNARY.items():
        for i, (shape, x_stride, y_stride) in enumerate(u.cases):
            for mode in u.inplace:
                if mode == INPLACE and x_stride != y_stride:
                    continue  # the script returns
                if (y_stride if mode == OUT else x_stride) and 0 in (
                        y_stride if mode == OUT else x_stride):
                    continue  # output.is_broadcast(): the script returns
                for p in u.params:
                    for dt in u.dtypes:
                        big = "-large" if prod(shape) > LARGE else ""
                        pid = "".join(f"-{v:g}" for v in p.values())
                        yield pytest.param(op, i, mode, p, dt,
                                           id=f"{op}-{i + 1}-{mode}{pid}-{dt.short_name}{big}")


# ---------------------------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """torch's references on one thread: on a busy 2-core machine its two intra-op threads
    make each reduction (allclose) 10-50x slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _seed(*key):
    torch.manual_seed(zlib.crc32(repr(key).encode()))
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def run(handle, op: str, tensors, params: dict, raw: bool):
    """create (descriptors dropped before calculate) + calculate, like the harness."""
    descs = [None if t is None else t.descriptor() for t in tensors]
    desc = getattr(infiniop, f"create_{op}_descriptor")(handle, *descs, **params)
    del descs
    ws = torch.ones(desc.workspace_size, dtype=torch.uint8) if desc.workspace_size else None
    desc.calculate(ws, *[None if t is None else (t.tensor.data_ptr() if raw else t.tensor)
                         for t in tensors])
    desc.destroy()


def promised(handle, op: str, tensors, before: list, params: dict, x=None):
    """The values our operator promises (tests/test_catalogue.py), from the logical inputs as
    they were before the call (``before``: NumPy copies in operand order, None for outputs).
    Checked bit for bit for the exact operators; for the others up to 2**14 elements (their
    float64 references are slow, and test_catalogue.py's test_values covers the values)."""
    entry = ENTRY[op]
    ops = entry.spec.operands
    if not entry.exact and max(b.size for b in before if b is not None) > 1 << 14:
        return
    sig = entry.spec.match(tuple(None if t is None else t.dtype for t in tensors))
    ins = [b for o, b in zip(ops, before) if o.reads and b is not None]
    after = [None if t is None else t.logical() for t in tensors]
    check_results(entry, sig, after, expected(entry, sig, ins, params),
                  ins[0] if x is None else x)


def close(got: torch.Tensor, want: torch.Tensor, tol) -> None:
    """The scripts' check: torch.allclose(actual, reference, atol, rtol)."""
    atol, rtol = tol
    if got.dtype == torch.bool or want.dtype == torch.bool:
        assert torch.equal(got, want)
        return
    assert torch.allclose(got, want.to(got.dtype), atol=atol, rtol=rtol), (
        (got.double() - want.double()).abs().max())


@pytest.mark.parametrize("op, case, mode, params, dtype", list(_unary_runs()))
def test_unary_script(handle, op, case, mode, params, dtype):
    u = UNARY[op]
    shape, x_stride, y_stride = u.cases[case]
    rng = _seed(op, case, mode, dtype, tuple(params.items()))
    x = HarnessTensor(shape, x_stride, dtype, rng,
                      data=u.data(dtype) if u.data else _u01(dtype))
    if u.prep is not None:  # set_tensor / clamp_: the values the script runs on
        x = HarnessTensor(shape, x_stride, dtype, rng, data=lambda s: u.prep(x.data))
    y = x if mode == INPLACE else HarnessTensor(
        shape, y_stride, dtype, rng, value=u.out) if u.out is not None else HarnessTensor(
        shape, y_stride, dtype, rng)
    with torch.no_grad():
        want = u.ref(x.tensor, **params)
    before = [None, x.logical()]
    run(handle, op, [y, x], params, raw=dtype in (F32, BYTE))
    if op in ("ones", "zeros"):  # the scripts compare after .to(float32) within 1e-3
        assert torch.allclose(y.tensor.to(torch.float32), want.to(torch.float32), 1e-3, 1e-3)
    else:
        close(y.tensor, want, u.tol[dtype])
    promised(handle, op, [y, x], before, params)
    y.assert_gaps_untouched()
    if mode == OUT:
        x.assert_gaps_untouched()


# ---------------------------------------------------------------------------------------------
# equal.py, swiglu.py (binary), addcmul.py (ternary with a value)
# ---------------------------------------------------------------------------------------------

# sub.py's rows (shape, a_stride, b_stride, c_stride); equal.py adds add.py's two broadcast rows
SW10 = [((13, 4), None, None, None), ((13, 4), (10, 1), (10, 1), (10, 1)),
        ((13, 4), (0, 1), None, None), ((13, 4, 4), None, None, None),
        ((13, 4, 4), (20, 4, 1), (20, 4, 1), (20, 4, 1)), ((13, 4, 4), (4, 0, 1), (0, 4, 1), None),
        ((16, 5632), None, None, None), ((16, 5632), (13312, 1), (13312, 1), (13312, 1)),
        ((4, 4, 5632), None, None, None),
        ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1), (45056, 5632, 1))]
EQ12 = SW10[:8] + [((13, 16, 2), (128, 4, 1), (0, 2, 1), (64, 4, 1)),
                   ((13, 16, 2), (128, 4, 1), (2, 0, 1), (64, 4, 1))] + SW10[8:]


def _binary_runs():
    for i, case in enumerate(EQ12):
        if case[3] is None or 0 not in case[3]:
            for dt in (F16, F32, BF16, I32, I64):
                yield pytest.param("equal", i, OUT, dt, id=f"equal-{i + 1}-{dt.short_name}"
                                   + ("-large" if prod(case[0]) > LARGE else ""))
    for i, (shape, a_st, b_st, c_st) in enumerate(SW10):
        for mode in (OUT, "INPLACE_A", "INPLACE_B"):
            src = {"INPLACE_A": a_st, "INPLACE_B": b_st}.get(mode)
            if mode != OUT and c_st is not None and c_st != src:
                continue
            out = c_st if mode == OUT else src
            if out is not None and 0 in out:
                continue  # c.is_broadcast()
            for dt in (F16, BF16, F32):
                yield pytest.param("swiglu", i, mode, dt, id=f"swiglu-{i + 1}-{mode}-"
                                   f"{dt.short_name}" + ("-large" if prod(shape) > LARGE else ""))


@pytest.mark.parametrize("op, case, mode, dtype", list(_binary_runs()))
def test_binary_script(handle, op, case, mode, dtype):
    shape, a_st, b_st, c_st = (EQ12 if op == "equal" else SW10)[case]
    rng = _seed(op, case, mode, dtype)
    a = HarnessTensor(shape, a_st, dtype, rng)
    b = HarnessTensor(shape, b_st, dtype, rng)
    if op == "equal":  # the output is a random BOOL TestTensor
        c = HarnessTensor(shape, c_st, BOOL, rng, data=_randint(0, 2))
        want, tol = torch.eq(a.tensor, b.tensor), (0, 0)
    else:
        c = {"INPLACE_A": a, "INPLACE_B": b}.get(mode) or HarnessTensor(shape, c_st, dtype, rng)
        want = a.tensor * b.tensor / (1 + torch.exp(-b.tensor.float()).to(dtype=b.tensor.dtype))
        tol = {F16: (1e-3, 1e-3), BF16: (5e-3, 1e-2), F32: (1e-5, 1e-5)}[dtype]
    before = [None, a.logical(), b.logical()]
    run(handle, op, [c, a, b], {}, raw=dtype is F32)
    close(c.tensor, want, tol)
    promised(handle, op, [c, a, b], before, {})
    c.assert_gaps_untouched()


AC5 = [((3, 3), None, None, None), ((32, 512), None, None, None),
       ((32, 512), (1024, 1), (1024, 1), (1024, 1)), ((16, 32, 64), None, None, None),
       ((8, 1, 1024), None, None, None)]


@pytest.mark.parametrize("case, mode, value, dtype", [
    pytest.param(i, mode, v, dt, id=f"addcmul-{i + 1}-{mode}-{v:g}-{dt.short_name}")
    for i in range(len(AC5)) for mode in (OUT, "INPLACE_INPUT") for v in (1.0, 0.5, -2.0)
    for dt in (F16, BF16, F32)])
def test_addcmul_script(handle, case, mode, value, dtype):
    shape, x_st, t1_st, t2_st = AC5[case]
    rng = _seed("addcmul", case, mode, value, dtype)
    x = HarnessTensor(shape, x_st, dtype, rng)
    t1 = HarnessTensor(shape, t1_st, dtype, rng)
    t2 = HarnessTensor(shape, t2_st, dtype, rng)
    want = torch.addcmul(x.tensor, t1.tensor, t2.tensor, value=value)
    out = x if mode != OUT else HarnessTensor(shape, None, dtype, rng)
    before = [None, x.logical(), t1.logical(), t2.logical()]
    run(handle, "addcmul", [out, x, t1, t2], {"value": value}, raw=dtype is F32)
    close(out.tensor, want, {F16: (1e-3, 1e-2), BF16: (5e-3, 5e-2), F32: (1e-5, 1e-5)}[dtype])
    promised(handle, "addcmul", [out, x, t1, t2], before, {"value": value})
    out.assert_gaps_untouched()


# ---------------------------------------------------------------------------------------------
# softplus.py, relu.py (x = rand * 2 - 1, contiguous); silu_and_mul.py
# ---------------------------------------------------------------------------------------------

SP6 = [(1, 3), (3, 3), (32, 20, 512), (33, 333, 333), (2, 16, 112, 112), (3, 3, 13, 9, 17)]
FULL_SIZE = (32, 256, 112, 112)  # the script's own row, capped above


def _sp_runs():
    for op in ("softplus", "relu"):
        for shape in SP6 + [FULL_SIZE]:
            for mode in (OUT, INPLACE):
                for dt in (F16, F32, BF16):
                    big = "-large" if prod(shape) > LARGE else ""
                    marks = [pytest.mark.long] if shape == FULL_SIZE else []
                    yield pytest.param(op, shape, mode, dt, marks=marks,
                                       id=f"{op}-{'x'.join(map(str, shape))}-{mode}-"
                                          f"{dt.short_name}{big}")


@pytest.mark.parametrize("op, shape, mode, dtype", list(_sp_runs()))
def test_softplus_relu_script(handle, request, op, shape, mode, dtype):
    if shape == FULL_SIZE and not request.config.getoption("--long"):
        pytest.skip("the 103M-element row runs with --long (capped to (2, 16, 112, 112))")
    rng = _seed(op, shape, mode, dtype)
    x = HarnessTensor(shape, None, dtype, rng, data=lambda s: torch.rand(s) * 2 - 1)
    y = x if mode == INPLACE else HarnessTensor(shape, None, dtype, rng)
    if op == "softplus":
        want = F.softplus(x.tensor, beta=1.0, threshold=20.0).to(x.tensor.dtype)
        params = {"beta": 1.0, "threshold": 20.0}
        tol = {F16: (1e-3, 1e-3), F32: (1e-7, 1e-7), BF16: (1e-3, 1e-3)}[dtype]
    else:
        want, params = F.relu(x.tensor).to(x.tensor.dtype), {}
        tol = {F16: (1e-3, 1e-3), F32: (1e-7, 1e-7), BF16: (1e-3, 1e-3)}[dtype]
    before = x.logical()
    run(handle, op, [y, x], params, raw=dtype is F32)
    close(y.tensor, want, tol)
    if op == "relu":
        assert_exact(y.logical(), np.maximum(before, before.dtype.type(0)))
    else:
        promised(handle, op, [y, x], [None, before], params)


SM6 = [((2, 8), (2, 4)), ((1024, 1024), (1024, 512)), ((16, 8192), (16, 4096)),
       ((2, 128, 2048), (2, 128, 1024)), ((8, 1, 4096), (8, 1, 2048)),
       ((2, 4, 16, 256), (2, 4, 16, 128))]


@pytest.mark.parametrize("case, dtype", [
    pytest.param(i, dt, id=f"silu_and_mul-{i + 1}-{dt.short_name}"
                 + ("-large" if prod(SM6[i][0]) > LARGE else ""))
    for i in range(len(SM6)) for dt in (F16, BF16, F32)])
def test_silu_and_mul_script(handle, case, dtype):
    in_shape, out_shape = SM6[case]
    rng = _seed("silu_and_mul", case, dtype)
    a = HarnessTensor(in_shape, None, dtype, rng)
    c = HarnessTensor(out_shape, None, dtype, rng, value=0)
    d = in_shape[-1] // 2
    want = F.silu(a.tensor[..., :d]) * a.tensor[..., d:]
    before = [None, a.logical()]
    run(handle, "silu_and_mul", [c, a], {}, raw=dtype is F32)
    close(c.tensor, want, {F16: (1e-3, 1e-3), F32: (1e-6, 1e-6), BF16: (1e-2, 1e-2)}[dtype])
    promised(handle, "silu_and_mul", [c, a], before, {})


# ---------------------------------------------------------------------------------------------
# BLAS level 1: axpy.py, scal.py, rot.py, rotm.py, swap.py, blas_copy.py
# ---------------------------------------------------------------------------------------------

AX5 = [(3, None, None), (8, (2,), (3,)), (32, None, (2,)), (257, (3,), None),
       (65535, None, None)]
RO6 = [((13,), None, None), ((13,), (10,), (10,)), ((5632,), None, None),
       ((5632,), (5,), (5,)), ((16,), (4,), (4,)), ((5632,), (32,), (32,))]
SC6 = [(((13,), None)), ((13,), (10,)), ((5632,), None), ((5632,), (5,)), ((16,), (4,)),
       ((5632,), (32,))]
RM4 = [((13,), None, None, (-1.0, 1.2, -0.3, 0.4, 0.8)),
       ((13,), (10,), (10,), (0.0, 0.0, -0.25, 0.5, 0.0)),
       ((5632,), None, None, (1.0, 1.1, 0.0, 0.0, 0.9)),
       ((5632,), (5,), (5,), (-2.0, 0.0, 0.0, 0.0, 0.0))]
BLAS_TOL = {F16: (1e-3, 1e-3), F32: (1e-5, 1e-5), BF16: (1e-2, 1e-2)}


@pytest.mark.parametrize("case, dtype", [
    pytest.param(i, dt, id=f"axpy-{i + 1}-{dt.short_name}") for i in range(len(AX5))
    for dt in (F16, F32, BF16)])
def test_axpy_script(handle, case, dtype):
    n, x_st, y_st = AX5[case]
    rng = _seed("axpy", case, dtype)
    alpha = HarnessTensor((), None, dtype, rng)
    x = HarnessTensor((n,), x_st, dtype, rng)
    y = HarnessTensor((n,), y_st, dtype, rng)
    want = alpha.tensor * x.tensor + y.tensor
    before = [alpha.logical(), x.logical(), y.logical()]
    run(handle, "axpy", [alpha, x, y], {}, raw=dtype is F32)
    close(y.tensor, want, BLAS_TOL[dtype])
    promised(handle, "axpy", [alpha, x, y], before, {})
    y.assert_gaps_untouched()


@pytest.mark.parametrize("case, dtype", [
    pytest.param(i, dt, id=f"scal-{i + 1}-{dt.short_name}") for i in range(len(SC6))
    for dt in (F16, F32, BF16)])
def test_scal_script(handle, case, dtype):
    shape, x_st = SC6[case]
    rng = _seed("scal", case, dtype)
    alpha = HarnessTensor((1,), (1,), dtype, rng, data=lambda s: torch.tensor([2.5]))
    x = HarnessTensor(shape, x_st, dtype, rng)
    want = x.tensor * alpha.tensor
    before = [alpha.logical(), x.logical()]
    run(handle, "scal", [alpha, x], {}, raw=dtype is F32)
    close(x.tensor, want, {F16: (1e-3, 1e-3), F32: (1e-7, 1e-7), BF16: (5e-3, 1e-2)}[dtype])
    promised(handle, "scal", [alpha, x], before, {})
    x.assert_gaps_untouched()


@pytest.mark.parametrize("op, case, dtype", [
    pytest.param(op, i, dt, id=f"{op}-{i + 1}-{dt.short_name}") for op in ("rot", "swap")
    for i in range(len(RO6)) for dt in ((F16, F32, BF16) if op == "rot" else (F32,))])
def test_rot_swap_script(handle, op, case, dtype):
    shape, x_st, y_st = RO6[case]
    rng = _seed(op, case, dtype)
    x = HarnessTensor(shape, x_st, dtype, rng)
    y = HarnessTensor(shape, y_st, dtype, rng)
    x0, y0 = x.tensor.clone(), y.tensor.clone()
    if op == "rot":
        c, s = HarnessTensor((), None, dtype, rng), HarnessTensor((), None, dtype, rng)
        tensors = [x, y, c, s]
        wx, wy = c.tensor * x0 + s.tensor * y0, c.tensor * y0 - s.tensor * x0
        tol = BLAS_TOL[dtype]
    else:
        tensors, (wx, wy), tol = [x, y], (y0, x0), (1e-7, 1e-7)
    before = [t.logical() for t in tensors]
    run(handle, op, tensors, {}, raw=dtype is F32)
    close(x.tensor, wx, tol)
    close(y.tensor, wy, tol)
    promised(handle, op, tensors, before, {})
    x.assert_gaps_untouched()
    y.assert_gaps_untouched()


def _torch_rotm(x, y, param):  # rotm.py's reference
    sflag, sh11, sh21, sh12, sh22 = param
    if sflag == -2.0:
        return x, y
    if sflag < 0.0:
        return x * sh11 + y * sh12, x * sh21 + y * sh22
    if sflag == 0.0:
        return x + y * sh12, x * sh21 + y
    return x * sh11 + y, -x + sh22 * y


@pytest.mark.parametrize("case", range(len(RM4)), ids=lambda i: f"rotm-{i + 1}-float32")
def test_rotm_script(handle, case):
    shape, x_st, y_st, param = RM4[case]
    rng = _seed("rotm", case)
    x = HarnessTensor(shape, x_st, F32, rng)
    y = HarnessTensor(shape, y_st, F32, rng)
    p = HarnessTensor((5,), (1,), F32, rng, data=lambda s: torch.tensor(param))
    wx, wy = _torch_rotm(x.tensor.clone(), y.tensor.clone(), param)
    before = [x.logical(), y.logical(), p.logical()]
    run(handle, "rotm", [x, y, p], {}, raw=True)
    close(x.tensor, wx, (1e-5, 1e-5))
    close(y.tensor, wy, (1e-5, 1e-5))
    promised(handle, "rotm", [x, y, p], before, {})


@pytest.mark.parametrize("case", range(len(AX5)), ids=lambda i: f"blas_copy-{i + 1}-float32")
def test_blas_copy_script(handle, case):
    n, x_st, y_st = AX5[case]
    rng = _seed("blas_copy", case)
    x = HarnessTensor((n,), x_st, F32, rng)
    y = HarnessTensor((n,), y_st, F32, rng)
    run(handle, "blas_copy", [x, y], {}, raw=True)
    assert torch.equal(y.tensor, x.tensor)
    y.assert_gaps_untouched()


# ---------------------------------------------------------------------------------------------
# fused_gated_delta_net_gating.py, per_tensor_dequant_int8.py
# ---------------------------------------------------------------------------------------------

GA3 = [((2, 1, 8), None, None, None), ((2, 3, 17), None, None, None),
       ((2, 3, 17), (80, 20, 1), (80, 20, 1), (2,))]


@pytest.mark.parametrize("case, dtype", [
    pytest.param(i, dt, id=f"gating-{i + 1}-{dt.short_name}") for i in range(len(GA3))
    for dt in (F16, F32, BF16)])
def test_gating_script(handle, case, dtype):
    shape, t_st, out_st, h_st = GA3[case]
    rng = _seed("gating", case, dtype)
    beta, threshold = 1.0, 20.0
    h = shape[-1]
    a = HarnessTensor(shape, t_st, dtype, rng)
    b = HarnessTensor(shape, t_st, dtype, rng)
    A_log = HarnessTensor((h,), h_st, dtype, rng)
    dt_bias = HarnessTensor((h,), h_st, dtype, rng)
    g = HarnessTensor(shape, out_st, F32, rng, value=1)
    beta_out = HarnessTensor(shape, out_st, F32, rng, value=1)
    xs = a.tensor.float() + dt_bias.tensor.float().view(1, 1, -1)
    sp = torch.where(beta * xs <= threshold, F.softplus(xs, beta=beta, threshold=threshold), xs)
    want_g = -A_log.tensor.float().exp().view(1, 1, -1) * sp
    want_b = b.tensor.float().sigmoid()
    tensors = [g, beta_out, A_log, a, b, dt_bias]
    before = [None, None] + [t.logical() for t in tensors[2:]]
    params = {"beta": beta, "threshold": threshold}
    run(handle, "fused_gated_delta_net_gating", tensors, params, raw=dtype is F32)
    tol = {F16: (2e-3, 2e-3), F32: (1e-6, 1e-6), BF16: (2e-2, 2e-2)}[dtype]
    close(g.tensor, want_g, tol)
    close(beta_out.tensor, want_b, tol)
    promised(handle, "fused_gated_delta_net_gating", tensors, before, params)
    g.assert_gaps_untouched()
    beta_out.assert_gaps_untouched()


DQ8 = [((16, 5632), None, None), ((13, 4), (10, 1), None), ((13, 4), (10, 1), (10, 1)),
       ((16, 5632), (13312, 1), (13312, 1)), ((4, 4, 5632), None, None),
       ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1)),
       ((1, 4, 132, 128), (67584, 16896, 128, 1), (67584, 16896, 128, 1)),
       ((1, 4, 132, 128), None, None)]


@pytest.mark.parametrize("case, dtype", [
    pytest.param(i, dt, id=f"dequant-{i + 1}-{dt.short_name}") for i in range(len(DQ8))
    for dt in (BF16, F16, F32)])
def test_dequant_script(handle, case, dtype):
    shape, x_st, q_st = DQ8[case]  # symmetric: x_zero is None
    rng = _seed("dequant", case, dtype)
    x = HarnessTensor(shape, x_st, dtype, rng)
    q = HarnessTensor(shape, q_st, I8, rng, data=_randint(-127, 127))
    scale = HarnessTensor((1,), None, F32, rng)
    want = q.tensor.to(x.tensor.dtype) * scale.tensor
    tensors = [x, q, scale, None]
    before = [None, q.logical(), scale.logical(), None]
    run(handle, "per_tensor_dequant_int8", tensors, {}, raw=dtype is F32)
    tol = {F16: (1e-3, 5e-2), BF16: (1e-3, 5e-2), F32: (3e-5, 5e-3)}[dtype]
    assert torch.allclose(x.tensor.float(), want.float(), atol=tol[0], rtol=tol[1])
    promised(handle, "per_tensor_dequant_int8", tensors, before, {})
    x.assert_gaps_untouched()
