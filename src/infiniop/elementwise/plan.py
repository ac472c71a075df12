"""ElementwiseInfo: everything about a call that depends only on descriptors, decided once."""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import Layout, broadcast_shape, broadcast_strides, check_writable_layout, normalize
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from .spec import ElementwiseSpec


@dataclass(frozen=True)
class ElementwiseInfo:
    """The validated, normalised plan of one elementwise call.

    ``descs`` are the operands' own descriptors (output first) for the buffer checks;
    ``layout`` is the normalised iteration space; ``kind`` is 'flat' (one dense loop, inputs
    dense or scalar) or 'strided'; ``pattern`` says per operand how its innermost dim moves:
    '1' unit stride, '0' broadcast, 'g' any other stride; ``aliasable[k]`` is True when input k
    may share the output's memory exactly (same strides once broadcast), i.e. in-place.
    """

    spec: ElementwiseSpec
    descs: tuple[TensorDescriptor, ...]
    layout: Layout
    kind: str
    pattern: str
    aliasable: tuple[bool, ...]

    @property
    def dtype(self):
        return self.descs[0].dtype

    @property
    def numel(self) -> int:
        return self.descs[0].numel


def plan(spec: ElementwiseSpec, out: TensorDescriptor, ins: tuple[TensorDescriptor, ...]) -> ElementwiseInfo:
    names = ("out",) + spec.inputs
    if len(ins) != spec.arity:
        raise InfiniError(Status.BAD_PARAM,
                          f"{spec.name} takes {spec.arity} inputs ({', '.join(spec.inputs)}), "
                          f"got {len(ins)}")
    dt = out.dtype
    if dt not in spec.dtypes:
        allowed = ", ".join(sorted(d.short_name for d in spec.dtypes))
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"{spec.name}: output dtype {dt} is not supported (supported: {allowed})")
    for k, d in enumerate(ins):
        want = spec.input_dtype(k, dt)
        if d.dtype is not want:
            raise InfiniError(Status.BAD_TENSOR_DTYPE,
                              f"operand '{names[k + 1]}': dtype {d.dtype}, expected {want}")
    for k, d in enumerate(ins):  # first a precise message: which operand does not fit
        broadcast_strides(d, out.shape, names[k + 1])
    expected = broadcast_shape([d.shape for d in ins], list(names[1:]))
    if expected != out.shape:
        raise InfiniError(Status.BAD_TENSOR_SHAPE,
                          f"operand 'out': shape {out.shape}, but the inputs broadcast to {expected}")
    check_writable_layout(out, "out")
    aligned = [out.strides] + [broadcast_strides(d, out.shape, names[k + 1]) for k, d in enumerate(ins)]
    lay = normalize(out.shape, aligned)
    inner = [s[-1] for s in lay.strides]
    pattern = "".join("1" if s == 1 else "0" if s == 0 else "g" for s in inner)
    flat = lay.ndim == 1 and pattern[0] == "1" and "g" not in pattern
    kind = "flat" if flat else "strided"
    t = None if flat else _transposed_dim(lay)
    if t is not None:  # walk 2-D tiles over (t, innermost) so the transposed operand reuses lines
        order = [d for d in range(lay.ndim - 1) if d != t] + [t, lay.ndim - 1]
        lay = Layout(tuple(lay.shape[d] for d in order),
                     tuple(tuple(st[d] for d in order) for st in lay.strides), lay.offsets)
        kind = "tiled"
    aliasable = tuple(
        all(a == b or n == 1 for a, b, n in zip(aligned[0], aligned[k + 1], out.shape))
        and ins[k].dtype.itemsize == dt.itemsize
        for k in range(len(ins))
    )
    return ElementwiseInfo(spec, (out,) + tuple(ins), lay, kind, pattern, aliasable)


def _transposed_dim(lay: Layout) -> int | None:
    """The outer dim along which some operand is densest, if that operand's innermost stride is
    larger (a transposed read): tiling over that dim and the innermost one keeps its lines."""
    last = lay.ndim - 1
    for st in lay.strides[1:]:
        cands = [(abs(st[d]), d) for d in range(lay.ndim) if st[d] != 0 and lay.shape[d] > 1]
        if not cands:
            continue
        s, d = min(cands)
        if d != last and abs(st[last]) > s and lay.shape[last] > 1:
            return d
    return None
