"""infiniop operators on Dask arrays: lazy graphs whose every block is computed by our kernels.

``infiniop.sub(x, y)``, any user-defined operator, ``infiniop.rearrange`` and ``infiniop.copy_``
dispatch here when an operand is a Dask array (recognised by its type's module, without importing
Dask). Elementwise operators become one ``da.blockwise`` layer, broadcast and chunk-aligned the way
Dask's own elementwise operations are (chunks that do not line up are unified, size-1 dims and
scalars broadcast); each block is computed by the functional form on NumPy blocks. Everything that
can be checked without the data is checked when the graph is built, with the statuses NumPy arrays
get. Operators pickle by value (see ``ElementwiseOperator.__reduce__``), so user-defined ones reach
``dask.distributed`` workers, which compile or load their kernels from their own kernel cache.

Dask is optional: ``pip install 'infiniop[dask]'``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import partial
from math import prod

import numpy as np

from .layout import broadcast_shape
from .status import InfiniError, Status

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


def _immutable(what: str) -> InfiniError:
    return InfiniError(Status.BAD_PARAM, f"{what}: Dask arrays are immutable, so there is no "
                                         "output to write into; use the returned array "
                                         "(dask.array.store writes it into an existing one)")


# ---------------------------------------------------------------------------------------------
# Elementwise operators
# ---------------------------------------------------------------------------------------------


def elementwise(spec, args, out=None, kwargs=None):
    """``spec(*args, **kwargs)`` where some of ``args`` are Dask arrays: a lazy Dask array (a
    tuple of them for an operator with several outputs). ``out=`` is refused (BAD_PARAM).
    Operands the operator updates in place (BLAS ``axpy``'s ``y``) are not modified: each block
    works on a copy and the updated values are returned, as for every other output."""
    da = _dask_array()
    from dask.array.utils import meta_from_array
    from dask.base import tokenize

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
    token = tokenize(spec.name, getattr(spec, "key", None), sorted(kwargs.items()), *operands)
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
    d = inspect_buffer(dst, "dst")
    if d.trusted:
        raise InfiniError(Status.BAD_PARAM, "copy_ needs arrays or tensors; for raw addresses use "
                                            "create_rearrange_descriptor")
    if as_dtype(src.dtype) is not d.dtype:  # checked before computing anything
        raise InfiniError(Status.BAD_TENSOR_DTYPE, f"operand 'src' is {as_dtype(src.dtype)} but "
                                                   f"'dst' is {d.dtype}; copy_ does not convert")
    if broadcast_shape([d.shape, tuple(src.shape)], ["dst", "src"]) != d.shape:
        raise InfiniError(Status.BAD_TENSOR_SHAPE,
                          f"operand 'src': shape {src.shape} cannot broadcast to {d.shape}")
    if d.readonly:
        raise InfiniError(Status.BAD_PARAM, "operand 'dst': output buffer is read-only")
    return np.asarray(src.compute())
