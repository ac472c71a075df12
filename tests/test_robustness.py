"""The bad-input matrix: every public entry point x every kind of bad input (issue #7).

Rows are entry points: ``TensorDescriptor``, ``create_handle``, ``create_<op>_descriptor`` and
``desc.calculate`` for every elementwise operator and for rearrange, the functional front end
(``infiniop.<op>``) for every operator, ``infiniop.rearrange(x, pattern)`` and ``copy_``.
Columns are the kinds of bad input in ``KINDS``. A cell is a list of concrete calls; each asserts

- the exact ``Status`` (or success, for the few documented "this is fine" cases), and
- that no byte changed except inside the outputs of a call that succeeded: every operand lives
  in the middle of a bigger buffer filled with the CANARY byte, every buffer is snapshotted
  before the call and compared byte for byte after it (a failed call must leave the operands
  themselves untouched too).

A non-``InfiniError`` exception from any cell is a bug and fails with its traceback. Cells that
cannot exist for an entry point are in ``NOT_APPLICABLE`` with the reason;
``test_matrix_is_complete`` checks that no (entry, kind) pair is silently missing. Calls that
might crash the interpreter (known crashes, raw addresses) run in a child process (see
test_isolation.py).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod

import numpy as np
import pytest
import torch
from conftest import CANARY
from test_catalogue import ENTRY as CATALOGUE
from test_catalogue import reference as catalogue_reference
from test_isolation import describe_exit, run_isolated

import infiniop
from infiniop import Device, DType, InfiniError, Status
from infiniop import TensorDescriptor as TD
from infiniop.ops import ALL as OPS
from infiniop.rearrange import copy_, create_rearrange_descriptor, rearrange

F32, F64, I32, I8, BOOL = DType.F32, DType.F64, DType.I32, DType.I8, DType.BOOL
SHAPE = (3, 4)
PAD = 64  # CANARY bytes on each side of every operand
LAYOUTS = {  # element strides for SHAPE: reach [lo, hi] relative to element 0
    "contiguous": (4, 1),  # [0, 11]
    "negative": (-4, -1),  # [-11, 0]
    "mixed": (4, -1),      # [-3, 8]: memory on both sides of element 0
}
S = Status

# The columns. The first group is the list; the second group applies to some rows only.
KINDS = [
    "wrong_dtype", "wrong_ndim", "not_broadcastable", "broadcast_output",
    "self_overlapping_output", "negative_extent", "strides_wrong_length",
    "short_buffer_high", "short_buffer_low_negative_strides", "short_buffer_mixed_strides",
    "wrong_dtype_array", "readonly_output", "partial_overlap", "workspace_too_small",
    "destroyed", "unknown_device", "huge_span",
    "none_argument", "wrong_operand_count", "not_an_array",
]
EXTRA_KINDS = {  # kind -> the entry-point families it applies to
    "valid": {"descriptor", "handle", "create", "calculate", "functional", "pattern", "copy_"},
    "wrong_strides_array": {"calculate"},
    "odd_byte_strides": {"functional", "copy_"}, "bad_scalar": {"functional"},
    "bad_pattern": {"pattern"}, "bad_axis_size": {"pattern"},
}


# ---------------------------------------------------------------------------------------------
# Canaried buffers
# ---------------------------------------------------------------------------------------------


class Buffer:
    """One operand's memory: a CANARY-filled byte buffer with the operand in its middle, laid out
    as ``desc`` says (element 0 at ``origin``)."""

    def __init__(self, name: str, desc: TD, values=None):
        self.name, self.desc = name, desc
        self.isz = desc.dtype.itemsize
        lo, hi = desc.reach
        span = 0 if desc.is_empty else (hi - lo + 1) * self.isz
        self.raw = np.full(span + 2 * PAD, CANARY, np.uint8)
        self.origin = PAD - lo * self.isz
        if values is not None:
            self.view()[...] = values
        self.snapshot()

    def _strides(self):
        return [s * self.isz for s in self.desc.strides]

    def view(self, dtype=None, *, writeable=True, cls=np.ndarray) -> np.ndarray:
        """The operand as its descriptor lays it out (optionally reinterpreted as ``dtype``)."""
        v = np.ndarray(self.desc.shape, np.dtype(dtype or self.desc.dtype.numpy), buffer=self.raw,
                       offset=self.origin, strides=self._strides())
        v.flags.writeable = writeable
        return v if cls is np.ndarray else v.view(cls)

    def memory(self, lo: int, hi: int, dtype=None, cls=np.ndarray) -> np.ndarray:
        """An array whose own memory is exactly elements [lo, hi] around element 0 (its data
        pointer is element 0), whatever the descriptor's layout: the README's 'buffer' notion."""
        assert lo <= 0 <= hi
        dt = np.dtype(dtype or self.desc.dtype.numpy)
        if lo == 0:
            shape, strides = (hi + 1,), (self.isz,)
        else:  # rows [0..hi] and [lo..lo+hi]: the extent is [lo, hi]
            shape, strides = (2, hi + 1), (lo * self.isz, self.isz)
        a = np.ndarray(shape, dt, buffer=self.raw, offset=self.origin, strides=strides)
        return a if cls is np.ndarray else a.view(cls)

    def reach_memory(self, lo_cut: int = 0, hi_cut: int = 0, **kw) -> np.ndarray:
        lo, hi = self.desc.reach
        return self.memory(lo + lo_cut, hi - hi_cut, **kw)

    def covered(self) -> np.ndarray:
        """Bytes of ``raw`` that belong to the operand's elements."""
        m = np.zeros(self.raw.size, bool)
        if not self.desc.is_empty:
            np.ndarray(self.desc.shape + (self.isz,), np.bool_, buffer=m, offset=self.origin,
                       strides=self._strides() + [1])[...] = True
        return m

    def snapshot(self) -> None:
        self.before = self.raw.copy()

    def changed(self) -> np.ndarray:
        return self.raw != self.before


def values(dtype: DType, shape=SHAPE, seed=0) -> np.ndarray:
    """Small non-zero integers (exact in every float type), or random booleans."""
    rng = np.random.default_rng(seed)
    if dtype is BOOL:
        return rng.random(shape) < 0.5
    v = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)
    return v.astype(dtype.numpy)


class Junk:
    """Not an array: has neither DLPack nor an array interface."""


class CudaLike:
    """A buffer that says it lives on a CUDA device (``__cuda_array_interface__``)."""

    def __init__(self, typestr="<f4", shape=SHAPE):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0x7F0000000000, False), "version": 3}


class Sub(np.ndarray):
    """Not exactly an ndarray: forces the general (Python-checked) path of calculate."""


class DLPackOnly:
    """An array seen only through ``__dlpack__``."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class ArrayInterfaceOnly:
    """An array seen only through ``__array_interface__``."""

    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self.keep = a


ARRAY_KINDS = {  # the ways calculate can be handed one array (NumPy's is the compiled fast path)
    "numpy": lambda a: a, "ndarray subclass": lambda a: a.view(Sub),
    "torch": lambda a: torch.from_numpy(a), "DLPack": DLPackOnly,
    "array interface": ArrayInterfaceOnly,
}


def meta(dtype: DType, shape=SHAPE):
    return torch.empty(shape, dtype=_torch_dtype(dtype), device="meta")


def _torch_dtype(dtype: DType):
    from infiniop.dtype import to_torch

    return to_torch(dtype)


# ---------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------


@dataclass
class Cell:
    label: str
    call: Callable | None  # None when ``isolate`` holds the code to run in a child
    status: Status | None  # None: the call must succeed
    buffers: list = field(default_factory=list)  # every Buffer the call can see
    outputs: list = field(default_factory=list)  # Buffers a successful call may write
    check: Callable | None = None  # check(result) after a successful call
    isolate: str | None = None  # child-process code (must exit 0)
    xfail: str | None = None  # a known, reported bug in a module this file's owner does not own


def run_cell(cell: Cell) -> str | None:
    """None if the cell holds, else what went wrong."""
    if cell.isolate is not None:
        proc = run_isolated(cell.isolate, timeout=600)
        return None if proc.returncode == 0 else describe_exit(proc)
    for b in cell.buffers:
        b.snapshot()
    try:
        result = cell.call()
    except InfiniError as e:
        if cell.status is None:
            return f"expected success, got {e!r}"
        if e.status is not cell.status:
            return f"expected {cell.status.name}, got {e!r}"
        for b in cell.buffers:
            ch = b.changed()
            if ch.any():
                where = "the operand itself" if (ch & b.covered()).any() else "the canary bytes"
                return f"failed call ({e.status.name}) changed {int(ch.sum())} bytes of " \
                       f"'{b.name}' ({where})"
        return None
    except Exception as e:  # noqa: BLE001 - any other exception type is the bug we look for
        return f"non-InfiniError exception {type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}"
    if cell.status is not None:
        return f"expected InfiniError({cell.status.name}), the call succeeded"
    for b in cell.buffers:
        allowed = b.covered() if any(b is o for o in cell.outputs) else np.zeros(b.raw.size, bool)
        stray = b.changed() & ~allowed
        if stray.any():
            return f"successful call changed {int(stray.sum())} bytes of '{b.name}' outside its output"
    if cell.check is not None:
        return cell.check(result)
    return None


# ---------------------------------------------------------------------------------------------
# Targets: the descriptor-API operators (every elementwise op, and rearrange)
# ---------------------------------------------------------------------------------------------


REFERENCE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "abs": np.abs,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)), "where": np.where,
    "clip": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), "rearrange": lambda x: x.copy(),
}


@dataclass(frozen=True)
class Target:
    """An entry point's operands in the matrix's order: the first written operand (``out``,
    or BLAS's updated ``y``/``x``) at index 0, then the others in the operator's (C) order;
    ``create``/``calculate`` put them back in C order. Operands that are not of the iteration
    shape (``alpha``, ``param``, ``A_log``, silu_and_mul's ``[..., 2d]`` input) take the shapes
    tests/test_catalogue.py's table gives them."""

    name: str
    spec: object = None  # the ElementwiseSpec; None for rearrange

    @property
    def order(self) -> tuple[int, ...]:
        """Matrix index -> C index."""
        if self.spec is None:
            return (0, 1)
        ops = self.spec.operands
        w = next(k for k, o in enumerate(ops) if o.writes)
        return (w,) + tuple(k for k in range(len(ops)) if k != w)

    def operand(self, j: int):
        return None if self.spec is None else self.spec.operands[self.order[j]]

    @property
    def names(self) -> tuple[str, ...]:
        if self.spec is None:
            return ("dst", "src")
        return tuple(self.operand(j).name for j in range(len(self.order)))

    def reads(self, j: int) -> bool:
        return j == 1 if self.spec is None else self.operand(j).reads

    def writes(self, j: int) -> bool:
        return j == 0 if self.spec is None else self.operand(j).writes

    def optional(self, j: int) -> bool:
        return self.spec is not None and self.operand(j).optional

    def own(self, j: int) -> bool:
        """Operand j has a shape of its own (not the iteration shape)."""
        return self.shape(j) != SHAPE

    def shape(self, j: int, shape=SHAPE) -> tuple:
        if self.spec is None or self.name not in CATALOGUE:
            return shape
        return CATALOGUE[self.name].own_shapes(shape).get(self.names[j], shape)

    @property
    def classic(self) -> bool:
        """One output first, then inputs only (the original eleven operators' form)."""
        return self.spec is not None and self.order == tuple(range(len(self.order))) and all(
            o.role == "in" for o in self.spec.operands[1:])

    def dtypes(self, out: DType = F32) -> list[DType]:
        """Matrix-order dtypes: the signature with the most float32 operands (out=F32), or
        ``out`` everywhere the operator does not pin an input (for the bad-dtype cells)."""
        if self.spec is None:
            return [out, out]
        if out is F32:
            sig = max(self.spec.signatures, key=lambda s: sum(d is F32 for d in s.dtypes))
            return [sig.dtypes[k] for k in self.order]
        if self.classic:
            return [out] + [self.spec.input_dtype(k, out) for k in range(self.spec.arity)]
        return [out] * len(self.order)

    def to_c(self, items: list) -> list:
        if self.spec is None or len(items) != len(self.order):
            return list(items)  # a wrong count: refused whatever the order
        c = [None] * len(items)
        for j, k in enumerate(self.order):
            c[k] = items[j]
        return c

    def create(self, handle, *descs):
        if self.spec is None:
            return create_rearrange_descriptor(handle, *descs)
        return self.spec.create_descriptor(handle, *self.to_c(list(descs)))

    def calculate(self, desc, *bufs):
        if self.spec is None:
            return desc.calculate(*bufs)
        return desc.calculate(None, *self.to_c(list(bufs)))

    def aliasable(self, j: int) -> bool:
        """The output may be operand j's memory exactly (in place on an input)."""
        o = self.operand(j)
        return (self.spec is None or (o.role == "in" and o.nviews == 1)) and not self.own(j)

    def expected(self, arrays: list) -> list:
        """The written operands' values (matrix order) from the operands as they are now."""
        if self.spec is None or self.name not in CATALOGUE:
            ins = [np.array(a) for j, a in enumerate(arrays) if self.reads(j) and j > 0]
            with np.errstate(all="ignore"):
                return [np.asarray(REFERENCE[self.name](*ins))]
        entry = CATALOGUE[self.name]
        c = self.to_c([np.array(a) for a in arrays])
        sig = self.spec.match(tuple(self.to_c(self.dtypes())))
        defaults = {p.name: p.default for p in self.spec.params}  # the matrix passes none
        want = catalogue_reference(entry, sig, [a for o, a in zip(self.spec.operands, c)
                                                if o.reads], defaults)
        return [want[self.spec.outputs.index(self.names[j])]
                for j in range(len(self.order)) if self.writes(j)]

    def __repr__(self) -> str:
        return self.name


TARGETS = [Target(s.name, s) for s in OPS] + [Target("rearrange")]
EW_TARGETS = TARGETS[:-1]


@pytest.fixture(scope="module")
def handle():
    return infiniop.create_handle("cpu")


def setup(t: Target, handle, layout="contiguous", out_dtype=F32):
    """A valid descriptor and canaried operands laid out as ``layout`` (operands of their own
    shape: contiguous); the operands the call reads hold values, written-only ones canaries."""
    strides = LAYOUTS[layout]
    dts = t.dtypes(out_dtype)
    descs = [TD(d, t.shape(j)) if t.own(j) else TD(d, SHAPE, strides) for j, d in enumerate(dts)]
    bufs = [Buffer(n, d, values(d.dtype, d.shape, seed=k) if t.reads(k) else None)
            for k, (n, d) in enumerate(zip(t.names, descs))]
    return t.create(handle, *descs), descs, bufs


def written(t: Target, bufs: list) -> list:
    return [b for j, b in enumerate(bufs) if t.writes(j)]


def expect_output(t: Target, bufs: list, where: dict | None = None):
    """A check of every written operand after a successful call, against the values of the
    operands now (``where``: matrix index -> the Buffer a written operand lives in instead,
    for in-place calls)."""
    mem = [(where or {}).get(j, b) for j, b in enumerate(bufs)]
    want = t.expected([m.view() for m in mem])
    outs = [m for j, m in enumerate(mem) if t.writes(j)]

    def check(_):
        for out, w in zip(outs, want):
            got = out.view()
            if t.name in CATALOGUE and not CATALOGUE[t.name].exact and got.dtype.kind == "f":
                bad = ~(np.isclose(got, w, rtol=1e-5, atol=0) | (np.isnan(got) & np.isnan(w)))
                if bad.any():
                    return f"wrong result in '{out.name}':\n{got}\nwant\n{w}"
            elif not np.array_equal(got, w, equal_nan=got.dtype.kind == "f"):
                return f"wrong result in '{out.name}':\n{got}\nwant\n{w}"
        return None
    return check


# ---- create_* -----------------------------------------------------------------------------


def create_cells(t: Target, kind: str, handle) -> list[Cell]:
    n_in = len(t.names) - 1
    dts = t.dtypes()
    good = [TD(d, t.shape(j)) for j, d in enumerate(dts)]
    shaped = any(prod(t.shape(j)) > 1 for j in range(1, n_in + 1))  # not scal's x alone
    cells = []

    def with_operand(k, desc):
        return [desc if j == k else good[j] for j in range(len(good))]

    def add(label, descs, status, h=handle):
        cells.append(Cell(label, lambda: t.create(h, *descs), status))

    if kind == "valid":
        add("contiguous", good, None)
        for name, st in LAYOUTS.items():
            add(name, [g if t.own(j) else TD(d, SHAPE, st)
                       for j, (g, d) in enumerate(zip(good, dts))], None)
    elif kind == "wrong_dtype":
        if t.spec is None:
            add("src float64, dst float32", [good[0], TD(F64, SHAPE)], S.BAD_TENSOR_DTYPE)
            add("src int32, dst float32 (same size)", [good[0], TD(I32, SHAPE)], S.BAD_TENSOR_DTYPE)
        else:
            bools = t.dtypes(BOOL)
            if not t.spec.candidates(tuple(t.to_c(bools))):
                add("output bool (no signature accepts it)",
                    [TD(d, g.shape) for d, g in zip(bools, good)], S.BAD_TENSOR_DTYPE)
            add("output float8 (not supported)",
                [TD(d, g.shape) for d, g in zip(t.dtypes(DType.F8), good)], S.BAD_TENSOR_DTYPE)
            for k in range(1, n_in + 1):
                wrong = F32 if dts[k] is BOOL else F64
                add(f"operand '{t.names[k]}' {wrong}", with_operand(k, TD(wrong, good[k].shape)),
                    S.BAD_TENSOR_DTYPE)
    elif kind == "wrong_ndim":
        for k in range(1, n_in + 1):
            add(f"'{t.names[k]}' with a leading dim of 2, output 2-d",
                with_operand(k, TD(dts[k], (2,) + good[k].shape)), S.BAD_TENSOR_SHAPE)
        if t.spec is None:
            add("src 1-d (12,), dst (3, 4)", [good[0], TD(F32, (12,))], S.BAD_TENSOR_SHAPE)
        elif shaped:  # scal's x alone decides the shape (its alpha has shape (1,))
            add("output 1-d (12,), inputs (3, 4)", with_operand(0, TD(dts[0], (12,))),
                S.BAD_TENSOR_SHAPE)
    elif kind == "not_broadcastable":
        for k in range(1, n_in + 1):
            for shape in [(3, 5), (3,), (2, 4)]:
                add(f"'{t.names[k]}' {shape}", with_operand(k, TD(dts[k], shape)),
                    S.BAD_TENSOR_SHAPE)
        if t.spec is None:  # rearrange needs equal shapes (0 strides broadcast)
            add("src (1, 4) (NumPy would broadcast)", [good[0], TD(F32, (1, 4))], S.BAD_TENSOR_SHAPE)
        else:
            alone = t.reads(0) and sum(t.writes(j) for j in range(n_in + 1)) == 1
            for shape in ([(3, 1), (4, 3)] if shaped else []) + ([] if alone else [(2, 3, 4)]):
                add(f"output {shape}, inputs broadcast to (3, 4)",  # an updated y may be
                    with_operand(0, TD(dts[0], shape)), S.BAD_TENSOR_SHAPE)  # larger than x
    elif kind == "broadcast_output":
        for st in [(0, 1), (4, 0), (0, 0)]:
            add(f"output strides {st}", with_operand(0, TD(dts[0], SHAPE, st)),
                S.BAD_TENSOR_STRIDES)
    elif kind == "self_overlapping_output":
        for st in [(1, 1), (2, 1), (3, 1), (-1, 1)]:
            add(f"output strides {st}", with_operand(0, TD(dts[0], SHAPE, st)),
                S.BAD_TENSOR_STRIDES)
    elif kind == "huge_span":  # valid descriptors: create plans them without allocating
        far = 2**61 - 2  # (2 * far + 1) * 4 bytes < 2**63
        add("output (2,) with stride 2**61 - 2 (span just under 2**63 bytes)",
            [TD(dts[0], (2,), (far,))] + [TD(d, t.shape(j, (2,))) for j, d in enumerate(dts)
                                          if j], None)
        big = (2**30, 2**29) if t.name == "silu_and_mul" else (2**30, 2**30)  # [..., 2d] input
        add(f"every operand {big}", [TD(d, t.shape(j, big)) for j, d in enumerate(dts)], None)
        wide = (2**40, 2**19) if t.name == "silu_and_mul" else (2**40, 2**20)
        add(f"inputs broadcast to a {wide} output",
            [TD(dts[0], wide)] + [TD(d, t.shape(j, wide), (0,) * len(t.shape(j, wide)))
                                  if not t.writes(j) else TD(d, wide)
                                  for j, d in enumerate(dts) if j], None)
    elif kind == "none_argument":
        add("handle None", good, S.NULL_POINTER, h=None)
        for k in range(len(good)):
            add(f"'{t.names[k]}' descriptor None", with_operand(k, None),
                None if t.optional(k) else S.NULL_POINTER)
    elif kind == "wrong_operand_count":
        add("one descriptor missing", good[:-1], S.BAD_PARAM)
        add("one descriptor too many", good + [good[-1]], S.BAD_PARAM)
        add("no input descriptor", good[:1], S.BAD_PARAM)
    elif kind == "not_an_array":  # a descriptor argument that is not a TensorDescriptor
        for k in range(len(good)):
            add(f"'{t.names[k]}' is an ndarray", with_operand(k, np.zeros(SHAPE, np.float32)),
                S.BAD_PARAM)
            add(f"'{t.names[k]}' is a shape tuple", with_operand(k, SHAPE), S.BAD_PARAM)
    elif kind == "unknown_device":  # the handle argument is not a Handle
        for bad in ["cpu", "gpu", Device.CPU, 0]:
            add(f"handle {bad!r}", good, S.BAD_PARAM, h=bad)
    return cells


# ---- desc.calculate -----------------------------------------------------------------------


def calculate_cells(t: Target, kind: str, handle) -> list[Cell]:
    cells = []
    nops = len(t.names)

    def call(desc, arrays, label, status, bufs, outputs=(), check=None):
        cells.append(Cell(label, lambda: t.calculate(desc, *arrays), status, list(bufs),
                          list(outputs), check))

    def per_operand_memory(layout, lo_cut, hi_cut, status, what):
        for path, cls in (("numpy", np.ndarray), ("general", Sub)):
            for j in range(nops):
                desc, _, bufs = setup(t, handle, layout)
                lo, hi = bufs[j].desc.reach
                if lo + lo_cut > 0 or hi - hi_cut < 0:
                    continue  # a one-element operand (alpha, c, s) has no such cut
                arrays = [b.view(cls=cls) for b in bufs]
                arrays[j] = bufs[j].reach_memory(lo_cut, hi_cut, cls=cls)
                v = bufs[j].view()
                if arrays[j].shape == v.shape and arrays[j].strides == v.strides:
                    continue  # a contiguous 1-d operand (A_log, param) is its own reach
                call(desc, arrays, f"'{t.names[j]}' {what} ({path} path)", status, bufs)

    if kind == "valid":
        for layout in LAYOUTS:
            for path, cls in (("numpy", np.ndarray), ("general", Sub)):
                desc, _, bufs = setup(t, handle, layout)
                call(desc, [b.view(cls=cls) for b in bufs], f"{layout} ({path} path)", None, bufs,
                     written(t, bufs), expect_output(t, bufs))
        for kname, wrap in ARRAY_KINDS.items():
            desc, _, bufs = setup(t, handle)
            call(desc, [wrap(b.view()) for b in bufs], f"contiguous ({kname})", None, bufs,
                 written(t, bufs), expect_output(t, bufs))
        # the stride of an extent-1 dim moves to no element: any value is fine
        descs = [TD(d, t.shape(j, (1, 4))) for j, d in enumerate(t.dtypes())]
        desc = t.create(handle, *descs)
        bufs = [Buffer(n, TD(d.dtype, d.shape, (9, 1)) if d.shape == (1, 4) else d,
                       values(d.dtype, d.shape, k) if t.reads(k) else None)
                for k, (n, d) in enumerate(zip(t.names, descs))]
        call(desc, [b.view() for b in bufs], "(1, 4) arrays with row stride 9, descriptors 4",
             None, bufs, written(t, bufs), expect_output(t, bufs))
        desc, _, bufs = setup(t, handle)  # read-only inputs are fine
        call(desc, [b.view(writeable=not (t.reads(j) and not t.writes(j)))
                    for j, b in enumerate(bufs)],
             "read-only inputs", None, bufs, written(t, bufs), expect_output(t, bufs))
    elif kind == "wrong_ndim":  # an array must have its descriptor's shape (issue 10)
        per_operand_memory("contiguous", 0, 0, S.BAD_TENSOR_SHAPE, "(12,) holding exactly the reach")
        per_operand_memory("mixed", 0, 0, S.BAD_TENSOR_SHAPE, "(2, 9) holding exactly the reach")
        for kname, wrap in ARRAY_KINDS.items():
            for j in range(nops):
                desc, _, bufs = setup(t, handle)
                arrays = [wrap(b.view()) for b in bufs]
                arrays[j] = wrap(bufs[j].view()[None])
                call(desc, arrays, f"'{t.names[j]}' {(1,) + bufs[j].desc.shape} ({kname})",
                     S.BAD_TENSOR_SHAPE, bufs)
    elif kind == "wrong_strides_array":  # the right shape, other strides (issue 10)
        for kname, wrap in ARRAY_KINDS.items():
            for j in range(nops):
                shape = t.shape(j)
                if len(shape) == 2:
                    choices = [(1, 3), (8, 2), (5, 1), (-4, -1), (0, 1)]
                elif len(shape) == 1 and shape[0] > 1:  # A_log, param: a vector of its own
                    choices = [(2,), (-1,), (0,)]
                else:
                    continue  # 0-d or one element: no stride moves to an element
                for strides in choices:
                    if kname == "torch" and min(strides) < 0:
                        continue  # torch.from_numpy refuses negative strides
                    desc, descs, bufs = setup(t, handle)
                    other = Buffer(f"{t.names[j]} laid out {strides}",
                                   TD(descs[j].dtype, shape, strides),
                                   values(descs[j].dtype, shape, seed=j))
                    arrays = [wrap(b.view()) for b in bufs]
                    arrays[j] = wrap(other.view())
                    call(desc, arrays, f"'{t.names[j]}' strides {strides} ({kname})",
                         S.BAD_TENSOR_STRIDES, bufs + [other])
    elif kind == "short_buffer_high":  # a shorter array has another shape
        per_operand_memory("contiguous", 0, 1, S.BAD_TENSOR_SHAPE, "one element short at the high end")
        per_operand_memory("mixed", 0, 1, S.BAD_TENSOR_SHAPE, "mixed strides, one short at the high end")
    elif kind == "short_buffer_low_negative_strides":
        per_operand_memory("negative", 1, 0, S.BAD_TENSOR_SHAPE,
                           "negative strides, one short at the low end")
    elif kind == "short_buffer_mixed_strides":
        per_operand_memory("mixed", 1, 0, S.BAD_TENSOR_SHAPE, "mixed strides, one short at the low end")
        per_operand_memory("mixed", 1, 1, S.BAD_TENSOR_SHAPE, "mixed strides, one short at both ends")
    elif kind == "wrong_dtype_array":
        for j in range(nops):
            dt = t.dtypes()[j]
            others = {1: [np.int8, np.uint8] if dt is BOOL else [np.uint8, np.bool_],
                      4: [np.int32, np.dtype(">f4"), np.uint32, np.float16]}[dt.itemsize]
            for other in others:
                desc, _, bufs = setup(t, handle)
                arrays = [b.view() for b in bufs]
                isz = np.dtype(other).itemsize
                if isz == bufs[j].isz:
                    arrays[j] = bufs[j].view(np.dtype(other))
                elif bufs[j].desc.numel * bufs[j].isz >= 24 * isz:
                    arrays[j] = bufs[j].memory(0, 23, dtype=other)
                else:
                    continue  # a one-element operand holds no 24 halves
                call(desc, arrays, f"'{t.names[j]}' array is {np.dtype(other)}",
                     S.BAD_TENSOR_DTYPE, bufs)
    elif kind == "readonly_output":
        for layout in LAYOUTS:
            desc, _, bufs = setup(t, handle, layout)
            call(desc, [bufs[0].view(writeable=False)] + [b.view() for b in bufs[1:]],
                 f"{layout}: read-only output", S.BAD_PARAM, bufs)
        desc, _, bufs = setup(t, handle)
        call(desc, [np.broadcast_to(bufs[0].view(), SHAPE)] + [b.view() for b in bufs[1:]],
             "np.broadcast_to view as output", S.BAD_PARAM, bufs)
    elif kind == "partial_overlap":
        for k in range(1, nops):
            for shift in (1, -1, 0.5) if prod(t.shape(k)) > 1 else (-1, 0.5):  # +1: past it
                desc, descs, bufs = setup(t, handle)
                shared = bufs[k]  # the output is carved out of operand k's buffer, shifted
                isz = descs[0].dtype.itemsize
                off = shared.origin + int(shift * isz)
                out = np.ndarray(SHAPE, descs[0].dtype.numpy, buffer=shared.raw, offset=off,
                                 strides=[s * isz for s in descs[0].strides])
                arrays = [out] + [b.view() for b in bufs[1:]]
                call(desc, arrays, f"output shifted by {shift} element over '{t.names[k]}'",
                     S.BAD_PARAM, bufs)
            # exact aliasing is in-place: fine on an input of the output's dtype and layout,
            # refused otherwise (another output, an operand of its own shape, another dtype)
            desc, descs, bufs = setup(t, handle)
            same = descs[k].dtype is descs[0].dtype
            if same and t.aliasable(k):
                arrays = [bufs[k].view()] + [b.view() for b in bufs[1:]]
                call(desc, arrays, f"output is '{t.names[k]}' exactly (in place)", None, bufs,
                     [bufs[k]] + written(t, bufs)[1:], expect_output(t, bufs, {0: bufs[k]}))
            else:
                arrays = [np.ndarray(SHAPE, descs[0].dtype.numpy, buffer=bufs[k].raw,
                                     offset=bufs[k].origin)] + [b.view() for b in bufs[1:]]
                why = "another written operand" if t.writes(k) else (
                    "other itemsize" if not same else "not an input of the output's shape")
                call(desc, arrays, f"output at the same address as '{t.names[k]}' "
                                   f"({descs[k].dtype}, {why})", S.BAD_PARAM, bufs)
        for layout in ("negative", "mixed"):  # overlap through negative strides
            desc, descs, bufs = setup(t, handle, layout)
            isz = descs[0].dtype.itemsize
            k = nops - 1
            if descs[k].dtype is not descs[0].dtype or t.own(k):
                continue  # (an operand of its own shape is laid out contiguous: not below)
            out = np.ndarray(SHAPE, descs[0].dtype.numpy, buffer=bufs[k].raw,
                             offset=bufs[k].origin - isz,
                             strides=[s * isz for s in descs[0].strides])
            call(desc, [out] + [b.view() for b in bufs[1:]],
                 f"{layout}: output one element below '{t.names[k]}'", S.BAD_PARAM, bufs)
    elif kind == "destroyed":
        desc, _, bufs = setup(t, handle)
        desc.destroy()
        call(desc, [b.view() for b in bufs], "after destroy()", S.BAD_PARAM, bufs)
        desc2, _, bufs2 = setup(t, handle)
        with desc2:
            pass
        call(desc2, [b.view() for b in bufs2], "after the with block", S.BAD_PARAM, bufs2)
        desc3, _, bufs3 = setup(t, handle)
        desc3.destroy()
        desc3.destroy()  # twice is fine
        call(desc3, [None] * nops, "after destroy(), with None buffers", S.BAD_PARAM, [])
    elif kind == "unknown_device":
        for j in range(nops):
            dt = t.dtypes()[j]
            for label, foreign in [("torch 'meta' tensor", meta(dt)),
                                   ("__cuda_array_interface__ object",
                                    CudaLike(np.dtype(dt.numpy).str))]:
                desc, _, bufs = setup(t, handle)
                arrays = [b.view() for b in bufs]
                arrays[j] = foreign
                call(desc, arrays, f"'{t.names[j]}' is a {label}", S.BAD_PARAM, bufs)
    elif kind == "none_argument":
        for j in range(nops):
            for bad, what in [(None, "None"), (0, "address 0")]:
                desc, _, bufs = setup(t, handle)
                arrays = [b.view() for b in bufs]
                arrays[j] = bad
                call(desc, arrays, f"'{t.names[j]}' is {what}", S.NULL_POINTER, bufs)
    elif kind == "wrong_operand_count":  # every count mistake is an InfiniError, not TypeError
        desc, _, bufs = setup(t, handle)
        arrays = [b.view() for b in bufs]
        call(desc, arrays[:-1], "one input missing", S.BAD_PARAM, bufs)
        call(desc, arrays + [arrays[-1]], "one input too many", S.BAD_PARAM, bufs)
        cells.append(Cell("no argument at all", lambda: desc.calculate(), S.BAD_PARAM, bufs))
        if t.spec is None:
            cells.append(Cell("a workspace first (rearrange takes none)",
                              lambda: desc.calculate(None, *arrays), S.BAD_PARAM, bufs))
        else:
            c_arrays = t.to_c(arrays)
            cells.append(Cell("the workspace forgotten", lambda: desc.calculate(*c_arrays),
                              S.BAD_PARAM, bufs))
            cells.append(Cell("the workspace only", lambda: desc.calculate(None), S.BAD_PARAM,
                              bufs))
    elif kind == "not_an_array":
        for j in range(nops):
            for bad in [[0.0] * 12, 1.5, "buffer", b"\0" * 48, Junk(), -16, 2**64, True,
                        memoryview(bytearray(48))]:
                desc, _, bufs = setup(t, handle)
                arrays = [b.view() for b in bufs]
                arrays[j] = bad
                call(desc, arrays, f"'{t.names[j]}' is {type(bad).__name__} {str(bad)[:20]}",
                     S.BAD_PARAM, bufs)
    return cells


# ---- the functional front end -------------------------------------------------------------


def functional_cells(t: Target, kind: str) -> list[Cell]:
    """``infiniop.<op>(*args, out=...)``: the arguments are the operands that are not pure
    outputs (C order), ``out=`` the pure outputs (a tuple when there are several). "The output"
    of a cell is the first pure output, or, for the BLAS updates, the first updated argument."""
    spec = t.spec
    ops = spec.operands
    arg_k = [k for k, o in enumerate(ops) if o.role != "out"]
    out_k = [k for k, o in enumerate(ops) if o.role == "out"]
    c_dts = t.to_c(t.dtypes())
    c_shapes = t.to_c([t.shape(j) for j in range(len(t.names))])
    names = [ops[k].name for k in arg_k]
    dts = [c_dts[k] for k in arg_k]  # the arguments' dtypes
    n_in = len(arg_k)
    main = out_k[0] if out_k else next(k for k in arg_k if ops[k].writes)
    main_dt = c_dts[main]
    main_arg = arg_k.index(main) if main in arg_k else None  # an updated argument
    # dequant's output dtype is not implied by its inputs: allocating needs out=
    known = tuple(c_dts[k] if k in arg_k else None for k in range(len(ops)))
    ambiguous = len({s.dtypes[main] for s in spec.candidates(known)}) > 1
    shaped = any(prod(c_shapes[k]) > 1 for k in arg_k if k != main)  # not scal's x alone
    cells = []

    def inputs(dtypes=None, shapes=None):
        bufs = []
        for i, k in enumerate(arg_k):
            d = (dtypes or dts)[i]
            shape = (shapes or [c_shapes[k] for k in arg_k])[i]
            bufs.append(Buffer(names[i], TD(d, shape), values(d, shape, seed=i + 1)))
        return bufs

    def out_buffer(dtype=None, shape=SHAPE, strides=None):
        return Buffer(ops[main].name, TD(dtype or main_dt, shape, strides))

    def call(args, out):
        """The functional call with ``out`` as the output (out= or the updated argument)."""
        args = list(args)
        if main_arg is not None:
            if out is not None:
                args[main_arg] = out
            return spec(*args)
        if out is None and ambiguous:
            out = np.zeros(SHAPE, main_dt.numpy)
        if len(out_k) == 1:
            return spec(*args, out=out)
        rest = tuple(np.zeros(c_shapes[k], c_dts[k].numpy) for k in out_k[1:])
        return spec(*args, out=None if out is None else (out,) + rest)

    def add(label, status, bufs, args, out=None, outputs=(), check=None):
        cells.append(Cell(label, lambda: call(args, out), status, list(bufs), list(outputs),
                          check))

    def check_all(bufs, result_is=None, alias=None):
        """Every written operand after a successful call (result: the returned array(s));
        ``alias``: the argument the output is (in place)."""
        c = [None] * len(ops)
        for i, k in enumerate(arg_k):
            c[k] = np.array(bufs[i].view())
        if alias is not None and main_arg is not None:
            c[main] = c[arg_k[alias]]
        for k in out_k:
            c[k] = np.zeros(c_shapes[k], c_dts[k].numpy)
        want = t.expected([c[k] for k in t.order])

        def check(result):
            got = result if isinstance(result, tuple) else (result,)
            if result_is is not None:
                got = (result_is.view(),) + got[1:]
            for g, w in zip(got, want):
                g = np.asarray(g)
                tol = t.name in CATALOGUE and not CATALOGUE[t.name].exact and g.dtype.kind == "f"
                ok = (np.isclose(g, w, rtol=1e-5, atol=0) | (np.isnan(g) & np.isnan(w))).all() \
                    if tol else np.array_equal(g, w, equal_nan=g.dtype.kind == "f")
                if not ok:
                    return f"wrong result {g}, want {w}"
            return None
        return check

    ins = inputs()
    if kind == "valid":
        if out_k:
            o = out_buffer()
            add("out= given", None, ins + [o], [b.view() for b in ins], o.view(), [o],
                check_all(ins, o))
        if ambiguous:
            cells.append(Cell("out allocated: the output dtype is ambiguous",
                              lambda: spec(*[b.view() for b in ins]), S.BAD_PARAM, ins))
        add("out allocated" if out_k else "updated in place", None, ins,
            [b.view() for b in ins], outputs=[b for i, b in enumerate(ins)
                                               if ops[arg_k[i]].writes],
            check=check_all(ins))
    elif kind == "wrong_dtype":
        for i in range(n_in):
            if dts[i] is BOOL or n_in == 1:
                continue
            d = [F64 if j == i else dt for j, dt in enumerate(dts)]
            if d[i] is dts[i]:
                continue
            bad = inputs(d)
            add(f"input '{names[i]}' float64, others as before", S.BAD_TENSOR_DTYPE, bad,
                [b.view() for b in bad])
        add("complex64 arrays", S.BAD_TENSOR_DTYPE, [],
            [np.ones(c_shapes[k], np.complex64) if dts[i] is not BOOL
             else np.ones(c_shapes[k], bool) for i, k in enumerate(arg_k)])
        if spec.name == "where":
            bad = inputs([F32, F32, F32])
            add("cond float32", S.BAD_TENSOR_DTYPE, bad, [b.view() for b in bad])
        elif not spec.candidates(tuple(BOOL if k in arg_k else None for k in range(len(ops)))):
            add("bool arrays (no signature accepts them)", S.BAD_TENSOR_DTYPE, [],
                [np.ones(c_shapes[k], bool) for k in arg_k])
    elif kind == "wrong_ndim":
        o = out_buffer(shape=(12,))
        add("output (12,) for (3, 4) inputs", S.BAD_TENSOR_SHAPE if shaped else None, ins + [o],
            [b.view() for b in ins], o.view(), [o], None if shaped else (lambda r: None))
    elif kind == "not_broadcastable":
        for i in range(n_in if n_in > 1 else 0):  # one input: any shape is its own broadcast
            shapes = [c_shapes[k] for k in arg_k]
            shapes[i] = (3, 5)
            if not any(s == SHAPE for s in shapes):
                continue  # scal: x alone decides the shape
            bad = inputs(shapes=shapes)
            add(f"'{names[i]}' (3, 5)", S.BAD_TENSOR_SHAPE, bad, [b.view() for b in bad])
        o = out_buffer(shape=(3, 1))
        add("output (3, 1)", S.BAD_TENSOR_SHAPE if shaped else None, ins + [o],
            [b.view() for b in ins], o.view(), [o], None if shaped else (lambda r: None))
    elif kind == "broadcast_output":
        o = out_buffer(shape=(4,))
        isz = main_dt.itemsize
        out = np.lib.stride_tricks.as_strided(o.view(), SHAPE, (0, isz))  # writable 0-stride
        add("writable 0-stride output", S.BAD_TENSOR_STRIDES, ins + [o], [b.view() for b in ins],
            out)
    elif kind == "self_overlapping_output":
        o = out_buffer(shape=(6,))
        isz = main_dt.itemsize
        out = np.lib.stride_tricks.as_strided(o.view(), SHAPE, (isz, isz))
        add(f"writable output with strides ({isz}, {isz}) bytes", S.BAD_TENSOR_STRIDES,
            ins + [o], [b.view() for b in ins], out)
    elif kind == "wrong_dtype_array":
        for dt in (F64, I32, DType.F16):
            if spec.candidates(tuple(dt if k == main else d for k, d in enumerate(known))):
                continue  # an output dtype the operator accepts (dequant: float16)
            o = out_buffer(dtype=dt)
            add(f"output {dt}", S.BAD_TENSOR_DTYPE, ins + [o], [b.view() for b in ins], o.view())
    elif kind == "readonly_output":
        o = out_buffer()
        add("read-only output", S.BAD_PARAM, ins + [o], [b.view() for b in ins],
            o.view(writeable=False))
    elif kind == "partial_overlap":
        for i in range(n_in):
            if dts[i] is BOOL or i == main_arg or c_shapes[arg_k[i]] != SHAPE:
                continue
            npdt = dts[i].numpy
            shared = Buffer("shared", TD(dts[i], (13,)), np.arange(1, 14).astype(npdt))
            others = [b.view() for b in ins]
            others[i] = shared.memory(0, 11).reshape(SHAPE)
            out = np.ndarray(SHAPE, main_dt.numpy, buffer=shared.raw,
                             offset=shared.origin + main_dt.itemsize)
            add(f"output shifted by one element over '{names[i]}'", S.BAD_PARAM,
                ins + [shared], others, out)
            if dts[i] is main_dt and t.aliasable(t.order.index(arg_k[i])):
                inplace = inputs()
                arrays = [b.view() for b in inplace]
                add(f"output is '{names[i]}' (in place)", None, inplace, arrays, arrays[i],
                    [inplace[i]] + [b for j, b in enumerate(inplace) if ops[arg_k[j]].writes],
                    check_all(inplace, inplace[i], alias=i))
        for i in range(n_in):  # an operand of its own shape (alpha...) inside the output
            if dts[i] is not main_dt or c_shapes[arg_k[i]] == SHAPE or ops[arg_k[i]].writes:
                continue
            o = out_buffer()
            n = int(np.prod(c_shapes[arg_k[i]]))
            arrays = [b.view() for b in ins]
            arrays[i] = o.memory(0, n - 1).reshape(c_shapes[arg_k[i]])
            add(f"'{names[i]}' inside the output", S.BAD_PARAM, ins + [o], arrays, o.view())
    elif kind == "unknown_device":
        for i in range(n_in):
            arrays = [b.view() for b in ins]
            arrays[i] = meta(dts[i], c_shapes[arg_k[i]])
            add(f"'{names[i]}' is a torch 'meta' tensor", S.BAD_PARAM, ins, arrays)
        if out_k:
            add("out is a torch 'meta' tensor", S.BAD_PARAM, ins,
                [torch.from_numpy(np.array(b.view())) for b in ins], meta(main_dt))
    elif kind == "none_argument":
        for i in range(n_in):
            arrays = [b.view() for b in ins]
            arrays[i] = None
            ok = ops[arg_k[i]].optional
            add(f"'{names[i]}' is None" + (" (optional)" if ok else ""),
                None if ok else S.NULL_POINTER, ins, arrays,
                outputs=[b for j, b in enumerate(ins) if ops[arg_k[j]].writes],
                check=None if not ok else (lambda r: None))
    elif kind == "wrong_operand_count":
        arrays = [b.view() for b in ins]
        if not ops[arg_k[-1]].optional:
            add("one input missing", S.BAD_PARAM, ins, arrays[:-1])
        add("one input too many", S.BAD_PARAM, ins, arrays + [arrays[-1]])
    elif kind == "not_an_array":
        for i in range(n_in):
            for bad in [[1.0] * 4, "x", Junk(), b"\0" * 16]:
                arrays = [b.view() for b in ins]
                arrays[i] = bad
                add(f"'{names[i]}' is {type(bad).__name__}", S.BAD_PARAM, ins, arrays)
        if out_k:
            for bad in [[0.0] * 12, "out", Junk(), 12345]:
                add(f"out is {type(bad).__name__}", S.BAD_PARAM, ins, [b.view() for b in ins],
                    bad)
    elif kind == "odd_byte_strides":  # byte strides that are not multiples of the itemsize
        for i in range(n_in):
            if dts[i].itemsize != 4 or c_shapes[arg_k[i]] != SHAPE:
                continue
            b = Buffer("odd", TD(dts[i], (20,)), np.arange(20).astype(dts[i].numpy))
            arrays = [x.view() for x in ins]
            arrays[i] = np.lib.stride_tricks.as_strided(b.view(), SHAPE, (24, 6))
            add(f"'{names[i]}' with byte strides (24, 6)", S.BAD_TENSOR_STRIDES,
                ins + [b], arrays)
        if out_k and main_dt.itemsize > 1:  # any byte stride fits a 1-byte bool output
            o = Buffer("out", TD(main_dt, (20,)))
            out = np.lib.stride_tricks.as_strided(o.view(), SHAPE, (24, 6))
            add("out with byte strides (24, 6)", S.BAD_TENSOR_STRIDES, ins + [o],
                [b.view() for b in ins], out)
    elif kind == "bad_scalar":
        int_dtype = I8 if I8 in spec.dtypes else None
        for i in range(n_in):
            if dts[i] is BOOL:
                continue
            for scalar in ([1000, -129, 2**70, float("nan"), float("inf")] if int_dtype else []):
                arrays = [np.ones(SHAPE, np.bool_ if dts[j] is BOOL else np.int8)
                          for j in range(n_in)]
                arrays[i] = scalar
                if all(not isinstance(a, np.ndarray) or a.dtype == bool for a in arrays):
                    continue  # no array fixes the dtype
                add(f"'{names[i]}' = {scalar!r} with int8 arrays", S.BAD_PARAM, [], arrays)
            arrays = [b.view() for b in ins]
            arrays[i] = 1 + 2j
            add(f"'{names[i]}' = complex scalar", S.BAD_PARAM, ins, arrays)
    return cells


# ---- rearrange(x, pattern, **sizes) and copy_(dst, src) -----------------------------------


X3 = (2, 3, 4)


def pattern_cells(kind: str) -> list[Cell]:
    cells = []
    src = Buffer("x", TD(F32, X3), np.arange(24, dtype=np.float32).reshape(X3))

    def add(label, status, x, pattern, isolate=None, xfail=None, check=None, **sizes):
        cells.append(Cell(label, (lambda: rearrange(x, pattern, **sizes)) if isolate is None
                          else None, status, [src], [], check, isolate, xfail))

    x = src.view()
    if kind == "valid":
        want = np.ascontiguousarray(np.array(x).transpose(2, 0, 1))
        add("a b c -> c a b", None, x, "a b c -> c a b",
            check=lambda r: None if np.array_equal(r, want) else f"wrong result {r}")
        add("read-only input", None, src.view(writeable=False), "a b c -> c a b",
            check=lambda r: None if np.array_equal(r, want) else f"wrong result {r}")
    elif kind == "wrong_dtype":
        add("complex64 input", S.BAD_TENSOR_DTYPE, np.ones(X3, np.complex64), "a b c -> c b a")
        add("object input", S.BAD_TENSOR_DTYPE, np.ones(X3, object), "a b c -> c b a")
        add("big-endian float32 input", S.BAD_TENSOR_DTYPE, np.ones(X3, ">f4"), "a b c -> c b a")
    elif kind == "wrong_ndim":
        for p in ["a b -> b a", "a b c d -> d c b a", "a (b c) d e -> a b c d e", "-> ",
                  "a b c () -> a b c"]:
            add(f"{p!r} on a 3-d input", S.BAD_PARAM, x, p)
    elif kind == "not_broadcastable":  # axis sizes that do not fit the extents
        add("(a b) with a=5 on extent 2", S.BAD_PARAM, x, "(a b) c d -> a b c d", a=5)
        add("(a b) with neither size", S.BAD_PARAM, x, "(a b) c d -> a b c d")
        add("(b1 b2) with b1=0", S.BAD_PARAM, x, "a (b1 b2) c -> a b1 b2 c", b1=0)
        add("a=3 on extent 2", S.BAD_PARAM, x, "a b c -> c b a", a=3)
    elif kind == "negative_extent":
        add("a=-1", S.BAD_PARAM, x, "a b c -> a b c", a=-1)
        add("(b1 b2) with b1=-3", S.BAD_PARAM, x, "a (b1 b2) c -> a b1 b2 c", b1=-3)
    elif kind == "huge_span":
        add("b1=2**70", S.BAD_PARAM, x, "a (b1 b2) c -> a b1 b2 c", b1=2**70)
        add("(c d) with c=d=2**40", S.BAD_PARAM, x, "a b (c d) -> a b c d", c=2**40, d=2**40)
        add("(c d e) with c=d=2**31", S.BAD_PARAM, x, "a b (c d e) -> a b c d e", c=2**31, d=2**31)
    elif kind == "unknown_device":
        add("torch 'meta' tensor input", S.BAD_PARAM, None, "a b -> b a", isolate="""
            import torch
            from infiniop.rearrange import rearrange
            expect_error(Status.BAD_PARAM, rearrange, torch.ones(4, 3, device="meta"), "a b -> b a")
            """)
        add("__cuda_array_interface__ input", S.BAD_PARAM, None, "a b -> b a", isolate="""
            from infiniop.rearrange import rearrange
            class C:
                __cuda_array_interface__ = {"shape": (4, 3), "typestr": "<f4",
                                            "data": (0x7F0000000000, False), "version": 3}
            expect_error(Status.BAD_PARAM, rearrange, C(), "a b -> b a")
            """)
    elif kind == "none_argument":
        add("x is None", S.NULL_POINTER, None, "a -> a")
        add("pattern is None", S.BAD_PARAM, x, None)
    elif kind == "not_an_array":
        for bad in [[1.0, 2.0], "abc", Junk(), 12345, 1.5]:
            add(f"x is {type(bad).__name__}", S.BAD_PARAM, bad, "a -> a")
    elif kind == "bad_pattern":
        for p in ["", "a b c", "a b c -> a b c -> a b c", "a b c -> a b", "a b c -> a b c d",
                  "a a b -> a b", "a b c -> c b a a", "(a b c -> a b c", "a b c) -> a b c",
                  "((a) b) c -> a b c", "a b c -> 2 a b c", "a b c -> 0 a b c", "a ... ... -> a",
                  "(...) -> ...", "a b c -> (a ...) b c", "é b c -> é b c", "a-b c -> a b c",
                  "a b c -> a b c\x00", "a b c -> a b c 99999999999999999999", b"a b c -> a b c",
                  123]:
            add(f"pattern {p!r}", S.BAD_PARAM, x, p)
        add("pattern is a list", S.BAD_PARAM, x, ["a b c -> a b c"])
    elif kind == "bad_axis_size":
        for v in [2.0, True, "2", None, 2 + 0j, np.float32(2)]:
            add(f"a={v!r}", S.BAD_PARAM, x, "a b c -> a b  c", a=v)  # a pattern no one caches
        add("size for an axis not in the pattern", S.BAD_PARAM, x, "a b c -> a b c", z=1)
        cells.append(Cell(
            "a=2.0 after a=2 was cached (the plan cache must not conflate 2 and 2.0)",
            lambda: (rearrange(x, "a b c -> c b a", a=2), rearrange(x, "a b c -> c b a", a=2.0)),
            S.BAD_PARAM, [src]))
    return cells


def copy_cells(kind: str) -> list[Cell]:
    cells = []

    def pair(dst_desc=None, src_desc=None):
        d = Buffer("dst", dst_desc or TD(F32, SHAPE))
        s = Buffer("src", src_desc or TD(F32, SHAPE), values(F32, (src_desc or TD(F32, SHAPE)).shape))
        return d, s

    def add(label, status, bufs, dst, src, outputs=(), check=None, xfail=None):
        cells.append(Cell(label, lambda: copy_(dst, src), status, list(bufs), list(outputs), check,
                          xfail=xfail))

    def same_as(d, s):
        want = np.array(np.broadcast_to(s.view(), d.desc.shape))
        return lambda _: None if np.array_equal(d.view(), want) else "wrong copy"

    if kind == "valid":
        for layout in LAYOUTS.values():
            d, s = pair(TD(F32, SHAPE, layout))
            add(f"dst strides {layout}", None, [d, s], d.view(), s.view(), [d], same_as(d, s))
        d, s = pair(src_desc=TD(F32, (4,)))
        add("src broadcasts (4,) -> (3, 4)", None, [d, s], d.view(), s.view(), [d], same_as(d, s))
        d, s = pair()
        add("src read-only", None, [d, s], d.view(), s.view(writeable=False), [d], same_as(d, s))
    elif kind == "wrong_dtype":
        for dt in (F64, I32):
            d, s = pair(src_desc=TD(dt, SHAPE))
            add(f"src {dt}, dst float32", S.BAD_TENSOR_DTYPE, [d, s], d.view(), s.view())
    elif kind == "wrong_ndim":
        d, s = pair(src_desc=TD(F32, (2,) + SHAPE))
        add("src 3-d, dst 2-d", S.BAD_TENSOR_SHAPE, [d, s], d.view(), s.view())
    elif kind == "not_broadcastable":
        for shape in [(3, 5), (3,), (2, 4)]:
            d, s = pair(src_desc=TD(F32, shape))
            add(f"src {shape}", S.BAD_TENSOR_SHAPE, [d, s], d.view(), s.view())
    elif kind == "broadcast_output":
        d, s = pair(TD(F32, (4,)))
        add("writable 0-stride dst", S.BAD_TENSOR_STRIDES, [d, s],
            np.lib.stride_tricks.as_strided(d.view(), SHAPE, (0, 4)), s.view())
        d, s = pair()
        add("np.broadcast_to dst (read-only too)", S.BAD_TENSOR_STRIDES, [d, s],
            np.broadcast_to(d.view()[:1], SHAPE), s.view())
    elif kind == "self_overlapping_output":
        d, s = pair(TD(F32, (6,)))
        add("dst with strides (4, 4) bytes", S.BAD_TENSOR_STRIDES, [d, s],
            np.lib.stride_tricks.as_strided(d.view(), SHAPE, (4, 4)), s.view())
    elif kind == "readonly_output":
        d, s = pair()
        add("read-only dst", S.BAD_PARAM, [d, s], d.view(writeable=False), s.view())
    elif kind == "partial_overlap":
        shared = Buffer("shared", TD(F32, (13,)), np.arange(1, 14, dtype=np.float32))
        a = shared.memory(0, 11).reshape(SHAPE)
        b = np.ndarray(SHAPE, np.float32, buffer=shared.raw, offset=shared.origin + 4)
        add("dst one element after src", S.BAD_PARAM, [shared], b, a)
        add("dst one element before src", S.BAD_PARAM, [shared], a, b)
        add("dst is src transposed (same memory)", S.BAD_PARAM, [shared],
            a[:, :3], a[:3, :3].T)
        d, s = pair()
        add("dst is src (same layout): nothing to do", None, [d], d.view(), d.view(), [d])
    elif kind == "unknown_device":
        d, s = pair()
        add("src is a torch 'meta' tensor", S.BAD_PARAM, [d, s], d.view(), meta(F32))
        add("dst is a torch 'meta' tensor", S.BAD_PARAM, [d, s], meta(F32), s.view())
        add("src is a __cuda_array_interface__ object", S.BAD_PARAM, [d, s], d.view(), CudaLike())
    elif kind == "none_argument":
        d, s = pair()
        add("dst is None", S.NULL_POINTER, [d, s], None, s.view())
        add("src is None", S.NULL_POINTER, [d, s], d.view(), None)
    elif kind == "not_an_array":
        d, s = pair()
        for bad in [[0.0] * 12, "x", Junk(), 1.5]:
            add(f"dst is {type(bad).__name__}", S.BAD_PARAM, [d, s], bad, s.view())
            add(f"src is {type(bad).__name__}", S.BAD_PARAM, [d, s], d.view(), bad)
        add("dst is an int address", S.BAD_PARAM, [d, s], d.view().ctypes.data, s.view())
        add("src is an int address", S.BAD_PARAM, [d, s], d.view(), s.view().ctypes.data)
    elif kind == "odd_byte_strides":
        o = Buffer("odd", TD(F32, (20,)), np.arange(20, dtype=np.float32))
        d, s = pair()
        add("src with byte strides (24, 6)", S.BAD_TENSOR_STRIDES, [d, s, o], d.view(),
            np.lib.stride_tricks.as_strided(o.view(), SHAPE, (24, 6)))
        add("dst with byte strides (24, 6)", S.BAD_TENSOR_STRIDES, [d, s, o],
            np.lib.stride_tricks.as_strided(o.view(), SHAPE, (24, 6)), s.view())
    return cells


# ---- TensorDescriptor and create_handle ---------------------------------------------------


def descriptor_cells(kind: str) -> list[Cell]:
    cells = []

    def add(label, status, *args):
        cells.append(Cell(label, lambda: TD(*args), status))
        if len(args) == 3:  # the C-API spelling too
            cells.append(Cell(label + " (create_tensor_descriptor)",
                              lambda: infiniop.create_tensor_descriptor(args[1], args[2], args[0]),
                              status))

    if kind == "valid":
        add("(3, 4) row-major", None, F32, SHAPE, None)
        add("empty with an extent of 2**63 - 1", None, I8, (2**63 - 1, 0), None)
    elif kind == "wrong_dtype":
        for bad in ["complex64", "float128", np.complex64, "O", 0, 15, 3.5, object(), "", "complex"]:
            add(f"dtype {bad!r}", S.BAD_TENSOR_DTYPE, bad, SHAPE, None)
    elif kind == "negative_extent":
        for shape in [(-1,), (3, -4), (0, -1), -5]:
            add(f"shape {shape}", S.BAD_TENSOR_SHAPE, F32, shape, None)
    elif kind == "strides_wrong_length":
        for shape, strides in [(SHAPE, (1,)), (SHAPE, (4, 1, 1)), ((), (1,)), ((5,), ())]:
            add(f"shape {shape} strides {strides}", S.BAD_TENSOR_STRIDES, F32, shape, strides)
    elif kind == "huge_span":
        add("extent 2**63", S.BAD_TENSOR_SHAPE, I8, (2**63,), None)
        add("extent 2**64 + 1", S.BAD_TENSOR_SHAPE, I8, (2**64 + 1,), None)
        add("2**62 float32 elements (2**64 bytes)", S.BAD_TENSOR_SHAPE, F32, (2**31, 2**31), None)
        add("(2**32, 2**32) int8 (2**64 bytes)", S.BAD_TENSOR_SHAPE, I8, (2**32, 2**32), None)
        add("stride 2**62 on float32 (2**64-byte step)", S.BAD_TENSOR_STRIDES, F32, (2,), (2**62,))
        add("strides spanning 2**63 + bytes", S.BAD_TENSOR_STRIDES, I8, (3, 3),
            (2**62, -(2**62)))
        add("stride -2**63", S.BAD_TENSOR_STRIDES, I8, (1,), (-(2**63),))
    elif kind == "none_argument":
        add("dtype None", S.BAD_TENSOR_DTYPE, None, SHAPE, None)
        add("shape None", S.BAD_PARAM, F32, None, None)
    elif kind == "not_an_array":  # values that are not ints
        for shape, strides in [((2.0, 3), None), ((True, 3), None), (("3",), None),
                               ((None,), None), (SHAPE, (4.0, 1)), (SHAPE, (4, None)),
                               (SHAPE, 4), ("34", None), (np.ones((1, 2)), None),
                               (((3,), 4), None), (SHAPE, (np.float64(4), 1))]:
            add(f"shape {shape!r} strides {strides!r}", S.BAD_PARAM, F32, shape, strides)
    return cells


def handle_cells(kind: str) -> list[Cell]:
    cells = []
    if kind == "valid":
        for dev in ["cpu", Device.CPU, 0]:
            cells.append(Cell(f"create_handle({dev!r})", lambda d=dev: infiniop.create_handle(d), None))
    elif kind == "unknown_device":
        for bad in ["gpu", "cuda", "CPU0", "", 99, -1, 2.0, b"cpu"]:
            cells.append(Cell(f"create_handle({bad!r})", lambda b=bad: infiniop.create_handle(b),
                              S.BAD_PARAM))
        cells.append(Cell("cambricon (no backend)", lambda: infiniop.create_handle(Device.CAMBRICON),
                          S.DEVICE_TYPE_NOT_SUPPORTED))
        cells.append(Cell("cpu device 1", lambda: infiniop.create_handle("cpu", 1),
                          S.DEVICE_NOT_FOUND))
        for bad_id in [-1, 1.0, "0", True]:
            cells.append(Cell(f"device_id {bad_id!r}",
                              lambda b=bad_id: infiniop.create_handle("cpu", b), S.BAD_PARAM))
    elif kind == "none_argument":
        cells.append(Cell("create_handle(None)", lambda: infiniop.create_handle(None), S.BAD_PARAM))
    return cells


# ---------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------

_ARR = "calculate takes memory, not a layout: the layout is the descriptor's, checked by create"
_TD = "a TensorDescriptor with it cannot exist: the constructor refuses it (row 'descriptor')"
_OWN = "the front end allocates its output"
_SIG = "fixed Python signature: a wrong argument count is Python's TypeError"
_WS = ("every built-in operator has workspace_size 0 (test_workspace_sizes); the base class "
       "check is tested in test_foundation.py::test_operator_descriptor_workspace")
_NO_BUF = "takes no buffer"
_ARRAYS = "NumPy/torch arrays carry their own layout and always hold it"
_HUGE_RUN = ("running a huge-reach descriptor on small arrays could crash the run: it is in "
             "test_isolation.py::test_huge_reach_*")
_CREATE_RUN = "checked when the descriptor is run, not created (row 'calculate')"

NOT_APPLICABLE = {
    "descriptor": {
        **{k: "a descriptor has no operands" for k in [
            "wrong_ndim", "not_broadcastable", "broadcast_output", "self_overlapping_output",
            "partial_overlap", "wrong_operand_count"]},
        **{k: _NO_BUF for k in [
            "short_buffer_high", "short_buffer_low_negative_strides", "short_buffer_mixed_strides",
            "wrong_dtype_array", "readonly_output", "workspace_too_small"]},
        "destroyed": "immutable value, nothing to destroy",
        "unknown_device": "device-independent (a handle carries the device)",
    },
    "handle": {k: "create_handle only takes a device" for k in KINDS
               if k not in ("unknown_device", "none_argument")},
    "create": {
        "negative_extent": _TD, "strides_wrong_length": _TD,
        **{k: _CREATE_RUN for k in [
            "short_buffer_high", "short_buffer_low_negative_strides", "short_buffer_mixed_strides",
            "wrong_dtype_array", "readonly_output", "partial_overlap", "workspace_too_small",
            "destroyed"]},
    },
    "create:rearrange": {"wrong_operand_count": _SIG},
    "calculate": {
        **{k: _ARR for k in ["wrong_dtype", "not_broadcastable", "broadcast_output",
                             "self_overlapping_output"]},
        "negative_extent": _TD, "strides_wrong_length": _TD, "workspace_too_small": _WS,
        "huge_span": _HUGE_RUN,
    },
    "functional": {
        **{k: _ARRAYS for k in ["negative_extent", "strides_wrong_length", "short_buffer_high",
                                "short_buffer_low_negative_strides", "short_buffer_mixed_strides",
                                "huge_span"]},
        "workspace_too_small": "no workspace", "destroyed": "descriptors are cached, never exposed",
    },
    "pattern": {
        **{k: _OWN for k in ["broadcast_output", "self_overlapping_output", "readonly_output",
                             "partial_overlap", "wrong_dtype_array", "short_buffer_high",
                             "short_buffer_low_negative_strides", "short_buffer_mixed_strides"]},
        "strides_wrong_length": _ARRAYS, "workspace_too_small": "no workspace",
        "destroyed": "descriptors are cached, never exposed", "wrong_operand_count": _SIG,
    },
    "copy_": {
        **{k: _ARRAYS for k in ["negative_extent", "strides_wrong_length", "short_buffer_high",
                                "short_buffer_low_negative_strides", "short_buffer_mixed_strides",
                                "huge_span"]},
        "wrong_dtype_array": "the dtypes of dst and src are the arrays' own: see wrong_dtype",
        "workspace_too_small": "no workspace", "destroyed": "descriptors are cached, never exposed",
        "wrong_operand_count": _SIG,
    },
}


def family(entry: str) -> str:
    return entry.split(":")[0]


def not_applicable(entry: str, kind: str) -> str | None:
    return NOT_APPLICABLE.get(entry, {}).get(kind) or NOT_APPLICABLE.get(family(entry), {}).get(kind)


ENTRIES = (["descriptor", "handle"] + [f"create:{t.name}" for t in TARGETS]
           + [f"calculate:{t.name}" for t in TARGETS] + [f"functional:{t.name}" for t in EW_TARGETS]
           + ["pattern", "copy_"])
TARGET = {t.name: t for t in TARGETS}


def build(entry: str, kind: str, handle) -> list[Cell]:
    fam, _, name = entry.partition(":")
    if fam == "descriptor":
        return descriptor_cells(kind)
    if fam == "handle":
        return handle_cells(kind)
    if fam == "create":
        return create_cells(TARGET[name], kind, handle)
    if fam == "calculate":
        return calculate_cells(TARGET[name], kind, handle)
    if fam == "functional":
        return functional_cells(TARGET[name], kind)
    if fam == "pattern":
        return pattern_cells(kind)
    return copy_cells(kind)


def _applicable():
    for entry in ENTRIES:
        for kind in KINDS + [k for k, fams in EXTRA_KINDS.items() if family(entry) in fams]:
            if not_applicable(entry, kind) is None:
                yield pytest.param(entry, kind, id=f"{entry}-{kind}")


@pytest.mark.parametrize("entry, kind", list(_applicable()))
def test_bad_input(entry, kind, handle):
    cells = build(entry, kind, handle)
    assert cells, f"{entry} x {kind}: no cell built and no NOT_APPLICABLE reason"
    failures, expected = [], []
    for cell in cells:
        problem = run_cell(cell)
        if cell.xfail is not None:
            if problem is None:
                failures.append(f"[{cell.label}] passes now: remove its xfail ({cell.xfail})")
            else:
                expected.append(f"[{cell.label}] {cell.xfail}")
        elif problem is not None:
            failures.append(f"[{cell.label}] {problem}")
    if failures:
        pytest.fail(f"{entry} x {kind}: {len(failures)} of {len(cells)} cells fail:\n"
                    + "\n".join(failures), pytrace=False)
    if expected:
        pytest.xfail("known bugs: " + "; ".join(dict.fromkeys(expected)))


def test_matrix_is_complete(handle):
    """Every (entry point, core kind) pair has cells or a written reason why it cannot exist."""
    missing = []
    for entry in ENTRIES:
        for kind in KINDS:
            if not_applicable(entry, kind) is None and not build(entry, kind, handle):
                missing.append(f"{entry} x {kind}")
    assert not missing, "cells with neither a case nor a reason:\n" + "\n".join(missing)


def test_workspace_sizes(handle):
    """No built-in descriptor needs a workspace, so there is no 'too small' to test (the
    contract is tested on the base class); a workspace passed anyway is ignored."""
    for t in TARGETS:
        desc, _, bufs = setup(t, handle)
        assert desc.workspace_size == 0, t.name
        if t.spec is not None:
            desc.calculate(np.zeros(4, np.uint8), *t.to_c([b.view() for b in bufs]))


def test_canaries_catch_a_stray_write():
    """The harness itself: a write one element past an operand is reported."""
    b = Buffer("x", TD(F32, SHAPE), values(F32))
    cell = Cell("stray", lambda: b.memory(0, 12).__setitem__(12, 1.0), None, [b], [b])
    assert "outside its output" in run_cell(cell)
    b2 = Buffer("y", TD(F32, SHAPE), values(F32))

    def fail_after_write():
        b2.view()[0, 0] = 99.0
        raise InfiniError(S.BAD_PARAM, "late check")
    assert "the operand itself" in run_cell(Cell("late", fail_after_write, S.BAD_PARAM, [b2]))
    assert "non-InfiniError" in run_cell(Cell("type", lambda: [][1], S.BAD_PARAM))
