"""RowInfo: everything about a row call that depends only on descriptors, decided once."""

from __future__ import annotations

from dataclasses import dataclass

from ..elementwise.plan import OverlapCheck
from ..layout import Layout, broadcast_shape, broadcast_strides, check_writable_layout, normalize
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from .spec import RowProgram, RowSpec


@dataclass(frozen=True)
class RowInfo:
    """The validated plan of one row call.

    ``shape`` is the row outputs' shape, ``axis`` the reduced axis (>= 0), ``n`` the row length
    and ``rows`` the number of rows. ``layout`` is the normalised iteration space over the rows
    (every dim but the axis; kernel slot order, see RowProgram), ``axis_strides`` each slot's
    stride along the axis (col slots: their own; stat slots: 0), ``pattern`` per slot how the
    axis moves ('1' unit, '0' broadcast, 'g' other), ``kind`` 'row' (a row is walked in place)
    or 'col' (the axis is strided and the innermost row dim is dense: rows are processed side by
    side), ``slot_offsets`` each slot's element offset of the iteration origin. With a causal
    operator the layout keeps the original dims in order (the last one is the mask's row index).
    """

    spec: RowSpec
    program: RowProgram
    descs: tuple[TensorDescriptor | None, ...]
    params: tuple
    shape: tuple[int, ...]
    axis: int
    n: int
    layout: Layout
    axis_strides: tuple[int, ...]
    pattern: str
    kind: str
    slot_offsets: tuple[int, ...]
    checks: tuple[OverlapCheck, ...]

    @property
    def rows(self) -> int:
        return self.layout.numel

    @property
    def numel(self) -> int:
        return self.rows * self.n

    @property
    def empty(self) -> bool:
        """Nothing to compute: no rows (rows of length 0 still have statistics)."""
        return self.rows == 0


def plan(spec: RowSpec, descs: tuple, values: tuple, axis: int | None) -> RowInfo:
    ops = spec.operands
    names = [o.name for o in ops]
    present = tuple(d is not None for d in descs)
    sig = spec.match(tuple(d.dtype if d is not None else None for d in descs))
    program = spec.program(sig, present)
    row_out = [k for k, o in enumerate(ops) if o.writes and o.kind == "row"]
    shape = descs[row_out[0]].shape
    ndim = len(shape)
    if axis is None:
        if ndim == 0:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"{spec.name}: operand '{names[row_out[0]]}'"
                              " is 0-d; rows need at least one dim")
        axis = ndim - 1
    elif not -ndim <= axis < ndim:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: {spec.axis}={axis} is out of range for "
                          f"{ndim}-d operands")
    axis %= ndim
    n = shape[axis]
    if spec.causal:
        if ndim < 2 or shape[-1] < shape[-2]:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"{spec.name}: shape {shape}: needs at least "
                              "2 dims and shape[-1] >= shape[-2] (every row keeps a column)")
    outer = tuple(d for d in range(ndim) if d != axis)
    stat_shape = tuple(shape[d] for d in outer)
    row_in = []
    for k, (o, d) in enumerate(zip(ops, descs)):
        if d is None:
            continue
        if o.kind == "col":
            if d.shape != (n,):
                raise InfiniError(Status.BAD_TENSOR_SHAPE, f"{spec.name}: operand '{o.name}' has "
                                  f"shape {d.shape}; it must be ({n},), the row length")
        elif o.kind == "stat":
            if d.shape != stat_shape:
                raise InfiniError(Status.BAD_TENSOR_SHAPE, f"{spec.name}: operand '{o.name}' has "
                                  f"shape {d.shape}; one value per row is {stat_shape}")
        elif o.writes:
            if d.shape != shape:
                raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{o.name}': shape {d.shape}, "
                                  f"but '{names[row_out[0]]}' has {shape}")
        else:
            broadcast_strides(d, shape, o.name)
            row_in.append(k)
        if o.writes:
            check_writable_layout(d, o.name)
    expected = broadcast_shape([descs[k].shape for k in row_in], [names[k] for k in row_in])
    if row_in and expected != shape:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{names[row_out[0]]}': shape {shape}, "
                          f"but the inputs broadcast to {expected}")

    outer_strides, axis_strides = [], []
    for s, kind in zip(program.slots, program.kinds):
        d = descs[s.operand]
        if kind == "col":
            outer_strides.append((0,) * len(outer))
            axis_strides.append(d.strides[0] if n > 1 else 1)
        elif kind == "stat":
            outer_strides.append(d.strides)
            axis_strides.append(0)
        else:
            st = broadcast_strides(d, shape, names[s.operand])
            outer_strides.append(tuple(st[k] for k in outer))
            axis_strides.append(st[axis] if n > 1 else 1)
    outer_shape = tuple(shape[d] for d in outer)
    if spec.causal:
        lay = Layout(outer_shape, tuple(outer_strides), (0,) * len(program.slots))
    else:
        lay = normalize(outer_shape, outer_strides)
    pattern = "".join("1" if a == 1 else "0" if a == 0 else "g" for a in axis_strides)
    kind = "row"
    inner_ok = all(st[-1] == 1 if (s.store is not None) else st[-1] in (0, 1)
                   for s, kd, st in zip(program.slots, program.kinds, lay.strides) if kd == "row")
    if not spec.causal and n > 1 and pattern[0] != "1" and lay.shape[-1] > 1 and inner_ok:
        kind = "col"

    checks = []
    for w, o in enumerate(ops):
        if not o.writes:
            continue
        for k, d in enumerate(descs):
            if k == w or d is None or (ops[k].writes and k < w):
                continue
            kd = d
            if ops[k].reads and ops[k].kind == "row":
                kd = TensorDescriptor(d.dtype, shape, broadcast_strides(d, shape, names[k]))
            aliasable = (ops[k].reads and ops[k].kind == "row" and o.kind == "row"
                         and d.dtype.itemsize == descs[w].dtype.itemsize
                         and all(a == b or m == 1 for a, b, m in
                                 zip(descs[w].strides, kd.strides, shape)))
            checks.append(OverlapCheck(w, k, (descs[w], kd), aliasable))
    return RowInfo(spec, program, tuple(descs), tuple(values), shape, axis, n, lay,
                   tuple(axis_strides), pattern, kind, tuple(lay.offsets), tuple(checks))
