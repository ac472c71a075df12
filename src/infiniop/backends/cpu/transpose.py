"""In-register tile transpose and 64-byte line copies for the rearrange kernels (llvmlite).

``tile_transpose(marker, src, s_off, c0, dst, d_off, r0, kr, kc, nt)`` moves one L x L micro-tile
of U-byte units (U = ``marker.dtype`` itemsize in {1, 2, 4, 8}, L = 64 / U lanes, so every row
is one 512-bit register; ``tile_transpose_256``: 32-byte rows, L = 32 / U, for AVX2's sixteen
256-bit registers, where a 64-byte-row float32 tile spilled ~100 registers per tile: the
elementwise tiled kind uses it on CPUs without AVX-512, ``cpuinfo.TILE_ROW_BYTES``;
``tile_transpose_stacked``: two such tiles one under the other, 2L source rows of L units, so
each destination row receives one 64-byte line at once: rearrange's transposes on AVX2, where a
destination line completed by two tiles apart stored 1.4-1.8x slower):

- source row i (i < kr) starts at ``src + s_off[i] + c0*U`` and is contiguous: units c0..c0+kc-1
  are read (rows >= kr and lanes >= kc are not touched);
- each live source row is also prefetched ``PREFETCH_BYTES`` ahead (the next tiles' data; not on
  Intel, see ``_prefetch_bytes``);
- the L registers are transposed with log2(L) rounds of one-micro-op two-source shuffles
  (``network``: in-block interleaves ``vpunpck*``, then 128-bit block exchanges ``vshufi64x2``);
- destination row j (j < kc) starts at ``dst + d_off[j] + r0*U`` and receives units r0..r0+kr-1
  (kr <= 2L for the stacked tile): a full row (kr == L, or 2L) is one 64-byte store,
  non-temporal when ``nt`` is true and the address is 64-byte aligned (checked at run time, so
  the ``align 64`` claim is always true), an ordinary unaligned store otherwise.

Edge tiles (kr < L or kc < L) are done one of two ways, depending on the target
(``_native_masks``):

- masked: when the target has masked loads/stores of U-byte lanes (4 and 8 bytes everywhere,
  1 and 2 with AVX-512BW), each live source row is one masked load, each live destination row one
  masked store (full tiles use the same load with an all-ones mask: one 64-byte load per row);
- staged: otherwise (1- and 2-byte units on AVX2), the kr x kc corner is copied (``memcpy``) into
  a stack tile of 64-byte rows, transposed as a full tile into a second one, and its first kc
  rows' kr units are copied out. LLVM would turn each masked 8/16-bit load or store into a
  branch and a scalar access per lane (full tiles too: their loads were masked): an elementwise
  kernel with a transposed int8 input took 170 s to compile (float32: 4 s) and its 600 x 600
  call 2.0 ms (0.13 ms now). Full tiles use plain loads there and share the shuffle code.

``s_off``/``d_off`` are the addresses of int64 tables of byte offsets (entry 0 is row r0 / c0);
only entries < kr / < kc are read. Any extents work.

``copy_line(dst, src, nt)`` copies 64 bytes (one cache line), NT when ``nt``; the caller
guarantees ``dst`` is 64-byte aligned when ``nt`` is true. ``memcpy_bytes(dst, src, n)`` is
``llvm.memcpy``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cpuinfo
from .intrinsics import sfence as store_fence  # noqa: F401  (re-exported for the kernels)

_I1, _I8, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PTR = ir.PointerType(ir.IntType(8))


def _prefetch_bytes() -> int:
    """Software prefetch of each source row this far ahead of the tile being loaded. On an AMD
    EPYC host it measured 2-3x faster (32 concurrent row streams are more than its hardware
    prefetcher keeps ahead of); on Intel Xeon (Sapphire Rapids class) the L2 streamer keeps up
    and the prefetches cost 10-20% (ours against a C probe at the same pattern, same process).
    The lines go to L2, not L1 too (prefetcht1): on an AMD EPYC (Zen 4), 2026-11-27, same bits,
    a float32 4096^2 transpose 6.3-6.7 -> 4.8-5.1 ms, NCHW -> NHWC (32, 64, 56, 56) 1.7-2.3 ->
    1.1 ms, A.T - B 4096^2 within noise (11.3-14.8 vs 11.7-12.6 ms)."""
    return 0 if cpuinfo.intel() else 512


PREFETCH_BYTES = _prefetch_bytes()


def _nt_md(builder):
    return builder.module.add_metadata([ir.Constant(_I32, 1)])


def _masked_load(builder, vt, ptr, mask, lanes, bits):
    name = f"llvm.masked.load.v{lanes}i{bits}.p0"
    fnty = ir.FunctionType(vt, [ptr.type, _I32, mask.type, vt])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, [ptr, ir.Constant(_I32, 1), mask, ir.Constant(vt, None)])


def _masked_store(builder, vt, value, ptr, mask, lanes, bits):
    name = f"llvm.masked.store.v{lanes}i{bits}.p0"
    fnty = ir.FunctionType(ir.VoidType(), [vt, ptr.type, _I32, mask.type])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    builder.call(fn, [value, ptr, ir.Constant(_I32, 1), mask])


def _unpack(lanes: int, block: int, unit: int, high: bool) -> list[int]:
    """Lanes of an in-block interleave of two vectors (``vpunpck{l,h}*``): in each 128-bit block
    of ``block`` lanes, the low (or high) half of the ``unit``-lane groups of a and b, alternating."""
    units = block // unit
    picked = range(units // 2, units) if high else range(units // 2)
    return [src * lanes + b * block + u * unit + e for b in range(lanes // block) for u in picked
            for src in (0, 1) for e in range(unit)]


def _blocks(lanes: int, block: int, pick: tuple[int, int]) -> list[int]:
    """Two 128-bit blocks of a, then the same two of b (``vshufi64x2``)."""
    return [src * lanes + b * block + e for src in (0, 1) for b in pick for e in range(block)]


def network(lanes: int, blocks: int = 4):
    """The shuffles that transpose a ``lanes`` x ``lanes`` tile held in ``lanes`` registers of
    ``blocks`` 128-bit blocks (4: 512-bit, 2: 256-bit).

    Rounds of two-source shuffles on register pairs (r, r | 1 << bit), each one instruction of
    one micro-op (in-block interleaves at 1, 2, 4, ... lanes, then two 128-bit block exchanges:
    cheaper than a general two-source permute, which costs 16-bit and 8-bit lanes 2-3 micro-ops).
    Returns ``(rounds, order)``: rounds of ``(bit, low mask, high mask)`` (the low result goes to
    register r, the high one to r | 1 << bit), and ``order[j]``: the register that ends up
    holding column j. Checked by simulation."""
    block = lanes // blocks
    rounds = []
    bit, unit = 0, 1
    while unit < block:
        rounds.append((bit, _unpack(lanes, block, unit, False), _unpack(lanes, block, unit, True)))
        bit, unit = bit + 1, unit * 2
    exchanges = (((0, 1), (2, 3)), ((0, 2), (1, 3))) if blocks == 4 else (((0,), (1,)),)
    for pick_lo, pick_hi in exchanges:
        rounds.append((bit, _blocks(lanes, block, pick_lo), _blocks(lanes, block, pick_hi)))
        bit += 1
    regs = [[(i, j) for j in range(lanes)] for i in range(lanes)]
    for b, lo, hi in rounds:
        new = list(regs)
        for r in range(lanes):
            if not r >> b & 1:
                both = regs[r] + regs[r | 1 << b]
                new[r], new[r | 1 << b] = [both[k] for k in lo], [both[k] for k in hi]
        regs = new
    order = [0] * lanes
    for r, content in enumerate(regs):
        col = content[0][1]
        assert content == [(i, col) for i in range(lanes)], "not a transpose"
        order[col] = r
    return rounds, order


def _vptr(builder, addr, vt):
    return builder.inttoptr(addr, vt.as_pointer())


def memcpy(builder, dst, src, n):
    """``llvm.memcpy`` of ``n`` bytes between int64 addresses."""
    fnty = ir.FunctionType(ir.VoidType(), [_PTR, _PTR, _I64, _I1])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.memcpy.p0.p0.i64")
    builder.call(fn, [builder.inttoptr(dst, _PTR), builder.inttoptr(src, _PTR), n,
                      ir.Constant(_I1, 0)])


def _native_masks(context, unit: int) -> bool:
    """Whether the target has masked loads/stores of ``unit``-byte lanes: AVX2/AVX-512F for 4 and
    8 bytes, only AVX-512BW for 1 and 2. LLVM scalarises the others (a test, a branch and a
    scalar load or store per lane: on an AVX2 host the int8 tile was ~8,000 branches, and a
    kernel calling it took minutes to compile and ran 3x slower than float32)."""
    features = getattr(context.codegen(), "_tm_features", "") or ""
    return unit >= 4 or "+avx512bw" in features.split(",")


def _tile_transpose(row_bytes: int, stack: int = 1):
    """The ``tile_transpose`` intrinsic for tile rows of ``row_bytes`` (64 or 32) bytes; with
    ``stack`` 2, two square tiles one under the other (2L source rows of L units), so that each
    destination row receives 2 x ``row_bytes`` at once."""

    @intrinsic
    def tile_transpose(typingctx, marker, src, s_off, c0, dst, d_off, r0, kr, kc, nt):
        return _typed(marker, row_bytes, stack)

    return tile_transpose


def _typed(marker, row_bytes: int, stack: int = 1):
    unit = marker.dtype.bitwidth // 8
    if unit not in (1, 2, 4, 8):
        return None
    sig = types.void(marker, types.int64, types.int64, types.int64, types.int64, types.int64,
                     types.int64, types.int64, types.int64, types.boolean)
    lanes, bits = row_bytes // unit, unit * 8
    height, out_bytes = stack * lanes, stack * row_bytes  # source rows; bytes a destination row
    prefetch_distance = PREFETCH_BYTES

    def codegen(context, builder, signature, args):
        _, src_, soff_, c0_, dst_, doff_, r0_, kr_, kc_, nt_ = args
        nt_ = builder.icmp_unsigned("!=", nt_, ir.Constant(nt_.type, 0))
        et = ir.IntType(bits)
        vt = ir.VectorType(et, lanes)
        ot = ir.VectorType(et, height)  # a destination row
        mt = ir.VectorType(_I1, lanes)

        def lane_ids(n):
            return ir.Constant(ir.VectorType(_I64, n), list(range(n)))

        def splat(v, n=lanes):
            undef = ir.Constant(ir.VectorType(_I64, n), None)
            ins = builder.insert_element(undef, v, ir.Constant(_I32, 0))
            return builder.shuffle_vector(ins, undef, ir.Constant(ir.VectorType(_I32, n), [0] * n))

        soff_p = builder.inttoptr(soff_, _I64.as_pointer())
        doff_p = builder.inttoptr(doff_, _I64.as_pointer())
        c0b = builder.mul(c0_, ir.Constant(_I64, unit))
        r0b = builder.mul(r0_, ir.Constant(_I64, unit))
        prefetch_fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_PTR, _I32, _I32, _I32]), "llvm.prefetch.p0")
        shuffles, order = network(lanes, row_bytes // 16)

        def transpose(rows):
            for b, lo, hi in shuffles:
                lo_mask = ir.Constant(ir.VectorType(_I32, lanes), lo)
                hi_mask = ir.Constant(ir.VectorType(_I32, lanes), hi)
                new = list(rows)
                for i in range(lanes):
                    if not i >> b & 1:
                        j = i | 1 << b
                        new[i] = builder.shuffle_vector(rows[i], rows[j], lo_mask)
                        new[j] = builder.shuffle_vector(rows[i], rows[j], hi_mask)
                rows = new
            return [rows[r] for r in order]

        def transposed(rows):
            """``height`` source rows -> ``lanes`` destination rows (stacked tiles joined)."""
            parts = [transpose(rows[k * lanes:(k + 1) * lanes]) for k in range(stack)]
            if stack == 1:
                return parts[0]
            join = ir.Constant(ir.VectorType(_I32, height), list(range(height)))
            return [builder.shuffle_vector(a, b, join) for a, b in zip(*parts)]

        def src_row(i):
            off = builder.load(builder.gep(soff_p, [i]), align=8)
            addr = builder.add(builder.add(src_, off), c0b)
            if prefetch_distance:
                pf = builder.inttoptr(builder.add(addr, ir.Constant(_I64, prefetch_distance)), _PTR)
                builder.call(prefetch_fn, [pf, ir.Constant(_I32, 0), ir.Constant(_I32, 2),
                                           ir.Constant(_I32, 1)])
            return addr

        def dst_row(j):
            off = builder.load(builder.gep(doff_p, [j]), align=8)
            return builder.add(builder.add(dst_, off), r0b)

        def store_rows(rows, addrs, stream):
            """Full rows: non-temporal when ``stream`` (and every row is 64-byte aligned)."""
            with builder.if_else(stream, likely=True) as (then_nt, plain):
                with then_nt:
                    for j in range(lanes):
                        st = builder.store(rows[j], _vptr(builder, addrs[j], ot), align=out_bytes)
                        st.set_metadata("nontemporal", _nt_md(builder))
                with plain:
                    for j in range(lanes):
                        builder.store(rows[j], _vptr(builder, addrs[j], ot), align=1)

        def aligned(addrs):
            phase = addrs[0]
            for a in addrs[1:]:
                phase = builder.or_(phase, a)
            return builder.icmp_unsigned("==", builder.and_(phase, ir.Constant(_I64, out_bytes - 1)),
                                         ir.Constant(_I64, 0))

        full = builder.and_(builder.icmp_signed("==", kr_, ir.Constant(_I64, height)),
                            builder.icmp_signed("==", kc_, ir.Constant(_I64, lanes)))
        consts = [ir.Constant(_I64, i) for i in range(lanes)]
        row_consts = [ir.Constant(_I64, i) for i in range(height)]

        if not _native_masks(context, unit):
            # Edges are staged: the kr x kc corner is copied into a 64-byte-row stack tile, the
            # whole tile is transposed (one copy of the shuffle code for full tiles and edges)
            # into a second one, and kr units of its first kc rows are copied out. Full tiles
            # read and write in place with plain loads.
            def stack_tile():
                with builder.goto_entry_block():
                    tile = builder.alloca(ir.ArrayType(_I8, row_bytes * height))
                    tile.align = 64
                return builder.ptrtoint(tile, _I64)

            tile_in, tile_out = stack_tile(), stack_tile()
            with builder.if_else(full, likely=True) as (whole, edge):
                with whole:
                    whole_src = [src_row(i) for i in row_consts]
                    whole_dst = [dst_row(j) for j in consts]
                    whole_nt = builder.and_(nt_, aligned(whole_dst))
                    whole_end = builder.basic_block
                with edge:
                    with cgutils.for_range(builder, kr_) as loop:
                        at = builder.add(tile_in, builder.mul(loop.index, _I64(row_bytes)))
                        memcpy(builder, at, src_row(loop.index), builder.mul(kc_, _I64(unit)))
                    edge_src = [builder.add(tile_in, _I64(row_bytes * i)) for i in range(height)]
                    edge_dst = [builder.add(tile_out, _I64(out_bytes * j)) for j in range(lanes)]
                    edge_end = builder.basic_block

            def join(whole_v, edge_v, ty=_I64):
                phi = builder.phi(ty)
                phi.add_incoming(whole_v, whole_end)
                phi.add_incoming(edge_v, edge_end)
                return phi

            srcs = [join(a, b) for a, b in zip(whole_src, edge_src)]
            dsts = [join(a, b) for a, b in zip(whole_dst, edge_dst)]
            stream = join(whole_nt, ir.Constant(_I1, 0), _I1)
            rows = transposed([builder.load(_vptr(builder, a, vt), align=1) for a in srcs])
            store_rows(rows, dsts, stream)
            with builder.if_then(builder.not_(full), likely=False):
                with cgutils.for_range(builder, kc_) as loop:
                    at = builder.add(tile_out, builder.mul(loop.index, _I64(out_bytes)))
                    memcpy(builder, dst_row(loop.index), at, builder.mul(kr_, _I64(unit)))
            return context.get_dummy_value()

        colmask = builder.icmp_signed("<", lane_ids(lanes), splat(kc_))
        rowmask = builder.icmp_signed("<", lane_ids(height), splat(kr_, height))
        zero_mask = ir.Constant(mt, None)

        def load_row(i, mask):
            # a masked load even when the mask is all ones: one 64-byte load per row (LLVM splits
            # plain loads to fold halves into the first shuffles: measured slower)
            return _masked_load(builder, vt, _vptr(builder, src_row(i), vt), mask, lanes, bits)

        with builder.if_else(full, likely=True) as (whole, edge):
            with whole:  # the common case: no per-row tests, one alignment test per tile
                rows = transposed([load_row(i, colmask) for i in row_consts])
                addrs = [dst_row(j) for j in consts]
                store_rows(rows, addrs, builder.and_(nt_, aligned(addrs)))
            with edge:  # rows >= kr are not loaded, columns >= kc not stored
                last_row = builder.sub(kr_, ir.Constant(_I64, 1))
                rows = []
                for ci in row_consts:
                    live = builder.icmp_signed("<", ci, kr_)
                    # rows >= kr: read a valid table entry (the last live row) and load nothing
                    rows.append(load_row(builder.select(live, ci, last_row),
                                         builder.select(live, colmask, zero_mask)))
                rows = transposed(rows)
                for j in range(lanes):
                    with builder.if_then(builder.icmp_signed("<", consts[j], kc_)):
                        _masked_store(builder, ot, rows[j], _vptr(builder, dst_row(consts[j]), ot),
                                      rowmask, height, bits)
        return context.get_dummy_value()

    return sig, codegen



tile_transpose = _tile_transpose(64)
tile_transpose_256 = _tile_transpose(32)  # AVX2 (16 registers): cpuinfo.TILE_ROW_BYTES
tile_transpose_stacked = _tile_transpose(32, stack=2)  # AVX2, 64-byte destination rows


@intrinsic
def copy_line(typingctx, dst, src, nt):
    sig = types.void(types.int64, types.int64, types.boolean)

    def codegen(context, builder, signature, args):
        dst_, src_, nt_ = args
        nt_ = builder.icmp_unsigned("!=", nt_, ir.Constant(nt_.type, 0))
        vt = ir.VectorType(_I64, 8)
        v = builder.load(_vptr(builder, src_, vt), align=1)
        p = _vptr(builder, dst_, vt)
        with builder.if_else(nt_, likely=True) as (then_nt, plain):
            with then_nt:
                st = builder.store(v, p, align=64)
                st.set_metadata("nontemporal", _nt_md(builder))
            with plain:
                builder.store(v, p, align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def memcpy_bytes(typingctx, dst, src, n):
    """``llvm.memcpy`` of n bytes between raw addresses (LLVM inlines small ones)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        memcpy(builder, *args)
        return context.get_dummy_value()

    return sig, codegen
