"""The functional front end of row operators: ``infiniop.softmax(x, axis=-1)``.

Arguments are the operator's inputs in its (C) order, scalars are keywords; outputs are
allocated (or given as ``out=``, a tuple when there are several) and returned (a tuple when
there are several). NumPy arrays or torch tensors in, the same kind out. Descriptors are cached
(the elementwise front end's bounded LRU), so a repeated call does no planning.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .. import _forksafe
from ..dask_arrays import is_dask
from ..dask_arrays import rows as dask_rows
from ..elementwise.functional import (
    CACHE_SIZE,
    _as_array,
    _descriptor,
    _gpu_device,
    _is_torch,
    _params_key,
    _same_scalars,
    arity_error,
    operand_dtype,
    split_dtype,
    wanted_outputs,
)
from ..layout import broadcast_shape
from ..memory import empty_aligned, torch_empty
from ..status import InfiniError, Status

_cache: OrderedDict = OrderedDict()  # NumPy call signature -> (descriptor, out shapes, dtypes)
_lock = _forksafe.Lock()
# Per operator, its last NumPy call: (the scalars, the descriptor's fast path, the first input's
# shape, the outputs' shapes and dtypes). A call with the same scalars runs that fast path before
# building a cache key; its launcher checks every layout, dtype and overlap, and anything else
# falls through (AMD EPYC: rms_norm (1, 4096) float32 with out= 4.5 -> 2.3-2.5 us a call, with
# epsilon= given too 4.7 -> 2.7 us; the descriptor's calculate takes 1.3).
_last_call: dict = {}


def call(spec, args, out=None, params=None):
    params = params or {}
    last = _last_call.get(spec)
    if last is not None and _same_scalars(params, last[0]):
        _, fast, shape0, shapes, dtypes, allocated = last
        if out is not None:
            outs = list(out) if isinstance(out, tuple | list) else [out]
        elif allocated and args and type(args[0]) is np.ndarray and args[0].shape == shape0:
            outs = [empty_aligned(s, d) for s, d in zip(shapes, dtypes)]
        else:
            outs = None
        if outs is not None and len(outs) == len(shapes):
            arrange = _arranger(spec, len(args))
            if arrange is not None and fast(arrange(args, outs)) == 0:
                return outs[0] if len(outs) == 1 else tuple(outs)
    key = _numpy_key(spec, args, out, params)
    hit = _cache.get(key) if key is not None else None
    if hit is not None:
        desc, shapes, dtypes = hit
        if out is None:
            outs = [empty_aligned(s, d) for s, d in zip(shapes, dtypes)]
        else:
            outs = list(out) if isinstance(out, tuple | list) else [out]
        desc.calculate(None, *_arranger(spec, len(args))(args, outs))  # count in the key
        _note_last(spec, desc, args, params, shapes, dtypes, out is None)
        return outs[0] if len(outs) == 1 else tuple(outs)
    return _call_general(spec, args, out, params, key)


def _numpy_key(spec, args, out, params):
    """The cache key of an all-NumPy call (None otherwise): layouts of the inputs and of the
    outputs given, and the scalars."""
    key = [spec, _params_key(params)]  # by type and repr: axis=True is not axis=1
    for a in (out if isinstance(out, tuple | list) else () if out is None else (out,)):
        if type(a) is not np.ndarray:
            return None
        key.append(("out", a.shape, a.strides, a.dtype))
    for a in args:
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray:
            key.append((a.shape, a.strides, a.dtype))
        else:
            return None
    return tuple(key)


_arrangers: dict = {}


def _arranger(spec, nargs: int):
    """``f(args, outs)`` -> the buffers in the operator's order (inputs missing at the end are
    None), as one generated tuple expression (0.7 us with iterators, 0.2 this way), for calls
    with ``nargs`` inputs; None when the operator has fewer."""
    f = _arrangers.get((spec, nargs))
    if f is None:
        if nargs > sum(o.reads for o in spec.operands):
            return None  # the general path says what is wrong
        items, i, k = [], 0, 0
        for o in spec.operands:
            if o.writes:
                items.append(f"o[{k}]")
                k += 1
            else:
                items.append(f"a[{i}]" if i < nargs else "None")
                i += 1
        env: dict = {}
        exec(f"def f(a, o):\n    return ({', '.join(items)},)\n", env)
        f = _arrangers[(spec, nargs)] = env["f"]
    return f


def _call_general(spec, args, out, params, key):
    if any(is_dask(a) for a in args) or any(is_dask(o) for o in
                                            (out if isinstance(out, tuple | list) else (out,))):
        return dask_rows(spec, args, out, params)  # a lazy graph (dask_arrays.py)
    asked, (params, want) = params, split_dtype(spec, params)  # asked: what the caches key
    ops = spec.operands
    ins = [o for o in ops if o.reads]
    outs_ops = [o for o in ops if o.writes]
    if len(args) > len(ins) or any(not o.optional for o in ins[len(args):]):
        raise arity_error(spec, [o.name for o in ins], len(args))
    args = list(args) + [None] * (len(ins) - len(args))
    arrays = []
    for o, a in zip(ins, args):
        if a is None and not o.optional:
            raise InfiniError(Status.NULL_POINTER, f"operand '{o.name}' is None")
        arrays.append(None if a is None else _as_array(o.name, a))
    if out is None:
        outs = [None] * len(outs_ops)
    elif len(outs_ops) == 1:
        outs = list(out) if isinstance(out, tuple | list) else [out]
    elif isinstance(out, tuple | list) and len(out) == len(outs_ops):
        outs = list(out)
    else:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name} has {len(outs_ops)} outputs "
                          f"({', '.join(o.name for o in outs_ops)}): out= must be a tuple of "
                          "that many arrays (or None)")
    if len(outs) != len(outs_ops):
        raise InfiniError(Status.BAD_PARAM, f"{spec.name} has {len(outs_ops)} output(s)")
    given = outs  # an ndarray subclass (memmap...) is computed into as a plain view, returned
    outs = [a.view(np.ndarray) if isinstance(a, np.ndarray) and type(a) is not np.ndarray else a
            for a in outs]
    for o, a in zip(outs_ops, outs):
        if a is not None and type(a) is not np.ndarray and not _is_torch(a):
            raise InfiniError(Status.BAD_PARAM, f"operand '{o.name}': cannot use {type(a).__name__}")
    use_torch = any(_is_torch(a) for a in arrays + outs if a is not None)
    buffers = list(_arranger(spec, len(arrays))(arrays, outs))
    sig = spec.match(wanted_outputs(spec, tuple(None if b is None else operand_dtype(o.name, b)
                                                 for o, b in zip(ops, buffers)), want))
    rows_in = [b for o, b in zip(ops, buffers) if o.reads and o.kind == "row" and b is not None]
    row_outs = [b for o, b in zip(ops, buffers) if o.writes and o.kind == "row" and b is not None]
    if rows_in:
        shape = broadcast_shape([tuple(b.shape) for b in rows_in], [o.name for o in ops])
    elif row_outs:
        shape = tuple(row_outs[0].shape)
    else:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: needs a row input or output array")
    stat_shape = shape[:-1]
    if spec.axis:
        axis = params.get(spec.axis, -1)
        if hasattr(axis, "__index__") and not isinstance(axis, bool | np.bool_) \
                and -len(shape) <= int(axis) < len(shape):  # np.int64 too, as create accepts it
            a = int(axis) % len(shape)
            stat_shape = shape[:a] + shape[a + 1:]
    device = _gpu_device(buffers) if use_torch else None
    dev = "cpu" if device is None else f"{device[0]}:{device[1]}"
    for k, o in enumerate(ops):
        if buffers[k] is None and o.writes:
            dt = sig.dtypes[k]
            s = shape if o.kind == "row" else stat_shape
            if use_torch:
                from ..dtype import to_torch

                buffers[k] = torch_empty(s, to_torch(dt), dev)
            else:
                buffers[k] = empty_aligned(s, dt.numpy)
    desc = _descriptor(spec, buffers, params, device)
    desc.calculate(None, *buffers)
    written = [b for o, b in zip(ops, buffers) if o.writes]
    results = [b if g is None else g for g, b in zip(given, written)]
    if key is not None and all(type(b) is np.ndarray for b in buffers if b is not None):
        shapes, dtypes = [r.shape for r in results], [r.dtype for r in results]
        with _lock:
            _cache[key] = (desc, shapes, dtypes)
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
        _note_last(spec, desc, args, asked, shapes, dtypes, out is None)
    return results[0] if len(results) == 1 else tuple(results)


def _note_last(spec, desc, args, params, shapes, dtypes, allocated) -> None:
    """Remember a NumPy call of ``spec`` for the shortcut at the top of ``call``. Only a call
    that allocated its outputs may allocate for the next one: outputs given as out= may have
    another dtype than a call without them gets (logsoftmax: fp16 -> float32)."""
    fast = getattr(desc, "_fast", None)
    if fast is not None and args and type(args[0]) is np.ndarray:
        _last_call[spec] = (dict(params), fast, args[0].shape, shapes, dtypes, allocated)


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        _last_call.clear()
