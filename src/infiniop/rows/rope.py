"""rope: rotary position embedding, an elementwise rotation of pairs with gathered sin/cos.

``x`` is ``[..., seq, nhead, dh]``; ``sin_table``/``cos_table`` are ``[max_pos, dh/2]`` and row
``pos_ids[..., s]`` is used for token ``s`` (``pos_ids`` broadcasts against ``x.shape[:-2]``).
Pair ``i`` is ``(a, b) = (x[2i], x[2i+1])`` for ``algo=0`` (GPT-J) or ``(x[i], x[i + dh/2])`` for
``algo=1`` (GPT-NeoX), and becomes ``(a cos - b sin, a sin + b cos)`` in float32 (float64 for
float64), rounded once. The pair layout is only strides: both algorithms are one kernel.

Positions outside ``[0, max_pos)`` are ``BAD_PARAM`` at calculate, before anything is written
(checked in the CPU kernel, whatever the buffer kind; on a GPU when the positions are in host
memory, otherwise the kernel masks them and writes NaN for those tokens: it never reads outside
the tables).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..dask_arrays import _immutable as dask_immutable
from ..dask_arrays import is_dask
from ..dask_arrays import rope as dask_rope
from ..descriptor import MISSING, OperatorDescriptor, check_descriptor, check_handle
from ..elementwise import signature as sigs
from ..elementwise.expr import fingerprint, trace
from ..elementwise.functional import _as_array, _descriptor, _gpu_device, _is_torch
from ..elementwise.plan import OverlapCheck
from ..kernel_cache import sha1
from ..layout import Layout, broadcast_strides, check_writable_layout, normalize, overlap, raw_view
from ..memory import empty_aligned, torch_empty
from ..status import InfiniError, Status

NAMES = ("y", "x", "pos_ids", "sin_table", "cos_table")
ROLES = ("out", "in", "in", "in", "in")
_INTS = "i8|i16|i32|i64|u8|u16|u32|u64"
PATTERNS = tuple(sigs.parse(s) for s in (
    [f"{t}, {_INTS}, {t}, {t} -> {t}" for t in ("f16", "bf16", "f32", "f64")]
    + [f"{t}, {_INTS}, f32, f32 -> {t}" for t in ("f16", "bf16")]))
SIGNATURES = sigs.expand(list(PATTERNS), ROLES, frozenset())
_OPERANDS = tuple(SimpleNamespace(name=n) for n in NAMES)  # what signature.match reads
ALGOS = {0: "GPT-J (pairs 2i, 2i+1)", 1: "GPT-NeoX (pairs i, i + dh/2)"}


def rotate(m, a, b, sin, cos):
    """The rotation of one pair (the whole arithmetic of rope)."""
    return a * cos - b * sin, a * sin + b * cos


@dataclass(frozen=True)
class RopeProgram:
    """The traced rotation for one signature: ``results`` over inputs (a, b, sin, cos)."""

    results: tuple
    dtypes: tuple  # y, x, pos, sin, cos
    key: str


_programs: dict = {}


def program(sig) -> RopeProgram:
    prog = _programs.get(sig)
    if prog is None:
        cx, ct = sigs.COMPUTE[sig.dtypes[1]], sigs.COMPUTE[sig.dtypes[3]]
        results = trace(rotate, [cx, cx, ct, ct])
        key = sha1((fingerprint(results) + str(sig.dtypes)).encode()).hexdigest()[:12]
        prog = _programs[sig] = RopeProgram(results, sig.dtypes, key)
    return prog


@dataclass(frozen=True)
class RopeInfo:
    """The plan: ``layout`` iterates the rows of x (every dim but the last: ``[..., seq,
    nhead]``) for slots (y, x, pos); ``half`` pairs per row; ``pairs`` the element offsets
    (step per pair, offset of b) of y and x; ``tables`` the (row, column) strides of sin and
    cos; ``max_pos`` the table length."""

    program: RopeProgram
    descs: tuple
    algo: int
    layout: Layout
    half: int
    pairs: tuple[tuple[int, int], tuple[int, int]]
    tables: tuple[tuple[int, int], tuple[int, int]]
    max_pos: int
    checks: tuple

    @property
    def rows(self) -> int:
        return self.layout.numel

    @property
    def numel(self) -> int:
        return self.rows * self.half * 2


def plan(descs, algo) -> RopeInfo:
    y, x, pos, sin, cos = descs
    sig = _match(tuple(d.dtype for d in descs))
    if isinstance(algo, bool) or not isinstance(algo, int | np.integer) or int(algo) not in ALGOS:
        raise InfiniError(Status.BAD_PARAM, f"rope: algo={algo!r}; expected 0 ({ALGOS[0]}) or "
                          f"1 ({ALGOS[1]})")
    algo = int(algo)
    if x.ndim < 3:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"rope: operand 'x' has shape {x.shape}; "
                          "expected [..., seq, nhead, dh]")
    if y.shape != x.shape:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand 'y': shape {y.shape}, but 'x' has "
                          f"{x.shape}")
    dh = x.shape[-1]
    if dh % 2:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"rope: head dim {dh} is odd")
    half = dh // 2
    for t in (sin, cos):
        if t.ndim != 2 or t.shape[1] != half or t.shape != sin.shape:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"rope: tables have shapes {sin.shape} "
                              f"and {cos.shape}; both must be (max_pos, {half})")
    tokens = x.shape[:-2]
    pos_strides = broadcast_strides(pos, tokens, "pos_ids") + (0,)
    check_writable_layout(y, "y")
    rows_shape = x.shape[:-1]
    lay = normalize(rows_shape, [y.strides[:-1], x.strides[:-1], pos_strides])
    pairs = []
    for d in (y, x):
        sd = d.strides[-1]
        pairs.append((2 * sd, sd) if algo == 0 else (sd, half * sd))
    checks = []
    for k in range(1, 5):
        d = descs[k]
        kd = d if k != 1 else x
        aliasable = k == 1 and y.dtype is x.dtype and all(
            a == b or m == 1 for a, b, m in zip(y.strides, x.strides, x.shape))
        checks.append(OverlapCheck(0, k, (y, kd), aliasable))
    return RopeInfo(program(sig), tuple(descs), algo, lay, half, tuple(pairs),
                    ((sin.strides[0], sin.strides[1]), (cos.strides[0], cos.strides[1])),
                    sin.shape[0], tuple(checks))


def _match(dtypes):
    """The signature of these dtypes, or signature.match's BAD_TENSOR_DTYPE naming the operand."""
    return sigs.match("rope", _OPERANDS, SIGNATURES, dtypes,
                      lambda: sigs.describe(list(PATTERNS), frozenset()))


class RopeDescriptor(OperatorDescriptor):
    """``calculate(workspace, y, x, pos_ids, sin_table, cos_table, stream=None)``.

    >>> import numpy as np, infiniop
    >>> x = np.ones((1, 1, 4), np.float32)                    # seq 1, 1 head, dh 4
    >>> pos = np.array([1], np.int32)
    >>> ang = np.array([[0.0, 0.0], [np.pi / 2, 0.0]])        # table row 1 rotates pair 0
    >>> sin, cos = np.sin(ang).astype(np.float32), np.cos(ang).astype(np.float32)
    >>> infiniop.rope(x, pos, sin, cos, algo=0).round(6)      # pairs (0, 1), (2, 3)
    array([[[-1.,  1.,  1.,  1.]]], dtype=float32)
    >>> infiniop.rope(x, pos, sin, cos, algo=1).round(6)      # pairs (0, 2), (1, 3)
    array([[[-1.,  1.,  1.,  1.]]], dtype=float32)
    """

    name = "rope"

    def __init__(self, handle, descs, algo):
        super().__init__(check_handle(handle))
        if len(descs) != 5:
            raise InfiniError(Status.BAD_PARAM, f"rope takes 5 tensor descriptors "
                              f"({', '.join(NAMES)}), got {len(descs)}")
        checked = tuple(check_descriptor(d, n) for d, n in zip(descs, NAMES))
        self.info = info = plan(checked, algo)
        self._kernel = None if info.numel == 0 else handle.backend.rope_kernel(info, handle=handle)
        self._host_check = getattr(self._kernel, "checks_positions", True) is False
        from ..elementwise.descriptor import _fast_path, device_fast_path

        launcher = getattr(self._kernel, "array_launcher", None)
        self._fast = None
        if launcher is not None:
            self._fast = _fast_path(self._kernel, _FastInfo(info), _OPERANDS)
        self._fast_device = device_fast_path(handle, self._kernel, info, _OPERANDS)

    def calculate(self, workspace=MISSING, *buffers, stream=None) -> None:
        fast = self._fast
        if fast is not None:
            code = fast(buffers)
            if code == 0:
                return
            if code == 1000:
                raise _position_error(self.info)
        fast = self._fast_device  # every operand on the device (host positions: checked below)
        if fast is not None and workspace is None and fast(buffers, stream):
            return
        if not self._alive:
            self._check_alive()
        if workspace is MISSING or len(buffers) != 5:
            raise self._arguments_error(("workspace",) + NAMES, (workspace,) + buffers)
        self._check_workspace(workspace)
        infos = [self._buffer(b, d, n, writable=k == 0)
                 for k, (b, d, n) in enumerate(zip(buffers, self.info.descs, NAMES))]
        for c in self.info.checks:
            rel = overlap(infos[0].address, c.descs[0], infos[c.k].address, c.descs[1])
            if rel == "partial" or (rel == "same" and not c.aliasable):
                raise InfiniError(Status.BAD_PARAM, f"operand 'y' overlaps input '{NAMES[c.k]}'; "
                                  "in place needs y laid out exactly as x")
        if self._kernel is None:
            return
        addresses = [i.address for i in infos]
        if self._host_check and infos[2].device == "cpu":
            p = raw_view(addresses[2], self.info.descs[2])
            if p.size and (p.min() < 0 or p.max() >= self.info.max_pos):
                raise _position_error(self.info)
        if self._kernel.launch_pointers(addresses, stream=stream) == 1000:
            raise _position_error(self.info)

    def destroy(self) -> None:
        self._fast = self._fast_device = None
        super().destroy()


@dataclass(frozen=True)
class _FastInfo:
    """What elementwise's fast-path generator reads from an info."""

    info: RopeInfo

    @property
    def descs(self):
        return self.info.descs

    @property
    def params(self):
        return ()


@dataclass(frozen=True)
class _Op:
    name: str
    writes: bool


_OPERANDS = tuple(_Op(n, k == 0) for k, n in enumerate(NAMES))


def _position_error(info) -> InfiniError:
    return InfiniError(Status.BAD_PARAM, f"rope: a position in pos_ids is outside the tables "
                       f"[0, {info.max_pos})")


def create_rope_descriptor(handle, y, x, pos_ids, sin_table, cos_table, algo=0):
    """InfiniCore's ``infiniopCreateRoPEDescriptor`` (``algo``: 0 GPT-J, 1 GPT-NeoX)."""
    return RopeDescriptor(handle, (y, x, pos_ids, sin_table, cos_table), algo)


class _RopeOp:
    """The functional form's descriptor factory (for the shared descriptor cache)."""

    name = "rope"

    @staticmethod
    def create_descriptor(handle, *descs, algo=0):
        return RopeDescriptor(handle, descs, algo)


# algo -> (the last NumPy call's descriptor fast path, x's shape and dtype, its plan): a repeated
# call (a decode loop) tries it before building a cache key; its launcher checks every layout,
# dtype and overlap, and anything else falls through (decode (1, 32, 128) fp16: 24.6 -> 4.5 us,
# with out= 20.5 -> 1.9 us)
_last_call: dict = {}


class _Required:
    """The default of rope's operands: a missing one is BAD_PARAM, as for the other functional
    operators, not Python's TypeError."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED = _Required()


def rope(x, pos_ids=REQUIRED, sin_table=REQUIRED, cos_table=REQUIRED, algo: int = 0, out=None):
    """Functional rope on NumPy arrays, torch tensors or Dask arrays; returns ``y`` (``out=x``
    for in place)."""
    last = _last_call.get(algo) if type(algo) is int else None  # True == 1: not a shortcut
    if last is not None and type(x) is np.ndarray:
        fast, shape, npdt, info = last
        y = out if out is not None else empty_aligned(shape, npdt) if x.shape == shape else None
        if y is not None:
            code = fast((y, x, pos_ids, sin_table, cos_table))
            if code == 0:
                return y
            if code == 1000:
                raise _position_error(info)
    given = (x, pos_ids, sin_table, cos_table)
    if any(a is REQUIRED for a in given):
        raise InfiniError(Status.BAD_PARAM, f"rope takes 4 operands ({', '.join(NAMES[1:])}), got "
                          f"{sum(a is not REQUIRED for a in given)}")
    if any(is_dask(a) for a in (*given, out)):
        if out is not None:
            raise dask_immutable("rope: out=")
        return dask_rope(x, pos_ids, sin_table, cos_table, algo, rope)
    arrays = [_as_array(n, a) for n, a in zip(NAMES[1:], given)]
    if out is None:
        x0 = arrays[0]
        if _is_torch(x0):
            out = torch_empty(x0.shape, x0.dtype, x0.device)
        else:
            out = empty_aligned(x0.shape, x0.dtype)
    given = out  # an ndarray subclass (memmap...) is computed into as a plain view, returned
    if isinstance(out, np.ndarray):
        out = out if type(out) is np.ndarray else out.view(np.ndarray)
    elif not _is_torch(out):
        raise InfiniError(Status.BAD_PARAM, f"operand 'y': cannot use {type(out).__name__}")
    bufs = [out] + arrays
    d = _descriptor(_RopeOp, bufs, {"algo": algo}, _gpu_device(bufs))
    d.calculate(None, *bufs)
    if given is not out:
        return given
    if d._fast is not None and all(type(b) is np.ndarray for b in bufs):
        _last_call[algo] = (d._fast, out.shape, out.dtype, d.info)
    return out
