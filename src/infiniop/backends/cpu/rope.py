"""The CPU rope kernel: rows of x (``[..., seq, nhead]``) x pairs, sin/cos gathered by position.

Generated per (signature, step pattern): the per-pair steps of y, x and the tables' columns are
baked in when they are 1 or 2 (contiguous NeoX halves, interleaved GPT-J pairs), so the pair loop
vectorises; and per streaming: a large out-of-place call stages each row whose y is whole lines
on a line in a stack chunk and stores it non-temporally. Positions are checked first, in
compiled code: one outside the tables returns 1000 and nothing is written. Rows are walked with
an odometer (one division per dimension per task, not per row).
"""

from __future__ import annotations

import numpy as np

from ...dtype import DType
from . import native, ndarray_abi, runtime
from .codegen import kernels
from .elementwise import launcher_arrays
from .elementwise_kernels import (
    PRELUDE,
    STORAGE,
    TASK_PIECES,
    WIDE,
    _driver,
    _load,
    _store,
    aliasing_test,
    keeps_nan_payloads,
    launcher,
    launcher_tables,
)
from .row_kernels import _render

_ROPE_IMPORT = "from infiniop.backends.cpu.intrinsics import rope_pairs_f16, rope_pairs_f16_nt\n"
TASK_ELEMS = 1 << 15
STAGE_BYTES = 4096  # a streamed row's stack chunk: rows of whole lines up to this size stream


def _step(v: int) -> str:
    return str(v) if v in (1, 2) else "g"


def adjacent_pairs(e, I: str, dts, isz: int, lines, outs, results, idx, out: str,
                   y_at: str = "", nt: str = "") -> None:
    """Emit the loop of a GPT-J row whose pairs are adjacent (yb = xb = 1), reading and writing
    its elements at constant steps (``2 * i``, ``2 * i + 1``), which LLVM vectorises as
    interleaved accesses, where the step as a variable (``i * 2 + xb``) it did not; then
    ``else:`` for the element loop the caller emits. Stores go through ``out`` (``h0``, or
    ``h1`` in place; ``h0`` at ``y_at``, a staged row's stack chunk, when given;
    non-temporally when ``nt`` (the further condition: rows starting on a line, and not at 4K
    aliasing's risk). Until 2026-11-29 such rows were
    read and written a pair per 32- or 64-bit word (shifts and masks); (2048, 32, 128), AMD
    EPYC Zen 3, the two kernels alternating in one process, same bits: float16 1.86-2.09 ->
    1.44-1.53 ms, float32 2.27-2.80 -> 2.10-2.56, bfloat16 2.06-2.15 -> 2.01-2.06; (16, 32,
    128) on one thread 18 -> 14-15 us (float32, float16).

    fp16 rows (``swapped_pairs``) go through ``intrinsics.rope_pairs_f16[_nt]`` first, y = x c +
    swap(x) s over whole 16-element vectors with the position's c = (cos, cos) and s = (-sin,
    sin) pairs built once per position (``pct``/``pst``, per task), then the element loop takes
    the pairs left: no even/odd shuffles (same bits; (2048, 32, 128) -7 to -25%, (16, 32, 128)
    one thread 15 -> 10 us)."""
    st = STORAGE[dts[0]]
    e(f"{I}if yb == 1 and xb == 1{f' and {nt}' if nt else ''}:")
    J = I + "    "
    h0_at = y_at or f"s0 + g0 * {isz}"
    y_addr = f"s1 + g1 * {isz}" if out == "h1" else h0_at  # where ``out`` writes
    e(f"{J}h0 = address_as_pointer({h0_at}, np.{st})")
    e(f"{J}h1 = address_as_pointer(s1 + g1 * {isz}, np.{st})")
    first = "0"
    if swapped_pairs(dts, lines, outs):
        e(f"{J}if p != pc:  # the position's (cos, cos) and (-sin, sin) pairs, once per position")
        e(f"{J}    for i in range(half):")
        e(f"{J}        sn = {_load(dts[3], f'q3[{idx(3)}]')}")
        e(f"{J}        cs = {_load(dts[4], f'q4[{idx(4)}]')}")
        e(f"{J}        pct[2 * i] = cs")
        e(f"{J}        pct[2 * i + 1] = cs")
        e(f"{J}        pst[2 * i] = -sn")
        e(f"{J}        pst[2 * i + 1] = sn")
        e(f"{J}    pc = p")
        fn = f"rope_pairs_f16{'_nt' if nt else ''}"
        e(f"{J}done = {fn}({y_addr}, s1 + g1 * {isz}, pct_at, pst_at, 2 * half) // 2")
        first = "done"
    e(f"{J}for i in range({first}, half):")
    K = J + "    "
    e(f"{K}a = {_load(dts[1], 'h1[2 * i]')}")
    e(f"{K}b = {_load(dts[1], 'h1[2 * i + 1]')}")
    e(f"{K}sn = {_load(dts[3], f'q3[{idx(3)}]')}")
    e(f"{K}cs = {_load(dts[4], f'q4[{idx(4)}]')}")
    for line in lines:
        e(K + line)
    for at, v, r in (("2 * i", outs[0], results[0]), ("2 * i + 1", outs[1], results[1])):
        value = _store(dts[0], v, r.dtype, nan_low_bits_zero(dts, results))
        e(f"{K}nt_store({out}, {at}, {value})" if nt else f"{K}{out}[{at}] = {value}")
    e(f"{I}else:")


# the rope expression intrinsics.rope_pairs_f16 computes (a cos - b sin, a sin + b cos)
_ROPE_LINES = ["r_0 = (a * cs)", "r_1 = (b * sn)", "r_2 = (r_0 - r_1)", "r_3 = (a * sn)",
               "r_4 = (b * cs)", "r_5 = (r_3 + r_4)"]


def nan_low_bits_zero(dts, results) -> bool:
    """Whether bf16 outputs round with ``f32_to_bf16_finite`` (no NaN select: 3 of the
    rounding's 8 vector operations): x, sin and cos all bf16 and the rotation plain
    arithmetic (``keeps_nan_payloads``), so a NaN reaching the rounding is an input's,
    quieted, or the default NaN, its low 16 bits zero: nothing carries, and the bits are the
    select's (hi | 0x40). float32 tables keep the select (their NaNs' low bits may carry).
    (2048, 32, 128), AMD EPYC Zen 3, 2026-11-29, on the pool, old and new kernels alternating
    in one process, same bits, y on a page / 48 bytes ahead, ms: GPT-J 1.79 -> 1.50 / 1.39 ->
    1.25, 2.21 -> 1.79 / 1.60 -> 1.40; NeoX 1.75 -> 1.61 / 1.59 -> 1.43, 1.51 -> 1.34 / 1.64 ->
    1.37."""
    return all(dts[k] == DType.BF16 for k in (0, 1, 3, 4)) and keeps_nan_payloads(results)


def swapped_pairs(dts, lines, outs) -> bool:
    """Whether a GPT-J row goes through ``intrinsics.rope_pairs_f16``: fp16 rows of the built-in
    expression. (2048, 32, 128), AMD EPYC Zen 3, 2026-11-29, the generated kernels alternating
    in one process, same bits: fp16 -7 to -25% (y on a page or 48 bytes ahead of x, five runs);
    float32 -2 to +3% and bfloat16 -2 to +15% (its integer rounding in 16-lane vectors), so they
    keep the elements at steps of 2."""
    return (dts[0] == DType.F16 and dts[1] == dts[0] and [ln.strip() for ln in lines] == _ROPE_LINES
            and list(outs) == ["r_2", "r_5"])


def source(prog, steps: str, stream: bool = False) -> str:
    """``stream``: out-of-place rows whose y is one run of whole 64-byte lines are computed
    into a stack chunk and stored from there non-temporally (large calls)."""
    dts = prog.dtypes  # y, x, pos, sin, cos
    isz = [d.itemsize for d in dts]
    st = [STORAGE[d] for d in dts]
    lines, outs = _render(prog.results, ["a", "b", "sn", "cs"], 0, "r_")
    L = []
    e = L.append

    def idx(k: int, off: str = "") -> str:
        step = steps[k]
        base = "i" if step == "1" else f"i * {step}" if step == "2" else f"i * st{k}"
        return base + off

    def pair_loops(I: str, inplace: bool, staged: bool = False, direct: bool = False) -> None:
        """A row's pairs: adjacent (GPT-J, at constant steps) or at any steps; stored through x's
        pointer and steps when ``inplace``, into the stack chunk ``sc`` (y's layout) when
        ``staged``, non-temporally through ``qd`` (y's row, its halves whole lines on a line)
        when ``direct``."""
        o, ob = (1, "xb") if inplace else (0, "yb")
        J = I
        if steps[:2] == "22" and dts[0] == dts[1]:
            J += "    "
            adjacent_pairs(e, I, dts, isz[0], lines, outs, prog.results, idx, f"h{o}",
                           "sc" if staged else "")
        e(f"{J}for i in range(half):")
        K = J + "    "
        xa, xb = idx(1), idx(1, " + xb")
        e(f"{K}a = {_load(dts[1], f'q1[{xa}]')}")
        e(f"{K}b = {_load(dts[1], f'q1[{xb}]')}")
        e(f"{K}sn = {_load(dts[3], f'q3[{idx(3)}]')}")
        e(f"{K}cs = {_load(dts[4], f'q4[{idx(4)}]')}")
        for line in lines:
            e(K + line)
        ya, yb = idx(o), idx(o, f" + {ob}")
        y = "qs" if staged else f"q{o}"
        for at, v, r in ((ya, outs[0], prog.results[0]), (yb, outs[1], prog.results[1])):
            value = _store(dts[0], v, r.dtype, nan_low_bits_zero(dts, prog.results))
            if direct:
                e(f"{K}nt_store(qd, {at}, {value})")
            else:
                e(f"{K}{y}[{at}] = {value}")

    def out_of_place(I: str) -> None:
        if not stream:
            pair_loops(I, False)
            return
        # y's row one run (NeoX halves abutting, or GPT-J pairs adjacent) starting on a line;
        # the row's length is whole lines (RopeKernel streams only then)
        run = "yb == half" if steps[0] == "1" else "yb == 1"
        J = I + "    "
        if steps[0] == "1":
            # NeoX halves that are whole lines each: stored non-temporally as computed (the
            # vector loop's stores start on lines). Through the stack chunk, which every 16th
            # (bf16) to 8th (float32) row's input meets within a few bytes mod 4096, (2048, 32,
            # 128) took 3-9% longer (AMD EPYC Zen 4, 2026-11-29, same process, same bits)
            e(f"{I}if (s0 + g0 * {isz[0]}) & 63 == 0 and yb == half "
              f"and (half * {isz[0]}) & 63 == 0:")
            e(f"{J}qd = address_as_pointer(s0 + g0 * {isz[0]}, np.{st[0]})")
            pair_loops(J, False, direct=True)
            e(f"{I}elif (s0 + g0 * {isz[0]}) & 63 == 0 and {run}:")
        elif steps[:2] == "22" and dts[0] == dts[1]:
            # GPT-J rows on a line: stored likewise as computed ((2048, 32, 128), same
            # measurement with the pairs as words: 1-8% faster in each dtype); through the
            # stack chunk where y starts 1-80 bytes ahead of x mod 4096 (4K aliasing, as in the
            # elementwise and row kernels): y 48 bytes ahead (a 64-byte aligned y, a NumPy x),
            # AMD EPYC Zen 3, 2026-11-29, both kernels alternating in one process, two runs:
            # float32 2.43-2.67 -> 2.21-2.31 ms, float16 1.59-1.68 -> 1.55-1.61, bfloat16
            # 1.88-2.42 -> 1.38-2.15 (NeoX staged there: float16 3-8% slower, kept direct)
            direct = (f"(s0 + g0 * {isz[0]}) & 63 == 0 and not ("
                      f"{aliasing_test(['q0'], ['q1'])})")
            adjacent_pairs(e, I, dts, isz[0], lines, outs, prog.results, idx, "h0", nt=direct)
            I, J = J, J + "    "  # the rows below go in adjacent_pairs' trailing ``else:``
            e(f"{I}if (s0 + g0 * {isz[0]}) & 63 == 0 and {run}:")
        else:
            e(f"{I}if (s0 + g0 * {isz[0]}) & 63 == 0 and {run}:")
        e(f"{J}qs = address_as_pointer(sc, np.{st[0]})")
        pair_loops(J, False, staged=True)
        e(f"{J}wo = address_as_pointer(s0 + g0 * {isz[0]}, np.uint32)")
        e(f"{J}ws = address_as_pointer(sc, np.uint32)")
        e(f"{J}for i in range(half * {isz[0] // 2}):")
        e(f"{J}    nt_store(wo, i, ws[i])")
        e(f"{I}else:")
        pair_loops(J, False)

    def next_row(I: str) -> None:
        """Step the odometer ``ix`` (innermost dimension first) and the offsets with it."""
        e(f"{I}d = nd - 1")
        e(f"{I}while d >= 0:")
        e(f"{I}    ix[d] += 1")
        for j in range(3):
            e(f"{I}    g{j} += strides[{j}, d]")
        e(f"{I}    if ix[d] < shape[d]:")
        e(f"{I}        break")
        e(f"{I}    ix[d] = 0")
        for j in range(3):
            e(f"{I}    g{j} -= shape[d] * strides[{j}, d]")
        e(f"{I}    d -= 1")

    # the pool runs ``serial`` through rope_driver (one for every rope kernel)
    e("\n\n@njit(**OPTS)")
    e(f"def serial({ARGS}, serial_at, t0, t1):")
    if WIDE:  # 512-bit vectors (see intrinsics.prefer_512_bit_vectors)
        e("    prefer_512_bit_vectors()")
    e("    nd = shape.shape[0]")
    e("    rows = 1")
    e("    for d in range(nd):")
    e("        rows *= shape[d]")
    e("    st0 = steps[0]")
    e("    yb = steps[1]")
    e("    st1 = steps[2]")
    e("    xb = steps[3]")
    e("    t3 = steps[4]")
    e("    st3 = steps[5]")
    e("    t4 = steps[6]")
    e("    st4 = steps[7]")
    # every position first: one outside the tables writes nothing. pos_ids repeat along
    # the dimensions where their stride is 0 (the heads), which the check does not walk:
    # (2048, 32, 128) visited 65,536 rows serially for 2,048 positions, 76 us of a 0.85 ms
    # float16 call
    e("    if t0 < 0 or t1 < 0:  # a whole call, or the driver's check (task runs skip it)")
    e("        ix = np.zeros(max(nd, 1), np.int64)")
    e("        cs = np.empty(max(nd, 1), np.int64)")
    e("        crows = 1")
    e("        for d in range(nd):")
    e("            cs[d] = shape[d] if strides[2, d] != 0 else 1")
    e("            crows *= cs[d]")
    e("        g2 = 0")
    e("        for r in range(crows):")
    e(f"            p = np.int64(address_as_pointer(s2 + g2 * {isz[2]}, np.{st[2]})[0])")
    e("            if p < 0 or p >= maxpos:")
    e("                return 1000")
    e("            d = nd - 1")
    e("            while d >= 0:")
    e("                ix[d] += 1")
    e("                g2 += strides[2, d]")
    e("                if ix[d] < cs[d]:")
    e("                    break")
    e("                ix[d] = 0")
    e("                g2 -= cs[d] * strides[2, d]")
    e("                d -= 1")
    e("    if t0 < 0:")
    e("        return 0")
    e("    ntask = (rows + per_task - 1) // per_task")
    e("    for t in range(t0, ntask if t1 < 0 else t1):")
    if stream:  # allocated once, where the function starts
        e(f"        sc = stack_scratch({STAGE_BYTES})")
    e("        ix = np.empty(max(nd, 1), np.int64)")
    if steps[:2] == "22" and swapped_pairs(dts, lines, outs):  # a GPT-J row's pair tables
        e("        ptab = np.empty(4 * max(half, 1), np.float32)")
        e("        pct_at = ptab.ctypes.data")
        e("        pst_at = pct_at + 8 * max(half, 1)")
        e("        pct = address_as_pointer(pct_at, np.float32)")
        e("        pst = address_as_pointer(pst_at, np.float32)")
        e("        pc = np.int64(-1)")
    e("        r0 = t * per_task")
    e("        r1 = min(rows, r0 + per_task)")
    I = "        "
    # the first row's offsets by division, the next ones counted (an odometer): two
    # integer divisions a dimension per row cost about as much as a row of 64 pairs
    e(f"{I}rem = r0")
    for j in range(3):
        e(f"{I}g{j} = 0")
    e(f"{I}for d in range(nd - 1, -1, -1):")
    e(f"{I}    ext = shape[d]")
    e(f"{I}    ix[d] = rem % ext")
    e(f"{I}    rem //= ext")
    for j in range(3):
        e(f"{I}    g{j} += ix[d] * strides[{j}, d]")
    e(f"{I}for r in range(r0, r1):")
    I += "    "
    e(f"{I}p = np.int64(address_as_pointer(s2 + g2 * {isz[2]}, np.{st[2]})[0])")
    e(f"{I}q0 = address_as_pointer(s0 + g0 * {isz[0]}, np.{st[0]})")
    e(f"{I}q1 = address_as_pointer(s1 + g1 * {isz[1]}, np.{st[1]})")
    e(f"{I}q3 = address_as_pointer(s3 + p * t3 * {isz[3]}, np.{st[3]})")
    e(f"{I}q4 = address_as_pointer(s4 + p * t4 * {isz[4]}, np.{st[4]})")
    if steps[0] == steps[1] and dts[0] == dts[1]:
        # in place (y is x): one pointer read and written, which LLVM vectorises; with
        # two, its overlap check sends every row to the scalar loop (fp16 12x slower)
        e(f"{I}if s0 + g0 * {isz[0]} == s1 + g1 * {isz[1]} and yb == xb and st0 == st1:")
        pair_loops(I + "    ", True)
        e(f"{I}else:")
        out_of_place(I + "    ")
    else:
        out_of_place(I)
    next_row(I)
    if stream:  # once per task: the rows' non-temporal stores drain meanwhile
        e("        sfence()")
    e("    return 0")
    return PRELUDE + _ROPE_IMPORT + "\n".join(L) + "\n"


ARGS = "s0, s1, s2, s3, s4, shape, strides, steps, half, maxpos, per_task"


def rope_driver() -> native.Kernel:
    """``parallel(<ARGS>, serial_at, t0, t1)``: a rope kernel on the thread pool, shared by
    every rope kernel (a prange of each kernel's own took ~5 s to compile, 2.5-3.5x its
    ``serial``). It asks the kernel's ``serial`` to check every position first (t0 = -1: check
    only), then hands its tasks out in up to TASK_PIECES consecutive runs (``t0``, ``t1``
    ignored)."""
    args = ARGS.split(", ")
    call = f"call_kernel(serial_at, ({', '.join(args)}, serial_at, "
    L = [f"def parallel({ARGS}, serial_at, t0, t1):",
         f"    r = {call}-1, 0))", "    if r != 0:", "        return r",
         "    rows = 1", "    for d in range(shape.shape[0]):", "        rows *= shape[d]",
         "    ntask = (rows + per_task - 1) // per_task",
         f"    pieces = min(ntask, {TASK_PIECES})",
         "    for c in prange(pieces):",
         f"        {call}c * ntask // pieces, (c + 1) * ntask // pieces))",
         "    return 0"]
    return _driver("rope", L)


class RopeKernel:
    """``launch_pointers(addresses)`` returns 1000 when a position is outside the tables (nothing
    written); ``array_launcher`` for the descriptor's fast path (same code)."""

    checks_positions = True

    def __init__(self, info):
        prog = info.program
        lay = info.layout
        (ya, yb), (xa, xb) = info.pairs
        (t3, s3), (t4, s4) = info.tables
        # per-pair step class of each operand (index = operand; pos has none: "-")
        steps = _step(ya) + _step(xa) + "-" + _step(s3) + _step(s4)
        pairs = [(0, k) for k in range(1, 5)]
        n = info.numel
        isz = [d.dtype.itemsize for d in info.descs]
        row_bytes = 2 * info.half * isz[0]
        stream = (steps[0] in "12" and row_bytes % 64 == 0 and row_bytes <= STAGE_BYTES
                  and runtime.streams(n * (isz[0] + isz[1])))
        fns = kernels(f"rope_{prog.key[:10]}_{steps}{'_nt' if stream else ''}",
                      source(prog, steps, stream), ("serial",))
        self.parallel = info.rows > 1 and n >= runtime.PARALLEL_THRESHOLD
        per_task = info.rows
        if self.parallel:
            per_task = max(1, min(-(-info.rows // (8 * runtime.num_threads())),
                                  -(-TASK_ELEMS // (2 * info.half))))
        self._origins = [lay.offsets[0] * isz[0], lay.offsets[1] * isz[1],
                         lay.offsets[2] * isz[2], 0, 0]
        self._shape = np.array(lay.shape, dtype=np.int64)
        self._strides = np.array(lay.strides, dtype=np.int64).reshape(3, lay.ndim)
        self._steps = np.array([ya, yb, xa, xb, t3, s3, t4, s4], dtype=np.int64)
        # fixed argument types (native.Kernel), as in elementwise.ElementwiseKernel
        at = (0, 0, 0, 0, 0, self._shape, self._strides, self._steps, info.half, info.max_pos,
              per_task, 0, 0, -1)
        fn = rope_driver() if self.parallel else fns["serial"]
        # (half, maxpos, per_task, serial_at, t0, t1): every task, positions checked first
        self._sizes = (*at[8:11], fns["serial"].address(*at) if self.parallel else 0, 0, -1)
        args = (*at[:8], *self._sizes)
        self._fn = fn.specialize(*args)
        self.meta = launcher_tables([*self._sizes[:3], fn.address(*args)], info, range(5),
                                    self._origins, (self._shape, self._strides, self._steps,
                                                    self._sizes[3:]))
        self.array_launcher_args = (self.meta,)
        self.array_launcher_checked = ndarray_abi.verified()
        launch = launcher(list(range(5)), 5, 0, pairs,
                          [("shape", 1), ("strides", 2), ("steps", 1), ("tasks", 1)],
                          ["shape", "strides", "steps", "meta[0]", "meta[1]", "meta[2]",
                           "tasks[0]", "tasks[1]", "tasks[2]"])
        self.array_launcher = launch.specialize(*launcher_arrays(info.descs, {0}), self.meta)

    def launch_pointers(self, addresses, stream=None) -> int:
        ptrs = [a + o for a, o in zip(addresses, self._origins)]
        return self._fn(*ptrs, self._shape, self._strides, self._steps, *self._sizes)
