"""The functional front end: ``infiniop.sub(a, b, out=None)`` on NumPy arrays or torch tensors.

Arguments are the operator's read operands in its (C) order; scalar parameters are keyword
arguments; outputs are allocated (or given as ``out=``, a tuple when there are several).
Operands updated in place (BLAS-style ``axpy``'s ``y``) are passed as arguments and returned.
Broadcasts like NumPy, returns the kind of array it was given, and caches descriptors in a
bounded LRU keyed by the operands' layouts and the parameters, so a repeated call does no
planning.
"""

from __future__ import annotations

from collections import OrderedDict
from math import copysign

import numpy as np

from .. import _forksafe
from ..dask_arrays import elementwise as dask_elementwise
from ..dask_arrays import is_dask
from ..dtype import DType, as_dtype, from_numpy
from ..interop import _torch
from ..layout import broadcast_shape, result_order
from ..memory import empty_aligned, torch_empty
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor

_ML_SCALARS = ("bfloat16", "float8_e4m3fn")  # ml_dtypes' (not imported for this)
CACHE_SIZE = 1024  # entries kept per cache (least recently used dropped first)
_cache: OrderedDict = OrderedDict()  # NumPy call signature -> (descriptor, out shape, out dtype)
_descriptors: OrderedDict = OrderedDict()  # operand layouts -> descriptor (every array kind)
_cache_lock = _forksafe.Lock()
_handle = None
# Per operator, its last NumPy call without parameters: (the descriptor's fast path, the first
# input's shape, the output's shape and dtype). A call with the same layouts runs it without
# building a cache key: the fast path checks the dtypes and ranks, its launcher the shapes,
# strides and overlaps, and anything else falls through to the keyed lookup (~3.3 -> ~1.7 us
# for a 4K sub with out=).
_last_call: dict = {}
# The same for calls with scalar parameters (``hardtanh(x, min_val=-2.0, out=y)``), with the
# scalars first: a call whose scalars are the same by :func:`_same_scalars` (4.2 -> ~1.8 us).
_last_scalar_call: dict = {}
# The same for GPU calls on torch tensors: (the descriptor's device fast path, the first input's
# shape, the output's shape, dtype and device).
_last_device_call: dict = {}


def _cpu_handle():
    global _handle
    if _handle is None:
        from ..handle import create_handle

        _handle = create_handle("cpu")
    return _handle


_gpu_handles: dict = {}  # torch device (type, index) -> its Triton handle


def _handle_for(device):
    """The CPU handle for host buffers; for torch tensors on a GPU, that GPU's Triton handle
    (``cuda:1`` tensors run on ``create_handle("nvidia", 1)``)."""
    if device is None:
        return _cpu_handle()
    h = _gpu_handles.get(device)
    if h is None:
        from ..handle import create_handle

        kind, index = device
        if kind != "cuda":
            raise InfiniError(Status.BAD_PARAM, f"tensors on {kind} have no infiniop device")
        h = _gpu_handles[device] = create_handle("nvidia", index)
    return h


def _gpu_device(buffers):
    """(type, index) of the first torch tensor that is not on the CPU, else None."""
    for b in buffers:
        if b is not None and _is_torch(b) and b.device.type != "cpu":
            return b.device.type, b.device.index or 0
    return None


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _layout(x):
    if x is None:
        return None
    if type(x) is np.ndarray:
        isz = x.itemsize
        if any(s % isz for s in x.strides):  # s // isz would describe other elements
            raise InfiniError(Status.BAD_TENSOR_STRIDES, f"array strides {x.strides} (bytes) "
                              f"are not multiples of its itemsize {isz}")
        return x.dtype, x.shape, tuple(s // isz for s in x.strides)
    return x.dtype, tuple(x.shape), tuple(x.stride())


def _params_key(params: dict) -> tuple:
    """Scalar parameters as a cache key, by type and repr: -0.0 and 0.0 (different bits, e.g.
    hardtanh's bound picked for a -0.0 input) are two keys, and a value that cannot be hashed
    (a list given by mistake) is looked up and then refused by create (BAD_PARAM)."""
    return tuple(sorted((k, type(v).__name__, repr(v)) for k, v in params.items()))


def _same_scalars(params: dict, last: dict) -> bool:
    """The scalars are the last call's by type and value (axis=True is not axis=1, -0.0 is not
    0.0; NaN is never the same): cheaper than comparing ``_params_key``s (0.3 vs 1.2 us)."""
    if len(params) != len(last):
        return False
    for k, v in params.items():
        lv = last.get(k, last)
        if type(v) is not type(lv) or v != lv or (type(v) is float and copysign(1.0, v) != copysign(1.0, lv)):
            return False
    return True


def _descriptor(spec, buffers, params: dict, device=None):
    """Create (or reuse) the descriptor for these operands' layouts and parameters, on the
    handle of ``device`` (None: the CPU)."""
    key = (spec, _params_key(params), device) + tuple(_layout(a) for a in buffers)
    hit = _descriptors.get(key)
    if hit is not None:
        try:
            _descriptors.move_to_end(key)  # least recently used is evicted first
        except KeyError:
            pass
        return hit
    descs = [None if lay is None else TensorDescriptor(as_dtype(lay[0]), lay[1], lay[2])
             for lay in key[3:]]
    d = spec.create_descriptor(_handle_for(device), *descs, **params)
    with _cache_lock:
        _descriptors[key] = d
        while len(_descriptors) > CACHE_SIZE:
            _descriptors.popitem(last=False)
    return d


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
        _descriptors.clear()
        _last_call.clear()
        _last_scalar_call.clear()
        _last_device_call.clear()


def _classic(spec) -> bool:
    """One output first, then inputs only: the common case the fast path serves."""
    ops = spec.operands
    return ops[0].role == "out" and all(o.role == "in" and not o.optional for o in ops[1:])


def call(spec, args, out=None, params=None):
    """Run ``spec`` on arrays/tensors/scalars. Scalars take the dtype the matching signature
    gives their position (the array operands decide it)."""
    if args:
        a0 = args[0]
        if not params:
            last = _last_device_call.get(spec)
            if last is not None and type(a0) is last[0]:  # a torch tensor, as the last GPU call
                _, fast, shape0, like, shape, tdt, dev, order = last
                if out is not None:
                    if fast((out, *args), None):
                        return out
                elif a0.shape == shape0:  # the GPU descriptor's own check decides; no key
                    o = (_torch().empty_like(a0) if like and order is None and a0.is_contiguous()
                         else _empty_torch(shape, tdt, dev, order))
                    if fast.fresh((o, *args), None):  # o is as the descriptor's output
                        return o
                    del o
            last = _last_call.get(spec)
        else:
            last = _last_scalar_call.get(spec)
            last = last[1] if last is not None and _same_scalars(params, last[0]) else None
        if last is not None:
            fast, shape0, shape, npdt, order = last
            if out is not None:
                if fast((out, *args)) == 0:
                    return out
            elif type(a0) is np.ndarray and a0.shape == shape0:
                o = empty_aligned(shape, npdt) if order is None else _empty(shape, npdt, order)
                if fast((o, *args)) == 0:
                    return o
                del o  # another layout: a large buffer goes back to the pool before the next
    # Fast path: NumPy arrays only, layouts seen before -> one dict lookup, no planning.
    key = _numpy_key(spec, args, out, params)
    if key is not None:
        hit = _cache.get(key)
        if hit is not None:
            try:
                _cache.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: harmless
                pass
            desc, shape, npdt, order = hit
            if out is None:  # (the row-major case without the helper's call: the hot path)
                out = empty_aligned(shape, npdt) if order is None else _empty(shape, npdt, order)
            desc.calculate(None, out, *args)
            _note_last(spec, desc, args, params, shape, npdt, order)
            return out
    tkey = None if key is not None else _torch_key(spec, args, out, params)
    if tkey is not None:
        hit = _cache.get(tkey)
        if hit is not None:
            desc, shape, tdt, dev, order = hit
            if out is None:
                out = _empty_torch(shape, tdt, dev, order)
            desc.calculate(None, out, *args)
            _note_last_device(spec, desc, args, params, hit)
            return out
        key = tkey
    return _call_general(spec, args, out, params or {}, key)


def _note_last_device(spec, desc, args, params, hit) -> None:
    """Remember a GPU call of ``spec`` for the shortcut at the top of ``call``."""
    fast = desc._fast_device
    a0 = args[0] if args else None
    if fast is not None and not params and _is_torch(a0) and _classic(spec):
        shape, tdt, dev, order = hit[1:]
        like = shape == a0.shape and tdt == a0.dtype and dev == a0.device
        _last_device_call[spec] = (type(a0), fast, a0.shape, like, shape, tdt, dev, order)


def _torch_key(spec, args, out, params):
    """The cache key of a call on torch tensors only (CPU or GPU): layouts and devices."""
    if not args or not all(_is_torch(a) for a in args) or (out is not None and not _is_torch(out)):
        return None
    key = [spec, "torch", None if out is None else (out.dtype, out.shape, out.stride(), out.device)]
    if params:
        key.append(_params_key(params))
    for a in args:
        key.append((a.dtype, a.shape, a.stride(), a.device))
    return tuple(key)


def _note_last(spec, desc, args, params, shape, npdt, order) -> None:
    fast = desc._fast
    if fast is not None and args and type(args[0]) is np.ndarray:
        last = (fast, args[0].shape, shape, npdt, order)
        if params:
            _last_scalar_call[spec] = (dict(params), last)
        else:
            _last_call[spec] = last


def _numpy_key(spec, args, out, params):
    if out is not None and type(out) is not np.ndarray:
        return None
    key = [spec, None if out is None else (out.shape, out.strides, out.dtype)]
    if params:
        key.append(_params_key(params))
    for a in args:
        if type(a) is not np.ndarray:
            return None
        key.append((a.shape, a.strides, a.dtype))
    return tuple(key)


def _scalar_array(spec, name: str, a, want: DType, use_torch: bool):
    try:
        v = np.asarray(a, dtype=want.numpy)
    except (OverflowError, ValueError, TypeError) as e:  # 1000 as int8, nan as int
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': scalar {a!r} "
                          f"does not fit {want}: {e}") from None
    if not want.is_float and want is not DType.BOOL and v != a:  # 1.5 on an int array
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': scalar {a!r} "
                          f"is not exactly representable as {want} (no type promotion)")
    if use_torch:
        import torch

        v = torch.from_numpy(v.view(np.int16) if want is DType.BF16 else v)
        if want is DType.BF16:
            v = v.view(torch.bfloat16)
    return v


def _as_array(name: str, a):
    """A NumPy array or torch tensor for an array-like operand (DLPack, array interface)."""
    if type(a) is np.ndarray or _is_torch(a):
        return a
    if hasattr(a, "__dlpack__") or hasattr(a, "__array_interface__"):
        from ..interop import inspect_buffer

        info = inspect_buffer(a, name)  # an InfiniError for anything unreadable
        if info.device != "cpu":
            raise InfiniError(Status.BAD_PARAM, f"operand '{name}': buffer lives on {info.device}")
        o = info.owner  # the ndarray (maybe a subclass) or torch tensor it was read through
        return np.asarray(o) if isinstance(o, np.ndarray) else o
    raise InfiniError(Status.BAD_PARAM, f"operand '{name}': cannot use {type(a).__name__}")


def operand_dtype(name: str, b) -> DType:
    """``b``'s dtype as a DType, or BAD_TENSOR_DTYPE naming the operand (a big-endian array or
    a complex tensor was reported without saying which operand it was)."""
    try:
        return as_dtype(b.dtype)
    except InfiniError as e:
        raise InfiniError(e.status, f"operand '{name}': {e}") from None


def _is_scalar(a) -> bool:
    """Python and NumPy real numbers (ml_dtypes' too); a complex, str, bytes, datetime or void
    NumPy scalar is not one (np.asarray would drop an imaginary part or parse '1'): it goes on
    to the array checks and their BAD_TENSOR_DTYPE."""
    if isinstance(a, bool | int | float):
        return True
    return isinstance(a, np.generic) and (a.dtype.kind in "biuf" or a.dtype.name in _ML_SCALARS)


def arity_error(spec, names, given: int) -> InfiniError:
    """BAD_PARAM for a wrong operand count, naming the keywords a scalar goes in (a scalar
    passed positionally, ``rms_norm(x, w, 1e-6)``, is the usual cause)."""
    keys = [p.name for p in spec.params] + ([spec.axis] if getattr(spec, "axis", None) else [])
    hint = f"; scalars are keywords: {', '.join(k + '=...' for k in keys)}" if keys else ""
    return InfiniError(Status.BAD_PARAM, f"{spec.name} takes {len(names)} operands "
                                         f"({', '.join(names)}), got {given}{hint}")


def split_dtype(spec, params: dict) -> tuple[dict, DType | None]:
    """``dtype=`` (NumPy's ufunc keyword) taken out of the keywords: the dtype of the outputs a
    call allocates, where the inputs leave it open (per_tensor_dequant_int8's f16/bf16/f32,
    logsoftmax's float16 -> float32), so that Dask arrays, which take no out=, reach every
    signature too. An operator with a parameter named ``dtype`` keeps its own meaning."""
    if "dtype" not in params or any(p.name == "dtype" for p in spec.params):
        return params, None
    rest = dict(params)
    want = rest.pop("dtype")
    if want is None:
        return rest, None
    try:
        return rest, as_dtype(want)
    except (InfiniError, TypeError, ValueError):
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: dtype={want!r} is not a dtype "
                          "infiniop knows") from None


def wanted_outputs(spec, known: tuple, want: DType | None) -> tuple:
    """The operands' known dtypes with ``want`` for every output not given; an output given
    (out=) of another dtype is BAD_PARAM, as NumPy refuses dtype= against its out=."""
    if want is None:
        return known
    dts = list(known)
    for k, o in enumerate(spec.operands):
        if o.role != "out":
            continue
        if dts[k] is None:
            dts[k] = want
        elif dts[k] is not want:
            raise InfiniError(Status.BAD_PARAM, f"{spec.name}: dtype={want} but out= operand "
                              f"'{o.name}' is {dts[k]}")
    return tuple(dts)


def _call_general(spec, args, out, params, key):
    if any(is_dask(a) for a in args) or any(is_dask(o) for o in
                                            (out if isinstance(out, tuple | list) else (out,))):
        return dask_elementwise(spec, args, out, params)  # a lazy graph (dask_arrays.py)
    asked, (params, want) = params, split_dtype(spec, params)  # asked: what the caches key
    ops = spec.operands
    arg_ops = [k for k, o in enumerate(ops) if o.role != "out"]
    out_ops = [k for k, o in enumerate(ops) if o.role == "out"]
    names = [ops[k].name for k in arg_ops]
    if len(args) > len(arg_ops) or any(not ops[k].optional for k in arg_ops[len(args):]):
        raise arity_error(spec, names, len(args))
    args = list(args) + [None] * (len(arg_ops) - len(args))
    for k, a in zip(arg_ops, args):
        if a is None and not ops[k].optional:
            raise InfiniError(Status.NULL_POINTER, f"operand '{ops[k].name}' is None")
    outs = _out_list(spec, out, out_ops)
    if any(o is not None and type(o) is not np.ndarray and isinstance(o, np.ndarray) for o in outs):
        # a subclass (memmap, a masked array...): compute into plain views of it, return what
        # was given
        views = [o.view(np.ndarray) if isinstance(o, np.ndarray) else o for o in outs]
        _call_general(spec, args, views if len(views) > 1 else views[0], asked, None)
        return out
    use_torch = any(_is_torch(a) for a in args) or any(_is_torch(o) for o in outs)
    buffers: list = [None] * len(ops)
    for k, a in zip(arg_ops, args):
        if a is not None and not _is_scalar(a):
            buffers[k] = _as_array(ops[k].name, a)
    for k, o in zip(out_ops, outs):
        if o is not None:
            if type(o) is not np.ndarray and not _is_torch(o):
                raise InfiniError(Status.BAD_PARAM,
                                  f"operand '{ops[k].name}': cannot use {type(o).__name__}")
            buffers[k] = o
    known = tuple(None if b is None else operand_dtype(o.name, b) for o, b in zip(ops, buffers))
    known = wanted_outputs(spec, known, want)
    if all(d is None for d in known):
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: at least one operand must be an array")
    cands = spec.candidates(known)
    if not cands:
        spec.match(known)  # raises BAD_TENSOR_DTYPE with the accepted signatures
    for k, a in zip(arg_ops, args):
        if a is not None and _is_scalar(a):
            if ops[k].writes:
                raise InfiniError(Status.BAD_PARAM, f"operand '{ops[k].name}' is updated in "
                                  "place: it must be an array, not a scalar")
            buffers[k] = _scalar_array(spec, ops[k].name, a, _pick(spec, cands, k), use_torch)
    device = _gpu_device(buffers) if use_torch else None
    if device is not None:  # scalars were made on the host: the kernel reads them there
        for k, a in zip(arg_ops, args):
            if a is not None and _is_scalar(a):
                buffers[k] = buffers[k].to(f"{device[0]}:{device[1]}")
    fresh = [k for k in out_ops if buffers[k] is None]
    order = None
    if fresh:
        shape = _result_shape(spec, buffers)
        order = _fresh_order(spec, buffers, shape)
        for k in fresh:
            dt = _pick(spec, cands, k, output=True)
            if use_torch:
                from ..dtype import to_torch

                dev = "cpu" if device is None else f"{device[0]}:{device[1]}"
                buffers[k] = _empty_torch(shape, to_torch(dt), dev, order)
            else:
                buffers[k] = _empty(shape, dt.numpy, order)
    desc = _descriptor(spec, buffers, params, device)
    desc.calculate(None, *buffers)
    if key is not None and _classic(spec) and all(type(b) is np.ndarray for b in buffers):
        k0 = out_ops[0]
        _remember(key, (desc, buffers[k0].shape, buffers[k0].dtype, order))
        _note_last(spec, desc, args, asked, buffers[k0].shape, buffers[k0].dtype, order)
    elif key is not None and key[1] == "torch" and _classic(spec) and all(
            _is_torch(b) for b in buffers):
        o = buffers[out_ops[0]]
        hit = (desc, tuple(o.shape), o.dtype, o.device, order)
        _remember(key, hit)
        _note_last_device(spec, desc, args, asked, hit)
    results = [buffers[k] for k, o in enumerate(ops) if o.writes]
    return results[0] if len(results) == 1 else tuple(results)


def _fresh_order(spec, buffers, shape) -> tuple[int, ...] | None:
    """The axis order of the outputs a call allocates: the inputs' (layout.result_order)."""
    operands = []
    for o, b in zip(spec.operands, buffers):
        if b is None or not o.reads or o.views is not None:
            continue
        if type(b) is np.ndarray:
            size = b.itemsize
            if any(st % size for st in b.strides):
                continue
            operands.append((b.shape, tuple(st // size for st in b.strides)))
        else:
            operands.append((tuple(b.shape), tuple(b.stride())))
    return result_order(shape, operands)


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(order)
    for j, i in enumerate(order):
        inverse[i] = j
    return tuple(inverse)


def _empty(shape, npdt, order):
    """``empty_aligned(shape)`` laid out in ``order`` (None: row-major)."""
    if order is None:
        return empty_aligned(shape, npdt)
    return empty_aligned(tuple(shape[i] for i in order), npdt).transpose(_inverse(order))


def _empty_torch(shape, tdt, dev, order):
    """``torch_empty(shape)`` laid out in ``order`` (None: row-major)."""
    if order is None:
        return torch_empty(shape, tdt, dev)
    return torch_empty(tuple(shape[i] for i in order), tdt, dev).permute(_inverse(order))


def _out_list(spec, out, out_ops) -> list:
    if not out_ops:
        if out is not None:
            raise InfiniError(Status.BAD_PARAM, f"{spec.name} updates its operands in place; "
                              "it takes no out=")
        return []
    if len(out_ops) == 1:
        if isinstance(out, tuple | list):
            if len(out) != 1:
                raise InfiniError(Status.BAD_PARAM, f"{spec.name} has 1 output, got {len(out)}")
            out = out[0]
        return [out]
    if out is None:
        return [None] * len(out_ops)
    if not isinstance(out, tuple | list) or len(out) != len(out_ops):
        raise InfiniError(Status.BAD_PARAM, f"{spec.name} has {len(out_ops)} outputs "
                          f"({', '.join(spec.operands[k].name for k in out_ops)}): out= must be a "
                          "tuple of that many arrays (or None)")
    return list(out)


def _pick(spec, cands, k: int, output: bool = False) -> DType:
    """The dtype at operand k that every remaining signature agrees on."""
    dts = sorted({s.dtypes[k] for s in cands})
    if len(dts) == 1:
        return dts[0]
    name = spec.operands[k].name
    choices = ", ".join(d.short_name for d in dts)
    how = "pass dtype= or out= (an array of the dtype you want)" if output else "pass an array"
    raise InfiniError(Status.BAD_PARAM, f"{spec.name}: the dtype of '{name}' is ambiguous "
                      f"({choices}); {how}")


def _result_shape(spec, buffers) -> tuple[int, ...]:
    """The iteration shape: an in-place operand's shape, else the inputs' views broadcast."""
    shapes, names = [], []
    for o, b in zip(spec.operands, buffers):
        if b is None or not o.reads:
            continue
        if o.writes:
            return tuple(b.shape)
        if o.views is None:
            shapes.append(tuple(b.shape))
        else:
            d = TensorDescriptor(as_dtype(b.dtype), tuple(b.shape),
                                 None if type(b) is np.ndarray else tuple(b.stride()))
            shapes += [v.shape for v, _ in o.view(d)]
        names.append(o.name)
    return broadcast_shape(shapes, names)


def _remember(key, value) -> None:
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def result_dtype(x) -> DType:
    return from_numpy(x.dtype) if isinstance(x, np.ndarray) else as_dtype(x.dtype)
