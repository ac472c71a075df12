"""CPU elementwise kernels generated from a traced operator (elementwise.spec.Program).

One module per (program, layout kind, stride pattern) holds the Numba functions of
:func:`kernel_names`: ``serial`` (a light flat body's also ``streamed``), which a shared driver
runs on the pool (:func:`flat_driver`, :func:`task_driver`).
They take raw slot addresses (any buffer kind) and the scalar parameters. The array
``launch`` (:func:`launcher`, a module of its own shared by every kernel of the same operand
structure) takes the operands as NumPy arrays and checks, in compiled code,
that each array is laid out exactly as its descriptor says and that outputs do not overlap other
operands, then calls the kernel by address: a small call stays within about a microsecond of
NumPy's own ufunc call.

The body is rendered one statement per expression node (SSA), in the node's own type
(``np.float32(...)`` etc.): IEEE arithmetic, no contraction (Numba's default), ``fma`` and
``bitcast`` through intrinsics, so the bits are the ones the expression defines.

Layout kinds (decided once, at create):
- 'flat': one dense loop; each input is dense ('1') or a single broadcast value ('0'). Large
  outputs use non-temporal stores: the head is peeled to 64-byte alignment and full blocks of
  64 KiB are stored with ``nt_store`` (see intrinsics.py for the alignment discipline);
  outputs narrower than 4 bytes as packed 32-bit words (``_Gen.packed_loop``).
- 'strided': rows of the normalised layout; the innermost dim's stride class per slot is
  baked into the code ('1' contiguous, '0' broadcast, 'g' general) so unit-stride rows vectorise.
- 'tiled': 2-D tiles over (a transposed input's dense dim, the output's dense dim). Inputs
  of class 't' (unit stride along the tiles' rows, set by ``elementwise.staged_pattern``) are
  transposed tile by tile into a scratch with rearrange's in-register ``tile_transpose``, so
  the tile rows run the same unit-stride body as 'strided', with non-temporal stores.
"""

from __future__ import annotations

import os

from ...dtype import DType
from ...elementwise.expr import BINARY, COMPARE, LIBM, Expr, topo
from . import codegen, fission, native, ndarray_abi
from .codegen import kernels
from .cpuinfo import TILE_ROW_BYTES, intel

STORAGE = {
    DType.F16: "uint16", DType.BF16: "uint16", DType.F32: "float32", DType.F64: "float64",
    DType.I8: "int8", DType.I16: "int16", DType.I32: "int32", DType.I64: "int64",
    DType.U8: "uint8", DType.U16: "uint16", DType.U32: "uint32", DType.U64: "uint64",
    DType.BOOL: "uint8", DType.BYTE: "uint8",
}
NP = {"f32": "np.float32", "f64": "np.float64", "i32": "np.int32", "i64": "np.int64",
      "u32": "np.uint32", "u64": "np.uint64", "bool": "np.bool_"}
DTYPE_BYTES = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "u32": 4, "u64": 8}
LOAD = {DType.F16: "f16_to_f32({})", DType.BF16: "bf16_to_f32({})", DType.F32: "{}",
        DType.F64: "{}", DType.BOOL: "({} != 0)"}
BLOCK_BYTES = 1 << 16
# Math-heavy bodies (at least STAGE_MIN_NODES expression nodes) compute into a stack chunk in
# L1 and copy it out (heavy_loop); light bodies store as they go, narrow outputs as packed
# words (packed_loop), which is faster for them (sub/clip f16: 1.3-1.6x) and slower for math
# (silu f16: 1.3x).
STAGE_BYTES = 4096
STAGE_MIN_NODES = 16
# Vector iterations LLVM's loop vectoriser interleaves in those bodies (jit.loop_interleave),
# so that an iteration holds 16 elements of independent chains: 2 for float32 math, 4 where
# most of the body is float64 (half the lanes). A/B, 16M elements, 2 threads, same bits, 2
# against LLVM's choice: float32 silu -6%, sigmoid -8%, tanh -11%, gelu -12%, erf -10%, log1p
# -9%, fp16/bf16 silu, sigmoid, gelu -7 to -14%; 4 against 2 for float64 bodies: float32 gelu
# -22%, erf -17%, erfc -15%, erfinv -19%, float64 silu -12%, sigmoid -30%, tanh -8% (4 for
# float32 bodies: silu +16%, tanh +37%).
HEAVY_INTERLEAVE = 2
TILE_SCRATCH_BYTES = 256 << 10  # one staged input's tile (the tiled kind): in L2
# Vector width the kernels ask LLVM for (INFINIOP_VECTOR_BITS=256 keeps LLVM's default on
# AVX-512 CPUs, which is 256-bit; the request does nothing on CPUs without 512-bit vectors).
WIDE = os.environ.get("INFINIOP_VECTOR_BITS", "512") == "512"



ALIAS_WINDOW = 80  # bytes an output may start ahead of an input, mod 4096, before it stages


def aliasing_test(outs: list[str], ins: list[str], window: bool = True) -> str:
    """Generated condition: some output pointer starts 1..ALIAS_WINDOW bytes ahead of some
    input pointer, mod 4096 (4K aliasing; see ``_Gen.aliasing_risk``; not when ``window`` is
    False), or exactly at it (an operand updated in place: streamed straight from the compute
    loop, its non-temporal stores hit lines the loop reads next, and LLVM's overlap check
    keeps that loop scalar: sub float16 (4096, 4096) in place 722 ms, 1.5 out of place; AMD
    EPYC Zen 4); '' if no pairs."""
    near = f"0 < ((pointer_address({{o}}) - pointer_address({{i}})) & 4095) <= {ALIAS_WINDOW} or "
    return " or ".join((near if window else "").format(o=o, i=i)
                       + f"pointer_address({o}) == pointer_address({i})"
                       for o in outs for i in ins)


def packed_word(values: list[str], bits: int) -> str:
    """One 32-bit word of ``32 // bits`` stored elements, element 0 in the low bits (through the
    unsigned storage width: a signed element must not fill the high bits)."""
    parts = [f"np.uint32(np.uint{bits}({v}))" for v in values]
    word = " | ".join(f"({v} << np.uint32({bits * u}))" if u else v for u, v in enumerate(parts))
    return f"np.uint32({word})"


def bf16_lane(word: str, lane: int) -> str:
    """Element ``lane`` (0: the low half) of a 32-bit word of two bf16 values, as float32: the
    word shifted or masked, lane-wise (read as 16-bit elements, pairs need shuffles)."""
    bits = f"{word} << np.uint32(16)" if lane == 0 else f"{word} & np.uint32(0xFFFF0000)"
    return f"bitcast(np.uint32({bits}), np.float32)"


def launcher_tables(head: list[int], info, operands: list[int], origins: list[int],
                    extras=()):
    """The one int64 table the generated array launchers read (see :func:`launcher`):
    ``head`` (:data:`HEAD` entries: three kernel sizes, the kernel's address), each operand's
    byte reach (lo, hi + 1), the slots' origins, the overlap checks' aliasable flags; then each
    operand's ``dtype, ndim, shape..., byte strides...`` (what ``arrays.layout_end`` compares an
    array with; ``dtype`` is the address of its NumPy dtype when the launcher checks it, see
    :func:`launcher_arrays`); then each of ``extras`` (the kernel's own int64 arrays, 1-D or
    2-D) as ``rows, cols, values...``. One array: each
    argument a launch unboxes costs about as much as a small kernel's work."""
    import numpy as np

    checked = ndarray_abi.verified()
    meta, layouts = list(head), []
    for d in (info.descs[k] for k in operands):
        lo, hi = d.reach
        meta += [lo * d.dtype.itemsize, (hi + 1) * d.dtype.itemsize]
        # the dtype objects live as long as NumPy (builtins) or ml_dtypes (bfloat16)
        layouts += [id(d.dtype.numpy) if checked else 0, d.ndim, *d.shape,
                    *(st * d.dtype.itemsize for st in d.strides)]
    meta += origins
    meta += [int(c.aliasable) for c in info.checks]
    for x in extras:
        x = np.asarray(x, dtype=np.int64)
        rows, cols = (1, x.size) if x.ndim == 1 else x.shape
        layouts += [rows, cols, *x.ravel().tolist()]
    return np.array(meta + layouts, dtype=np.int64)


HEAD = 4  # launcher_tables' head: three kernel sizes, then the kernel's address

LAUNCHER_PRELUDE = '''\
# Generated by infiniop (backends/cpu/elementwise_kernels.py). Do not edit.
import numpy as np
from numba import njit
from infiniop.backends.cpu.intrinsics import call_kernel
from infiniop.backends.cpu.arrays import layout_end
from infiniop.backends.cpu.checked_arrays import descr_address
'''


def launcher(slot_operands: list[int], nops: int, nparams: int, pairs, extras,
             tail: list[str]) -> native.Kernel:
    """``launch(a0.., p0.., meta)``: the NumPy fast path's entry (elementwise, rows, rope), as a
    ``native.Kernel``. ``meta`` is :func:`launcher_tables`' table: 3 kernel sizes, the kernel's
    address, per operand reach_lo, reach_hi (bytes), per slot its origin (bytes), per pair
    'aliasable', the operands' layouts, then ``extras`` (names, with their ndim: 1 or 2). Each
    array must be laid out as its descriptor and the (written, other) ``pairs`` must not overlap
    unless exactly aliasable; then the kernel is called (``intrinsics.call_kernel``) with slot
    j's address (``b<slot_operands[j]>`` + its origin), the parameters and ``tail`` (expressions
    of ``meta[...]`` and the extras). Returns 0 (done), 1 + u (operand u not as described),
    100 + pair (overlap) or the kernel's own nonzero code. The kernel is not part of the
    source: one launcher (compiled once) serves every kernel with the same operand structure
    and argument types (a light operator's first call compiled 0.6-0.7 s with its own launcher,
    0.08 s with a shared one)."""
    names = [f"a{u}" for u in range(nops)] + [f"p{k}" for k in range(nparams)]
    layouts_at = HEAD + 2 * nops + len(slot_operands) + len(pairs)
    L = ["\n\n@njit(cache=True, nogil=True, error_model='numpy', boundscheck=False)",
         f"def launch({', '.join(names)}, meta):",
         f"    pos = np.int64({layouts_at})  # not a literal: one layout_end for every launcher"]
    for u in range(nops):
        # an array not laid out as its descriptor (shape, element strides) goes to the
        # general path, which says why
        L += [f"    pos = layout_end(descr_address(a{u}), a{u}.shape, a{u}.strides, meta, pos)",
              "    if pos < 0:", f"        return {1 + u}",
              f"    b{u} = a{u}.ctypes.data"]
    for q, (w, k) in enumerate(pairs):
        lw, hw, lk, hk = HEAD + 2 * w, HEAD + 1 + 2 * w, HEAD + 2 * k, HEAD + 1 + 2 * k
        L += [f"    if not (b{w} + meta[{hw}] <= b{k} + meta[{lk}] or "
              f"b{k} + meta[{hk}] <= b{w} + meta[{lw}]):",
              f"        if not (b{w} == b{k} and meta[{layouts_at - len(pairs) + q}] == 1):",
              f"            return {100 + q}"]
    for name, nd in extras:
        shape = ".reshape((meta[pos], meta[pos + 1]))" if nd == 2 else ""
        L += [f"    {name} = meta[pos + 2:pos + 2 + meta[pos] * meta[pos + 1]]{shape}",
              "    pos += 2 + meta[pos] * meta[pos + 1]"]
    args = [f"b{u} + meta[{HEAD + 2 * nops + j}]" for j, u in enumerate(slot_operands)]
    args += [f"p{k}" for k in range(nparams)] + list(tail)
    L.append(f"    return call_kernel(meta[{HEAD - 1}], ({', '.join(args)},))")
    return kernels("launch", LAUNCHER_PRELUDE + "\n".join(L) + "\n", ("launch",))["launch"]


TASK_ARGS = "shape, strides, chunks, nt, serial_at, t0, t1"  # strided and tiled kernels' sizes
TASK_PIECES = 64  # calls task_driver makes at most (each costs ~25 ns: 256 rows of 1024 lost 3 us)


def kernel_names(kind: str, roots) -> tuple[str, ...]:
    """The functions of a kernel module: ``serial`` (and a light flat body's ``streamed``; a
    heavy flat body's ``serial`` streams itself when asked). The pool's loop is a shared driver
    (:func:`flat_driver`, :func:`task_driver`) calling them by address. A first large call
    compiled ``parallel`` in 0.65 s (``sub``, flat), 1.14 s (``add`` with a broadcast column,
    strided), 2.03 s (``add(A.T, B)``, tiled); now 0.16, 0.49 and 0.87 s (AMD EPYC, empty
    cache; a driver 0.5 s, once per operand structure), same bits and speed. Math-heavy bodies
    kept their own prange ``parallel`` while called by address they ran 15-16% slower (float32
    erf, gelu); since ``heavy_loop`` they run at the same speed (2026-11-28, AMD EPYC Zen 4, 16M,
    alternating in one process: gelu float32 11.20 vs 11.29 ms, silu float32 4.63 vs 4.61, gelu
    float16 4.50 vs 4.55), and a prange function compiled 2.5-3.5x as long as ``serial`` (gelu
    float32 1.65 vs 0.65 s, swiglu bfloat16 strided 7.6 vs 2.1)."""
    return ("serial", "streamed") if kind == "flat" and not is_heavy(roots) else ("serial",)


DRIVER_PRELUDE = '''\
# Generated by infiniop (backends/cpu/elementwise_kernels.py). Do not edit.
from numba import njit, prange
from infiniop.backends.cpu.intrinsics import call_kernel


@njit(parallel=True, cache=True, nogil=True, error_model="numpy", boundscheck=False)
'''


def _driver(stem: str, lines: list[str]) -> native.Kernel:
    return kernels(stem, DRIVER_PRELUDE + "\n".join(lines) + "\n", ("parallel",))["parallel"]


def flat_driver(itemsizes: list[int], pattern: str, written: list[int],
                nparams: int) -> native.Kernel:
    """``parallel(s0.., p0.., n, stream, serial_at)``: a flat kernel on the thread pool,
    shared by every flat kernel with the same slots (item sizes, dense '1' or broadcast '0',
    which are written). The n elements go to the pool in blocks of BLOCK_BYTES of slot 0, each
    a call by address of the kernel's ``serial_at``, or for a full block of its ``streamed``
    (``stream``; 0: no streaming) when every written slot shares slot 0's alignment mod 64;
    the head before slot 0's first 64-byte boundary runs first."""
    isz0 = itemsizes[0]
    block = BLOCK_BYTES // isz0
    slots = [f"s{j}" for j in range(len(itemsizes))]
    params = [f"p{k}" for k in range(nparams)]
    L = [f"def parallel({', '.join(slots + params)}, n, stream, serial_at):"]
    if any(itemsizes[j] != isz0 for j in written):
        L.append("    stream = 0")
    for j in written[1:]:
        L += [f"    if (s{j} - s0) % 64 != 0:", "        stream = 0"]
    L += ["    head = 0", "    if stream:", f"        head = ((64 - (s0 & 63)) & 63) // {isz0}",
          f"        if s0 % {isz0} != 0 or head > n:", "            head = n",
          f"        call_kernel(serial_at, ({', '.join(slots + params)}, head, 0, 0))",
          f"    nblocks = (n - head + {block - 1}) // {block}",
          "    for b in prange(nblocks):",
          f"        start = head + b * {block}",
          f"        m = min({block}, n - start)",
          "        fn = serial_at",
          "        nt = 0",
          f"        if stream and m == {block}:",
          "            fn = stream",
          "            nt = 1"]
    at = [f"s{j} + start * {itemsizes[j]}" if pattern[j] == "1" else f"s{j}"
          for j in range(len(itemsizes))]
    # ``nt``: a heavy body's ``serial`` is its ``streamed`` too (a light one's ignores it)
    L += [f"        call_kernel(fn, ({', '.join(at + params)}, m, nt, 0))", "    return 0"]
    return _driver("flat", L)


def task_driver(kind: str, nslots: int, nparams: int, band_rows: int = 0) -> native.Kernel:
    """``parallel(s0.., p0.., shape, strides, chunks, nt, serial_at, t0, t1)``: a
    strided or tiled kernel on the thread pool, its tasks (as the kernel counts them: rows x
    column chunks; tiled: bands of ``band_rows`` rows x column blocks) in up to TASK_PIECES
    consecutive runs, each a call of its ``serial_at``; shared by every such kernel with as
    many slots and parameters."""
    args = [f"s{j}" for j in range(nslots)] + [f"p{k}" for k in range(nparams)]
    lead = 1 if kind == "strided" else 2
    L = [f"def parallel({', '.join(args)}, {TASK_ARGS}):",
         "    nd = shape.shape[0]", "    ntask = chunks", f"    for d in range(nd - {lead}):",
         "        ntask *= shape[d]"]
    if kind == "tiled":
        L.append(f"    ntask *= (shape[nd - 2] + {band_rows - 1}) // {band_rows}")
    L += [f"    pieces = min(ntask, {TASK_PIECES})",
          "    for c in prange(pieces):",
          f"        call_kernel(serial_at, ({', '.join(args)}, shape, strides, chunks, nt, 0, "
          "c * ntask // pieces, (c + 1) * ntask // pieces))", "    return 0"]
    return _driver(kind if kind == "strided" else f"tiled_{band_rows}", L)


def tile_shape(itemsizes: list[int], staged: list[int]) -> tuple[int, int]:
    """(rows, columns) of the tiled kind's tiles, in elements: the lengths of the contiguous
    runs each stream is read or written in per tile (a staged input's runs are rows long, the
    output's and dense inputs' columns long). The scratch tile stays within
    ``TILE_SCRATCH_BYTES`` (L2).

    Intel: columns of 512 bytes of the narrowest slot, rows of 1 KiB of the widest staged input.
    Measured there (8192 x 4096 A.T - B, 4 alternating processes, % of a copy moving the same
    bytes in the same process): float32 256 x 128 75-81% against 63-67% at 128 x 64 (256 x 256:
    72-83%); float16 512 x 256 100-104% against 65-68% at 256 x 128.

    Other CPUs (AMD EPYC, Zen 2): longer staged runs, shorter dense ones: columns of 256 bytes,
    rows of 4 KiB as far as the scratch allows (units of 2 bytes or more). A.T - B, 4096^2 /
    8192^2, 2 threads, one run: float32 1024 x 64 26.5 / 26.0 GB/s against 19.9 / 20.1 at
    256 x 128 (a C probe of the same pattern with 8 x 8 AVX2 tiles: 22.0 at best); float64
    512 x 32 28.1 / 28.8 against 20.2 / 19.0; float16 1024 x 128 19.7 / 19.7 against
    18.0 / 18.5; 128-byte columns took 2-3x longer; int8 keeps 512 x 512 (1024 x 256: 9.6
    against 11.3)."""
    narrow = min(itemsizes)
    unit = max([itemsizes[j] for j in staged] or [4])
    if not intel() and narrow > 1:
        cols = 256 // narrow
        return min(4096 // unit, TILE_SCRATCH_BYTES // (cols * unit)), cols
    cols = 512 // narrow
    return max(64 // unit, min(1024 // unit, TILE_SCRATCH_BYTES // (cols * unit))), cols


_UNARY = {"neg": "(-{0})", "abs": "abs({0})", "sqrt": "np.sqrt({0})", "floor": "np.floor({0})",
          "ceil": "np.ceil({0})", "trunc": "np.trunc({0})", "rint": "np.rint({0})",
          "isnan": "({0} != {0})", **{f: f"np.{f}({{0}})" for f in LIBM},
          "atanh": "np.arctanh({0})", "erf": "math.erf({0})", "erfc": "math.erfc({0})"}

PRELUDE = '''\
# Generated by infiniop (backends/cpu/elementwise_kernels.py). Do not edit.
import math
import numpy as np
from numba import njit, prange
from infiniop.backends.cpu.intrinsics import (
    address_as_pointer, nt_store, sfence, f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16, fma,
    f32_to_bf16_finite, f64_to_f32_odd, bitcast, prefer_512_bit_vectors, prefetch, prefetch_l2,
    stack_scratch, pointer_address,
    opaque, canonical, row_max_f32, row_max_f16, row_max_bf16, row_sum_f16, row_sum_bf16,
    row_sumsq_f16, row_sumsq_bf16, select, minimum, maximum, lanes_sum_f32, lanes_sum_f64)
from infiniop.backends.cpu.transpose import tile_transpose, tile_transpose_256
from infiniop.backends.cpu.arrays import layout_end

OPTS = dict(cache=True, nogil=True, error_model="numpy", boundscheck=False)
'''


# ------------------------------------------------------------------------ expression rendering

def _const(v, t: str) -> str:
    if t == "bool":
        return "True" if v else "False"
    return codegen.literal(v, t)


def _node(node: Expr, a: list[str]) -> str:
    """Numba source of one node whose operands are the variables ``a``."""
    op, t = node.op, node.dtype
    if op in BINARY:
        expr = f"({a[0]} {BINARY[op]} {a[1]})"
        if t == "bool" or t in ("f32", "f64"):
            return expr
        return f"{NP[t]}{expr}"  # integers: wrap to the node's width
    if op == "invert":
        return f"(not {a[0]})" if t == "bool" else f"{NP[t]}(~{a[0]})"
    if op == "fma":
        return f"fma({a[0]}, {a[1]}, {a[2]})"
    if op in ("minimum", "maximum"):
        return f"{op}({a[0]}, {a[1]})"
    if op == "where":
        return f"select({a[0]}, {a[1]}, {a[2]})"
    if op == "cast":
        src = node.args[0].dtype
        if t == "bool":
            return f"({a[0]} != 0)"
        if src in ("f32", "f64") and t in ("i32", "u32"):  # via int64: defined for every value in range
            return f"{NP[t]}(np.int64({a[0]}))"
        if src in ("f32", "f64") and t == "u64":
            return _float_to_u64(a[0])
        return f"{NP[t]}({a[0]})"
    if op == "bitcast":
        return f"bitcast({a[0]}, {NP[t]})"
    if op in ("neg", "abs") and t not in ("f32", "f64"):
        return f"{NP[t]}({_UNARY[op].format(a[0])})"
    return _UNARY[op].format(*a)


def render_body(results, inputs: list[str], params: list[str], prefix: str = "t",
                given: dict[int, str] | None = None,
                consts: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(statements, result variables): one statement per node of the DAG over the loaded
    inputs (variables ``inputs[k]``) and parameters; temporaries are ``<prefix><n>``.
    ``given`` maps node ids to variables that already hold their values. ``consts``: float
    constants become variables ``kc<n>`` instead, recorded here (literal -> variable) for the
    caller to define outside its loop (see :func:`constant_definitions`)."""
    given = given or {}
    names: dict[int, str] = {}
    lines: list[str] = []
    for node in topo(results, given.keys()):
        if id(node) in given:
            names[id(node)] = given[id(node)]
        elif node.op == "input":
            names[id(node)] = inputs[node.args[0]]
        elif node.op == "param":
            names[id(node)] = params[node.args[0]]
        elif node.op == "const":
            names[id(node)] = _const(node.args[0], node.dtype)
            if consts is not None and node.dtype in ("f32", "f64"):
                names[id(node)] = consts.setdefault(names[id(node)], f"kc{len(consts)}")
        else:
            v = f"{prefix}{len(lines)}"
            lines.append(f"{v} = {_node(node, [names[id(x)] for x in node.args])}")
            names[id(node)] = v
    return lines, [names[id(r)] for r in results]


# elementwise bodies with at most this many distinct float constants name them: measured
# (AMD EPYC Zen 4, 2026-11-27, same bits) silu/sigmoid fp16/bf16 (10-12) 6-10% faster, hardswish
# fp16 (6) 20%, tanh (12) within 2.5%; bodies with more (log1p 13, gelu 25, float32 gelu/erf
# with 30-35 in float64) were 3-5% slower named, so they keep their literals
NAMED_CONSTANTS = 12


def constant_definitions(indent: str, consts: dict[str, str]) -> list[str]:
    """The definitions of render_body's named constants, each through ``intrinsics.opaque``:
    LLVM then keeps them in registers (or spills them once) instead of reloading each from the
    constant pool in every iteration, which it does in a loop short of registers (softmax's exp
    pass: 12 broadcasts an iteration, each after a 64-bit address load)."""
    return [f"{indent}{v} = opaque({c})" for c, v in consts.items()]


def _load(dtype: DType, src: str) -> str:
    if dtype in LOAD:
        return LOAD[dtype].format(src)
    return f"np.uint64({src})" if dtype.is_unsigned_int else f"np.int64({src})"


# Operations whose NaN result is an operand's NaN (quieted: the payload kept) or the default NaN
# (see nan_low_bits_zero)
_NAN_KEEPING = frozenset(("input", "const", "cast", "neg", "abs", "fma", "minimum", "maximum",
                          "where", "sqrt", "floor", "ceil", "trunc", "rint", "isnan", "add", "sub",
                          "mul", "truediv") + COMPARE)


def nan_low_bits_zero(program) -> bool:
    """Whether the program's bf16 outputs may round without f32_to_bf16's NaN select
    (``f32_to_bf16_finite``: 3 of the rounding's 8 vector operations fewer): every loaded operand
    bf16 or an integer, no scalar parameters or NaN constants, only operations of _NAN_KEEPING.
    A NaN reaching the rounding is then a bf16 input's, quieted, or the default NaN, its low 16
    bits zero (float64 steps keep them: a float32 NaN widened and narrowed again, or the
    default one), so nothing carries and the bits are the select's (hi | 0x40)."""
    if any(s.load is not None and s.dtype.is_float and s.dtype is not DType.BF16
           for s in program.slots):
        return False
    return keeps_nan_payloads(program.results)


def keeps_nan_payloads(results) -> bool:
    """Whether ``results`` use only operations of _NAN_KEEPING and no NaN constant."""
    return all(n.op in _NAN_KEEPING and not (n.op == "const" and n.args[0] != n.args[0])
               for n in topo(results))


def _store(dtype: DType, value: str, t: str, finite: bool = False) -> str:
    """``value`` (compute type ``t``) converted to ``dtype``'s storage. fp16/bf16 from anything
    but float32 go through float64 and float32 rounded to odd: one rounding in all (from
    float32 by round to nearest would be a second one). ``finite``: the value is known not to
    be NaN, so bf16 rounds without the NaN select (``f32_to_bf16_finite``)."""
    if dtype in (DType.F16, DType.BF16):
        v = value if t == "f32" else f"f64_to_f32_odd(np.float64({value}))"
        bf16 = "f32_to_bf16_finite" if finite else "f32_to_bf16"
        return f"{'f32_to_f16' if dtype is DType.F16 else bf16}({v})"
    if dtype is DType.BOOL:
        return f"np.uint8({value})" if t == "bool" else f"np.uint8({value} != 0)"
    st = STORAGE[dtype]
    if dtype is DType.U64 and t in ("f32", "f64"):
        return _float_to_u64(value)
    if not dtype.is_float and t in ("f32", "f64"):
        value = f"np.int64({value})"  # float -> int truncates (defined in the int64 range)
    return f"np.{st}({value})"


def _float_to_u64(value: str) -> str:
    """float -> uint64 as NumPy converts on x86: [2^63, 2^64) directly (through int64 they all
    became 2^63), below through int64 (negative values wrap, where a direct conversion is
    undefined)."""
    return f"(np.uint64({value}) if {value} >= 9223372036854775808.0 else np.uint64(np.int64({value})))"


# ------------------------------------------------------------------------------- generator

class _Gen:
    """Source of one kernel module: the program's slots, layout kind and pattern."""

    def __init__(self, program, kind: str, pattern: str):
        self.p = program
        self.kind = kind
        self.pattern = pattern
        self.slots = program.slots
        self.nslots = len(self.slots)
        self.isz = [s.dtype.itemsize for s in self.slots]
        self.st = [STORAGE[s.dtype] for s in self.slots]
        self.used = {n.args[0] for n in topo(program.results) if n.op == "input"}
        self.compared = compared_inputs(
            program.results, {s.load for j, s in enumerate(self.slots)
                              if s.load is not None and pattern[j] != "0"})
        self.params = [f"p{k}" for k in range(len(program.params))]
        self.written = [j for j, s in enumerate(self.slots) if s.store is not None]
        self.nan_plain = nan_low_bits_zero(program)  # bf16 rounded without the NaN select
        self.L: list[str] = []
        # a body with few float constants names them (see constant_definitions), defined where
        # each function starts (``wide``'s marks)
        few = len({(n.args[0], n.dtype) for n in topo(program.results)
                   if n.op == "const" and n.dtype in ("f32", "f64")}) <= NAMED_CONSTANTS
        self.consts: dict[str, str] | None = {} if few else None
        self.marks: list[tuple[int, str]] = []
        self.copies = 0  # bodies rendered so far (``render`` names each apart)

    def emit(self, line: str) -> None:
        self.L.append(line)

    def wide(self, indent: str) -> None:
        """Ask for 512-bit vectors in the function compiled from this point; the named
        constants are defined here too (:meth:`define`)."""
        if WIDE:
            self.emit(f"{indent}prefer_512_bit_vectors()")
        self.marks.append((len(self.L), indent))

    def define(self) -> None:
        """Insert the named constants' definitions at every mark (once all bodies are rendered)."""
        for at, indent in reversed(self.marks):
            self.L[at:at] = constant_definitions(indent, self.consts or {})

    def loaded(self, j: int) -> bool:
        s = self.slots[j]
        return s.load is not None and s.load in self.used

    def loads(self, indent: str, ptr: str, index: str, hoisted: bool, stride: str = "st",
              var: str = "x", words: dict | None = None) -> None:
        """Load the slots whose innermost class is '0' (``hoisted``) or not; a bf16 slot in
        ``words`` from its 32-bit word: ``words[j]`` = (word variable, element 0 or 1 of it)."""
        for j, s in enumerate(self.slots):
            cls = self.pattern[j]
            if not self.loaded(j) or (cls == "0") != hoisted:
                continue
            idx = "0" if cls == "0" else index if cls in "1t" else f"({index}) * {stride}{j}"
            value = _load(s.dtype, f"{ptr}{j}[{idx}]")
            if words and j in words:
                value = bf16_lane(*words[j])
            if s.dtype is DType.F16 and s.load in self.compared:  # see intrinsics.canonical
                value = f"{'opaque' if hoisted else 'canonical'}({value})"
            self.emit(f"{indent}{var}{s.load} = {value}")

    def compute(self, indent: str, ptr: str, index: str, stride: str = "st",
                lane: str = "", raw: bool = False, given: dict | None = None,
                words: dict | None = None) -> list:
        """Load and compute one element; the values to store, per written slot (storage type;
        ``raw``: (value, compute type) pairs, unconverted). ``lane`` keeps the names of several
        elements computed side by side apart; ``given``: see render_body."""
        outs = self.render(indent, ptr, index, self.p.results, stride, lane, given, words=words)
        if raw:
            return [(outs[self.slots[j].store], self.p.results[self.slots[j].store].dtype)
                    for j in self.written]
        return [_store(self.slots[j].dtype, outs[self.slots[j].store],
                       self.p.results[self.slots[j].store].dtype, self.nan_plain)
                for j in self.written]

    def render(self, indent: str, ptr: str, index: str, roots, stride: str = "st",
               lane: str = "", given: dict | None = None, prefix: str = "t",
               words: dict | None = None) -> list[str]:
        """Load one element's inputs and emit the statements of ``roots``; their variables.
        Each call names its variables apart (``<x|prefix><lane>c<n>_<k>``): a kernel renders
        its body several times (block loop, tail, lanes), and a name assigned in several places
        makes Numba's SSA pass rewrite the whole function for it (a third of the compile time
        of a large body)."""
        self.copies += 1
        tag = f"{lane}c{self.copies}_"
        self.loads(indent, ptr, index, False, stride, f"x{tag}", words)
        nin = max([s.load for s in self.slots if s.load is not None], default=-1) + 1
        inputs = [f"x{tag}{k}" if self.slots_loading(k, hoisted=False) else f"x{k}"
                  for k in range(nin)]
        lines, outs = render_body(roots, inputs, self.params, f"{prefix}{tag}", given, self.consts)
        for line in lines:
            self.emit(indent + line)
        return outs

    def slots_loading(self, k: int, hoisted: bool) -> bool:
        """Whether expression input k is loaded per element (not hoisted: a '0' slot)."""
        return any(s.load == k and (self.pattern[j] == "0") == hoisted
                   for j, s in enumerate(self.slots))

    def body(self, indent: str, ptr: str, index: str, nt: bool, stride: str = "st",
             given: dict | None = None) -> None:
        values = self.compute(indent, ptr, index, stride, given=given)
        for j, value in zip(self.written, values):
            idx = index if self.pattern[j] == "1" else f"({index}) * {stride}{j}"
            if nt:
                self.emit(f"{indent}nt_store({ptr}{j}, {idx}, {value})")
            else:
                self.emit(f"{indent}{ptr}{j}[{idx}] = {value}")

    def loop(self, indent: str, ptr: str, count: str, nt: bool = False) -> None:
        """``count`` elements of a light body, stored as they are computed."""
        self.emit(f"{indent}for i in range({count}):")
        self.body(indent + "    ", ptr, "i", nt)

    def plain_loop(self, indent: str, ptr: str, count: str) -> None:
        """``count`` elements from the pointers ``<ptr><j>`` with ordinary stores: ``loop``, or
        for a light bf16 body (``paired``) ``packed_loop`` over its words, then the last
        element of an odd count. An output updating an input in place goes through the stack
        chunk (``staged_loop`` with ordinary stores): with the same array behind two pointers,
        LLVM's overlap check sends the plain loop to its scalar version (sub float16 (64, 1024)
        in place 0.21 ms against 0.01 out of place; AMD EPYC Zen 4)."""
        same = self.aliasing_risk(ptr, window=False)
        if same and len({self.isz[j] for j in self.written}) == 1 \
                and all(self.pattern[j] == "1" for j in self.written):  # copied out as words
            k = self.packing()
            wbits = 32 if k > 1 else 8 * self.isz[self.written[0]]
            self.emit(f"{indent}if {same}:")
            J = indent + "    "
            for j in self.written:
                self.emit(f"{J}w{j} = address_as_pointer(pointer_address({ptr}{j}), np.uint{wbits})")
            self.emit(f"{J}words = ({count}) // {k}")
            self.staged_loop(J, ptr, "words", nt=False)
            self.emit(f"{J}for i in range(words * {k}, {count}):")
            self.body(J + "    ", ptr, "i", False)
            self.emit(f"{indent}else:")
            indent += "    "
        if not self.paired():
            self.loop(indent, ptr, count)
            return
        for j in self.written + self.bf16_pairs():
            self.emit(f"{indent}{'w' if j in self.written else 'u'}{j} = "
                      f"address_as_pointer(pointer_address({ptr}{j}), np.uint32)")
        self.packed_loop(indent, ptr, f"({count}) // 2", nt=False)
        self.emit(f"{indent}for i in range(({count}) // 2 * 2, {count}):")
        self.body(indent + "    ", ptr, "i", False)

    def handover_arrays(self, indent: str, cut, elements: int, tag: str) -> None:
        """A stack array of ``elements`` values (``<tag>p<n>``) per node of a fission cut."""
        for n, node in enumerate(cut):
            self.emit(f"{indent}{tag}c{n} = stack_scratch({elements * DTYPE_BYTES[node.dtype]})")
            self.emit(f"{indent}{tag}p{n} = address_as_pointer({tag}c{n}, {NP[node.dtype]})")

    def first_half(self, indent: str, ptr: str, count: str, index: str, cut, tag: str) -> dict:
        """The first loop of a cut body: ``count`` elements at ``index``, each value of the cut
        stored to its array; the second loop's ``given``."""
        self.emit(f"{indent}for i in range({count}):")
        for n, v in enumerate(self.render(indent + "    ", ptr, index, cut, prefix="h")):
            self.emit(f"{indent}    {tag}p{n}[i] = {v}")
        return {id(node): f"{tag}p{n}[i]" for n, node in enumerate(cut)}

    def packing(self) -> int:
        """Elements per 32-bit word of the streamed outputs: 2 (16-bit) or 4 (8-bit) when every
        output has that width, else 1 (4 bytes or wider, or outputs of different widths, which
        are not streamed anyway)."""
        widths = {self.isz[j] for j in self.written}
        width = widths.pop() if len(widths) == 1 else 4
        return max(1, 4 // width)

    def packed_loop(self, indent: str, ptr: str, words: str, nt: bool = True) -> None:
        """``words`` iterations, each computing the elements of one 32-bit word of every output
        (unit stride, word pointers ``w<j>``) and storing the word non-temporally (``nt``, else
        plainly), element 0 in the low bits (little-endian). LLVM's loop vectoriser leaves
        non-temporal 8/16-bit stores scalar (fp16: one ``vmovsh`` per element); 32-bit ones
        become 64-byte ``vmovntdq``, and it sees through the packing of lane-wise bodies (no
        shuffles). Stored plainly, pairs of bf16 inputs are read as words too
        (:meth:`bf16_pairs`; streamed from DRAM that was 3-5% slower: sub, mul bfloat16 32M)."""
        k = self.packing()
        bits = 32 // k
        pairs = [] if nt else self.bf16_pairs()
        self.emit(f"{indent}for i in range({words}):")
        inner = indent + "    "
        for j in pairs:
            self.emit(f"{inner}wd{j} = u{j}[i]")
        lanes = [self.compute(inner, ptr, f"{k} * i + {u}", lane=str(u),
                              words={j: (f"wd{j}", u) for j in pairs}) for u in range(k)]
        for n, j in enumerate(self.written):
            word = packed_word([lane[n] for lane in lanes], bits)
            self.emit(f"{inner}nt_store(w{j}, i, {word})" if nt else f"{inner}w{j}[i] = {word}")

    def bf16_pairs(self) -> list[int]:
        """The dense bf16 inputs a packed loop of bf16 outputs reads as 32-bit words (pointers
        ``u<j>`` at the loop's first element): a word's two floats are it shifted and masked,
        lane-wise, where two 16-bit loads need deinterleaving shuffles. sub bfloat16, one
        thread, in L2: 0.228 -> 0.161 ns per element, same bits."""
        if self.packing() != 2 or any(self.slots[j].dtype is not DType.BF16 for j in self.written):
            return []
        return [j for j in range(self.nslots) if self.loaded(j) and self.pattern[j] == "1"
                and self.slots[j].dtype is DType.BF16 and j not in self.written]

    def paired(self) -> bool:
        """Whether a light body's plain loop runs as ``packed_loop`` with plain stores (see
        :meth:`plain_loop`): bf16 outputs, every per-element input a dense bf16 one (read as
        words)."""
        dense = [j for j in range(self.nslots) if self.loaded(j) and self.pattern[j] != "0"
                 and j not in self.written]
        return (not is_heavy(self.p.results) and bool(self.bf16_pairs())
                and set(dense) <= set(self.bf16_pairs())
                and all(self.pattern[j] == "1" for j in self.written))

    def staged_loop(self, indent: str, ptr: str, words: str, nt: bool = True) -> None:
        """``words`` words of every output of a light body (word pointers ``w<j>``), computed a
        stack chunk at a time with ordinary stores, then streamed from L1 as whole words
        (``nt``) or copied out plainly: where the output is an input updated in place or
        would meet 4K aliasing (``aliasing_risk``). A word is 32 bits of packed narrow
        outputs, or one element of 4- or 8-byte outputs."""
        k = self.packing()
        bits = 32 // k
        wide = [j for j in self.written if self.slots[j].dtype is DType.BF16]
        wbytes = 4 if k > 1 else self.isz[self.written[0]]
        chunk = STAGE_BYTES // (4 * k if wide else wbytes)      # words per chunk
        for j in self.written:
            self.emit(f"{indent}sc{j} = stack_scratch({STAGE_BYTES})")
            self.emit(f"{indent}sp{j} = address_as_pointer(sc{j}, "
                      f"np.{'float32' if j in wide else self.st[j]})")
            self.emit(f"{indent}sw{j} = address_as_pointer(sc{j}, np.uint{8 * wbytes})")
        self.emit(f"{indent}for c in range(0, {words}, {chunk}):")
        ind = indent + "    "
        self.emit(f"{ind}cw = min({chunk}, {words} - c)")
        self.chunk_compute(ind, ptr, f"cw * {k}", f"c * {k}", None, wide)
        self.emit(f"{ind}for i in range(cw):")
        for j in self.written:
            if j in wide:
                lanes = [_store(DType.BF16, f"sp{j}[{k} * i + {u}]", "f32", self.nan_plain)
                         for u in range(k)]
                word = packed_word(lanes, bits)
            else:
                word = f"sw{j}[i]"
            self.emit(f"{ind}    nt_store(w{j}, c + i, {word})" if nt
                      else f"{ind}    w{j}[c + i] = {word}")

    def heavy_loop(self, indent: str, ptr: str, count: str, stream: str = "",
                   start: str = "", direct: bool = False) -> None:
        """A math-heavy body's ``count`` elements: the function's one copy of the body computes
        a stack chunk at a time (``staged_loop``'s chunks: fp16 converted there, bf16 staged as
        float32), then the chunk is copied out. Where ``stream`` (a condition) holds, whole
        cache lines from the first 64-byte boundary of written slot j's element 0 (``start``,
        formatted with ``j``, its byte address) are stored non-temporally, as words; the head
        before it and the last partial line with ordinary stores, as everything else.

        Two copies of the body (a full chunk, whose trip count LLVM knows, and any other) where
        there was one per path (head, streamed lines, last line, in place, plain): LLVM
        vectorises each, and compiling grows faster than the function. swiglu bfloat16 (144
        nodes), strided rows: its ``parallel`` compiled in 45 s with 7 copies, 9 s now (AMD
        EPYC Zen 4, empty cache), at the same speed. With one variable-count copy it took 4 s
        but ran slower (gelu bfloat16 16M: 10.8 against 8.6 ms; LLVM reloaded the body's
        constants from memory in every iteration).

        ``direct`` (flat calls): one more copy for a full chunk of whole lines of a single
        4-byte output whose body is one loop, stored non-temporally as computed, where no store
        would alias a load (``aliasing_risk``). The staged copy-out cost (32M float32 elements,
        AMD EPYC Zen 4, 2026-11-29, the two kernels alternating in one process, same bits):
        silu 9-14%, sigmoid 1-8%, quickgelu 6%, log1p 5%; tanh, erf within 2%; gelu and
        softplus were 1-2% faster staged, float64 gelu 4% (8-byte outputs stay staged). silu
        streamed as computed was faster at every output offset from its input mod 4096 (swept
        in 32-byte steps, 0 included).

        Staged, in-place calls and 4K aliasing are harmless: the compute loop stores to the
        stack. (A load whose low 12 address bits match an older, still pending non-temporal
        store waits for it; streamed straight from the compute loop, an output starting 16-48
        bytes past its input (mod 4096) made silu float32 2.7x slower (AMD EPYC, 16M elements:
        2.07 vs 0.76 ns per element); staged: 0.75-0.90 ns at every offset.)"""
        e = self.emit
        k = self.packing()
        wide = [j for j in self.written if self.slots[j].dtype is DType.BF16]
        wbytes = 4 if k > 1 else self.isz[self.written[0]]
        chunk = STAGE_BYTES // (4 * k if wide else wbytes) * k     # elements per chunk
        for j in self.written:
            sbytes = 4 if j in wide else self.isz[j]
            e(f"{indent}sc{j} = stack_scratch({max(STAGE_BYTES, chunk * sbytes)})")
            e(f"{indent}sp{j} = address_as_pointer(sc{j}, "
              f"np.{'float32' if j in wide else self.st[j]})")
        cut = fission.split(self.p.results)
        self.handover_arrays(indent, cut or (), chunk, "h")
        e(f"{indent}zh = 0")
        e(f"{indent}zl = 0")
        if stream:
            isz0 = self.isz[self.written[0]]
            line = 64 // isz0
            wbits = 32 if k > 1 else 8 * isz0
            e(f"{indent}if {stream}:")
            J = indent + "    "
            e(f"{J}addr = {start.format(j=self.written[0])}")
            e(f"{J}zh = ((64 - (addr & 63)) & 63) // {isz0}")
            e(f"{J}if addr % {isz0} != 0 or zh > {count}:")
            e(f"{J}    zh = {count}")
            e(f"{J}zl = ({count} - zh) // {line} * {line}")
            for j in self.written:
                e(f"{indent}w{j} = address_as_pointer({start.format(j=j)} + zh * {isz0}, "
                  f"np.uint{wbits})")
                e(f"{indent}sw{j} = address_as_pointer(sc{j}, np.uint{wbits})")
        direct = (direct and stream and k == 1 and not wide and not cut
                  and len(self.written) == 1 and self.isz[self.written[0]] == 4)
        if direct:
            risk = self.aliasing_risk(ptr)
            e(f"{indent}dr = {stream} and not ({risk})" if risk else f"{indent}dr = {stream}")
        e(f"{indent}z0 = 0")
        e(f"{indent}while z0 < {count}:")
        ind = indent + "    "
        e(f"{ind}z1 = min(z0 + {chunk}, zh if z0 < zh else zh + zl if z0 < zh + zl else {count})")
        e(f"{ind}zw = z1 - z0")
        if direct:
            e(f"{ind}if zw == {chunk} and dr and zh <= z0 < zh + zl:")
            self.chunk_compute(ind + "    ", ptr, str(chunk), "z0", cut, wide, nt=True)
            e(f"{ind}    z0 = z1")
            e(f"{ind}    continue")
        # a full chunk's trip count is a constant: LLVM then keeps the body's constants in
        # registers (gelu bfloat16, 16M: 10.8 ms with one variable-count loop, 8.6 with both)
        e(f"{ind}if zw == {chunk}:")
        self.chunk_compute(ind + "    ", ptr, str(chunk), "z0", cut, wide)
        e(f"{ind}else:")
        self.chunk_compute(ind + "    ", ptr, "zw", "z0", cut, wide)
        plain = ind
        if stream:
            e(f"{ind}if zh <= z0 < zh + zl:")
            e(f"{ind}    for i in range(zw // {k}):")
            for j in self.written:
                word = f"sw{j}[i]"
                if j in wide:
                    word = packed_word([_store(DType.BF16, f"sp{j}[{k} * i + {u}]", "f32",
                                               self.nan_plain) for u in range(k)], 32 // k)
                e(f"{ind}        nt_store(w{j}, (z0 - zh) // {k} + i, {word})")
            e(f"{ind}else:")
            plain += "    "
        e(f"{plain}for i in range(zw):")
        for j in self.written:
            idx = "z0 + i" if self.pattern[j] == "1" else f"(z0 + i) * st{j}"
            v = _store(DType.BF16, f"sp{j}[i]", "f32", self.nan_plain) if j in wide else f"sp{j}[i]"
            e(f"{plain}    {ptr}{j}[{idx}] = {v}")
        e(f"{ind}z0 = z1")

    def chunk_compute(self, indent: str, ptr: str, count: str, first: str, cut,
                      wide: list[int], nt: bool = False) -> None:
        """A staged loop's compute loop: ``count`` elements from element ``first`` into the
        stack chunks ``sp<j>`` (fp16 converted there, F16C; the ``wide`` bf16 outputs as
        float32, rounded while copied out, where the rounding's integer steps vectorise well:
        in the compute loop they cost ~15%), or with ``nt`` straight to the outputs with
        non-temporal stores (see heavy_loop's ``direct``). ``cut``: see fission.split."""
        given = None
        if cut:  # loop fission: the first half of the chain, its values handed over in L1
            given = self.first_half(indent, ptr, count, f"{first} + i", cut, "h")
        self.emit(f"{indent}for i in range({count}):")
        values = self.compute(indent + "    ", ptr, f"{first} + i", raw=True, given=given)
        for j, (v, t) in zip(self.written, values):
            if j in wide:  # staged as float32: rounded to odd unless it is one (see _store)
                v = v if t == "f32" else f"f64_to_f32_odd(np.float64({v}))"
            else:
                v = _store(self.slots[j].dtype, v, t, self.nan_plain)
            if nt:
                self.emit(f"{indent}    nt_store({ptr}{j}, {first} + i, {v})")
            else:
                self.emit(f"{indent}    sp{j}[i] = {v}")

    def nt_loop(self, indent: str, ptr: str, count: str, start: str) -> None:
        """``count`` elements from the pointers ``<ptr><j>`` with non-temporal stores. ``start``
        (formatted with ``j``) is the byte address of element 0 of written slot j, 64-byte
        aligned. A light body (heavy ones: ``heavy_loop``) stores as it goes: 4- and 8-byte
        outputs element by element, narrower outputs as whole 32-bit words (``packed_loop``),
        then the last ``count % k`` elements with ordinary stores; through ``staged_loop``
        where ``aliasing_risk`` says so."""
        k = self.packing()
        sizes = {self.isz[j] for j in self.written}
        direct = k == 1
        risk = self.aliasing_risk(ptr, window=not direct)
        if direct and not (risk and len(sizes) == 1 and sizes <= {4, 8}):
            self.loop(indent, ptr, count, nt=True)
            return
        wbits = 32 if k > 1 else 8 * sizes.pop()
        for j in self.written:
            self.emit(f"{indent}w{j} = address_as_pointer({start.format(j=j)}, np.uint{wbits})")
        if direct:  # a light 4- or 8-byte body: staged only in place
            self.emit(f"{indent}if {risk}:")
            self.staged_loop(indent + "    ", ptr, count)
            self.emit(f"{indent}else:")
            self.loop(indent + "    ", ptr, count, nt=True)
            return
        self.emit(f"{indent}words = ({count}) // {k}")
        if risk:
            self.emit(f"{indent}if {risk}:")
            self.staged_loop(indent + "    ", ptr, "words")
            self.emit(f"{indent}else:")
            self.packed_loop(indent + "    ", ptr, "words")
        else:
            self.packed_loop(indent, ptr, "words")
        self.emit(f"{indent}for i in range(words * {k}, {count}):")
        self.body(indent + "    ", ptr, "i", False)

    def aliasing_risk(self, ptr: str, window: bool = True) -> str:
        """The condition under which ``packed_loop`` would meet 4K aliasing: an output starting
        1-80 bytes ahead of a unit-stride input, mod 4096 (loads then wait for the pending
        non-temporal stores whose low 12 address bits they match). Then ``nt_loop`` takes the
        staged loop, whose compute loop stores to the stack. Measured (AMD EPYC, 2 threads,
        16M elements, outputs 64-byte aligned, inputs at 0/16/32/48 mod 64): neg float16 1.1-1.3
        ms at every other offset, 2.9-3.0 ms at 16-64 bytes ahead, 1.6 at 80; bfloat16 1.5-2.1
        vs 5.2-5.3 at 16-48, 2.8 at 64-80; 32M clip float16 17.1 vs 6.6 ms, sub 10.4 vs 5.3.
        Staged costs ~30% where packed is fine (neg float16 at 112 bytes: 1.85 -> 2.44 ms),
        hence the narrow window. float32 outputs (stored element-wise) showed at most 15%."""
        reads = [r for r in range(self.nslots)
                 if self.pattern[r] == "1" and r not in self.written]
        return aliasing_test([f"{ptr}{j}" for j in self.written], [f"{ptr}{r}" for r in reads],
                             window)

    def pointers(self, indent: str, ptr: str, base: str) -> None:
        for j in range(self.nslots):
            self.emit(f"{indent}{ptr}{j} = address_as_pointer({base.format(j=j)}, np.{self.st[j]})")

    # -- flat --------------------------------------------------------------------------------------
    def flat(self) -> None:
        """``serial``: n elements with ordinary stores. A light body also gets ``streamed``: one
        full block (BLOCK_BYTES of slot 0; every written slot 64-byte aligned) with
        non-temporal stores, then a fence; the pool's loop calling these two by address is
        :func:`flat_driver`'s. A math-heavy body's ``serial`` streams whole lines itself when
        ``stream`` is nonzero (the driver passes 1 for full blocks; see :func:`kernel_names`)."""
        args = ", ".join([f"s{j}" for j in range(self.nslots)] + self.params)
        heavy = is_heavy(self.p.results)
        for fname in kernel_names("flat", self.p.results):
            self.emit("\n\n@njit(parallel=False, **OPTS)")
            self.emit(f"def {fname}({args}, n, stream, serial_at):")
            self.wide("    ")
            self.pointers("    ", "q", "s{j}")
            self.loads("    ", "q", "0", True)
            if fname == "serial" and heavy:  # streamed when the driver says so
                self.heavy_loop("    ", "q", "n", "stream", "s{j}", direct=True)
                self.emit("    if stream:")
                self.emit("        sfence()")
            elif fname == "serial":
                self.plain_loop("    ", "q", "n")
            elif fname == "streamed":
                self.nt_loop("    ", "q", str(BLOCK_BYTES // self.isz[0]), "s{j}")
                self.emit("    sfence()")
            self.emit("    return 0")

    # -- strided ---------------------------------------------------------------------------------
    def strided(self) -> None:
        args = ", ".join([f"s{j}" for j in range(self.nslots)] + self.params)
        stream = len(self.written) == 1 and self.pattern[0] == "1"
        for fname in kernel_names("strided", self.p.results):
            self.emit("\n\n@njit(parallel=False, **OPTS)")
            # chunks: column chunks per row; nt: stream rows; tasks t0..t1 (t1 < 0: all)
            self.emit(f"def {fname}({args}, {TASK_ARGS}):")
            e = self.emit
            self.wide("    ")
            e("    nd = shape.shape[0]")
            e("    inner = shape[nd - 1]")
            e("    lead = nd - 1")
            e("    rows = 1")
            e("    for d in range(lead):")
            e("        rows *= shape[d]")
            e("    csz = (inner + chunks - 1) // chunks")
            e("    ntask = rows * chunks")
            self.task_loop()
            e("        r = t // chunks")
            e("        c0 = (t % chunks) * csz")
            e("        c1 = min(inner, c0 + csz)")
            self.batch_offsets("        ", "r", "lead", "c0 * strides[{j}, nd - 1]")
            for j in range(self.nslots):
                e(f"        st{j} = strides[{j}, nd - 1]")
            for j in range(self.nslots):
                e(f"        q{j} = address_as_pointer(s{j} + g{j} * {self.isz[j]}, np.{self.st[j]})")
            self.loads("        ", "q", "0", True)
            e("        m = c1 - c0")
            if is_heavy(self.p.results):
                self.heavy_loop("        ", "q", "m", "nt" if stream else "",
                                f"s{{j}} + g{{j}} * {self.isz[0]}")
                e("        if nt:")
                e("            sfence()")
            elif stream:
                # Stream long contiguous output rows: peel to 64-byte alignment, then NT.
                isz0 = self.isz[0]
                e("        if nt:")
                e(f"            addr = s0 + g0 * {isz0}")
                e(f"            head = ((64 - (addr & 63)) & 63) // {isz0}")
                e(f"            if addr % {isz0} != 0 or head > m:")
                e("                head = m")
                self.loop("            ", "q", "head")
                for j in range(self.nslots):
                    if self.pattern[j] != "0":
                        e(f"            q{j} = address_as_pointer(s{j} + (g{j} + head * st{j}) * "
                          f"{self.isz[j]}, np.{self.st[j]})")
                # whole cache lines only: the row's last, partial line is stored as its
                # head is, not partly by non-temporal stores and partly by the next row's
                # ordinary ones (sub (65536, 256) - (65536, 1) float32 into NumPy's 16-byte
                # aligned output: 10.4 -> 4.x ms; AMD EPYC Zen 4, 2 threads)
                line = 64 // min(self.isz[j] for j in self.written)
                e(f"            lines = (m - head) // {line} * {line}")
                self.nt_loop("            ", "q", "lines",
                             f"s{{j}} + (g{{j}} + head * st{{j}}) * {isz0}")
                e("            for i in range(lines, m - head):")
                self.body("                ", "q", "i", False)
                e("            sfence()")
                e("        else:")
                self.plain_loop("            ", "q", "m")
            else:
                self.plain_loop("        ", "q", "m")
            e("    return 0")

    def task_loop(self) -> None:
        """The loop over a strided or tiled kernel's tasks ``t0``..``t1`` (t1 < 0: to the last;
        :func:`task_driver` hands them out on the pool)."""
        self.emit("    if t1 < 0 or t1 > ntask:")
        self.emit("        t1 = ntask")
        self.emit("    for t in range(t0, t1):")

    def batch_offsets(self, indent: str, index: str, lead: str, start: str) -> None:
        """``g<j>``: slot j's element offset of batch row ``index`` over dims 0..lead-1, plus
        ``start`` (formatted with ``j``)."""
        e = self.emit
        e(f"{indent}rem = {index}")
        for j in range(self.nslots):
            e(f"{indent}g{j} = {start.format(j=j)}")
        e(f"{indent}for d in range({lead} - 1, -1, -1):")
        e(f"{indent}    ext = shape[d]")
        e(f"{indent}    idx = rem % ext")
        e(f"{indent}    rem //= ext")
        for j in range(self.nslots):
            e(f"{indent}    g{j} += idx * strides[{j}, d]")

    # -- tiled -----------------------------------------------------------------------------------
    def tiled(self) -> None:
        """Tiles of R x C elements (``tile_shape``) over (mid, inner): mid is the dim some input is dense
        along, inner the output's dense dim. Each 't' input (unit stride along mid) is first
        transposed into a scratch tile, in registers, by rearrange's
        ``transpose.tile_transpose`` (64-byte rows; 32-byte on AVX2; edges masked or staged), so
        the tile's rows read it with unit stride and vectorise; other inputs are read in place.
        A task is a band of R mid rows (``chunks`` column blocks of it when there are few bands)
        walked along inner: the output and dense inputs are read and written as R rows of C
        elements, the staged input as C segments of R; output rows that start on a cache line
        and are whole lines long are stored non-temporally when ``nt``."""
        args = ", ".join([f"s{j}" for j in range(self.nslots)] + self.params)
        staged = [j for j in range(self.nslots) if self.pattern[j] == "t"]
        R, C = tile_shape(self.isz, staged)
        isz0 = self.isz[0]
        stream = len(self.written) == 1 and self.pattern[0] == "1"
        e = self.emit
        for fname in kernel_names("tiled", self.p.results):
            e("\n\n@njit(parallel=False, **OPTS)")
            e(f"def {fname}({args}, {TASK_ARGS}):")
            self.wide("    ")
            e("    nd = shape.shape[0]")
            e("    inner = shape[nd - 1]")
            e("    mid = shape[nd - 2]")
            e("    lead = nd - 2")
            e("    rows = 1")
            e("    for d in range(lead):")
            e("        rows *= shape[d]")
            e(f"    bands = (mid + {R - 1}) // {R}")
            # column blocks: whole tiles, so every block starts where the tiling does
            e(f"    csz = ((inner + chunks - 1) // chunks + {C - 1}) // {C} * {C}")
            for j in staged:
                # byte offset of each inner index in slot j (the transpose's source rows) and
                # of each scratch row
                e(f"    rowoff{j} = np.empty(inner, np.int64)")
                e("    for k in range(inner):")
                e(f"        rowoff{j}[k] = k * strides[{j}, nd - 1] * {self.isz[j]}")
                e(f"    tileoff{j} = np.empty({R}, np.int64)")
                e(f"    for k in range({R}):")
                e(f"        tileoff{j}[k] = k * {C * self.isz[j]}")
            e("    ntask = rows * bands * chunks")
            self.task_loop()
            ind = "        "
            e(f"{ind}cb = (t % chunks) * csz")
            e(f"{ind}ce = min(inner, cb + csz)")
            e(f"{ind}r0 = ((t // chunks) % bands) * {R}")
            e(f"{ind}r1 = min(mid, r0 + {R})")
            self.batch_offsets(ind, "t // (chunks * bands)", "lead", "0")
            for j in range(self.nslots):
                e(f"{ind}st{j} = strides[{j}, nd - 1]")
                e(f"{ind}sm{j} = strides[{j}, nd - 2]")
            for j in staged:
                e(f"{ind}mk{j} = np.empty(0, np.uint{8 * self.isz[j]})")
                e(f"{ind}buf{j} = np.empty({R * C * self.isz[j] + 64}, np.uint8)")
                e(f"{ind}ro{j} = rowoff{j}.ctypes.data")
                e(f"{ind}to{j} = tileoff{j}.ctypes.data")
            e(f"{ind}for c0 in range(cb, ce, {C}):")
            ind2 = ind + "    "
            e(f"{ind2}c1 = min(ce, c0 + {C})")
            for j in staged:
                lanes = TILE_ROW_BYTES // self.isz[j]
                fn = "tile_transpose" if TILE_ROW_BYTES == 64 else "tile_transpose_256"
                # the address is taken where it is used: Numba frees an array after its last use
                e(f"{ind2}sc{j} = buf{j}.ctypes.data + ((-buf{j}.ctypes.data) & 63)")
                e(f"{ind2}for i0 in range(0, c1 - c0, {lanes}):")
                e(f"{ind2}    for j0 in range(0, r1 - r0, {lanes}):")
                e(f"{ind2}        {fn}(mk{j}, s{j} + g{j} * {self.isz[j]}, "
                  f"ro{j} + 8 * (c0 + i0), r0 + j0, sc{j}, to{j} + 8 * j0, i0, "
                  f"min({lanes}, c1 - c0 - i0), min({lanes}, r1 - r0 - j0), False)")
            e(f"{ind2}for rr in range(r0, r1):")
            ind3 = ind2 + "    "
            for j in range(self.nslots):
                if j in staged:
                    e(f"{ind3}q{j} = address_as_pointer(sc{j} + (rr - r0) * {C * self.isz[j]}, "
                      f"np.{self.st[j]})")
                else:
                    e(f"{ind3}q{j} = address_as_pointer(s{j} + (g{j} + c0 * st{j} + rr * sm{j}) * "
                      f"{self.isz[j]}, np.{self.st[j]})")
            self.loads(ind3, "q", "0", True)
            # a trip count unknown to LLVM: a constant one is unrolled before it is vectorised,
            # and the unrolled stores may alias the loads, so they stay scalar
            e(f"{ind3}m = c1 - c0")
            if stream:
                e(f"{ind3}addr = s0 + (g0 + c0 + rr * sm0) * {isz0}")
            if is_heavy(self.p.results):
                self.heavy_loop(ind3, "q", "m", f"nt and (addr | m * {isz0}) & 63 == 0"
                                if stream else "", "addr")
            elif stream:
                e(f"{ind3}if nt and (addr | m * {isz0}) & 63 == 0:")
                self.nt_loop(ind3 + "    ", "q", "m", "addr")
                e(f"{ind3}else:")
                self.loop(ind3 + "    ", "q", "m")
            else:
                self.loop(ind3, "q", "m")
            for j in staged:
                e(f"{ind}buf{j}[0] = 0  # keeps the scratch alive until here")
            if stream:
                e(f"{ind}if nt:")
                e(f"{ind}    sfence()")
            e("    return 0")

def source(program, kind: str, pattern: str) -> str:
    g = _Gen(program, kind, pattern)
    if kind == "flat":
        g.flat()
    elif kind == "tiled":
        g.tiled()
    else:
        g.strided()
    g.define()
    ilv = interleave(program.results)
    return PRELUDE + "\n".join(g.L) + "\n" + (f"\nLOOP_INTERLEAVE = {ilv}\n" if ilv else "")


def compared_inputs(roots, streamed) -> set[int]:
    """The inputs whose fp16 loads go through ``intrinsics.canonical`` (or ``opaque`` where
    hoisted): those a minimum/maximum reads directly (or through neg/abs) against a constant, a
    parameter, a computed value or a hoisted input, and those a NaN test reads. Loaded from
    fp16, LLVM narrows those NaN tests and comparisons to half precision. clip and hardtanh
    float16 (AMD EPYC, 2 threads, same bits): 16M 3.35 -> 2.89 ms, clip 64K 25 -> 13 us. Not
    for minimum/maximum of two streamed inputs (their comparison is narrowed anyway: maximum
    float16 +8%) nor for the comparisons with constants of gelu/silu/hardswish (-2..+4%).
    ``streamed``: the inputs loaded per element."""
    def source(a):
        while a.op in ("neg", "abs"):
            a = a.args[0]
        return a.args[0] if a.op == "input" else None

    out = set()
    for node in topo(roots):
        if node.op == "isnan" and source(node.args[0]) is not None:
            out.add(source(node.args[0]))
        if node.op in ("minimum", "maximum"):
            ks = [source(a) for a in node.args]
            for k, other in ((ks[0], ks[1]), (ks[1], ks[0])):
                if k is not None and not (other in streamed and k in streamed):
                    out.add(k)
    return out


def is_heavy(roots) -> bool:
    """Whether a body is math-heavy (STAGE_MIN_NODES expression nodes or more, leaves counted):
    what staging, LOOP_INTERLEAVE and the pool threshold of such bodies go by."""
    return len(topo(roots)) >= STAGE_MIN_NODES


def interleave(roots) -> int:
    """``LOOP_INTERLEAVE`` for a body computing ``roots`` (0: LLVM's choice): see
    HEAVY_INTERLEAVE."""
    if not is_heavy(roots):
        return 0
    nodes = [n for n in topo(roots) if n.op not in ("input", "param", "const")]
    return 2 * HEAVY_INTERLEAVE if 2 * sum(n.dtype == "f64" for n in nodes) > len(nodes) \
        else HEAVY_INTERLEAVE


def kernel_functions(program, kind: str, pattern: str, operands: list[int],
                     pairs: list[tuple[int, int]]) -> dict:
    """This variant's functions (:func:`kernel_names`, and the shared driver as ``parallel``)
    and its array ``launch`` (:func:`launcher`; ``operands``:
    the user operands passed as arrays, in order; ``pairs``: (written, other) positions in that
    list) as ``native.Kernel`` objects: machine code found in the kernel cache runs without
    importing Numba; a module is generated and imported only when something must be compiled."""
    src = source(program, kind, pattern)
    name = f"ew_{program.name}_{program.key[:10]}_{kind}_{pattern}"
    fns = kernels(name, src, kernel_names(kind, program.results))
    nslots, nparams = len(program.slots), len(program.params)
    fns.setdefault("streamed", fns["serial"])  # a heavy body streams through serial
    if kind == "flat":
        if "parallel" not in fns:
            written = [j for j, s in enumerate(program.slots) if s.store is not None]
            fns["parallel"] = flat_driver([s.dtype.itemsize for s in program.slots], pattern,
                                          written, nparams)
        extras, tail = [], ["meta[0]", "meta[1]", "meta[2]"]
    else:
        if "parallel" not in fns:
            staged = [j for j, c in enumerate(pattern) if c == "t"]
            rows = tile_shape([s.dtype.itemsize for s in program.slots], staged)[0]
            fns["parallel"] = task_driver(kind, nslots, nparams, rows if kind == "tiled" else 0)
        extras = [("shape", 1), ("strides", 2)]
        tail = ["shape", "strides", "meta[0]", "meta[1]", "meta[2]", "0", "-1"]
    fns["launch"] = launcher([operands.index(s.operand) for s in program.slots], len(operands),
                             len(program.params), pairs, extras, tail)
    return fns
