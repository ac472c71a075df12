"""Numba intrinsics for the mathlib prototype kernels (test support): exact LLVM semantics.

fma -> llvm.fma; float unary ops -> llvm.fabs/sqrt/floor/ceil/trunc/rint; integer ops in the
operands' own width (Numba would widen int32 to int64); bitcast between same-width types.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _llvm_float(ty):
    return "f32" if ty.bitwidth == 32 else "f64"


@intrinsic
def fma(typingctx, a, b, c):
    sig = a(a, b, c)

    def codegen(context, builder, signature, args):
        t = args[0].type
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t, t, t]),
                                            f"llvm.fma.{_llvm_float(signature.args[0])}")
        return builder.call(fn, list(args))

    return sig, codegen


def _unary(name):
    @intrinsic
    def f(typingctx, x):
        sig = x(x)

        def codegen(context, builder, signature, args):
            t = args[0].type
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t]),
                                                f"llvm.{name}.{_llvm_float(signature.args[0])}")
            return builder.call(fn, list(args))

        return sig, codegen
    return f


fabs = _unary("fabs")
fsqrt = _unary("sqrt")
ffloor = _unary("floor")
fceil = _unary("ceil")
ftrunc = _unary("trunc")
frint = _unary("rint")


@intrinsic
def fneg(typingctx, x):
    sig = x(x)

    def codegen(context, builder, signature, args):
        return builder.fneg(args[0])

    return sig, codegen


def _ibin(name):
    @intrinsic
    def f(typingctx, a, b):
        sig = a(a, b)

        def codegen(context, builder, signature, args):
            return getattr(builder, name)(args[0], args[1])

        return sig, codegen
    return f


iadd, isub, imul = _ibin("add"), _ibin("sub"), _ibin("mul")
iand_, ior_, ixor = _ibin("and_"), _ibin("or_"), _ibin("xor")
ishl, iashr, ilshr = _ibin("shl"), _ibin("ashr"), _ibin("lshr")


@intrinsic
def bitcast(typingctx, x, dtype):
    ty = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    sig = ty(x, dtype)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(ty))

    return sig, codegen


@njit(inline="always")
def _minimum(a, b):
    return a if (a < b or a != a) else b


@njit(inline="always")
def _maximum(a, b):
    return a if (a > b or a != a) else b
