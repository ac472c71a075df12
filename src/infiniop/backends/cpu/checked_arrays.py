"""Array arguments that the compiled launcher checks and unboxes itself (the NumPy fast path).

A ``CheckedArray`` argument is an ordinary Numba array inside the kernel; only its entry differs.
Numba's unboxing trusts the object's rank and dtype (a rank above the signature's would write past
the array record on the stack) and allocates a reference-counting record per array, so our fast
path used to test each array's dtype, rank and writability from Python first: ~0.5 us for a
three-operand call, a third of a small call. Here the launcher's wrapper reads the object's own
fields (``ndarray_abi``) and refuses, with a ``TypeError`` and before touching the array, a rank
other than the signature's, a read-only array where the operand is written, or a
non-contiguous one for a 'C' signature. The record is borrowed (no reference counting: the
caller's arguments keep the arrays alive for the call). The dtype is checked by the launcher
against the descriptor's (``descr_address``, compared in ``arrays.layout_end``), which lets a
float16 or bfloat16 array enter as its uint16 storage without a view. The caller must pass
exact ``numpy.ndarray`` objects (the fast path tests ``type(x) is ndarray``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel.models import ArrayModel
from numba.extending import NativeValue, intrinsic, register_model, unbox

from . import ndarray_abi as abi

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_BYTE_PTR = ir.IntType(8).as_pointer()


class CheckedArray(types.Array):
    """``Array(dtype, ndim, layout, readonly)`` entered through the checks above."""

    def __init__(self, dtype, ndim, layout, readonly=False):
        ro = ", readonly" if readonly else ""
        super().__init__(dtype, ndim, layout, readonly=readonly,
                         name=f"checked_array({dtype}, {ndim}d, {layout}{ro})")


register_model(CheckedArray)(ArrayModel)


def _field(builder, obj, offset: int, ty):
    ptr = builder.gep(builder.bitcast(obj, _BYTE_PTR), [ir.Constant(_I64, offset)])
    return builder.load(builder.bitcast(ptr, ty.as_pointer()))


@unbox(CheckedArray)
def _unbox_checked(typ, obj, c):
    b = c.builder
    ary = c.context.make_array(typ)(c.context, b)
    need = (abi.WRITEABLE if typ.mutable else 0) | (abi.C_CONTIGUOUS if typ.layout == "C" else 0)
    ok = b.icmp_signed("==", _field(b, obj, abi.NDIM, _I32), ir.Constant(_I32, typ.ndim))
    if need:
        flags = b.and_(_field(b, obj, abi.FLAGS, _I32), ir.Constant(_I32, need))
        ok = b.and_(ok, b.icmp_unsigned("==", flags, ir.Constant(_I32, need)))
    with b.if_then(ok, likely=True):  # the shape and strides are read only at the right rank
        dims = _field(b, obj, abi.DIMS, _I64.as_pointer())
        steps = _field(b, obj, abi.STRIDES, _I64.as_pointer())
        shape = [b.load(b.gep(dims, [ir.Constant(_I64, i)])) for i in range(typ.ndim)]
        strides = [b.load(b.gep(steps, [ir.Constant(_I64, i)])) for i in range(typ.ndim)]
        nitems = ir.Constant(_I64, 1)
        for n in shape:
            nitems = b.mul(nitems, n)
        itemsize = c.context.get_abi_sizeof(c.context.get_data_type(typ.dtype))
        data = _field(b, obj, abi.DATA, _BYTE_PTR)
        c.context.populate_array(ary, data=b.bitcast(data, ary.data.type),
                                 shape=cgutils.pack_array(b, shape, ty=_I64),
                                 strides=cgutils.pack_array(b, strides, ty=_I64),
                                 itemsize=ir.Constant(_I64, itemsize), meminfo=None, parent=obj)
    failed = b.not_(ok)
    with b.if_then(failed, likely=False):
        c.pyapi.err_set_string("PyExc_TypeError", "array of another rank, read-only where "
                               "written, or not contiguous where required")
    return NativeValue(ary._getvalue(), is_error=failed)


@intrinsic
def descr_address(typingctx, a):
    """The address of the array object's dtype (its ``PyArray_Descr``), 0 for an array made in
    compiled code (no Python object behind it)."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        parent = context.make_array(sig.args[0])(context, builder, value=args[0]).parent
        out = cgutils.alloca_once_value(builder, ir.Constant(_I64, 0))
        with builder.if_then(cgutils.is_not_null(builder, parent), likely=True):
            descr = _field(builder, parent, abi.DESCR, _BYTE_PTR)
            builder.store(builder.ptrtoint(descr, _I64), out)
        return builder.load(out)

    return types.int64(a), codegen
