"""The benchmark cases: each builds its operands once and offers one callable per
implementation (ours through the descriptor and the functional front end, NumPy, PyTorch),
plus a way to read each implementation's result so they can be compared before timing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod

import numpy as np

from ..dtype import as_dtype
from ..memory import empty_aligned

ELEMENTWISE_OPS = ("sub", "add", "mul", "clip")
DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("contiguous", "scalar_bcast", "numpy_bcast", "transposed", "strided_out")
REARRANGE_LAYOUTS = ("copy", "nchw_nhwc", "transpose2d", "permute6d")
SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 25, 1 << 26)
QUICK_SIZES = (1 << 12, 1 << 20, 1 << 25)


@dataclass
class Prepared:
    impls: dict[str, Callable[[], object]]
    results: dict[str, Callable[[], np.ndarray]]
    nbytes: int  # bytes read + written once by an ideal implementation
    streams_in: int = 1  # inputs read as arrays (not broadcast scalars): picks the ceiling


@dataclass
class Case:
    op: str
    dtype: str
    layout: str
    shape: tuple[int, ...]
    build: Callable[[], Prepared] = field(repr=False)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def name(self) -> str:
        return f"{self.op}/{self.dtype}/{self.layout}/{'x'.join(map(str, self.shape))}"


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def _to_torch(x: np.ndarray):
    import warnings

    torch = _torch()
    if not x.flags.writeable:  # broadcast views: torch warns about read-only memory; we only read
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if x.dtype.name == "bfloat16":
                return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(x)
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _reversed(t):
    """``t`` with its dims in reverse order (torch deprecates ``.T`` beyond 2 dims)."""
    return t.permute(*reversed(range(t.ndim)))


def _random(shape, dtype: str, rng) -> np.ndarray:
    x = empty_aligned(shape, as_dtype(dtype).numpy)
    flat = x.reshape(-1)
    chunk = 1 << 22
    for s in range(0, flat.size, chunk):  # bounded temporaries for the 64M cases
        n = min(chunk, flat.size - s)
        flat[s:s + n] = (rng.standard_normal(n, dtype=np.float32) * 4).astype(flat.dtype)
    return x


def _square(size: int) -> tuple[int, int]:
    r = 1 << (size.bit_length() - 1) // 2
    return r, size // r


def _elementwise(op: str, dtype: str, layout: str, size: int, threads: int) -> Case:
    import infiniop as ip

    spec = getattr(ip, op)
    shape = (size,) if layout in ("contiguous", "scalar_bcast") else _square(size)

    def build() -> Prepared:
        rng = np.random.default_rng(0)
        npdt = as_dtype(dtype).numpy
        a = _random(shape, dtype, rng)
        if layout == "transposed":
            a = _random(shape[::-1], dtype, rng).T
        if op == "clip":
            lo = np.broadcast_to(np.array(-1.0, npdt), shape)
            hi = np.broadcast_to(np.array(1.0, npdt), shape)
            if layout == "numpy_bcast":
                lo = np.full((shape[0], 1), -1.0, npdt)
            ins = (a, lo, hi)
        elif layout == "scalar_bcast":
            ins = (a, np.broadcast_to(np.array(0.5, npdt), shape))
        elif layout == "numpy_bcast":
            ins = (a, _random((shape[0], 1), dtype, rng))
        else:
            ins = (a, _random(shape, dtype, rng))
        if layout == "strided_out":
            outs = {k: empty_aligned((shape[0], 2 * shape[1]), npdt)[:, :shape[1]]
                    for k in ("infiniop", "infiniop.fn", "numpy", "torch")}
        else:
            outs = {k: empty_aligned(shape, npdt) for k in ("infiniop", "infiniop.fn", "numpy", "torch")}
        descs = [ip.TensorDescriptor.from_array(x) for x in (outs["infiniop"],) + ins]
        d = spec.create_descriptor(ip.create_handle("cpu"), *descs)
        impls = {
            "infiniop": lambda: d.calculate(None, outs["infiniop"], *ins),
            "infiniop.fn": lambda: spec(*ins, out=outs["infiniop.fn"]),
        }
        if op == "clip":
            lo_s, hi_s = ins[1].reshape(-1)[0], ins[2].reshape(-1)[0]
            if layout == "numpy_bcast":
                impls["numpy"] = lambda: np.clip(a, ins[1], hi_s, out=outs["numpy"])
            else:
                impls["numpy"] = lambda: np.clip(a, lo_s, hi_s, out=outs["numpy"])
        else:
            ufunc = {"sub": np.subtract, "add": np.add, "mul": np.multiply}[op]
            impls["numpy"] = lambda: ufunc(*ins, out=outs["numpy"])
        torch = _torch()
        if torch is not None:
            torch.set_num_threads(threads)
            tin = [_reversed(_to_torch(a.T)) if layout == "transposed" and x is a else _to_torch(x)
                   for x in ins]
            tout = _to_torch(outs["torch"])
            if op == "clip":
                if layout == "numpy_bcast":
                    impls["torch"] = lambda: torch.clamp(tin[0], tin[1], tin[2], out=tout)
                else:
                    impls["torch"] = lambda: torch.clamp(tin[0], float(lo_s), float(hi_s), out=tout)
            else:
                tfn = {"sub": torch.sub, "add": torch.add, "mul": torch.mul}[op]
                impls["torch"] = lambda: tfn(tin[0], tin[1], out=tout)
        results = {k: (lambda k=k: outs[k]) for k in impls}
        nbytes = sum(_unique_bytes(x) for x in ins) + outs["infiniop"].size * outs["infiniop"].itemsize
        streams = sum(_unique_bytes(x) * 8 >= _unique_bytes(a) for x in ins)
        return Prepared(impls, results, nbytes, streams)

    return Case(op, dtype, layout, shape, build)


def _unique_bytes(x: np.ndarray) -> int:
    """Bytes an operand occupies (a broadcast operand is read once)."""
    return int(prod(n for n, s in zip(x.shape, x.strides) if s != 0)) * x.itemsize


_REARRANGE_SHAPES = {
    "nchw_nhwc": ((32, 64, 56, 56), (0, 2, 3, 1)),
    "transpose2d": ((4096, 4096), (1, 0)),
    "permute6d": ((3, 4, 50, 50, 5, 7), None),  # row-major -> column-major
}


def _rearrange(dtype: str, layout: str, size: int, threads: int) -> Case:
    import infiniop as ip

    if layout == "copy":
        shape, perm = (size,), (0,)
    else:
        shape, perm = _REARRANGE_SHAPES[layout]
    npdt = as_dtype(dtype).numpy

    def build() -> Prepared:
        rng = np.random.default_rng(0)
        src = _random(shape, dtype, rng)
        if perm is None:  # column-major destination of the same logical shape
            outs = {k: empty_aligned(shape[::-1], npdt).T
                    for k in ("infiniop", "infiniop.fn", "numpy", "torch")}
            views = dict.fromkeys(outs, src)
            dst_logical = outs
        else:
            # dst holds src.transpose(perm) contiguously; we describe it in src's index order
            inv = tuple(np.argsort(perm))
            dshape = tuple(shape[p] for p in perm)
            outs = {k: empty_aligned(dshape, npdt) for k in ("infiniop", "infiniop.fn", "numpy", "torch")}
            views = {k: src.transpose(perm) for k in outs}
            dst_logical = {k: v.transpose(inv) for k, v in outs.items()}
        d = ip.create_rearrange_descriptor(ip.create_handle("cpu"),
                                           ip.TensorDescriptor.from_array(dst_logical["infiniop"]),
                                           ip.TensorDescriptor.from_array(src))
        impls = {
            "infiniop": lambda: d.calculate(dst_logical["infiniop"], src),
            "infiniop.fn": lambda: ip.copy_(dst_logical["infiniop.fn"], src),
            "numpy": lambda: np.copyto(outs["numpy"], views["numpy"]),
        }
        torch = _torch()
        if torch is not None:
            torch.set_num_threads(threads)
            tsrc = _to_torch(src)
            if perm is None:
                tdst = _reversed(_to_torch(outs["torch"].T))
                impls["torch"] = lambda: tdst.copy_(tsrc)
            else:
                tdst = _to_torch(outs["torch"])
                tview = tsrc.permute(*perm)
                impls["torch"] = lambda: tdst.copy_(tview)
        results = {k: (lambda k=k: np.asarray(outs[k])) for k in impls}
        return Prepared(impls, results, 2 * src.size * src.itemsize)

    return Case("rearrange", dtype, layout, shape, build)


def default_suite(quick: bool, threads: int) -> list[Case]:
    """The cases `infiniop bench` runs (filters are applied by the runner)."""
    sizes = QUICK_SIZES if quick else SIZES
    cases: list[Case] = []
    for op in ELEMENTWISE_OPS:
        for dtype in DTYPES:
            if quick and (dtype == "float64" or (dtype != "float32" and op not in ("sub", "clip"))):
                continue
            for size in sizes:
                cases.append(_elementwise(op, dtype, "contiguous", size, threads))
        for layout in LAYOUTS[1:]:
            if quick and op not in ("sub",):
                continue
            if op == "clip" and layout == "scalar_bcast":
                continue  # clip's contiguous case already uses 0-stride bounds
            for size in (sizes[-1],) if quick else sizes[2:]:
                cases.append(_elementwise(op, "float32", layout, size, threads))
    for dtype in ("float32", "float16"):
        for layout in REARRANGE_LAYOUTS:
            if layout == "copy":
                for size in sizes[1:]:
                    cases.append(_rearrange(dtype, layout, size, threads))
            elif not (quick and dtype == "float16" and layout != "nchw_nhwc"):
                cases.append(_rearrange(dtype, layout, 0, threads))
    return cases
