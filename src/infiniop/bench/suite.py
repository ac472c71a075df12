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
ROW_DTYPES = ("float32", "float16", "bfloat16")
# (operator, layout label, shape): LLaMA-style prefill and decode shapes, and short rows (a
# mixture-of-experts router's softmax over 32 experts: per-row costs, not bandwidth)
ROW_CASES = (
    ("rms_norm", "prefill", (2048, 4096)), ("rms_norm", "rows", (4096, 4096)),
    ("rms_norm", "decode", (1, 4096)),
    ("add_rms_norm", "prefill", (2048, 4096)), ("layer_norm", "prefill", (2048, 4096)),
    ("softmax", "rows", (4096, 4096)), ("softmax", "short", (16384, 32)),
    ("logsoftmax", "rows", (4096, 4096)),
    ("causal_softmax", "prefill", (32, 2048, 2048)), ("causal_softmax", "decode", (32, 1, 2048)),
    ("rope", "prefill", (2048, 32, 128)), ("rope", "gptj", (2048, 32, 128)),
    ("rope", "decode", (1, 32, 128)),
)
# --quick stays under a minute: one large row case and the decode ones (the (32, 2048, 2048)
# causal_softmax prefill alone takes ~100 s with torch's side of it)
QUICK_ROW_CASES = {("rms_norm", "prefill"), ("rms_norm", "decode"),
                   ("causal_softmax", "decode"), ("rope", "decode")}
# agreement with the peers (their exp, summation order and rounding differ from ours; torch's
# fp16/bf16 log_softmax is off by ~1e-3 near 0, where ours is within an ulp of float64)
ROW_TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (4e-3, 2e-3), "bfloat16": (3e-2, 1.6e-2)}
QUICK_SIZES = (1 << 12, 1 << 20, 1 << 25)
QUICK_LAYOUT_SIZE = 1 << 22  # 2048 x 2048: the 2-D layouts in --quick
# elementwise catalogue operators with a torch peer (and a NumPy one where NumPy has the function)
MATH_OPS = ("silu", "gelu", "gelutanh", "quickgelu", "sigmoid", "tanh", "softplus", "hardswish",
            "hardtanh", "erf", "erfc", "erfinv", "atanh", "log1p", "log10", "reciprocal", "swiglu",
            "equal", "addcmul")
MATH_SIZES = (1 << 20, 1 << 25)
QUICK_MATH_CASES = {("silu", "float32"), ("gelu", "bfloat16"), ("tanh", "float16")}
# Ours are correctly rounded (max 1 ulp in float32), the peers are not: a peer agrees when
# |ours - theirs| <= k eps (1 + |ours|) with eps of the dtype, i.e. within k ulp of the result, or
# k ulp of 1 below 1 (torch's gelu and gelutanh compute x/2 (1 + erf(...)), which cancels for
# x < -3 and leaves errors of ~10 float32 ulp of 1 there; torch's addcmul fuses x + v t1 t2 into
# one rounding where we round v t1 t2 first, which shows when the sum cancels: up to 8 ulp of 1
# for our inputs). Exact operators agree bit for bit.
MATH_ULPS = {"gelu": 16, "gelutanh": 16, "addcmul": 16}  # others: 4
EXACT_MATH_OPS = {"hardtanh", "reciprocal", "equal"}
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


@dataclass
class Prepared:
    impls: dict[str, Callable[[], object]]
    results: dict[str, Callable[[], np.ndarray]]
    nbytes: int  # bytes read + written once by an ideal implementation
    streams_in: int = 1  # inputs read as arrays (not broadcast scalars): picks the ceiling
    inputs: tuple = ()  # the operands read (for extra implementations added by a caller)


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
    """torch, imported the first time as a user gets it alone: with OpenMP's own wait policy,
    not the passive one ``import infiniop`` sets for processes that mix the two (passive,
    torch's back-to-back calls took 1.3-1.8x as long at 1-4M elements: add float32 1M 57 ->
    100 us, 4M 230 -> 413 us; AMD EPYC, 2026-11-28)."""
    import os
    import sys

    from .. import _omp

    ours = "torch" not in sys.modules and _omp.OURS
    saved = os.environ.pop("OMP_WAIT_POLICY", None) if ours else None
    try:
        import torch

        return torch
    except ImportError:
        return None
    finally:
        if saved is not None:
            os.environ["OMP_WAIT_POLICY"] = saved


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
        return Prepared(impls, results, nbytes, streams, ins)

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
        return Prepared(impls, results, 2 * src.size * src.itemsize, inputs=(src,))

    return Case("rearrange", dtype, layout, shape, build)


def _agreeing(ours: Callable[[], np.ndarray], theirs: Callable[[], object],
              tolerance: tuple[float, float]):
    """The peer's result for the runner's bit-for-bit check: ours when the peer agrees within
    ``tolerance`` = (rtol, atol) (row operators and math functions are not bit-identical across
    libraries; NaN positions must match), else the peer's own (reported as a disagreement)."""
    rtol, atol = tolerance

    def result():
        a = np.asarray(ours()).astype(np.float64)
        t = theirs()
        b = _numpy_of(t).astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are caught by a == b
            ok = a.shape == b.shape and bool(np.all((a == b) | (np.abs(a - b) <= atol + rtol * np.abs(a))
                                                    | (np.isnan(a) & np.isnan(b))))
        return ours() if ok else _numpy_of(t)
    return result


def _numpy_of(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def _rows(op: str, dtype: str, layout: str, shape: tuple[int, ...], threads: int) -> Case:
    """A row operator (or rope) case: ours through the descriptor and the functional front
    end against torch's own kernels (composed where torch has none: causal mask + softmax, rope
    by slices). Needs torch (no NumPy peer)."""
    import infiniop as ip

    def build() -> Prepared:
        rng = np.random.default_rng(0)
        npdt = as_dtype(dtype).numpy
        h = ip.create_handle("cpu")
        td = ip.TensorDescriptor.from_array
        n = shape[-1]
        x = _random(shape, dtype, rng)
        impls: dict[str, Callable[[], object]] = {}
        results: dict[str, Callable[[], np.ndarray]] = {}
        if op == "rope":
            half = n // 2
            seq = shape[0]
            pos = rng.permutation(max(4096, seq))[:seq].astype(np.int32)
            ang = rng.random((max(4096, seq), half)).astype(np.float32) * 10
            sin, cos = np.sin(ang).astype(npdt), np.cos(ang).astype(npdt)
            ins, outs = (x, pos, sin, cos), [empty_aligned(shape, npdt) for _ in range(2)]
            algo = 0 if layout == "gptj" else 1  # GPT-J's interleaved pairs, or NeoX's halves
            d = ip.create_rope_descriptor(h, td(outs[0]), *[td(a) for a in ins], algo)
            impls["infiniop"] = lambda: d.calculate(None, outs[0], *ins)
            impls["infiniop.fn"] = lambda: ip.rope(*ins, algo=algo, out=outs[1])
            nbytes = 2 * x.nbytes + pos.nbytes + 2 * seq * half * sin.itemsize
        else:
            spec = getattr(ip, op)
            w, b = _random((n,), dtype, rng), _random((n,), dtype, rng)
            ins = {"rms_norm": (x, w), "add_rms_norm": (x, _random(shape, dtype, rng), w),
                   "layer_norm": (x, w, b)}.get(op, (x,))
            n_out = {"add_rms_norm": 2, "layer_norm": 3}.get(op, 1)
            stat = {2: shape[:-1]} if op == "layer_norm" else {}
            outs_of = [[empty_aligned(stat.get(k, shape), npdt) for k in range(n_out)]
                       for _ in range(2)]
            outs = [o[0] for o in outs_of]
            d = spec.create_descriptor(h, *[td(o) for o in outs_of[0]], *[td(a) for a in ins])
            impls["infiniop"] = lambda: d.calculate(None, *outs_of[0], *ins)
            impls["infiniop.fn"] = lambda: spec(*ins, out=tuple(outs_of[1]))
            nbytes = sum(a.nbytes for a in ins) + sum(o.nbytes for o in outs_of[0])
        results["infiniop"] = lambda: outs[0]
        results["infiniop.fn"] = lambda: outs[1]
        torch = _torch()
        if torch is not None:
            torch.set_num_threads(threads)
            tx = _to_torch(x)
            F = torch.nn.functional
            if op == "rms_norm":
                tw = _to_torch(ins[1])
                fn = lambda: F.rms_norm(tx, (n,), tw, 1e-5)  # noqa: E731
            elif op == "add_rms_norm":
                tb, tw = _to_torch(ins[1]), _to_torch(ins[2])
                fn = lambda: F.rms_norm(tx + tb, (n,), tw, 1e-5)  # noqa: E731
            elif op == "layer_norm":
                tw, tb = _to_torch(ins[1]), _to_torch(ins[2])
                fn = lambda: F.layer_norm(tx, (n,), tw, tb, 1e-5)  # noqa: E731
            elif op == "softmax":
                fn = lambda: torch.softmax(tx, -1)  # noqa: E731
            elif op == "logsoftmax":
                fn = lambda: torch.log_softmax(tx, -1)  # noqa: E731
            elif op == "causal_softmax":
                r = shape[-2]
                mask = torch.ones(r, n, dtype=torch.bool).triu(n - r + 1)
                fn = lambda: torch.softmax(tx.masked_fill(mask, float("-inf")), -1)  # noqa: E731
            else:
                tp, ts, tc = (torch.from_numpy(ins[1]).long(), _to_torch(ins[2]), _to_torch(ins[3]))

                def fn():  # InfiniCore's reference on the CPU: in float32, rounded once
                    s, c = ts[tp].unsqueeze(1).float(), tc[tp].unsqueeze(1).float()
                    if layout == "gptj":
                        a, b = tx[..., 0::2].float(), tx[..., 1::2].float()
                        y = torch.stack([a * c - b * s, a * s + b * c], -1)
                        return y.flatten(-2).to(tx.dtype)
                    a, b = tx[..., :n // 2].float(), tx[..., n // 2:].float()
                    return torch.cat([a * c - b * s, a * s + b * c], -1).to(tx.dtype)
            got = {}
            impls["torch"] = lambda: got.__setitem__("y", fn())
            results["torch"] = _agreeing(results["infiniop"], lambda: got["y"], ROW_TOLERANCE[dtype])
        streams = 2 if op == "add_rms_norm" else 1
        return Prepared(impls, results, nbytes, streams, inputs=ins)

    return Case(op, dtype, layout, shape, build)


def _offset_from(x: np.ndarray, shift: int, shape, dtype) -> np.ndarray:
    """An array whose data starts ``shift`` bytes past ``x``'s address modulo 4096."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = empty_aligned((nbytes + 8192,), np.uint8)
    start = (x.ctypes.data + shift - raw.ctypes.data) % 4096
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _math(op: str, dtype: str, size: int, threads: int, layout: str = "contiguous") -> Case:
    """An elementwise catalogue operator (1-D) through the descriptor and the functional front
    end with ``out=``, against torch's ``out=`` kernels (composed for swiglu and quickgelu,
    which torch lacks) and NumPy's ufunc where NumPy has one. ``layout`` "offset_out": every
    implementation's output starts 32 bytes past the input (mod 4096), where a load can wait
    for an unrelated older store to the same low 12 address bits (4K aliasing; see the CPU
    backend's ``heavy_loop``)."""
    import infiniop as ip

    spec = getattr(ip, op)
    params = {"hardtanh": {"min_val": -1.0, "max_val": 1.0}, "addcmul": {"value": 0.5},
              "softplus": {"beta": 1.0, "threshold": 20.0}}.get(op, {})
    arity = {"swiglu": 2, "equal": 2, "addcmul": 3}.get(op, 1)

    def build() -> Prepared:
        rng = np.random.default_rng(0)
        npdt = as_dtype(dtype).numpy
        ins = tuple(_random((size,), dtype, rng) for _ in range(arity))
        if op in ("log1p", "log10"):
            np.abs(ins[0], out=ins[0])  # their domains: x > -1, x > 0
        if op in ("atanh", "erfinv"):
            ins[0][...] = np.tanh(ins[0].astype(np.float32)).astype(npdt)  # in [-1, 1]
        if op == "equal":
            ins[1][::2] = ins[0][::2]  # half the elements equal
        out_dt = np.bool_ if op == "equal" else npdt
        outs = {k: _offset_from(ins[0], 32, (size,), out_dt) if layout == "offset_out"
                else empty_aligned((size,), out_dt) for k in ("infiniop", "infiniop.fn", "numpy", "torch")}
        td = ip.TensorDescriptor.from_array
        d = spec.create_descriptor(ip.create_handle("cpu"), td(outs["infiniop"]), *map(td, ins), **params)
        impls = {"infiniop": lambda: d.calculate(None, outs["infiniop"], *ins),
                 "infiniop.fn": lambda: spec(*ins, out=outs["infiniop.fn"], **params)}
        x = ins[0]
        if op == "hardtanh":
            lo, hi = npdt.type(-1.0), npdt.type(1.0)
            impls["numpy"] = lambda: np.clip(x, lo, hi, out=outs["numpy"])
        elif op in ("tanh", "log1p", "log10", "atanh", "reciprocal", "equal"):
            ufunc = getattr(np, {"atanh": "arctanh"}.get(op, op))

            def numpy_peer():
                with np.errstate(over="ignore"):  # float16 1/x of a subnormal is inf, rightly
                    ufunc(*ins, out=outs["numpy"])
            impls["numpy"] = numpy_peer
        torch = _torch()
        if torch is not None:
            torch.set_num_threads(threads)
            aten, t, tout = torch.ops.aten, [_to_torch(a) for a in ins], _to_torch(outs["torch"])
            impls["torch"] = {
                "silu": lambda: aten.silu.out(t[0], out=tout),
                "gelu": lambda: aten.gelu.out(t[0], out=tout),
                "gelutanh": lambda: aten.gelu.out(t[0], approximate="tanh", out=tout),
                "sigmoid": lambda: torch.sigmoid(t[0], out=tout),
                "tanh": lambda: torch.tanh(t[0], out=tout),
                "softplus": lambda: aten.softplus.out(t[0], 1.0, 20.0, out=tout),
                "hardswish": lambda: aten.hardswish.out(t[0], out=tout),
                "hardtanh": lambda: aten.hardtanh.out(t[0], -1.0, 1.0, out=tout),
                "quickgelu": lambda: torch.mul(t[0], torch.sigmoid(t[0] * 1.702), out=tout),
                "erf": lambda: torch.erf(t[0], out=tout),
                "erfc": lambda: torch.erfc(t[0], out=tout),
                "erfinv": lambda: torch.erfinv(t[0], out=tout),
                "atanh": lambda: torch.atanh(t[0], out=tout),
                "log1p": lambda: torch.log1p(t[0], out=tout),
                "log10": lambda: torch.log10(t[0], out=tout),
                "reciprocal": lambda: torch.reciprocal(t[0], out=tout),
                "swiglu": lambda: torch.mul(t[0], aten.silu(t[1]), out=tout),
                "equal": lambda: torch.eq(t[0], t[1], out=tout),
                "addcmul": lambda: torch.addcmul(t[0], t[1], t[2], value=0.5, out=tout),
            }[op]
        results = {k: (lambda k=k: outs[k]) for k in impls}
        if op not in EXACT_MATH_OPS:
            k = MATH_ULPS.get(op, 4) * EPS[dtype]
            for peer in ("numpy", "torch"):
                if peer in impls:
                    results[peer] = _agreeing(results["infiniop"], results[peer], (k, k))
        nbytes = sum(a.nbytes for a in ins) + outs["infiniop"].nbytes
        return Prepared(impls, results, nbytes, arity, ins)

    return Case(op, dtype, layout, (size,), build)


def default_suite(quick: bool, threads: int) -> list[Case]:
    """The cases `infiniop bench` runs (filters are applied by the runner)."""
    sizes = QUICK_SIZES if quick else SIZES
    cases: list[Case] = []
    for op in ELEMENTWISE_OPS:
        for dtype in DTYPES:
            if quick and (dtype == "float64" or (dtype != "float32" and op not in ("sub", "clip"))):
                continue
            # --quick: the DRAM-sized case for sub alone, the others at 1M
            for size in sizes if not quick or op == "sub" else sizes[1:2] or sizes:
                cases.append(_elementwise(op, dtype, "contiguous", size, threads))
        for layout in LAYOUTS[1:]:
            if quick and op not in ("sub",):
                continue
            if op == "clip" and layout == "scalar_bcast":
                continue  # clip's contiguous case already uses 0-stride bounds
            for size in (min(QUICK_LAYOUT_SIZE, sizes[-1]),) if quick else sizes[2:]:
                cases.append(_elementwise(op, "float32", layout, size, threads))
    for dtype in ("float32", "float16"):
        for layout in REARRANGE_LAYOUTS:
            if layout == "copy":
                for size in sizes[1:]:
                    cases.append(_rearrange(dtype, layout, size, threads))
            elif not (quick and dtype == "float16" and layout != "nchw_nhwc"):
                cases.append(_rearrange(dtype, layout, 0, threads))
    for op in MATH_OPS:
        for dtype in ROW_DTYPES:
            if quick and (op, dtype) not in QUICK_MATH_CASES:
                continue
            for size in MATH_SIZES[:1] if quick else MATH_SIZES:
                cases.append(_math(op, dtype, size, threads))
    if not quick:
        cases.append(_math("silu", "float32", MATH_SIZES[-1], threads, "offset_out"))
    for op, layout, shape in ROW_CASES if _torch() is not None else ():
        if quick and (op, layout) not in QUICK_ROW_CASES:
            continue
        for dtype in ROW_DTYPES:
            cases.append(_rows(op, dtype, layout, shape, threads))
    return cases
