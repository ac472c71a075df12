"""infiniop operators on Dask arrays: lazy graphs whose every block is computed by our kernels.

``infiniop.sub(x, y)``, any user-defined operator, the row operators and rope,
``infiniop.rearrange`` and ``infiniop.copy_`` dispatch here when an operand is a Dask array
(recognised by its type's module, without importing Dask). Elementwise operators become one
``da.blockwise`` layer, broadcast and chunk-aligned the way Dask's own elementwise operations are
(chunks that do not line up are unified, size-1 dims and scalars broadcast); each block is
computed by the functional form on NumPy blocks. Row operators and rope get blocks of whole rows
(:func:`rows`, :func:`rope`). Everything that can be checked without the data is checked when
the graph is built, with the statuses NumPy arrays get. Operators pickle by value (see
``ElementwiseOperator.__reduce__``), so user-defined ones reach ``dask.distributed`` workers,
which compile or load their kernels from their own kernel cache.

Dask is optional: ``pip install 'infiniop[dask]'``.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from functools import partial
from math import prod

import numpy as np

from .dtype import DType
from .kernel_cache import sha1
from .layout import broadcast_shape, broadcast_strides
from .status import InfiniError, Status
from .tensor import TensorDescriptor

INSTALL = "pip install 'infiniop[dask]'"


def is_dask(x) -> bool:
    """Is ``x`` a Dask array? A type-name test: costs nothing and imports nothing."""
    return type(x).__module__.startswith("dask.array")


def _dask_array():
    try:
        import dask.array as da
    except ImportError as e:
        raise InfiniError(Status.BAD_PARAM, f"a Dask array was passed but dask.array cannot be "
                                            f"imported ({e}); {INSTALL}") from None
    return da


def _check_known(x, name: str) -> None:
    if any(n != n for n in x.shape):  # NaN extents: chunk sizes Dask does not know yet
        raise InfiniError(Status.BAD_TENSOR_SHAPE,
                          f"operand '{name}': Dask array of unknown chunk sizes (shape {x.shape}); "
                          "call x.compute_chunk_sizes() first")


def _check_numpy_chunks(x, name: str) -> None:
    if type(x._meta) is not np.ndarray:  # CuPy, sparse, masked... chunks
        kind = f"{type(x._meta).__module__}.{type(x._meta).__name__}"
        raise InfiniError(Status.BAD_PARAM,
                          f"operand '{name}': Dask array of {kind} chunks; infiniop's functional "
                          "operators take NumPy chunks (for device chunks, call a descriptor on a "
                          "device handle inside map_blocks)")


def _check_dtype(x, name: str) -> None:
    """The dtype check a NumPy operand gets (same status and message), before any block runs."""
    from .interop import inspect_buffer

    inspect_buffer(np.empty(0, x.dtype), name)


def _immutable(what: str) -> InfiniError:
    return InfiniError(Status.BAD_PARAM, f"{what}: Dask arrays are immutable, so there is no "
                                         "output to write into; use the returned array "
                                         "(dask.array.store writes it into an existing one)")


# ---------------------------------------------------------------------------------------------
# Elementwise operators
# ---------------------------------------------------------------------------------------------


_COMPUTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def computes(spec, absent: frozenset[str] = frozenset()) -> str:
    """What an operator computes, for its graph keys: its name and a digest of its traced
    bodies over every signature (the operands named in ``absent`` left out). Two operators of
    one name (a user's, redefined in a notebook) must not share keys: Dask would hand one's
    blocks to the other. Parameters are keyed by their values, defaults filled in, by the
    callers."""
    known = _COMPUTES.setdefault(spec, {})
    if absent not in known:
        present = tuple(o.name not in absent for o in spec.operands)
        h = sha1()
        for sig in spec.signatures:
            h.update(spec.program(sig, present).key.encode())
        known[absent] = f"{spec.name}-{h.hexdigest()}"
    return known[absent]


def elementwise(spec, args, out=None, kwargs=None):
    """``spec(*args, **kwargs)`` where some of ``args`` are Dask arrays: a lazy Dask array (a
    tuple of them for an operator with several outputs). ``out=`` is refused (BAD_PARAM).
    Operands the operator updates in place (BLAS ``axpy``'s ``y``) are not modified: each block
    works on a copy and the updated values are returned, as for every other output."""
    da = _dask_array()
    from dask.array.utils import meta_from_array
    from dask.base import tokenize

    from .elementwise.functional import split_dtype
    from .elementwise.spec import split_last

    kwargs = dict(kwargs or {})
    if out is not None:
        raise _immutable(f"{spec.name}: out=")
    ops = [o for o in spec.operands if o.role != "out"]
    names = [ops[k].name if k < len(ops) else f"#{k}" for k in range(len(args))]
    operands, stand_ins, metas, shapes = [], [], [], []
    for k, (name, a) in enumerate(zip(names, args)):
        if isinstance(a, np.ndarray):
            a = da.asarray(a)
        if isinstance(a, da.Array):
            _check_known(a, name)
            _check_numpy_chunks(a, name)
            views = ops[k].views if k < len(ops) else None
            if views is not None:  # a row split in parts, or a vector of scalars: whole rows
                a = a.rechunk({d: -1 for d in range(a.ndim)} if views[0] is not split_last
                              else {a.ndim - 1: -1})
            metas.append(a._meta)
            stand = (1,) * a.ndim
            if views is not None and views[0] is split_last:
                stand = stand[:-1] + (views[1],)
                shapes.append(tuple(a.shape[:-1]) + (a.shape[-1] // views[1],))
            elif views is not None:
                stand = tuple(a.shape)
            else:
                shapes.append(tuple(a.shape))
            stand_ins.append(np.zeros(stand, a.dtype))
        elif a is None or isinstance(a, bool | int | float | np.generic):
            stand_ins.append(a)
        else:
            raise InfiniError(Status.BAD_PARAM, f"operand '{name}': cannot mix a Dask array with "
                                                f"{type(a).__name__} (convert it to a Dask or NumPy array)")
        operands.append(a)
    # The NumPy path on tiny stand-ins checks arity, None, dtypes, scalars and parameters exactly
    # as for NumPy arrays, and tells the output dtypes (one array, or a tuple for several outputs).
    result = spec(*[s.copy() if isinstance(s, np.ndarray) else s for s in stand_ins], **kwargs)
    shape = broadcast_shape(shapes, [n for n, a in zip(names, operands) if isinstance(a, da.Array)])
    for k, (name, a) in enumerate(zip(names, operands)):
        o = ops[k] if k < len(ops) else None
        if o is None or not isinstance(a, da.Array):
            continue
        if o.role == "inout" and tuple(a.shape) != shape:  # updated in place: never broadcast
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{name}' is updated in place but "
                              f"has shape {tuple(a.shape)}; the operands broadcast to {shape}")
        if o.views is not None and o.views[0] is split_last and a.shape[-1] % o.views[1]:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{name}': last dim of shape "
                              f"{tuple(a.shape)} must be a multiple of {o.views[1]}")
    nd = len(shape)
    pairs, adjust, extra = [], {}, nd
    for k, a in enumerate(operands):
        views = ops[k].views if k < len(ops) else None
        if not isinstance(a, da.Array):
            pairs += [a, None]
        elif views is not None and views[0] is not split_last:  # not aligned with the output
            pairs += [a, tuple(range(extra, extra + a.ndim))]
            extra += a.ndim
        else:
            pairs += [a, tuple(range(nd - a.ndim, nd))]
            if views is not None:
                adjust[nd - 1] = tuple(c // views[1] for c in a.chunks[-1])
    outs = result if isinstance(result, tuple) else (result,)
    out_metas = [meta_from_array(metas[0], ndim=nd, dtype=r.dtype) for r in outs]
    absent = frozenset(o.name for o, a in zip(ops, operands) if a is None)
    rest, want = split_dtype(spec, kwargs)
    token = tokenize(computes(spec, absent), spec.param_values(rest), want, *operands)
    single = (len(outs) == 1 and sum(o.role == "out" for o in spec.operands) == 1
              and not any(o.views for o in spec.operands))
    into = outs[0].dtype if single else None
    inplace = tuple(k for k, o in enumerate(ops) if o.role == "inout")
    blocks = da.blockwise(partial(_block, spec, kwargs, into, inplace), tuple(range(nd)), *pairs,
                          name=f"{spec.name}-{token}", meta=out_metas[0],
                          adjust_chunks=adjust or None, concatenate=True)
    if not isinstance(result, tuple):
        return blocks
    return tuple(blocks.map_blocks(operator.getitem, k, name=f"{spec.name}-{k}-{token}", meta=m)
                 for k, m in enumerate(out_metas))


def _block(spec, kwargs, dtype, inplace, *blocks):
    """One block: the functional form; a single NumPy output goes into a recycled buffer;
    operands updated in place are copied first (Dask's blocks are shared and immutable)."""
    if inplace:
        blocks = tuple(b.copy() if k in inplace else b for k, b in enumerate(blocks))
    if dtype is None:
        return spec(*blocks, **kwargs)
    shape = np.broadcast_shapes(*(b.shape for b in blocks if hasattr(b, "shape")))
    return spec(*blocks, out=recycled_empty(shape, dtype), **kwargs)


# Dask frees a block's result soon after its consumers ran, so block outputs of 1 MiB and more
# are recycled (memory.recycled_empty), not only those empty_aligned recycles.
_POOL_MIN = 1 << 20  # smaller outputs come from malloc, which recycles them well already


def recycled_empty(shape, dtype) -> np.ndarray:
    """An uninitialised 64-byte aligned array, in a recycled buffer when one is free."""
    from .memory import empty_aligned, recycled_empty

    dtype = np.dtype(dtype)
    nbytes = prod(shape) * dtype.itemsize
    if nbytes < _POOL_MIN:
        return empty_aligned(shape, dtype)
    return recycled_empty(shape, dtype, nbytes)


# ---------------------------------------------------------------------------------------------
# Row operators and rope
# ---------------------------------------------------------------------------------------------


def _operand(da, a, name: str):
    """A Dask operand: NumPy arrays join as one chunk; anything else but None is refused."""
    if isinstance(a, np.ndarray):
        a = da.from_array(a, chunks=-1)
    if not isinstance(a, da.Array):
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': cannot mix a Dask array with "
                                            f"{type(a).__name__} (convert it to a Dask or NumPy array)")
    _check_known(a, name)
    _check_numpy_chunks(a, name)
    return a


def _whole(a, dims) -> object:
    """``a`` with each of ``dims`` in one chunk (a row, or the (n, m) matrix of causal_softmax,
    must be in one block), other dims kept as they are."""
    want = {d: -1 for d in dims if len(a.chunks[d]) > 1}
    return a.rechunk(want) if want else a


def rows(spec, args, out=None, params=None):
    """``spec(*args, **params)`` (a row operator) where an operand is a Dask array: a lazy array
    (a tuple for several outputs) whose blocks are whole rows (the reduced axis, or causal
    softmax's last two, is rechunked to one chunk); per-column operands (a weight) are single
    chunks beside them; per-row statistics (layer_norm's std) come out without the axis."""
    da = _dask_array()
    from dask.array.utils import meta_from_array
    from dask.base import tokenize

    from .elementwise.functional import split_dtype

    params = dict(params or {})
    if out is not None:
        raise _immutable(f"{spec.name}: out=")
    ins = [o for o in spec.operands if o.reads]
    outs = [o for o in spec.operands if o.writes]
    if len(args) > len(ins):
        from .elementwise.functional import arity_error

        raise arity_error(spec, [o.name for o in ins], len(args))
    args = list(args) + [None] * (len(ins) - len(args))
    ops = [None if a is None else _operand(da, a, o.name) for o, a in zip(ins, args)]
    row_ops = [a for o, a in zip(ins, ops) if a is not None and o.kind == "row"]
    if not row_ops:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: needs a row input")
    shape = broadcast_shape([tuple(a.shape) for a in row_ops],
                            [o.name for o, a in zip(ins, ops) if a is not None and o.kind == "row"])
    nd = len(shape)
    axis = params.get(spec.axis, -1) if spec.axis else -1
    # the NumPy path on stand-ins checks operand count, None, dtypes, the axis and scalars with
    # the statuses NumPy arrays get, and tells the output dtypes
    a_ = axis % nd if isinstance(axis, int) and not isinstance(axis, bool) and -nd <= axis < nd else None
    whole = (nd - 2, nd - 1) if spec.causal else (() if a_ is None else (a_,))

    def stand(o, a):
        if a is None:
            return None
        if o.kind != "row":
            return np.zeros(a.shape, a.dtype)
        lead = nd - a.ndim
        return np.zeros(tuple(n if lead + d in whole else min(n, 1) for d, n in enumerate(a.shape)),
                        a.dtype)

    result = spec(*[stand(o, a) for o, a in zip(ins, ops)], **params)
    results = result if isinstance(result, tuple) else (result,)
    pairs = []
    for o, a in zip(ins, ops):
        if a is None:
            pairs += [None, None]
        elif o.kind == "row":
            lead = nd - a.ndim
            pairs += [_whole(a, [d - lead for d in whole if d >= lead]), tuple(range(lead, nd))]
        else:  # a column operand: the axis's label, one chunk
            pairs += [_whole(a, range(a.ndim)), (a_,) if a.ndim == 1 else tuple(range(nd - a.ndim, nd))]
    meta = meta_from_array(row_ops[0]._meta, ndim=nd, dtype=results[0].dtype)
    absent = frozenset(o.name for o, a in zip(ins, ops) if a is None)
    rest, want = split_dtype(spec, params)
    token = tokenize(computes(spec, absent), spec.scalar_values((), rest), want, *ops)
    blocks = da.blockwise(partial(_row_block, spec, params, len(ins)), tuple(range(nd)), *pairs,
                          name=f"{spec.name}-{token}", meta=meta, concatenate=True,
                          align_arrays=True)
    if len(outs) == 1:
        return blocks
    picked = []
    for k, (o, r) in enumerate(zip(outs, results)):
        ind = tuple(d for d in range(nd) if o.kind == "row" or d != a_)  # a statistic: no axis
        picked.append(da.blockwise(partial(_pick, k), ind, blocks, tuple(range(nd)),
                                   concatenate=False, name=f"{spec.name}-{k}-{token}",
                                   meta=meta_from_array(row_ops[0]._meta, ndim=len(ind),
                                                        dtype=r.dtype)))
    return tuple(picked)


def _row_block(spec, params, n, *blocks):
    """One block of whole rows: the functional form (absent operands come as None)."""
    return spec(*blocks[:n], **params)


def _pick(k, block):
    while type(block) is list:  # the axis a statistic drops (one block) arrives as a list
        block = block[0]
    return block[k]


def rope(x, pos_ids, sin_table, cos_table, algo, per_block: Callable):
    """rope on a Dask ``x`` ([..., seq, nhead, dh]): blocks keep (nhead, dh) whole and slice
    ``pos_ids`` along seq with them; the tables are one chunk each."""
    da = _dask_array()
    from dask.array.utils import meta_from_array
    from dask.base import tokenize

    x, pos, sin, cos = (_operand(da, a, n) for a, n in
                        ((x, "x"), (pos_ids, "pos_ids"), (sin_table, "sin_table"),
                         (cos_table, "cos_table")))
    nd = x.ndim
    if nd < 3:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"rope: operand 'x' has shape {x.shape}; "
                                                   "expected [..., seq, nhead, dh]")
    # as the NumPy path checks them (its dtype is checked below, on one position)
    broadcast_strides(TensorDescriptor(DType.I64, tuple(pos.shape)), tuple(x.shape[:-2]), "pos_ids")
    # dtypes, algo, head dim, table width: checked by the NumPy path on one position
    per_block(np.zeros((1,) * (nd - 2) + tuple(x.shape[-2:]), x.dtype),
              np.zeros((1,) * pos.ndim, pos.dtype),
              np.zeros(sin.shape, sin.dtype), np.zeros(cos.shape, cos.dtype), algo=algo)
    x = _whole(x, [nd - 2, nd - 1])
    pos_ind = tuple(range(nd - 2 - pos.ndim, nd - 2))  # pos_ids' dims are x's leading ones
    pos = pos.rechunk({i: x.chunks[d] if pos.shape[i] != 1 else -1 for i, d in enumerate(pos_ind)})
    sin, cos = _whole(sin, range(sin.ndim)), _whole(cos, range(cos.ndim))
    token = tokenize("rope", algo, x, pos, sin, cos)
    return da.blockwise(partial(_rope_block, per_block, algo), tuple(range(nd)),
                        x, tuple(range(nd)), pos, pos_ind, sin, (nd, nd + 1), cos, (nd, nd + 1),
                        name=f"rope-{token}", concatenate=True,
                        meta=meta_from_array(x._meta, ndim=nd, dtype=x.dtype))


def _rope_block(rope, algo, x, pos, sin, cos):
    return rope(x, pos, sin, cos, algo=algo)


# ---------------------------------------------------------------------------------------------
# rearrange and copy_
# ---------------------------------------------------------------------------------------------


def rearrange(x, pattern: str, axis_sizes: dict, per_block: Callable):
    """einops ``rearrange`` on a Dask array, lazily: one ``per_block`` call (the in-memory
    ``rearrange``, which dispatches here) per output block.

    An input dim split into ``(a b c)`` is chunked in whole multiples of ``b*c`` (so only ``a``
    is chunked); an axis merged behind another on the right (``b`` in ``(a b)``) must be one
    chunk. Chunks are changed only where one of these rules needs it."""
    da = _dask_array()
    from dask.array.utils import meta_from_array
    from dask.base import tokenize

    from .rearrange.pattern import ELLIPSIS, parse, resolve

    pat = parse(pattern)
    _check_known(x, "x")
    _check_numpy_chunks(x, "x")
    _check_dtype(x, "x")
    size, dims, ell = resolve(pat, tuple(x.shape), axis_sizes)
    out_axes = []  # per output dim: the axes merged into it, in order ("1" dropped)
    for group, merged in zip(pat.right.groups, pat.right.bracketed):
        axes = [a for ax in group for a in (ell if ax == ELLIPSIS else [ax]) if a != "1"]
        out_axes += [[a] for a in axes] if group == (ELLIPSIS,) and not merged else [axes]
    # An input dim is chunked along its first axis (its lead); the axes after it are whole.
    lead = {group[0]: d for d, group in enumerate(dims) if group and group[0] != "1"}
    inner = [prod(size[a] for a in group[1:]) for group in dims]
    whole = {lead[a] for axes in out_axes for a in axes[1:] if a in lead}
    chunks = tuple((n,) if d in whole else _multiples(c, inner[d], n)
                   for d, (c, n) in enumerate(zip(x.chunks, x.shape)))
    if chunks != x.chunks:
        x = x.rechunk(chunks)
    nout = len(out_axes)
    in_ind = [nout + d for d in range(x.ndim)]  # dims no output dim follows: contracted, 1 block
    new_axes, adjust = {}, {}
    for j, axes in enumerate(out_axes):
        rest = prod(size[a] for a in axes[1:])
        d = lead.get(axes[0]) if axes else None
        if d is None:  # an axis that is never chunked, or an extent-1 dim
            new_axes[j] = prod(size[a] for a in axes)
        else:
            in_ind[d] = j
            adjust[j] = tuple((c // inner[d] if inner[d] else size[axes[0]]) * rest
                              for c in x.chunks[d])
    # Per block, every split is given explicitly: whole axes their extent, a lead its block's.
    fixed, leads = {}, []
    for d, group in enumerate(dims):
        named = [a for a in group if a != "1"]
        if len(group) < 2:
            continue
        fixed.update({a: size[a] for a in named})
        if group[0] != "1" and inner[d]:
            leads.append((d, group[0], inner[d]))
    token = tokenize(x, pattern, sorted(axis_sizes.items()))
    return da.blockwise(partial(_rearrange_block, per_block, pattern, fixed, tuple(leads)),
                        tuple(range(nout)),
                        x, tuple(in_ind), new_axes=new_axes, adjust_chunks=adjust,
                        concatenate=False, name=f"rearrange-{token}",
                        meta=meta_from_array(x._meta, ndim=nout, dtype=x.dtype))


def _multiples(chunks: tuple[int, ...], unit: int, n: int) -> tuple[int, ...]:
    """``chunks`` with every boundary moved to the nearest multiple of ``unit`` (none lost)."""
    if unit <= 1 or all(c % unit == 0 for c in chunks):
        return chunks
    cuts, at = [], 0
    for c in chunks[:-1]:
        at += c
        cut = round(at / unit) * unit
        if 0 < cut < n and (not cuts or cut > cuts[-1]):
            cuts.append(cut)
    bounds = [0] + cuts + [n]
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


def _rearrange_block(rearrange, pattern, fixed, leads, block):
    while type(block) is list:  # a contracted dim (always one block) arrives as a list
        block = block[0]
    sizes = dict(fixed)
    for d, name, unit in leads:
        sizes[name] = block.shape[d] // unit
    return rearrange(block, pattern, **sizes)


def computed_source(dst, src) -> np.ndarray:
    """``copy_(dst, src)`` with a Dask ``src``: ``src`` computed (on whichever scheduler is
    active) into a NumPy array, which ``copy_`` then copies into ``dst`` (broadcasting). Checked
    against ``dst`` before anything is computed. A Dask ``dst`` is refused: Dask arrays are
    immutable."""
    da = _dask_array()
    from .dtype import as_dtype
    from .interop import inspect_buffer

    if is_dask(dst):
        raise _immutable("copy_: operand 'dst'")
    if src is None:
        raise InfiniError(Status.NULL_POINTER, "operand 'src': array is None")
    if dst is None:
        raise InfiniError(Status.NULL_POINTER, "operand 'dst': array is None")
    if not isinstance(src, da.Array):
        raise InfiniError(Status.BAD_PARAM, f"operand 'src': cannot use {type(src).__name__}")
    _check_known(src, "src")
    _check_numpy_chunks(src, "src")
    _check_dtype(src, "src")
    d = inspect_buffer(dst, "dst")
    if d.trusted:
        raise InfiniError(Status.BAD_PARAM, "copy_ needs arrays or tensors; for raw addresses use "
                                            "create_rearrange_descriptor")
    if as_dtype(src.dtype) is not d.dtype:  # checked before computing anything
        raise InfiniError(Status.BAD_TENSOR_DTYPE, f"operand 'src' is {as_dtype(src.dtype)} but "
                                                   f"'dst' is {d.dtype}; copy_ does not convert")
    broadcast_strides(TensorDescriptor(d.dtype, tuple(src.shape)), d.shape, "src")  # as NumPy's
    if d.readonly:
        raise InfiniError(Status.BAD_PARAM, "operand 'dst': output buffer is read-only")
    return np.asarray(src.compute())
