"""Low-level Numba intrinsics (llvmlite) the kernels need and Numba does not expose.

- ``address_as_pointer(addr, dtype)``: an int address as a typed pointer (raw-address kernels);
  ``pointer_address(ptr)`` the other way.
- ``nt_store(ptr, i, value)``: a store tagged ``!nontemporal`` that claims 64-byte alignment.
  The loop vectoriser turns it into ``vmovntps``/``vmovntdq`` stores. The claim is only true for
  vector stores, so callers MUST start every vectorised loop at a 64-byte aligned address and
  use block lengths that are multiples of 64 bytes (see ``elementwise_kernels``): with that
  discipline every vector store of 16/32/64 bytes is aligned to its own size. A loop that is not
  vectorised just gets ordinary scalar stores (x86 has no scalar float NT store).
- ``sfence()``: orders the weakly-ordered NT stores before the kernel returns.
- ``prefetch(ptr, i)``: asks for the cache line of ``ptr[i]`` (``prefetcht0``): a row kernel
  reads its next row from memory while it streams out the current one.
- ``stack_scratch(nbytes)``: the address of a 64-byte aligned stack buffer of a constant size,
  allocated once per call of the function compiled (in its entry block), not per loop trip.
- ``f16_to_f32(u16)`` / ``f32_to_f16(f32)``: IEEE half conversions through LLVM's ``half`` type
  (F16C ``vcvtph2ps``/``vcvtps2ph``): exact, round-to-nearest-even, NaN stays NaN;
  ``f32_to_bf16_finite(f32)``: ``f32_to_bf16`` for values known not to be NaN (no NaN select);
  ``f64_to_f32_odd(f64)``: float64 -> float32 rounded to odd, so that the rounding to fp16/bf16
  after it is the one correct rounding of the float64 value (not two in a row);
  ``canonical(x)`` and ``opaque(x)`` keep LLVM from narrowing comparisons of converted values
  (``opaque`` also keeps named constants in registers).
- ``row_max_f32/f16/bf16(addr, n)``: the largest of n elements from address ``addr``, in
  vectors (four 16-lane accumulators), with a flag: (max, 1.0 if any element is NaN else 0.0).
- ``row_sum_f16/bf16(addr, nchunks, L, lanes)`` and ``row_sumsq_*``: the lane sums of a
  row's whole chunks (of x, or of x * x), lane by lane in the fixed order, into ``lanes``.
- ``lookup16(dst, src, table, n, nt)``: ``dst[i] = table[src[i]]`` for n 16-bit elements
  (``table``: 65536 16-bit entries and one more, read but unused): 16-lane ``vpgatherdd``
  where the CPU has AVX-512, 64-byte stores (``!nontemporal`` when ``nt``: ``dst`` then 64-byte
  aligned), a scalar loop elsewhere and for the tail. The tabulated kernels (``tabulated.py``).
- ``select(c, a, b)``, ``minimum(a, b)``, ``maximum(a, b)``: a ternary and NaN-propagating
  extrema as LLVM ``select``s, where Numba's ternaries and inlined functions cost compile time.
- ``call_kernel(address, (args...))``: calls the compiled function at ``address`` (Numba's
  calling convention, an int64 result; ``native.Kernel.address``): the array launchers reach
  their kernel this way, so one launcher serves every kernel with the same operand structure.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cpuinfo, jit  # noqa: F401  (jit sets Numba up before it compiles anything)


@intrinsic
def address_as_pointer(typingctx, addr, dtype):
    ty = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    sig = types.CPointer(ty)(addr, dtype)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def pointer_address(typingctx, ptr):
    if not isinstance(ptr, types.CPointer):
        return None
    sig = types.int64(ptr)

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def nt_store(typingctx, ptr, index, value):
    sig = types.void(ptr, index, value)

    def codegen(context, builder, signature, args):
        p, i, v = args
        v = context.cast(builder, v, signature.args[2], signature.args[0].dtype)
        addr = builder.gep(p, [i])
        instr = builder.store(v, addr, align=64)
        instr.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sfence(typingctx):
    sig = types.void()

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                            "llvm.x86.sse.sfence")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def f16_to_f32(typingctx, bits):
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        v = builder.trunc(args[0], ir.IntType(16)) if args[0].type.width > 16 else args[0]
        return builder.fpext(builder.bitcast(v, ir.HalfType()), ir.FloatType())

    return sig, codegen


@intrinsic
def canonical(typingctx, x):
    """``x`` through ``llvm.canonicalize`` (a no-op on a value converted from fp16: a quiet NaN
    or an exact number): LLVM then cannot narrow a NaN test or a comparison with a constant of
    that value back to half precision, which x86 without AVX512-FP16 compares in float32 and
    then packs and unpacks the masks through 16-bit lanes (clip float16: ~45 instructions per
    16 elements instead of ~30). Costs a multiply by 1, so only for compared fp16 inputs."""
    if not isinstance(x, types.Float):
        return None
    sig = x(x)

    def codegen(context, builder, signature, args):
        ty = args[0].type
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ty, [ty]), f"llvm.canonicalize.{ty.intrinsic_name}")
        return builder.call(fn, [args[0]])

    return sig, codegen


@intrinsic
def opaque(typingctx, x):
    """``x``, through an empty inline asm that LLVM cannot look through. For values computed
    once outside a loop: a hoisted fp16 operand (a comparison of two values LLVM knows came
    from half precision is narrowed to half, see ``canonical``), and the named constants of
    ``elementwise_kernels.constant_definitions`` (kept in a register, not reloaded from the
    constant pool in every iteration)."""
    if not isinstance(x, types.Float):
        return None
    sig = x(x)

    def codegen(context, builder, signature, args):
        ty = args[0].type
        asm = ir.InlineAsm(ir.FunctionType(ty, [ty]), "", "=x,0", side_effect=False)
        return builder.call(asm, [args[0]])

    return sig, codegen


@intrinsic
def f32_to_f16(typingctx, value):
    sig = types.uint16(value)

    def codegen(context, builder, signature, args):
        v = context.cast(builder, args[0], signature.args[0], types.float32)
        return builder.bitcast(builder.fptrunc(v, ir.HalfType()), ir.IntType(16))

    return sig, codegen


@intrinsic
def bf16_to_f32(typingctx, bits):
    """bfloat16 bits (any unsigned int type holding 16 bits) -> float32, exact."""
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        v = args[0]
        i32 = ir.IntType(32)
        v = builder.zext(v, i32) if v.type.width < 32 else builder.trunc(v, i32) if v.type.width > 32 else v
        return builder.bitcast(builder.shl(v, ir.Constant(i32, 16)), ir.FloatType())

    return sig, codegen


@intrinsic
def f32_to_bf16(typingctx, value):
    """float32 -> bfloat16 bits, round-to-nearest-even; NaN stays NaN (quietened)."""
    sig = types.uint16(value)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        x = context.cast(builder, args[0], signature.args[0], types.float32)
        b = builder.bitcast(x, i32)
        hi = builder.lshr(b, ir.Constant(i32, 16))
        lsb = builder.and_(hi, ir.Constant(i32, 1))
        rounded = builder.lshr(builder.add(builder.add(b, ir.Constant(i32, 0x7FFF)), lsb),
                               ir.Constant(i32, 16))
        quiet_nan = builder.or_(hi, ir.Constant(i32, 0x40))
        is_nan = builder.fcmp_unordered("uno", x, x)
        r = builder.select(is_nan, quiet_nan, rounded)
        return builder.trunc(r, ir.IntType(16))

    return sig, codegen


@intrinsic
def f32_to_bf16_finite(typingctx, value):
    """float32 -> bfloat16 bits, round-to-nearest-even, for a value that is not NaN (finite or
    infinite): :func:`f32_to_bf16` without its NaN compare, ``or`` and select, three of its
    eight vector operations. A NaN's low bits may carry into its exponent (0x7FFF8000 -> -0)
    or round a signalling NaN to infinity, so a caller must know that no NaN reaches it."""
    sig = types.uint16(value)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        x = context.cast(builder, args[0], signature.args[0], types.float32)
        b = builder.bitcast(x, i32)
        lsb = builder.and_(builder.lshr(b, ir.Constant(i32, 16)), ir.Constant(i32, 1))
        rounded = builder.lshr(builder.add(builder.add(b, ir.Constant(i32, 0x7FFF)), lsb),
                               ir.Constant(i32, 16))
        return builder.trunc(rounded, ir.IntType(16))

    return sig, codegen


@intrinsic
def f64_to_f32_odd(typingctx, value):
    """float64 -> float32 rounded to odd: round to nearest, then an inexact even result steps to
    its odd neighbour towards the value. A second rounding to a type of at most 22 bits (fp16:
    11, bf16: 8) is then exactly the correct rounding of the float64 value; NaN and infinities
    pass as ``fptrunc`` gives them, a finite value beyond float32 becomes its largest finite."""
    sig = types.float32(value)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        v = context.cast(builder, args[0], signature.args[0], types.float64)
        f = builder.fptrunc(v, ir.FloatType())
        fd = builder.fpext(f, ir.DoubleType())
        b = builder.bitcast(f, i32)
        zero = ir.Constant(ir.DoubleType(), 0.0)
        up = builder.xor(builder.fcmp_ordered(">", v, fd), builder.fcmp_ordered("<", v, zero))
        step = builder.select(up, ir.Constant(i32, 1), ir.Constant(i32, -1))
        even = builder.icmp_unsigned("==", builder.and_(b, ir.Constant(i32, 1)),
                                     ir.Constant(i32, 0))
        fix = builder.and_(builder.fcmp_ordered("one", v, fd), even)  # "one": false for NaN
        return builder.bitcast(builder.select(fix, builder.add(b, step), b), ir.FloatType())

    return sig, codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (``llvm.fma``; vectorises to vfmadd). Operands of one float type."""
    if not (a == b == c and isinstance(a, types.Float)):
        return None
    sig = a(a, b, c)

    def codegen(context, builder, signature, args):
        t = args[0].type
        name = "llvm.fma.f64" if isinstance(t, ir.DoubleType) else "llvm.fma.f32"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t, t, t]), name)
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def select(typingctx, cond, a, b):
    """``a if cond else b`` as one LLVM ``select``. A ternary splits Numba's IR into blocks
    joined by a merge variable, and Numba's SSA pass then rewrites the whole function once per
    merge: generated kernels with dozens of them spent a third of their compile time there.
    LLVM turns the ternary into this same select, so the machine code does not change."""
    t = typingctx.unify_pairs(a, b)
    if not isinstance(cond, types.Boolean) or t is None:
        return None
    sig = t(cond, a, b)

    def codegen(context, builder, signature, args):
        c, x, y = args
        return builder.select(c, context.cast(builder, x, signature.args[1], t),
                              context.cast(builder, y, signature.args[2], t))

    return sig, codegen


def _extremum(name: str, op: str):
    """``minimum``/``maximum``: ``a op b ? a : b``, but ``a`` where ``a`` is NaN (so NaN in
    either operand gives NaN): two selects, no branches (see ``select``)."""

    def typer(typingctx, a, b):
        if a != b or not isinstance(a, (types.Float, types.Integer, types.Boolean)):
            return None
        sig = a(a, b)

        def codegen(context, builder, signature, args):
            x, y = args
            if isinstance(a, types.Float):
                pick = builder.select(builder.fcmp_ordered(op, x, y), x, y)
                return builder.select(builder.fcmp_ordered("==", x, x), pick, x)
            signed = isinstance(a, types.Integer) and a.signed
            less = builder.icmp_signed if signed else builder.icmp_unsigned
            return builder.select(less(op, x, y), x, y)

        return sig, codegen

    typer.__name__ = name
    return intrinsic(typer)


minimum = _extremum("minimum", "<")
maximum = _extremum("maximum", ">")


@intrinsic
def bitcast(typingctx, value, dtype):
    """The bits of ``value`` reinterpreted as ``dtype`` (same width: f32 <-> i32/u32,
    f64 <-> i64/u64)."""
    to = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    if value.bitwidth != to.bitwidth:
        return None
    sig = to(value, dtype)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(to))

    return sig, codegen


@intrinsic
def stack_scratch(typingctx, nbytes):
    if not isinstance(nbytes, types.IntegerLiteral):
        return None
    size = nbytes.literal_value
    sig = types.intp(nbytes)

    def codegen(context, builder, signature, args):
        with builder.goto_entry_block():
            buf = builder.alloca(ir.ArrayType(ir.IntType(8), size))
            buf.align = 64
        return builder.ptrtoint(buf, ir.IntType(64))

    return sig, codegen


def _prefetch(locality: int):
    """An intrinsic ``(ptr, index)`` asking for the cache line of ``ptr[index]`` (a read)."""

    @intrinsic
    def prefetch(typingctx, ptr, index):
        sig = types.void(ptr, index)

        def codegen(context, builder, signature, args):
            p, i = args
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [builder.bitcast(builder.gep(p, [i]), i8p), ir.Constant(i32, 0),
                              ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    return prefetch


# into every cache level (prefetcht0), and into L2 and beyond but not L1 (prefetcht1)
prefetch = _prefetch(3)
prefetch_l2 = _prefetch(2)


@intrinsic
def prefer_512_bit_vectors(typingctx):
    """Tell LLVM's vectoriser to use 512-bit vectors in the function being compiled (it prefers
    256-bit ones on AVX-512 CPUs): the string attribute ``"prefer-vector-width"="512"`` on that
    function, set as a side effect of compiling this call, which emits no instruction. Measured
    here: math-heavy float32 kernels 1.4-2x faster, and fp16/bf16 loops with non-temporal stores
    vectorise only at this width."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        # llvmlite validates attribute names against a fixed list; a string attribute is
        # written as is into the function's definition
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def call_kernel(typingctx, address, args):
    """Call the Numba-compiled function at ``address`` with the tuple ``args`` and return its
    int64 result; an exception it raises propagates. Integer arguments are passed as int64
    (how ``native.Kernel.specialize`` types Python ints; an array's address is unsigned), the
    rest as they are: the callee must have been compiled for exactly those types (an array's
    layout 'A' or 'C' is the same record)."""
    if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    argtys = [types.int64 if isinstance(t, types.Integer) else t for t in args.types]
    sig = types.int64(address, args)

    def codegen(context, builder, signature, llargs):
        items = [context.cast(builder, v, t, u) for v, t, u in
                 zip(cgutils.unpack_tuple(builder, llargs[1]), args.types, argtys)]
        fnty = context.call_conv.get_function_type(types.int64, argtys)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        status, result = context.call_conv.call_function(builder, fn, types.int64, argtys, items)
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return sig, codegen


_F32 = ir.FloatType()
_ROW_LANES, _ROW_VECTORS = 16, 4  # row_max/row_sum: 16-lane vectors, four at a time


def _row_loader(kind: str):
    """A row element's IR type and its conversion to float (scalar or vector)."""
    if kind == "f32":
        return _F32, lambda b, v: v

    def like(v, scalar):
        return ir.VectorType(scalar, _ROW_LANES) if isinstance(v.type, ir.VectorType) else scalar

    if kind == "f16":
        return ir.HalfType(), lambda b, v: b.fpext(v, like(v, _F32))

    def bf16(b, v):  # the bits above 16 zero bits
        i32 = like(v, ir.IntType(32))
        sixteen = ir.Constant(i32, [16] * _ROW_LANES if i32 != ir.IntType(32) else 16)
        return b.bitcast(b.shl(b.zext(v, i32), sixteen), like(v, _F32))

    return ir.IntType(16), bf16


def _row_max(kind: str):
    """``row_max_<kind>(addr, n)`` -> (max, nan): a row's maximum in explicit 16-lane vectors,
    four accumulators (``x > m ? x : m``, which x86 runs as one ``vmaxps``), then single vectors,
    then the scalar tail (at most 15 elements; it was up to 63, and causal_softmax's rows have
    every length: AMD EPYC Zen 4, old and new alternating in one process, same bits, softmax
    (16384, 100) -5% and -12%, (8192, 1000) -3% and 0, causal_softmax (32, 2048, 2048) -1 to
    -4%).
    The row kernels' lane order cannot be vectorised by LLVM (a NaN-propagating maximum's
    reduction may not be reordered), and its lanes live in memory: the max pass of a float32
    softmax row took 18% of the row's time. Order does not change a maximum's value except for
    the sign of a zero and the payload of a NaN, so the caller takes this result unless the
    flag says NaN or the result is zero, and follows the fixed lane order then."""

    @intrinsic
    def row_max(typingctx, addr, n):
        sig = types.UniTuple(types.float32, 2)(addr, n)

        def codegen(context, builder, signature, args):
            i1, i64 = ir.IntType(1), ir.IntType(64)
            W, K = _ROW_LANES, _ROW_VECTORS
            et, conv = _row_loader(kind)
            fv, bv = ir.VectorType(_F32, W), ir.VectorType(i1, W)
            base = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.int64),
                                    et.as_pointer())

            def vector(at):  # W elements from index ``at``, as float32
                p = builder.bitcast(builder.gep(base, [at]), ir.VectorType(et, W).as_pointer())
                return conv(builder, builder.load(p, align=1))

            def larger(x, m):  # NaN-propagating in x only: the flag below catches NaNs
                return builder.select(builder.fcmp_ordered(">", x, m), x, m)

            def nan_in(x):
                return builder.fcmp_unordered("uno", x, x)
            n = context.cast(builder, args[1], signature.args[1], types.int64)
            step = ir.Constant(i64, W * K)
            nv = builder.mul(builder.udiv(n, step), step)
            fn = builder.function
            entry = builder.block
            head, body, tail = (fn.append_basic_block(f"row_max_{b}") for b in
                                ("head", "body", "tail"))
            builder.branch(head)
            builder.position_at_end(head)  # the vector loop: i, K accumulators, NaN lanes
            i = builder.phi(i64)
            accs = [builder.phi(fv) for _ in range(K)]
            nan = builder.phi(bv)
            i.add_incoming(ir.Constant(i64, 0), entry)
            for a in accs:
                a.add_incoming(ir.Constant(fv, [float("-inf")] * W), entry)
            nan.add_incoming(ir.Constant(bv, [0] * W), entry)
            builder.cbranch(builder.icmp_signed("<", i, nv), body, tail)
            builder.position_at_end(body)
            seen = nan
            for k, a in enumerate(accs):
                x = vector(builder.add(i, ir.Constant(i64, W * k)))
                a.add_incoming(larger(x, a), body)
                seen = builder.or_(seen, nan_in(x))
            i.add_incoming(builder.add(i, step), body)
            nan.add_incoming(seen, body)
            builder.branch(head)
            builder.position_at_end(tail)  # the accumulators combined, then the last elements
            m = accs[0]
            for a in accs[1:]:
                m = larger(a, m)

            def scan(label, at, m, flag, width, load):
                """Elements ``width`` at a time from ``at`` while a whole step fits: returns
                the index reached, the maximum and the NaN flag."""
                top = builder.block
                head_, body_, out = (fn.append_basic_block(f"row_max_{label}_{b}")
                                     for b in ("head", "body", "out"))
                builder.branch(head_)
                builder.position_at_end(head_)
                j, mj, fj = builder.phi(i64), builder.phi(m.type), builder.phi(flag.type)
                j.add_incoming(at, top)
                mj.add_incoming(m, top)
                fj.add_incoming(flag, top)
                last = builder.sub(n, ir.Constant(i64, width))
                builder.cbranch(builder.icmp_signed("<=", j, last), body_, out)
                builder.position_at_end(body_)
                x = load(j)
                mj.add_incoming(larger(x, mj), body_)
                fj.add_incoming(builder.or_(fj, nan_in(x)), body_)
                j.add_incoming(builder.add(j, ir.Constant(i64, width)), body_)
                builder.branch(head_)
                builder.position_at_end(out)
                return j, mj, fj

            # whole vectors past the last step of K, one at a time, then single elements
            at, m, nan = scan("one", nv, m, nan, W, vector)
            reduce_max = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_F32, [fv]), f"llvm.vector.reduce.fmax.v{W}f32")
            reduce_or = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i1, [bv]), f"llvm.vector.reduce.or.v{W}i1")
            m0, nan0 = builder.call(reduce_max, [m]), builder.call(reduce_or, [nan])
            _, sm, sn = scan("tail", at, m0, nan0, 1,
                             lambda j: conv(builder, builder.load(builder.gep(base, [j]))))
            flag = builder.select(sn, ir.Constant(_F32, 1.0), ir.Constant(_F32, 0.0))
            return context.make_tuple(builder, signature.return_type, [sm, flag])

        return sig, codegen

    return row_max


row_max_f32, row_max_f16, row_max_bf16 = _row_max("f32"), _row_max("f16"), _row_max("bf16")


def _row_sum(kind: str, square: bool):
    """``row_sum[sq]_<kind>(addr, nchunks, L, lanes)``: lane l (of L, a multiple of 64) of a row
    becomes ``((-0 + f(x[l])) + f(x[L + l])) + ... f(x[(nchunks - 1) L + l])`` with f(x) = x or
    x * x (rounded, then added: no fused multiply-add), stored to the float32 array at
    ``lanes``: the row kernels' order for whole chunks, 64 lanes at a time held in four vectors
    over the chunks (the loops interchanged), instead of a load and a store of the lanes every
    32 elements. rms_norm's sum of squares, one thread, generated kernels side by side, same
    bits: fp16 0.168 -> 0.153 ns an element from memory, bf16 0.192 -> 0.180; float32 within
    2%, so float32 rows keep the lanes."""

    @intrinsic
    def row_sum(typingctx, addr, nchunks, L, lanes):
        sig = types.void(addr, nchunks, L, lanes)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            W, K = _ROW_LANES, _ROW_VECTORS
            et, conv = _row_loader(kind)
            fv = ir.VectorType(_F32, W)
            a64 = [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)]
            base = builder.inttoptr(a64[0], et.as_pointer())
            out = builder.inttoptr(a64[3], _F32.as_pointer())
            nch, L = a64[1], a64[2]
            fn = builder.function
            entry = builder.block
            bhead, bbody, chead, cbody, cdone, done = (fn.append_basic_block(f"row_sum_{b}") for b in
                                                       ("bhead", "bbody", "chead", "cbody", "cdone", "done"))
            builder.branch(bhead)
            builder.position_at_end(bhead)  # a block of 64 lanes
            b = builder.phi(i64)
            b.add_incoming(ir.Constant(i64, 0), entry)
            builder.cbranch(builder.icmp_signed("<", b, L), bbody, done)
            builder.position_at_end(bbody)
            builder.branch(chead)
            builder.position_at_end(chead)  # its elements in every whole chunk, in order
            c = builder.phi(i64)
            c.add_incoming(ir.Constant(i64, 0), bbody)
            accs = [builder.phi(fv) for _ in range(K)]
            for a in accs:
                a.add_incoming(ir.Constant(fv, [-0.0] * W), bbody)
            builder.cbranch(builder.icmp_signed("<", c, nch), cbody, cdone)
            builder.position_at_end(cbody)
            first = builder.add(builder.mul(c, L), b)
            for k, a in enumerate(accs):
                p = builder.gep(base, [builder.add(first, ir.Constant(i64, W * k))])
                x = conv(builder, builder.load(builder.bitcast(p, ir.VectorType(et, W).as_pointer()),
                                               align=1))
                a.add_incoming(builder.fadd(a, builder.fmul(x, x) if square else x), cbody)
            c.add_incoming(builder.add(c, ir.Constant(i64, 1)), cbody)
            builder.branch(chead)
            builder.position_at_end(cdone)
            for k, a in enumerate(accs):
                p = builder.gep(out, [builder.add(b, ir.Constant(i64, W * k))])
                builder.store(a, builder.bitcast(p, fv.as_pointer()), align=4)
            b.add_incoming(builder.add(b, ir.Constant(i64, W * K)), cdone)
            builder.branch(bhead)
            builder.position_at_end(done)
            return context.get_dummy_value()

        return sig, codegen

    return row_sum


row_sum_f16, row_sum_bf16 = _row_sum("f16", False), _row_sum("bf16", False)
row_sumsq_f16, row_sumsq_bf16 = _row_sum("f16", True), _row_sum("bf16", True)


def _counted_loop(builder, label: str, start, stop):
    """``for i in range(start, stop)`` in IR: returns (i, close) with the builder in the body;
    ``close(step)`` adds i + step from the body's last block and continues after the loop."""
    top = builder.block
    head, body, done = (builder.function.append_basic_block(f"{label}_{b}")
                        for b in ("head", "body", "done"))
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(start.type)
    i.add_incoming(start, top)
    builder.cbranch(builder.icmp_signed("<", i, stop), body, done)
    builder.position_at_end(body)

    def close(step: int) -> None:
        i.add_incoming(builder.add(i, ir.Constant(i.type, step)), builder.block)
        builder.branch(head)
        builder.position_at_end(done)

    return i, close


def _rope_pairs(nt: bool):
    """``rope_pairs_f16[_nt](y, x, c, s, n)`` -> the elements done (a multiple of 16, at most n):
    an fp16 GPT-J row (pairs adjacent; see ``rope.swapped_pairs``) as y = x * c + swap(x) * s
    over 16-element float32 vectors, with the swap of each pair's two elements one in-register
    shuffle, c = (cos_i, cos_i) and s = (-sin_i, sin_i) per pair as float32 rows the caller
    builds once per position. The same
    roundings as (a cos - b sin, a sin + b cos) computed apart (RN(a c) + RN(-b s) is RN(a c) -
    RN(b s)), without the even/odd deinterleaving and interleaving shuffles LLVM emits for the
    pairs as elements at steps of 2. ``nt``: non-temporal stores (y's row on a line)."""

    @intrinsic
    def rope_pairs(typingctx, y, x, c, s, n):
        sig = types.int64(y, x, c, s, n)

        def codegen(context, builder, signature, args):
            i64, W = ir.IntType(64), _ROW_LANES
            a64 = [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)]
            et, conv = _row_loader("f16")
            fv = ir.VectorType(_F32, W)
            yp, xp = (builder.inttoptr(a, et.as_pointer()) for a in a64[:2])
            cp, sp = (builder.inttoptr(a, _F32.as_pointer()) for a in a64[2:4])
            n = builder.mul(builder.udiv(a64[4], ir.Constant(i64, W)), ir.Constant(i64, W))
            swap = ir.Constant(ir.VectorType(ir.IntType(32), W), [k ^ 1 for k in range(W)])
            j, close = _counted_loop(builder, "rope_pairs", ir.Constant(i64, 0), n)

            def at(base, t):
                return builder.bitcast(builder.gep(base, [j]), ir.VectorType(t, W).as_pointer())
            xv = conv(builder, builder.load(at(xp, et), align=1))
            cv, sv = (builder.load(at(b, _F32), align=4) for b in (cp, sp))
            xs = builder.shuffle_vector(xv, ir.Constant(fv, ir.Undefined), swap)
            yv = builder.fadd(builder.fmul(xv, cv), builder.fmul(xs, sv))
            yv = builder.fptrunc(yv, ir.VectorType(ir.HalfType(), W))
            st = builder.store(yv, at(yp, et), align=2 * W if nt else 1)
            if nt:
                st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            close(W)
            return n

        return sig, codegen

    return rope_pairs


rope_pairs_f16, rope_pairs_f16_nt = _rope_pairs(False), _rope_pairs(True)

LANES_SUM_MAX = 32  # lanes_sum_* halves at most this many lanes in registers


def _lanes_sum(kind: str):
    """``lanes_sum_<kind>(addr, m)``: the sum of the m lanes at ``addr`` (m a power of two up to
    LANES_SUM_MAX) halved pairwise, lane l + lane l + m/2, then again, as the row kernels' lane
    order does (``row_kernels._Gen.halve``), in registers: the same additions in the same order,
    so the same bits. A short row's halving loops ran with trip counts below the vectorised
    loop's (interleaved) width, one lane at a time: without its sum's halving a softmax (16384,
    32) float32 call took 305 us instead of 430 (AMD EPYC Zen 3); with this, 396 against 445."""
    T = _F32 if kind == "f32" else ir.DoubleType()
    nt = types.float32 if kind == "f32" else types.float64

    @intrinsic
    def lanes_sum(typingctx, addr, m):
        sig = nt(addr, m)

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            base = context.cast(builder, args[0], signature.args[0], types.int64)
            m = context.cast(builder, args[1], signature.args[1], types.int64)
            fn = builder.function
            one = fn.append_basic_block("lanes_sum_1")
            done = fn.append_basic_block("lanes_sum_done")
            switch = builder.switch(m, one)
            sums = []
            size = 2
            while size <= LANES_SUM_MAX:
                block = fn.append_basic_block(f"lanes_sum_{size}")
                switch.add_case(ir.Constant(i64, size), block)
                builder.position_at_end(block)
                v = builder.load(builder.inttoptr(base, ir.VectorType(T, size).as_pointer()),
                                 align=T.get_abi_size(context.target_data))
                w = size
                while w > 1:  # lanes l and l + w/2
                    lo = ir.Constant(ir.VectorType(i32, w // 2), list(range(w // 2)))
                    hi = ir.Constant(ir.VectorType(i32, w // 2), list(range(w // 2, w)))
                    v = builder.fadd(builder.shuffle_vector(v, v, lo),
                                     builder.shuffle_vector(v, v, hi))
                    w //= 2
                sums.append((builder.extract_element(v, ir.Constant(i32, 0)), builder.block))
                builder.branch(done)
                size *= 2
            builder.position_at_end(one)
            sums.append((builder.load(builder.inttoptr(base, T.as_pointer())), one))
            builder.branch(done)
            builder.position_at_end(done)
            total = builder.phi(T)
            for value, block in sums:
                total.add_incoming(value, block)
            return total

        return sig, codegen

    return lanes_sum


lanes_sum_f32, lanes_sum_f64 = _lanes_sum("f32"), _lanes_sum("f64")


def _lookup16(nt: bool):
    """``lookup16[_nt](dst, src, table, n)``: see the module docstring. LLVM's loop vectoriser
    does not gather on AMD Zen (its cost model: scalar loads there), so the gathers are
    explicit: bf16 gelu, 32M elements from memory, 2 threads (AMD EPYC Zen 4): 10.4 ms
    computed, 9.4 with the scalar loads of a plain loop, 6.4 with these gathers (a copy: 2.8)."""

    @intrinsic
    def lookup16(typingctx, dst, src, table, n):
        sig = types.void(dst, src, table, n)

        def codegen(context, builder, signature, args):
            i8, i16, i32, i64 = (ir.IntType(b) for b in (8, 16, 32, 64))
            a64 = [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)]
            dst_p, src_p = (builder.inttoptr(a, i16.as_pointer()) for a in a64[:2])
            tab = builder.inttoptr(a64[2], i16.as_pointer())
            n = a64[3]
            W = 32 if cpuinfo.compiles_avx512() else 0  # elements a vector step (two gathers)
            nv = builder.mul(builder.udiv(n, ir.Constant(i64, W)), ir.Constant(i64, W)) if W \
                else ir.Constant(i64, 0)
            i, close = _counted_loop(builder, "lookup16_v", ir.Constant(i64, 0), nv)
            if W:
                v16, v32 = ir.VectorType(i16, 16), ir.VectorType(i32, 16)
                gather = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(v32, [v32, i8.as_pointer(), v32, i16, i32]),
                    "llvm.x86.avx512.gather.dpi.512")
                halves = []
                for h in range(2):  # 32-bit words at table + 2 idx: the entry in the low half
                    p = builder.gep(src_p, [builder.add(i, ir.Constant(i64, 16 * h))])
                    idx = builder.zext(builder.load(builder.bitcast(p, v16.as_pointer()), align=2), v32)
                    words = builder.call(gather, [ir.Constant(v32, [0] * 16),
                                                  builder.bitcast(tab, i8.as_pointer()), idx,
                                                  ir.Constant(i16, -1), ir.Constant(i32, 2)])
                    halves.append(builder.trunc(words, v16))
                both = builder.shuffle_vector(halves[0], halves[1],
                                              ir.Constant(ir.VectorType(i32, 32), list(range(32))))
                out = builder.bitcast(builder.gep(dst_p, [i]), ir.VectorType(i16, 32).as_pointer())
                store = builder.store(both, out, align=64 if nt else 2)
                if nt:
                    store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(i32, 1)]))
            close(W or 1)
            j, close = _counted_loop(builder, "lookup16_s", nv, n)  # the rest one by one
            idx = builder.zext(builder.load(builder.gep(src_p, [j])), i64)
            builder.store(builder.load(builder.gep(tab, [idx])), builder.gep(dst_p, [j]))
            close(1)
            return context.get_dummy_value()

        return sig, codegen

    return lookup16


lookup16, lookup16_nt = _lookup16(False), _lookup16(True)
