"""ElementwiseInfo: everything about a call that depends only on descriptors, decided once."""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import Layout, broadcast_shape, broadcast_strides, check_writable_layout, normalize
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from .spec import ElementwiseSpec, Program


@dataclass(frozen=True)
class OverlapCheck:
    """At calculate: written operand ``w`` against operand ``k`` (user order), as laid out in
    ``descs``; exact aliasing is allowed only when ``aliasable`` (in-place on an input)."""

    w: int
    k: int
    descs: tuple[TensorDescriptor, TensorDescriptor]
    aliasable: bool


@dataclass(frozen=True)
class ElementwiseInfo:
    """The validated, normalised plan of one elementwise call.

    ``descs`` are the operands' own descriptors in the operator's (C) order, None for an absent
    optional one; ``program`` is the traced kernel for the matched signature; ``slot_offsets``
    is each kernel slot's element offset from its operand's element 0 (its view's start plus the
    normalised origin); ``layout`` the normalised iteration space over the slots; ``kind`` is
    'flat' (one dense loop, inputs dense or scalar), 'strided' or 'tiled' (an input transposed
    against the output: 2-D tiles); ``pattern`` says per slot how its innermost dim moves: '1'
    unit stride, '0' broadcast, 'g' any other stride.
    """

    spec: ElementwiseSpec
    program: Program
    descs: tuple[TensorDescriptor | None, ...]
    params: tuple
    shape: tuple[int, ...]
    layout: Layout
    slot_offsets: tuple[int, ...]
    kind: str
    pattern: str
    checks: tuple[OverlapCheck, ...]

    @property
    def dtype(self):
        return self.program.slots[0].dtype

    @property
    def numel(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n


def plan(spec: ElementwiseSpec, descs: tuple, params: dict) -> ElementwiseInfo:
    ops = spec.operands
    names = [o.name for o in ops]
    present = tuple(d is not None for d in descs)
    sig = spec.match(tuple(d.dtype if d is not None else None for d in descs))
    values = spec.param_values(params)
    program = spec.program(sig, present)
    written = [k for k, o in enumerate(ops) if o.writes]
    shape = descs[written[0]].shape
    for k in written:
        if descs[k].shape != shape:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{names[k]}': shape "
                              f"{descs[k].shape}, but '{names[written[0]]}' has {shape}")
        check_writable_layout(descs[k], names[k])
    views = {k: ops[k].view(d) for k, d in enumerate(descs) if d is not None}
    read = [(k, v) for k, o in enumerate(ops) if o.reads and present[k] for v in views[k]]
    for k, (vd, _) in read:  # first a precise message: which operand does not fit
        try:
            broadcast_strides(vd, shape, names[k])
        except InfiniError:
            if len(views[k]) == 1:
                raise
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{names[k]}': shape "
                              f"{descs[k].shape} is read as {len(views[k])} parts of shape "
                              f"{vd.shape}, which cannot broadcast to output shape {shape}") from None
    expected = broadcast_shape([vd.shape for _, (vd, _) in read], [names[k] for k, _ in read])
    if read and expected != shape:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{names[written[0]]}': shape "
                          f"{shape}, but the inputs broadcast to {expected}")
    slot_views = [views[s.operand][s.view] for s in program.slots]
    aligned = [broadcast_strides(vd, shape, names[s.operand])
               for s, (vd, _) in zip(program.slots, slot_views)]
    lay = normalize(shape, aligned)
    pattern = "".join("1" if s == 1 else "0" if s == 0 else "g" for s in (st[-1] for st in lay.strides))
    nw = len(written)
    flat = lay.ndim == 1 and "g" not in pattern and "0" not in pattern[:nw]
    kind = "flat" if flat else "strided"
    t = None if flat else _transposed_dim(lay, nw)
    if t is not None:  # walk 2-D tiles over (t, innermost) so the transposed operand reuses lines
        order = [d for d in range(lay.ndim - 1) if d != t] + [t, lay.ndim - 1]
        lay = Layout(tuple(lay.shape[d] for d in order),
                     tuple(tuple(st[d] for d in order) for st in lay.strides), lay.offsets)
        kind = "tiled"
    offsets = tuple(o + off for o, (_, off) in zip(lay.offsets, slot_views))
    checks = []
    for w in written:
        for k, d in enumerate(descs):
            if k == w or d is None or (ops[k].writes and k < w):
                continue
            single = ops[k].nviews == 1
            kd = TensorDescriptor(d.dtype, shape, broadcast_strides(d, shape, names[k])) \
                if single and ops[k].reads else d
            aliasable = (ops[k].role == "in" and single and d.dtype.itemsize == descs[w].dtype.itemsize
                         and all(a == b or n == 1 for a, b, n in
                                 zip(descs[w].strides, kd.strides, shape)))
            checks.append(OverlapCheck(w, k, (descs[w], kd), aliasable))
    return ElementwiseInfo(spec, program, tuple(descs), values, shape, lay, offsets, kind,
                           pattern, tuple(checks))


def _transposed_dim(lay: Layout, nwritten: int) -> int | None:
    """The outer dim along which some input is densest, if that input's innermost stride is
    larger (a transposed read): tiling over that dim and the innermost one keeps its lines."""
    last = lay.ndim - 1
    for st in lay.strides[nwritten:]:
        cands = [(abs(st[d]), d) for d in range(lay.ndim) if st[d] != 0 and lay.shape[d] > 1]
        if not cands:
            continue
        s, d = min(cands)
        if d != last and abs(st[last]) > s and lay.shape[last] > 1:
            return d
    return None
