"""The reference library's (InfiniCore) test tables for sub, mul, add and clip, through the
descriptor API, built the way its harness builds them (test/infiniop/{sub,mul,add,clip}.py).

Harness conventions reproduced here:
- a strided operand lives in a buffer of span ``sum((n - 1) * stride) + 1`` elements viewed with
  ``as_strided``; a dim with stride 0 holds one logical element (extent 1 in the data);
- the descriptor gets the full shape with the requested strides (0 strides included);
- in-place modes and their skip rules (sub/mul: INPLACE_A runs when ``c_stride is None or
  c_stride == a_stride``; add: only when ``a_stride == c_stride``; any case whose output would
  be broadcast is skipped);
- tensor descriptors are dropped before ``calculate``;
- data: U[0, 1) for floats, ``randint(-2e9, 2e9)`` for integers (so I32 add wraps).
Results are compared exactly with the promised values (stronger than the harness tolerances)
and, like the harness, with torch within its tolerances. Buffers are passed as torch tensors or
as raw ``data_ptr()`` addresses (what the C harness passes); the gaps of strided outputs must
keep their canary bytes.
"""

from __future__ import annotations

import zlib
from math import prod

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import CANARY, assert_exact, to_numpy
from numpy.lib.stride_tricks import as_strided

import infiniop
from infiniop import DType, TensorDescriptor
from infiniop.dtype import to_torch

F16, F32, BF16, I32, I64 = DType.F16, DType.F32, DType.BF16, DType.I32, DType.I64
TORCH = {F16: torch.float16, F32: torch.float32, BF16: torch.bfloat16, I32: torch.int32,
         I64: torch.int64}

# test/infiniop/sub.py (mul.py is identical): (shape, a_stride, b_stride, c_stride)
SUB_CASES = [
    ((13, 4), None, None, None),
    ((13, 4), (10, 1), (10, 1), (10, 1)),
    ((13, 4), (0, 1), None, None),
    ((13, 4, 4), None, None, None),
    ((13, 4, 4), (20, 4, 1), (20, 4, 1), (20, 4, 1)),
    ((13, 4, 4), (4, 0, 1), (0, 4, 1), None),
    ((16, 5632), None, None, None),
    ((16, 5632), (13312, 1), (13312, 1), (13312, 1)),
    ((4, 4, 5632), None, None, None),
    ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1), (45056, 5632, 1)),
]
# test/infiniop/add.py: the same rows plus two after row 8 (non-contiguous output + broadcast)
ADD_CASES = SUB_CASES[:8] + [
    ((13, 16, 2), (128, 4, 1), (0, 2, 1), (64, 4, 1)),
    ((13, 16, 2), (128, 4, 1), (2, 0, 1), (64, 4, 1)),
] + SUB_CASES[8:]
# test/infiniop/clip.py: (shape, x_stride, y_stride, min, max)
CLIP_CASES = [
    ((10,), None, None, -1.0, 1.0), ((5, 10), None, None, -1.0, 1.0),
    ((2, 3, 4), None, None, -1.0, 1.0), ((10,), None, None, 0.0, 2.0),
    ((5, 10), None, None, 0.0, 2.0), ((2, 3, 4), None, None, 0.0, 2.0),
    ((10,), None, None, -2.0, 0.0), ((5, 10), None, None, -2.0, 0.0),
    ((2, 3, 4), None, None, -2.0, 0.0), ((7, 13), None, None, -1.0, 1.0),
    ((3, 5, 7), None, None, -1.0, 1.0), ((1, 1), None, None, -1.0, 1.0),
    ((100, 100), None, None, -1.0, 1.0), ((16, 16, 16), None, None, -1.0, 1.0),
    ((10,), None, None, -1000.0, 1000.0), ((10,), None, None, -0.001, 0.001),
    ((10,), None, None, 0.0, 0.0),
]
TOLERANCE = {F16: (1e-3, 1e-3), F32: (1e-7, 1e-7), BF16: (1e-3, 1e-3), I32: (0, 0), I64: (0, 0)}
CLIP_TOLERANCE = {**TOLERANCE, F32: (1e-7, 1e-6)}
OUT_OF_PLACE, INPLACE_A, INPLACE_B = "OUT_OF_PLACE", "INPLACE_A", "INPLACE_B"


def contiguous(shape):
    return tuple(int(prod(shape[d + 1:])) for d in range(len(shape)))


class HarnessTensor:
    """TestTensor: logical data with extent 1 on 0-stride dims, stored in a buffer of span
    sum((n - 1) * stride) + 1 whose other bytes are CANARY, seen through as_strided.
    ``value``: every element (mode="zeros"/"ones"); ``data``: a function of the logical shape
    giving a torch tensor (mode="manual", randint ranges, scale/bias); else U[0, 1) for floats,
    randint(-2e9, 2e9) for 32/64-bit integers."""

    def __init__(self, shape, strides, dtype: DType, rng, *, value=None, data=None):
        self.shape, self.dtype = tuple(shape), dtype
        self.strides = contiguous(shape) if strides is None else tuple(strides)
        logical = tuple(1 if s == 0 else n for n, s in zip(self.shape, self.strides))
        span = sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1
        raw = torch.from_numpy(np.full(span * dtype.itemsize, CANARY, np.uint8))
        tdt = to_torch(dtype)
        self.buffer = raw.view(tdt)
        if value is not None:
            data = torch.full(logical, value, dtype=tdt)
        elif data is not None:
            data = data(logical).to(tdt)
        elif dtype in (I32, I64):
            data = torch.from_numpy(rng.integers(-2 * 10**9, 2 * 10**9, logical)).to(tdt)
        else:
            data = torch.from_numpy(rng.random(logical, dtype=np.float32)).to(tdt)
        self.data = data  # torch_tensor(): the logical values
        self.buffer.as_strided(logical, self.strides).copy_(data)
        self.tensor = self.buffer.as_strided(self.shape, self.strides)  # actual_tensor()
        self.covered = np.zeros(span, bool)
        as_strided(self.covered, logical, self.strides)[...] = True

    def is_broadcast(self) -> bool:
        return 0 in self.strides

    def descriptor(self) -> TensorDescriptor:
        return TensorDescriptor(self.dtype, self.shape, self.strides)

    def logical(self) -> np.ndarray:
        """The values as a NumPy array of the full shape (copied)."""
        t = self.tensor
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
        a = t.contiguous().numpy().copy()
        return a.view(np.uint8) if self.dtype is DType.BYTE else a

    def assert_gaps_untouched(self):
        raw = self.buffer.view(torch.uint8).numpy().reshape(-1, self.dtype.itemsize)
        assert (raw[~self.covered] == CANARY).all(), "bytes between elements written"


def assert_close(got, ref, atol, rtol):
    """The harness's check: |got - ref| <= atol + rtol * |ref| (torch.allclose)."""
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert (np.abs(g - r) <= atol + rtol * np.abs(r)).all()


def _promised(op: str, dtype: DType, *xs) -> np.ndarray:
    if dtype in (I32, I64):
        fn = {"sub": np.subtract, "mul": np.multiply, "add": np.add}[op]
        return fn(*xs)
    f = [x.astype(np.float64) for x in xs]
    with np.errstate(all="ignore"):
        r = {"sub": np.subtract, "mul": np.multiply, "add": np.add}[op](*f) if op != "clip" else \
            np.minimum(np.maximum(f[0], f[1]), f[2])
    return r.astype(np.float32).astype(dtype.numpy)


def _runs(op: str, cases, dtypes):
    for dtype in dtypes:
        for i, case in enumerate(cases):
            shape, a_stride, b_stride, c_stride = case
            for mode in (OUT_OF_PLACE, INPLACE_A, INPLACE_B):
                if op == "add":
                    if mode == INPLACE_A and a_stride != c_stride:
                        continue
                    if mode == INPLACE_B and b_stride != c_stride:
                        continue
                else:
                    if mode == INPLACE_A and not (c_stride is None or c_stride == a_stride):
                        continue
                    if mode == INPLACE_B and not (c_stride is None or c_stride == b_stride):
                        continue
                out_stride = {OUT_OF_PLACE: c_stride, INPLACE_A: a_stride,
                              INPLACE_B: b_stride}[mode]
                if out_stride is not None and 0 in out_stride:  # c.is_broadcast(): skipped
                    continue
                yield pytest.param(op, case, mode, dtype,
                                   id=f"{op}-{i + 1}-{mode}-{dtype.short_name}")


BINARY_RUNS = (list(_runs("sub", SUB_CASES, (F16, F32, BF16)))
               + list(_runs("mul", SUB_CASES, (F16, F32, BF16)))
               + list(_runs("add", ADD_CASES, (F16, F32, BF16, I32, I64))))


def test_effective_run_counts_match_the_reference():
    """27 runs per dtype for sub and mul, 29 for add (infinicore-notes 5.3, 5.4)."""
    count = {}
    for p in BINARY_RUNS:
        op, _, _, dtype = p.values
        count[op, dtype] = count.get((op, dtype), 0) + 1
    assert {k: v for k, v in count.items() if k[0] != "add"} == {
        (op, dt): 27 for op in ("sub", "mul") for dt in (F16, F32, BF16)}
    assert {k: v for k, v in count.items() if k[0] == "add"} == {
        ("add", dt): 29 for dt in (F16, F32, BF16, I32, I64)}


def _buffers(*tensors, raw: bool):
    return [t.data_ptr() if raw else t for t in tensors]


@pytest.mark.parametrize("op, case, mode, dtype", BINARY_RUNS)
def test_binary_table(handle, op, case, mode, dtype):
    shape, a_stride, b_stride, c_stride = case
    rng = np.random.default_rng(zlib.crc32(repr((op, case, mode, int(dtype))).encode()))
    a = HarnessTensor(shape, a_stride, dtype, rng)
    b = HarnessTensor(shape, b_stride, dtype, rng)
    c = {INPLACE_A: a, INPLACE_B: b}.get(mode) or HarnessTensor(shape, c_stride, dtype, rng)
    want = _promised(op, dtype, a.logical(), b.logical())
    ref = getattr(torch, op)(a.tensor, b.tensor)  # the harness's torch reference
    descs = [c.descriptor(), a.descriptor(), b.descriptor()]
    desc = getattr(infiniop, f"create_{op}_descriptor")(handle, *descs)
    del descs  # the harness destroys the tensor descriptors before computing
    assert desc.workspace_size == 0
    workspace = torch.ones(desc.workspace_size, dtype=torch.uint8) if desc.workspace_size else None
    raw = dtype in (F32, I32)  # the C harness passes data_ptr(); others pass the tensors
    desc.calculate(workspace, *_buffers(c.tensor, a.tensor, b.tensor, raw=raw), stream=None)
    desc.destroy()
    assert_exact(c.logical(), want)
    atol, rtol = TOLERANCE[dtype]
    assert_close(c.logical(), to_numpy(ref), atol, rtol)
    c.assert_gaps_untouched()


def _clip_runs():
    for dtype in (F16, F32, BF16):
        for i, case in enumerate(CLIP_CASES):
            for mode in ("INPLACE_X", OUT_OF_PLACE):  # INPLACE_X skipped only if strides differ
                yield pytest.param(case, mode, dtype, id=f"clip-{i + 1}-{mode}-{dtype.short_name}")


CLIP_RUNS = list(_clip_runs())


def test_clip_run_count_matches_the_reference():
    assert len(CLIP_RUNS) == 34 * 3


@pytest.mark.parametrize("case, mode, dtype", CLIP_RUNS)
def test_clip_table(handle, case, mode, dtype):
    shape, x_stride, y_stride, lo, hi = case
    rng = np.random.default_rng(zlib.crc32(repr((case, mode, int(dtype))).encode()))
    x = HarnessTensor(shape, x_stride, dtype, rng)
    y = x if mode == "INPLACE_X" else HarnessTensor(shape, y_stride, dtype, rng)
    zeros = (0,) * len(shape)
    t_min = HarnessTensor(shape, zeros, dtype, rng, value=lo)  # one element, all-zero strides
    t_max = HarnessTensor(shape, zeros, dtype, rng, value=hi)
    assert t_min.buffer.numel() == 1 and t_max.buffer.numel() == 1
    want = _promised("clip", dtype, x.logical(), t_min.logical(), t_max.logical())
    ref = torch.clamp(x.tensor, lo, hi)
    descs = [y.descriptor(), x.descriptor(), t_min.descriptor(), t_max.descriptor()]
    with infiniop.create_clip_descriptor(handle, *descs) as desc:
        raw = dtype is F32
        desc.calculate(None, *_buffers(y.tensor, x.tensor, t_min.tensor, t_max.tensor,
                                       raw=raw))
    assert_exact(y.logical(), want)
    atol, rtol = CLIP_TOLERANCE[dtype]
    assert_close(y.logical(), to_numpy(ref), atol, rtol)
    assert t_min.logical().astype(np.float64).min() == float(torch.tensor(lo, dtype=TORCH[dtype]))
