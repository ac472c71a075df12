"""CPU row kernels generated from a traced row operator (rows.spec.RowProgram).

One module per (program, layout kind, axis stride pattern, streaming) holds ``serial`` (raw
slot addresses; tasks ``t0`` to ``t1``); a large call runs it on the thread pool through a
shared driver (:func:`row_driver`) calling it by address, one task at a time. The descriptor's
fast path reaches either through the shared array ``launch`` (elementwise_kernels.launcher:
NumPy arrays, layouts checked in compiled code).

Every pass walks a row in the order the reduction contract fixes (rows/spec.py): lane
``l = j mod L`` accumulates element ``j`` in a scratch array of L lanes, then the lanes halve
pairwise. Expressions are rendered by the elementwise renderer (one statement per node), so the
bits are the ones the expression defines.

Layout kinds (decided once, at create):
- 'row': a task walks whole rows; each row's passes after the first read it from cache. The
  last pass streams its outputs with non-temporal stores when they are large (unit stride, one
  itemsize; the row's head peeled to 64-byte alignment, rows whose outputs are not equally
  aligned are stored normally; 16-bit outputs as 32-bit words), and the heaviest pass after the
  first (the output pass, or softmax's exp pass: ``prefetch_stage``) prefetches the next row's
  input (into L2 for 4-byte elements), so that reading it overlaps this row's work. A cached
  last-stage value (softmax's ``exp(x - max)``) is kept in a scratch row instead of being
  computed twice. Softmax's and logsoftmax's float32 rows store their outputs during the next
  row's exp pass instead (``_Gen.deferral``), so that the stores drain while the exps compute.
- 'col': the axis is strided and the innermost other dim is dense: a task takes a block of
  adjacent rows and runs every pass across them side by side (vectorised across rows), with
  ``L x block`` lanes.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from ...dtype import DType
from ...elementwise.expr import topo
from ...rows.spec import IDENTITY, LANES, hoist
from .codegen import kernels
from .elementwise_kernels import (
    DTYPE_BYTES,
    HEAVY_INTERLEAVE,
    NP,
    PRELUDE,
    STORAGE,
    WIDE,
    _const,
    _driver,
    _load,
    _store,
    aliasing_test,
    bf16_lane,
    constant_definitions,
    is_heavy,
    launcher,
    packed_word,
    render_body,
)
from .elementwise_kernels import interleave as interleave_for

_TEMP = re.compile(r"\bt(\d+)\b")
# a row kernel's sizes (after its slots and parameters); ``serial_at``: the driver's callee
ROW_ARGS = "n, shape, strides, astr, per_task, cfg, serial_at, t0, t1"
# elements per block of the streamed pass: a multiple of 64 bytes for every item size, and
# enough 32-bit words for the vectorised loop (16 lanes x 4 interleaved) to run
_BLOCK = 256
# elements per block of the sum pass that asks for the next row's lines over whole chunks
# (softmax's exp pass on long rows; two chunks at a time until 2026-11-29): 64 (lines a block)
# instead of 256 spreads the prefetches among the exp's arithmetic. Same bits; AMD EPYC Zen 4,
# 2026-11-29, old and new kernels alternating in one process, 31 rounds, five runs: softmax
# float32 (4096, 4096) -0.8% to -5.2% (3.69 -> 3.50 ms), float16 -1.2% to -1.4%, bfloat16 and
# logsoftmax float32 within noise; blocks of 128 were no better. The blocks of a partial last
# chunk keep _BLOCK: their trip counts are not constants, and 64 there cost up to 26% (softmax
# (16384, 1024)) in one run
_PAIR_BLOCK = 64
# rows of at least this many chunks defer their outputs to the next row's exp pass (see
# _Gen.deferral): softmax float32 (2048, 8192) -10%, (1024, 16384) -17%, (4096, 4096) -2 to -8%,
# but (8192, 2048) +1.5 to +3.4% (AMD EPYC Zen 4, same process, same bits; a C probe of the
# same loops gained nothing at 2048 either)
_DEFER_MIN = 4
# and at most this many elements: two scratch rows of float32 exps are kept for a deferred row
# (512 KiB here, an L2); a longer row gains nothing from the cache and took a hidden scratch of
# twice its length (a (1, 2^28) float32 softmax needed 2 GiB beside its operands)
_DEFER_MAX = 1 << 16
_CHECKED_ROWS = 8  # rows a call needs before it checks its column operands (columns_finite)
# the dtypes the row loops of intrinsics.py read, and their names' tags (row_max_f16, ...)
_ROW_TAG = {DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16"}
# shorter rows keep the lanes. 64 (one step of four vectors) while rows of 16-32 went through
# row_max's scalar tail (6-24% slower); with its single 16-lane vectors, rows of 16-63 are
# faster through it (AMD EPYC Zen 3, 2026-11-29, generated kernels alternating in one process,
# 2 threads, same bits: softmax float32 (32768, 16) 741 -> 671 us, (16384, 32) 436 -> 401,
# (8192, 48) 287 -> 252, (8192, 63) 641 -> 626; float16 (16384, 32) 640 -> 567, (32768, 16)
# 678 -> 606; bfloat16 (16384, 32) 477 -> 427)
_ROW_MAX_MIN = 16
# lanes a sum halves in registers at the end (intrinsics.LANES_SUM_MAX: not imported here, a
# process running cached kernels has no Numba)
_LANES_SUM_MAX = 32


def _render(roots, names: list[str], nparams: int, prefix: str,
            consts: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """render_body with its temporaries renamed ``<prefix><k>`` (Numba types a variable once
    per function, so each pass gets its own names)."""
    lines, outs = render_body(roots, names, [f"p{k}" for k in range(nparams)], consts=consts)
    ren = [_TEMP.sub(lambda mt: f"{prefix}{mt.group(1)}", x) for x in lines]
    return ren, [_TEMP.sub(lambda mt: f"{prefix}{mt.group(1)}", x) for x in outs]


def _used(roots, nelem: int) -> set[int]:
    """The loaded operands (input leaves below ``nelem``) that ``roots`` read."""
    return {nd.args[0] for nd in topo(roots) if nd.op == "input" and nd.args[0] < nelem}


def _store_loops(outs_j: list[int], split: bool) -> list[tuple[list[int] | None, list[int]]]:
    """A streamed block's loops: ``(only, slots)`` each (``only`` for ``values``), one loop for
    every output (``split``) or one for all. Two non-temporal store streams interleaved in one
    loop cost up to 1.4x where their rows start at the same offset mod 4096, as the rows of
    page-aligned arrays of one shape do; split, each output's loop reads the block's inputs
    again from L1 and recomputes what they share. AMD EPYC Zen 3, 2026-11-29, (2048, 4096),
    both kernels alternating in one process, 21-41 rounds, same bits; every operand at one
    offset: add_rms_norm float32 6.36 -> 5.16 ms, float16 2.91 -> 2.70, bfloat16 3.50 -> 3.32;
    layer_norm float32 5.91 -> 4.10, float16 3.17 -> 2.45, bfloat16 2.89 -> 2.70; only the
    outputs at one offset: add_rms_norm float32 4.59 -> 3.93. With the outputs 64-1024 bytes
    apart the split was as fast in float32 and 7-15% slower in float16 and bfloat16 (the
    recomputed part and the conversions), so it is chosen per row (:meth:`_Gen.streamed`); and
    not for bfloat16 outputs (packed words), whose split at one offset measured 0-8% slower
    in three later runs of each operator."""
    if split:
        return [([n], [j]) for n, j in enumerate(outs_j)]
    return [(None, outs_j)]


class _Deferral(NamedTuple):
    """A row whose outputs are stored during the next row's last pass (see _Gen.deferral):
    the output slots, their per-element expressions and the names to render them with (the
    row's statistics and per-row values under their deferred names ``df_...``, its scratch row
    as ``dcache``), the per-row state to keep (name, NumPy type) and the slot the last pass
    reads."""

    outs_j: list[int]
    roots: list
    names: list[str]
    state: list[tuple[str, str]]
    read: int | None
    inputs: dict[int, int]  # the row inputs the outputs read: leaf -> slot


class _Gen:
    """Source of one kernel module. ``pattern``: per slot how the axis moves ('1', '0', 'g');
    ``inner`` (col kind): per slot how the innermost row dim moves; ``stream``: the row kind's
    output pass may use non-temporal stores."""

    def __init__(self, program, kind: str, pattern: str, inner: str, stream: bool):
        self.p = program
        self.kind = kind
        self.pattern = pattern
        self.inner = inner
        self.stream = stream
        self.slots = program.slots
        self.kinds = program.kinds
        self.ns = len(self.slots)
        self.isz = [s.dtype.itemsize for s in self.slots]
        self.st = [STORAGE[s.dtype] for s in self.slots]
        self.params = [f"p{k}" for k in range(len(program.params))]
        self.reds = program.reductions
        self.slot_of_load = {s.load: j for j, s in enumerate(self.slots) if s.load is not None}
        self.defer: _Deferral | None = None
        self.L: list[str] = []
        # bf16 row outputs of a NaN-free-if-finite operator: rows whose statistics and column
        # operands are finite round without the NaN select (see finite_or_not)
        self.finite_rows = program.nan_free_if_finite and kind == "row" and any(
            s.dtype is DType.BF16 and k == "row" and s.store is not None
            for s, k in zip(self.slots, self.kinds))

    def e(self, line: str) -> None:
        self.L.append(line)

    def render(self, roots, names: list[str], prefix: str, consts: dict[str, str] | None = None):
        return _render(roots, names, len(self.params), prefix, consts)

    def hoisted(self, indent: str, roots, names: list[str], prefix: str):
        """Emit the per-row values of ``roots`` at ``indent`` (once per row); returns the roots
        and names to render per element."""
        p = self.p
        inv, roots = hoist(roots, lambda k: k < p.nelem or k == p.cache, len(names))
        if not inv:
            return roots, names
        lines, outs = self.render(inv, names, prefix)
        for line in lines:
            self.e(indent + line)
        return roots, names + outs

    def finite_or_not(self, I: str, body) -> None:
        """``body(indent, finite)``: once with finite=False, or, where ``finite_rows``, under
        ``if row_finite:`` with finite=True (bf16 rounded without the NaN select) and ``else:``
        as it is. AMD EPYC Zen 3, (2048, 4096) bfloat16, generated kernels alternating in one
        process on one thread, same bits, ms: rms_norm 1.55 -> 1.40, 1.93 -> 1.80, 1.95 -> 1.75
        (the output straight, staged, staged), layer_norm 4.36 -> 4.17, 3.90 -> 3.56, 3.70 ->
        3.41, add_rms_norm 3.54 -> 3.56, 3.34 -> 3.23, 3.23 -> 3.05, 3.51 -> 3.23; softmax
        (4096, 4096) -2 to -4%, logsoftmax -4 to -6%, causal_softmax (8, 2048, 2048) -4%;
        (256, 4096), not streamed (the paired loops), us: rms_norm 176 -> 154, 192 -> 167,
        layer_norm 327 -> 281, 484 -> 404; (the element loop) softmax 0.390 -> 0.364, 0.323 ->
        0.296 ns an element, causal_softmax (8, 256, 256) 0.357 -> 0.337, 0.373 -> 0.360."""
        if not self.finite_rows:
            body(I, False)
            return
        self.e(f"{I}if row_finite:")
        body(I + "    ", True)
        self.e(f"{I}else:")
        body(I + "    ", False)

    # -- names -------------------------------------------------------------------------------------
    def names(self, stat: str, cache: str) -> list[str]:
        p = self.p
        out = [f"x{k}" for k in range(p.nelem)]
        out += [stat.format(k=k) for k in range(len(self.reds))]
        return out + ["n", cache]

    def index(self, j: int) -> str:
        """Element index expression of slot j along the axis (row kind) / axis + inner (col)."""
        cls = self.pattern[j]
        parts = [] if cls == "0" else ["j"] if cls == "1" else [f"j * a{j}"]
        if self.kind == "col" and self.kinds[j] == "row" and self.inner[j] == "1":
            parts.append("c")
        return " + ".join(parts) or "0"

    def loads(self, indent: str, used: set[int], which) -> None:
        for k in sorted(used):
            j = self.slot_of_load[k]
            if which(j):
                s = self.slots[j]
                self.e(f"{indent}x{k} = {_load(s.dtype, f'q{j}[{self.index(j)}]')}")

    # -- shared pieces --------------------------------------------------------------------------------
    def header(self) -> None:
        args = [f"s{j}" for j in range(self.ns)] + self.params
        self.e("\n\n@njit(parallel=False, **OPTS)")
        self.e(f"def serial({', '.join(args)}, {ROW_ARGS}):")
        self.wide("    ")
        self.e("    nd = shape.shape[0]")
        self.e("    lp = 1")
        self.e(f"    while lp < n and lp < {LANES}:")
        self.e("        lp *= 2")
        for j in range(self.ns):
            if self.pattern[j] == "g":
                self.e(f"    a{j} = astr[{j}]")

    def wide(self, indent: str) -> None:
        """Ask for 512-bit vectors in the function compiled from here, as the elementwise
        kernels do."""
        if WIDE:
            self.e(f"{indent}prefer_512_bit_vectors()")

    def pointers(self, indent: str) -> None:
        for j in range(self.ns):
            base = f"s{j}" if self.kinds[j] == "col" else f"s{j} + g{j} * {self.isz[j]}"
            self.e(f"{indent}q{j} = address_as_pointer({base}, np.{self.st[j]})")

    def scratch(self, indent: str, shape: str, cache_shape: str) -> None:
        """Per task: the reductions' lanes (``shape`` formatted with the number of lanes: twice
        ``lp`` for maxima, see :meth:`max_chunks`) and the cached row. A row's lanes (at most
        2 x LANES) live on the stack, reached through ``acc<k>`` at ``acc<k>_at``: on the heap
        each task's call of ``serial`` allocated them (~80 ns an array), at addresses that
        varied, and the speed with them (layer_norm bf16 (2048, 4096): 1.55 ms in one hour,
        2.10 in another, where the stack lanes ran at 1.52-1.59)."""
        for k, r in enumerate(self.reds):
            lanes = "2 * lp" if r.op == "max" else "lp"
            if shape == "{lanes}":
                most = (2 if r.op == "max" else 1) * LANES * (8 if r.dtype == "f64" else 4)
                self.e(f"{indent}acc{k}_at = stack_scratch({most})")
                self.e(f"{indent}acc{k} = address_as_pointer(acc{k}_at, {NP[r.dtype]})")
                continue
            self.e(f"{indent}acc{k} = np.empty({shape.format(lanes=lanes)}, {NP[r.dtype]})")
        c = self.p.cached
        if c is not None:
            if self.defer:  # two rows where rows may be deferred (see _DEFER_MAX)
                cache_shape = f"(2 if n <= {_DEFER_MAX} else 1) * {cache_shape}"
            self.e(f"{indent}cache = np.empty({cache_shape}, {NP[c.dtype]})")
            # stored and read through a pointer: ``cache[j]`` with j = c0 + l, which the
            # compiler cannot prove >= 0, would wrap negative indices and turn vector loads and
            # stores into gathers and scatters (the row kind keeps ``cache`` alive at the end
            # of the task)
            self.e(f"{indent}pcache = address_as_pointer(cache.ctypes.data, {NP[c.dtype]})")
        if self.defer:  # no row deferred yet; the state's names typed (see deferral)
            d = self.defer
            if c is not None:
                self.e(f"{indent}cbase = cache.ctypes.data")
                self.e(f"{indent}dcache = pcache")
            self.e(f"{indent}dq = 0")
            self.e(f"{indent}drot = 0")
            for j in d.outs_j:
                self.e(f"{indent}dp{j} = address_as_pointer(s{j}, np.{self.st[j]})")
            for j in sorted(set(d.inputs.values())):
                self.e(f"{indent}dpi{j} = address_as_pointer(s{j}, np.{self.st[j]})")
            for name, typ in d.state:
                self.e(f"{indent}df_{name} = {typ}(0)")

    def combine(self, k: int, a: str, b: str) -> str:
        return f"({a} + {b})" if self.reds[k].op == "sum" else f"maximum({a}, {b})"

    def columns_finite(self, I: str) -> None:
        """``cols_finite``: whether every element of the column operands is finite, once a call
        of ``serial`` (one pool task: 4096 bf16 weights take 0.67 us, against 44 us for a task
        of 64 rows of 4096, 1.40 ms / 32) of at least _CHECKED_ROWS rows (see
        ``finite_or_not``: a row also needs finite statistics); fewer rows take the exact
        rounding, which costs less than reading the columns once more (a (1, 4096) rms_norm
        call took 2.0 -> 2.6-3.8 us with the check)."""
        e = self.e
        e(f"{I}cols_finite = False")
        e(f"{I}if min(rows, t1 * per_task) - t0 * per_task >= {_CHECKED_ROWS}:")
        e(f"{I}    cm = np.uint32(0)")
        for j in range(self.ns):
            if self.kinds[j] == "col" and self.slots[j].load is not None:
                e(f"{I}    q{j} = address_as_pointer(s{j}, np.{self.st[j]})")
                value = _load(self.slots[j].dtype, f"q{j}[{self.index(j)}]")
                e(f"{I}    for j in range(n):")
                e(f"{I}        cm = max(cm, bitcast(np.float32({value}), np.uint32) & np.uint32(0x7FFFFFFF))")
        e(f"{I}    cols_finite = cm < np.uint32(0x7F800000)")

    # -- row kind -----------------------------------------------------------------------------------
    def tasks(self) -> None:
        """The loop over tasks ``t0`` to ``t1`` (all of them when ``t1`` < 0)."""
        self.e("    if t1 < 0:")
        self.e("        t1 = ntask")
        if self.finite_rows:
            self.columns_finite("    ")
        self.e("    for t in range(t0, t1):")

    def row_kernel(self) -> None:
        p, e = self.p, self.e
        self.defer = self.deferral(self.names("st{k}", "pcache[j]"))
        self.header()
        e("    rows = 1")
        e("    for d in range(nd):")
        e("        rows *= shape[d]")
        e("    ntask = (rows + per_task - 1) // per_task")
        self.tasks()
        consts: dict[str, str] = {}  # the sum and max passes' float constants, defined per task
        mark = len(self.L)
        self.scratch("        ", "{lanes}", "max(n, 1)")
        e("        r1 = min(rows, (t + 1) * per_task)")
        e("        for r in range(t * per_task, r1):")
        I = "            "
        for j in range(self.ns):
            e(f"{I}g{j} = 0")
        e(f"{I}ci = 0")
        self.row_offsets(I, "r", [j for j in range(self.ns) if self.kinds[j] != "col"], "g",
                         p.causal)
        self.pointers(I)
        self.next_row_pointers(I)
        if p.causal:  # lanes beyond the row's v elements would only combine identities
            e(f"{I}v = min(n, ci + n - shape[nd - 1] + 1)")
            e(f"{I}lv = 1")
            e(f"{I}while lv < v and lv < lp:")
            e(f"{I}    lv *= 2")
        else:
            e(f"{I}v = n")
            e(f"{I}lv = lp")
        names = self.names("st{k}", "pcache[j]")
        if self.defer and p.cached is not None:  # this row's half of the two scratch rows
            e(f"{I}pcache = address_as_pointer(cbase + (r & 1 if n <= {_DEFER_MAX} else 0) * max(n, 1) * "
              f"{DTYPE_BYTES[p.cached.dtype]}, {NP[p.cached.dtype]})")
        k0 = 0
        for s, stage in enumerate(p.stages):
            roots = [r.expr for r in stage]
            roots, inames = self.hoisted(I, roots, names, f"h{s}_")
            ks = range(k0, k0 + len(stage))
            maxes = [k for k in ks if self.reds[k].op == "max"]
            J = I
            loaded = self.vector_max_slot(s, stage, roots)
            if loaded is not None:  # the lane order only where it decides: see row_max_f32
                j = loaded
                tag = _ROW_TAG[self.slots[j].dtype]
                e(f"{I}st{k0} = {_const(0.0, 'f32')}")
                e(f"{I}nan{k0} = {_const(1.0, 'f32')}")
                e(f"{I}if v >= {_ROW_MAX_MIN}:")
                e(f"{I}    mr = row_max_{tag}(s{j} + g{j} * {self.isz[j]}, v)")
                e(f"{I}    st{k0} = mr[0]")
                e(f"{I}    nan{k0} = mr[1]")
                e(f"{I}if nan{k0} != 0 or st{k0} == 0:")
                J = I + "    "
            summed = self.vector_sum_slot(s, stage, roots)
            if summed is not None:  # whole chunks lane block by lane block: see row_sum_f16
                j, square = summed
                self.single_chunk(J, s, stage, k0, roots, inames, consts)
                e(f"{J}else:")
                e(f"{J}    nfull = v // lp")
                e(f"{J}    row_sum{'sq' if square else ''}_{_ROW_TAG[self.slots[j].dtype]}("
                  f"s{j} + g{j} * {self.isz[j]}, nfull, lp, acc{k0}_at)")
                e(f"{J}    for l in range(v - nfull * lp):")
                K = J + "        "
                e(f"{K}j = nfull * lp + l")
                outs = self.elements(K, s, stage, roots, inames, consts, f"s{s}_")
                e(f"{K}acc{k0}[l] = {self.combine(k0, f'acc{k0}[l]', outs[0])}")
            elif s != self.prefetch_stage():
                self.single_chunk(J, s, stage, k0, roots, inames, consts)
                e(f"{J}else:")
                self.chunk_loop(J + "    ", s, stage, k0, roots, inames, consts)
            else:
                self.single_chunk(J, s, stage, k0, roots, inames, consts, prefetch=True)
                e(f"{J}else:")
                self.chunk_loop(J + "    ", s, stage, k0, roots, inames, consts)
            for k in ks:
                self.halve(J, k, f"res{k}" if k in maxes else f"acc{k}")
            if self.defer and s == self.prefetch_stage():
                self.deferred_rest(J)
            k0 += len(stage)
        self.L[mark:mark] = constant_definitions("        ", consts)
        self.row_outputs(I, names)
        self.stat_outputs(I, "", "0")
        if p.cached is not None:
            # the passes reach the scratch row through pcache only: this use keeps ``cache``
            # alive (Numba frees an array after its last use in the function's IR)
            e("        cache[0] = cache[0]")
        for k, r in enumerate(self.reds):  # the maxima's lanes, reached through pointers too
            if r.op == "max":
                e(f"        acc{k}[0] = acc{k}[0]")
        if self.stream:  # once per task: the rows' non-temporal stores drain meanwhile
            e("        if cfg:")
            e("            sfence()")

    def vector_max_slot(self, s: int, stage, roots) -> int | None:
        """The slot whose row a stage takes the plain maximum of (``m.max(x)``, softmax's first
        pass), read along a unit-stride axis in float32/fp16/bf16: that stage runs as
        ``row_max_<dtype>`` (explicit vectors) and keeps the lane order for the rows where it
        decides the bits, a zero maximum (its sign) or a NaN (its payload), and for rows shorter
        than one 16-lane vector (``_ROW_MAX_MIN``). Same bits; softmax
        4096 x 4096 one thread, rows in L2: float32 0.409 -> 0.375 ns an element, fp16 0.363
        -> 0.343, bf16 0.412 -> 0.394 (from memory 5-8%)."""
        if (self.kind != "row" or len(stage) != 1 or stage[0].op != "max" or stage[0].cached
                or stage[0].dtype != "f32" or s == self.prefetch_stage()):
            return None
        root = roots[0]
        if root.op != "input" or root.args[0] >= self.p.nelem:
            return None
        j = self.slot_of_load[root.args[0]]
        if self.pattern[j] != "1" or self.slots[j].dtype not in _ROW_TAG:
            return None
        return j

    def vector_sum_slot(self, s: int, stage, roots) -> tuple[int, bool] | None:
        """(slot, squared) when a stage is one sum of a loaded fp16/bf16 operand or of its square
        (layer_norm's mean, rms_norm's sum of squares) along a unit-stride axis: its whole chunks
        run as ``row_sum[sq]_<dtype>`` (the same lanes in the same order, held in vectors), the
        last partial chunk and short rows as before. float32 rows keep the lanes (no gain)."""
        if (self.kind != "row" or len(stage) != 1 or stage[0].op != "sum" or stage[0].cached
                or stage[0].dtype != "f32" or s == self.prefetch_stage()):
            return None
        root, square = roots[0], False
        if root.op == "mul" and root.args[0] is root.args[1]:
            root, square = root.args[0], True
        if root.op != "input" or root.args[0] >= self.p.nelem:
            return None
        j = self.slot_of_load[root.args[0]]
        if self.pattern[j] != "1" or self.slots[j].dtype not in (DType.F16, DType.BF16):
            return None
        return j, square

    def chunk_loop(self, I: str, s: int, stage, k0: int, roots, inames: list[str],
                   consts: dict[str, str]) -> None:
        """Stage ``s`` over a row of any length: its lanes start as identities and take the
        row chunk by chunk (L elements each), in the order the contract fixes. Sum stages take
        their whole chunks first (:meth:`whole_chunks`)."""
        e = self.e
        ks = range(k0, k0 + len(stage))
        maxes = [k for k in ks if self.reds[k].op == "max"]
        for k in ks:
            e(f"{I}for l in range(lv):")
            e(f"{I}    acc{k}[l] = {self.identity(k)}")
        start = "0"
        if self.kind == "row" and not maxes:
            self.whole_chunks(I, s, stage, k0, roots, inames, consts)
            start = "cp"
        e(f"{I}for c0 in range({start}, v, lp):")
        self.max_chunks(I + "    ", maxes, "start")
        if s == self.prefetch_stage():
            # blocks of the chunk, each first asking for its lines of the next row: the
            # same lanes in the same order
            e(f"{I}    m = min(lp, v - c0)")
            J = self.prefetched_blocks(I + "    ", ks, "m", _BLOCK, f"min(c0 + b0 + {_BLOCK}, v)",
                                       f"min({_BLOCK}, m - b0)")
            acc = "pa{k}"
        else:
            e(f"{I}    for l in range(min(lp, v - c0)):")
            J = I + "        "
            e(f"{J}j = c0 + l")
            acc = "acc{k}"
        outs = self.elements(J, s, stage, roots, inames, consts, f"s{s}_")
        for i in range(len(stage)):
            k = k0 + i
            if k in maxes:
                e(f"{J}dst{k}[l] = {self.combine(k, f'src{k}[l]', outs[i])}")
            else:
                a = acc.format(k=k)
                e(f"{J}{a}[l] = {self.combine(k, f'{a}[l]', outs[i])}")
        self.max_chunks(I + "    ", maxes, "end")
        self.max_chunks(I, maxes, "result")

    def whole_chunks(self, I: str, s: int, stage, k0: int, roots, inames: list[str],
                     consts: dict[str, str]) -> None:
        """A sum stage's whole chunks (up to ``cp``), before a partial last one. The pass that
        prefetches (softmax's exp) sweeps them one at a time (:meth:`chunk_sweep`), in two
        versions where a row may be deferred (a check per block cost in-place logsoftmax
        5-10%); other sum passes take them two at a time (:meth:`chunk_pairs`)."""
        e = self.e
        if s != self.prefetch_stage():
            e(f"{I}cp = v - v % (2 * lp)")
            self.chunk_pairs(I, s, stage, k0, roots, inames, consts)
            return
        e(f"{I}cp = v - v % lp")
        if self.defer is None:
            self.chunk_sweep(I, s, stage, k0, roots, inames, consts, False)
            return
        e(f"{I}if dq != 0:")
        if self.defer.read is not None:  # see deferred_block
            o, i = self.defer.outs_j[0], self.defer.read
            e(f"{I}    drot = ((2048 - ((pointer_address(dp{o}) - pointer_address(q{i})) "
              f"& 4095)) & 4095) // 4 // {_PAIR_BLOCK} * {_PAIR_BLOCK}")
        self.chunk_sweep(I + "    ", s, stage, k0, roots, inames, consts, True)
        e(f"{I}else:")
        self.chunk_sweep(I + "    ", s, stage, k0, roots, inames, consts, False)

    def chunk_sweep(self, I: str, s: int, stage, k0: int, roots, inames: list[str],
                    consts: dict[str, str], deferred: bool) -> None:
        """The prefetching pass over the whole chunks one at a time, in blocks of _PAIR_BLOCK
        that first ask for the next row's lines, each followed by a block of the deferred row
        where ``deferred`` (see deferral). Against two chunks at a time (:meth:`chunk_pairs`),
        same bits, AMD EPYC Zen 4, 2026-11-29, same process: with a deferred row softmax float32
        (4096, 4096) -7 to -8%, logsoftmax -7 to -10% (the C probe: 3.92 against 4.29 ms);
        without, (8192, 2048) -6 to -9%, fp16 -1%, bf16 -3%, logsoftmax fp16 -2%, (1024,
        50257) -2%."""
        e = self.e
        ks = range(k0, k0 + len(stage))
        e(f"{I}for c0 in range(0, cp, lp):")
        J = self.prefetched_blocks(I + "    ", ks, "lp", _PAIR_BLOCK, f"c0 + b0 + {_PAIR_BLOCK}",
                                   str(_PAIR_BLOCK))
        outs = self.elements(J, s, stage, roots, inames, consts, f"s{s}_")
        for i, o in enumerate(outs):
            lane = f"pa{k0 + i}"
            e(f"{J}{lane}[l] = {self.combine(k0 + i, f'{lane}[l]', o)}")
        if deferred:
            self.deferred_block(I + "        ")

    def chunk_pairs(self, I: str, s: int, stage, k0: int, roots, inames: list[str],
                    consts: dict[str, str]) -> None:
        """A sum stage's whole chunks two at a time (up to ``cp``): lane l takes element c0 + l
        and then c0 + L + l, ``(a[l] + x) + y``, the same additions in the same order as two
        chunk sweeps, with half the lanes' loads and stores. Zen 4 stores one 256-bit half a
        cycle: the lanes' store was a third of softmax's exp pass beyond the exp (before that
        pass became :meth:`chunk_sweep`'s blocks)."""
        e = self.e
        e(f"{I}for c0 in range(0, cp, 2 * lp):")
        e(f"{I}    for l in range(lp):")
        J, first, acc = I + "        ", "c0 + l", "acc{k}"
        e(f"{J}j = {first}")
        a_outs = self.elements(J, s, stage, roots, inames, consts, f"s{s}_")
        for i, a in enumerate(a_outs):  # kept apart from the second element's loads: a sum
            e(f"{J}s{s}a_{i} = {a}")    # of the elements themselves is a load (``x0``)
        a_outs = [f"s{s}a_{i}" for i in range(len(a_outs))]
        e(f"{J}j = {first} + lp")
        b_outs = self.elements(J, s, stage, roots, inames, consts, f"s{s}p_")
        for i, (a, b) in enumerate(zip(a_outs, b_outs)):
            lane = acc.format(k=k0 + i)
            e(f"{J}{lane}[l] = {self.combine(k0 + i, self.combine(k0 + i, f'{lane}[l]', a), b)}")

    def prefetched_blocks(self, I: str, ks, extent: str, block: int, ahead: str,
                          count: str) -> str:
        """Blocks of a chunk (from ``c0``), each first asking for the next row's lines up to
        ``ahead``, then ``count`` elements ``j`` with their lanes at ``pa<k>``; returns the
        element loop's indentation."""
        e = self.e
        e(f"{I}for b0 in range(0, {extent}, {block}):")
        self.prefetch_next(I + "    ", "c0 + b0", ahead)
        self.block_lanes(I + "    ", ks)
        e(f"{I}    for l in range({count}):")
        e(f"{I}        j = c0 + b0 + l")
        return I + "        "

    def block_lanes(self, I: str, ks) -> None:
        """``pa<k>``: the lanes of a block at b0. Through pointers: ``acc[b0 + l]`` would be an
        index the compiler cannot prove >= 0 (wrapped, so gathered and scattered, not
        vectorised). (Sums only: see prefetch_stage.)"""
        for k in ks:
            if self.reds[k].op != "max":
                T = NP[self.reds[k].dtype]
                isz = 8 if self.reds[k].dtype == "f64" else 4
                self.e(f"{I}pa{k} = address_as_pointer(acc{k}_at + b0 * {isz}, {T})")

    def elements(self, J: str, s: int, stage, roots, inames: list[str], consts: dict[str, str],
                 prefix: str) -> list[str]:
        """Element j of stage ``s``: its loads, its values (returned names), the cached row."""
        self.loads(J, _used(roots, self.p.nelem), lambda j: True)
        lines, outs = self.render(roots, inames, prefix, consts)
        for line in lines:
            self.e(J + line)
        for i, r in enumerate(stage):
            if r.cached:
                self.e(f"{J}pcache[j] = {outs[i]}")
        return outs

    def single_chunk(self, I: str, s: int, stage, k0: int, roots, names: list[str],
                     consts: dict[str, str], prefetch: bool = False) -> None:
        """Stage ``s`` of a row of at most L elements (``if v <= lp:``, one chunk): each lane
        holds at most one element, so the lanes take the elements themselves and identities
        after them (``identity op x`` is x bit for bit: -0.0 + x and max(-inf, x)), without the
        chunk loop's identity fill, pointers and divisions. Short rows (softmax over 16-64
        columns) spent most of their time in those. ``prefetch`` (the prefetching pass): in
        blocks that first ask for the next row's lines (streamed rows up to 1024 long, which
        took the chunk loop until 2026-11-29: softmax (16384, 1024) -10 to -14%)."""
        e, p = self.e, self.p
        J = I + "        "
        e(f"{I}if v <= lp:")
        if prefetch:
            e(f"{I}    for b0 in range(0, v, {_BLOCK}):")
            self.prefetch_next(J, "b0", f"min(b0 + {_BLOCK}, v)")
            e(f"{J}for j in range(b0, min(b0 + {_BLOCK}, v)):")
            outs = self.elements(J + "    ", s, stage, roots, names, consts, f"f{s}_")
            for i in range(len(stage)):
                e(f"{J}    acc{k0 + i}[j] = {outs[i]}")
        else:
            e(f"{I}    for l in range(v):")
            e(f"{J}j = l")
            self.loads(J, _used(roots, p.nelem), lambda j: True)
            lines, outs = self.render(roots, names, f"f{s}_", consts)
            for line in lines:
                e(J + line)
            for i, r in enumerate(stage):
                e(f"{J}acc{k0 + i}[l] = {outs[i]}")
                if r.cached:
                    e(f"{J}pcache[j] = {outs[i]}")
        e(f"{I}    for l in range(v, lv):")
        for k in range(k0, k0 + len(stage)):
            e(f"{J}acc{k}[l] = {self.identity(k)}")
        for k in range(k0, k0 + len(stage)):
            if self.reds[k].op == "max":  # the lanes the halving reads (see max_chunks)
                e(f"{I}    res{k} = address_as_pointer(acc{k}_at, {NP[self.reds[k].dtype]})")

    def identity(self, k: int) -> str:
        return _const(IDENTITY[self.reds[k].op], self.reds[k].dtype)

    def max_chunks(self, I: str, maxes: list[int], part: str) -> None:
        """A maximum's lanes alternate between the two halves of ``acc<k>``: chunk c reads
        ``src<k>`` and writes ``dst<k>``. Updated in place (``a[l] = max(a[l], x)``), LLVM turns
        the update into a store of x where x wins, vectorised as a masked store
        (``vmaskmovps``), which AMD Zen CPUs run in microcode: the max pass of a 4096 x 4096
        float32 softmax took 3.8 of its 14.8 ms on an EPYC. Same operations, same order.
        ``part``: 'start' (pointers for chunk ``c0``), 'end' (lanes past a short chunk carried
        over), 'result' (``res<k>``: the half holding the lanes after the last chunk)."""
        e = self.e
        for k in maxes:
            T = NP[self.reds[k].dtype]
            isz = 8 if self.reds[k].dtype == "f64" else 4
            if part == "start":
                e(f"{I}o{k} = ((c0 // lp) & 1) * lp * {isz}")
                e(f"{I}src{k} = address_as_pointer(acc{k}_at + o{k}, {T})")
                e(f"{I}dst{k} = address_as_pointer(acc{k}_at + lp * {isz} - o{k}, {T})")
            elif part == "end":
                e(f"{I}for l in range(min(lp, v - c0), lv):")
                e(f"{I}    dst{k}[l] = src{k}[l]")
            else:
                e(f"{I}res{k} = address_as_pointer(acc{k}_at + "
                  f"(((v + lp - 1) // lp) & 1) * lp * {isz}, {T})")

    def halve(self, I: str, k: int, a: str) -> None:
        """The lanes of reduction k, in the array ``a``, halve pairwise (lane l takes l + h,
        h = L/2, L/4, ... 1), two levels per sweep: ``(a[l] . a[l+h]) . (a[l+q] . a[l+h+q])``
        with q = h/2 is the same operations in the same order as two sweeps, with half the
        loads and stores. It starts at ``lv`` lanes: a causal row's lanes from lv on would hold
        identities, and combining an identity (-0.0 for sums, -inf for max) leaves every
        value's bits as they are. Sets ``st<k>``, the reduction's value. A sum's last
        _LANES_SUM_MAX lanes halve in registers (``intrinsics.lanes_sum_*``, the same additions
        in the same order). AMD EPYC Zen 3, 2026-11-29, kernels before and after alternating
        in one process, 2 threads, same bits: softmax (16384, 32) float32 445 -> 396 us, float16
        402 -> 337, float64 926 -> 860, (32768, 16) float32 834 -> 775, bfloat16 (8192, 100) 657
        -> 621, float32 (65536, 128) 3.76 -> 3.60 ms, (4096, 4096) 6.05 -> 5.99."""
        e = self.e
        pair = self.combine(k, self.combine(k, f"{a}[l]", f"{a}[l + h]"),
                            self.combine(k, f"{a}[l + q]", f"{a}[l + h + q]"))
        if self.reds[k].op == "sum":
            e(f"{I}m = lv")
            e(f"{I}while m > {_LANES_SUM_MAX}:")
            e(f"{I}    h = m >> 1")
            e(f"{I}    q = h >> 1")
            e(f"{I}    for l in range(q):")
            e(f"{I}        {a}[l] = {pair}")
            e(f"{I}    m = q")
            e(f"{I}st{k} = lanes_sum_{self.reds[k].dtype}({a}_at, m)")
            return
        e(f"{I}h = lv >> 1")
        e(f"{I}while h > 1:")
        e(f"{I}    q = h >> 1")
        e(f"{I}    for l in range(q):")
        e(f"{I}        {a}[l] = {pair}")
        e(f"{I}    h >>= 2")
        e(f"{I}if h == 1:")
        e(f"{I}    {a}[0] = {self.combine(k, f'{a}[0]', f'{a}[1]')}")
        e(f"{I}st{k} = {a}[0]")

    def deferral(self, names: list[str]) -> _Deferral | None:
        """Whether a streamed row's outputs wait for the next row (same task): softmax's output
        pass only scales the scratch row, logsoftmax's subtracts from the input row (in L2 by
        then), so their non-temporal stores can run inside the next row's exp pass, a block of
        them after each block of exps, and drain while the exps compute instead of after them.
        Softmax's two scratch rows alternate; the exp pass takes whole chunks one at a time then
        (:meth:`chunk_sweep`). Same operations, same bits. A C probe of the same loops (AMD EPYC
        Zen 4, 2026-11-29, (4096, 4096) float32, contract order): 4.26 -> 3.80 ms, 3.98 ->
        3.36; ours against the kernels before, alternating in one process: softmax -7 to -16%
        (in place -20%), logsoftmax -10 to -11%, (1024, 16384) -15 to -18%.

        For a row kind with streamed 4-byte outputs that read only the cached row, per-row
        values and dense row inputs, whose last pass is the prefetching sum pass
        (``prefetch_stage``); the rows that qualify are decided per row (:meth:`row_outputs`:
        aligned, not the task's last, at least _DEFER_MIN chunks, and for outputs that read
        an input, not where the deferred loop's stores would alias its loads). fp16/bf16
        softmax rows (their exp compute-bound) were slower deferred: 2.90 -> 3.07 ms and 4.43
        -> 5.87."""
        p = self.p
        if not (self.kind == "row" and self.stream and not p.causal):
            return None
        last = self.prefetch_stage()
        if last is None or last != len(p.stages) - 1:
            return None
        outs_j = [j for j in range(self.ns) if self.slots[j].store is not None
                  and self.kinds[j] == "row"]
        if not outs_j or any(self.isz[j] != 4 for j in outs_j):
            return None
        roots = [p.results[self.slots[j].store] for j in outs_j]
        inv, per_element = hoist(roots, lambda k: k < p.nelem or k == p.cache, len(names))
        inputs = {k: self.slot_of_load[k] for k in sorted(_used(per_element, p.nelem))}
        if any(self.kinds[j] != "row" or self.pattern[j] != "1" for j in inputs.values()):
            return None
        _, hoisted = self.render(inv, names, "ho_")
        state = [(f"st{k}", NP[r.dtype]) for k, r in enumerate(self.reds)]
        state += [(h, NP[x.dtype]) for h, x in zip(hoisted, inv)]
        renamed = {name: f"df_{name}" for name, _ in state} | {"pcache[j]": "dcache[j]"}
        dnames = [renamed.get(n, n) for n in names + hoisted]
        text = "\n".join(sum(self.render(per_element, dnames, "dv_"), []))
        state = [(name, t) for name, t in state if re.search(rf"\bdf_{name}\b", text)]
        reads = [self.slot_of_load[k] for k in
                 sorted(_used([r.expr for r in p.stages[last]], p.nelem))]
        read = next((j for j in reads if self.pattern[j] == "1"), None)
        return _Deferral(outs_j, per_element, dnames, state, read, inputs)

    def deferred_stores(self, I: str, rng: str, prefix: str, stream: bool = True) -> None:
        """Store the deferred row's outputs at ``j`` in range ``rng`` (non-temporally where
        ``stream``)."""
        d, e = self.defer, self.e
        e(f"{I}for j in range({rng}):")
        for k, j in d.inputs.items():  # the deferred row's own elements (from L2)
            e(f"{I}    x{k} = {_load(self.slots[j].dtype, f'dpi{j}[j]')}")
        lines, outs = self.render(d.roots, d.names, prefix)
        for line in lines:
            e(f"{I}    {line}")
        for j, o, r in zip(d.outs_j, outs, d.roots):
            v = _store(self.slots[j].dtype, o, r.dtype)
            e(f"{I}    nt_store(dp{j}, j, {v})" if stream else f"{I}    dp{j}[j] = {v}")

    def deferred_block(self, I: str) -> None:
        """After a block of the exp pass: the deferred row's block at the same place in its
        chunk, turned by ``drot`` elements (whole blocks) so that its stores sit ~2 KB (mod 4
        KB) from the loads of the blocks that follow: in a C probe, output rows 64-320 bytes
        (mod 4 KB) past the input's took 3.5-3.6 ms unturned, 3.2-3.4 turned."""
        e = self.e
        e(f"{I}db = c0 + ((b0 + drot) & (lp - 1))")
        self.deferred_stores(I, f"db, db + {_PAIR_BLOCK}", "dv_")

    def deferred_rest(self, I: str) -> None:
        """After the exp pass: the deferred row's elements past its whole chunks (whole lines
        streamed, the last partial line stored), then no row is deferred."""
        e = self.e
        e(f"{I}if dq != 0:")
        e(f"{I}    dwords = v // 16 * 16")
        self.deferred_stores(I + "    ", "cp, dwords", "dr_")
        self.deferred_stores(I + "    ", "dwords, v", "dt_", stream=False)
        e(f"{I}    dq = 0")

    def prefetched(self) -> list[int]:
        """The slots the first pass reads along a unit-stride axis, when the last pass streams:
        the last pass asks for their next row's lines (``prefetch``), so that reading it from
        memory overlaps the current row's stores instead of following them."""
        if not (self.stream and self.p.stages):
            return []
        used = _used([r.expr for r in self.p.stages[0]], self.p.nelem)
        return sorted(j for j in (self.slot_of_load[k] for k in used)
                      if self.kinds[j] == "row" and self.pattern[j] == "1")

    def prefetch_stage(self) -> int | None:
        """The pass that asks for the next row's lines (:meth:`prefetched`): the heaviest of the
        sum passes after the first (which reads the row from memory) when it outweighs the
        output pass, else (None) the output pass. Its compute then overlaps the next row's
        reads. Measured on an AMD EPYC (Zen 4), 2026-11-27, (4096, 4096) softmax: a C probe
        with the same exp 7.2 ms without prefetches, 5.3 with them in the output pass, 4.2 in
        the exp pass; ours, the two kernels alternating in one process, same bits: float32
        7.24 -> 5.68 and 6.35 -> 4.82 ms, float16 5.20 -> 4.74, causal_softmax (32, 2048, 2048)
        float32 33.4 -> 29.9, float16 31.4 -> 29.9; bfloat16 (rounding-bound) within noise.
        Weights count the values computed per element only: logsoftmax's log of the sum (40
        operations, once a row) made its output pass look heavier than its exp pass; float32
        (4096, 4096) 4.1-4.7 -> 3.4 ms once the exp pass prefetched (2026-11-28)."""
        if not self.prefetched():
            return None
        p = self.p

        def weight(roots) -> int:  # per element: the values computed once a row do not count
            return len(topo(hoist(roots, lambda k: k < p.nelem or k == p.cache, 1 << 20)[1]))

        stages = [weight([r.expr for r in stage]) for stage in p.stages]
        out = [p.results[sl.store] for j, sl in enumerate(self.slots)
               if sl.store is not None and self.kinds[j] == "row"]
        sums = [s for s in range(1, len(stages)) if all(r.op == "sum" for r in p.stages[s])]
        best = max(sums, key=stages.__getitem__, default=None)
        return best if best is not None and stages[best] > weight(out) else None

    def prefetch_next(self, I: str, lo: str, hi: str) -> None:
        """Ask for the next row's lines of elements [lo, hi) of :meth:`prefetched`'s slots. The
        last row of a task asks too: the pool hands a thread adjacent tasks, so the next row is
        usually its next one (AMD EPYC Zen 4, 2026-11-27, 8-row tasks, same bits: rms_norm
        float32 (2048, 4096) 1.62 -> 1.47 ms, softmax float32 (4096, 4096) 5.56 -> 5.30)."""
        e, pf = self.e, self.prefetched()
        if not pf:  # (an operator without reductions reads nothing ahead: no empty ``if``)
            return
        e(f"{I}if r + 1 < rows:")
        for j in pf:
            e(f"{I}    for jp in range({lo}, {hi}, {64 // self.isz[j]}):")
            # 4-byte and wider rows into L2 only: measured on an AMD EPYC (Zen 4, 2026-11-27),
            # float32 rms_norm (2048, 4096) 2.3-2.9 -> 1.6-1.9 ms, causal_softmax (32, 2048,
            # 2048) 57-62 -> 43-47, softmax within noise; 2-byte rows neither gained nor
            # lost clearly (bf16 rms_norm lost in 7 of 9 runs), so they keep L1
            fn = "prefetch_l2" if self.isz[j] >= 4 else "prefetch"
            e(f"{I}        {fn}(qn{j}, jp)")

    def row_offsets(self, I: str, row: str, slots: list[int], g: str, causal: bool = False):
        """``<g><j>`` (0 before) = the element offset of row ``row`` in each of ``slots`` (and
        ``ci``, the row's index in its matrix, when ``causal``): one multiply where the rows
        span a single dimension (the usual case; a short-row call has many rows), else the
        row's index digits by division (two integer divisions per dimension)."""
        e = self.e
        e(f"{I}if nd == 1:")
        for j in slots:
            e(f"{I}    {g}{j} = ({row}) * strides[{j}, 0]")
        if causal:
            e(f"{I}    ci = ({row})")
        e(f"{I}else:")
        e(f"{I}    rem = ({row})")
        e(f"{I}    for d in range(nd - 1, -1, -1):")
        e(f"{I}        ext = shape[d]")
        e(f"{I}        idx = rem % ext")
        e(f"{I}        rem //= ext")
        for j in slots:
            e(f"{I}        {g}{j} += idx * strides[{j}, d]")
        if causal:
            e(f"{I}        if d == nd - 1:")
            e(f"{I}            ci = idx")

    def next_row_pointers(self, I: str) -> None:
        e = self.e
        pf = self.prefetched()
        if not pf:
            return
        for j in pf:
            e(f"{I}gn{j} = 0")
        self.row_offsets(I, "r + 1", pf, "gn")
        for j in pf:
            e(f"{I}qn{j} = address_as_pointer(s{j} + gn{j} * {self.isz[j]}, np.{self.st[j]})")

    def row_outputs(self, I: str, names: list[str]) -> None:
        """The last pass: every element of the row outputs. A causal row's elements from ``v``
        on are 0 (selected in the same loops, so that they stream too)."""
        p, e = self.p, self.e
        outs_j = [j for j in range(self.ns) if self.slots[j].store is not None
                  and self.kinds[j] == "row"]
        roots = [p.results[self.slots[j].store] for j in outs_j]
        before = len(names)
        roots, names = self.hoisted(I, roots, names, "ho_")
        if self.finite_rows:
            row_values = names[p.nelem:p.nelem + len(self.reds)] + names[before:]
            e(f"{I}row_finite = cols_finite" + "".join(f" and ({v} - {v}) == 0" for v in row_values))
        used = _used(roots, p.nelem)
        end = "n" if p.causal else "v"

        def values(J: str, prefix: str, words=(), lane: int = 0, masked: bool = True,
                   only: list[int] | None = None, finite: bool = False) -> list[str]:
            """Emit one element's outputs at ``J`` (``j`` set); their stored values. The slots
            in ``words`` are read from ``wd<j>``, the 32-bit word holding this element as its
            ``lane`` (see ``paired``). ``masked``: a causal row's elements from v on are 0.
            ``only``: the positions in ``outs_j`` to compute (all by default). ``finite``: in
            a ``row_finite`` row (no NaN to round)."""
            pick = range(len(roots)) if only is None else only
            rs = [roots[i] for i in pick]
            reads = used if only is None else _used(rs, p.nelem)
            self.loads(J, reads, lambda j: j not in words)
            for k in sorted(reads):
                j = self.slot_of_load[k]
                if j in words:
                    e(f"{J}x{k} = {bf16_lane(f'wd{j}', lane)}")
            lines, outs = self.render(rs, names, prefix)
            for line in lines:
                e(J + line)
            if p.causal and masked:  # selected here: ``j`` moves on before a packed word is stored
                for i, (o, r) in enumerate(zip(outs, rs)):
                    e(f"{J}{prefix}m{i} = {o} if j < v else {_const(0, r.dtype)}")
                outs = [f"{prefix}m{i}" for i in range(len(outs))]
            return [_store(self.slots[outs_j[i]].dtype, o, r.dtype, finite)
                    for i, o, r in zip(pick, outs, rs)]

        def loop(indent: str, rng: str, masked: bool = True, finite: bool = False) -> None:
            e(f"{indent}for j in range({rng}):")
            for j, value in zip(outs_j, values(indent + "    ", "o_", masked=masked,
                                               finite=finite)):
                e(f"{indent}    q{j}[{self.index(j)}] = {value}")

        dense = {self.slot_of_load[k] for k in used} - {j for j in range(self.ns)
                                                         if self.pattern[j] == "0"}
        pairs = (self.kind == "row" and not p.causal and not is_heavy(roots) and all(
            self.slots[j].dtype is DType.BF16 and self.pattern[j] == "1"
            for j in outs_j + sorted(dense)))

        def paired(indent: str) -> None:
            """The whole row, two elements per 32-bit word of each bf16 operand and output (a
            shift and a mask, no deinterleaving; see elementwise_kernels' ``bf16_pairs``), for
            light epilogues: (256, 4096) bfloat16 rms_norm 198-209 -> 157-167 us, layer_norm
            416-431 -> 367-407; softmax was 2-4% slower, causal_softmax 22-37% (its mask's
            select per lane), so those keep element loads."""
            for j in outs_j + sorted(dense):
                base = f"s{j}" if self.kinds[j] == "col" else f"s{j} + g{j} * 2"
                e(f"{indent}pw{j} = address_as_pointer({base}, np.uint32)")

            def words(P: str, finite: bool) -> None:
                e(f"{P}for i in range({end} // 2):")
                for j in sorted(dense):
                    e(f"{P}    wd{j} = pw{j}[i]")
                lanes = []
                for u in range(2):
                    e(f"{P}    j = 2 * i + {u}")
                    lanes.append(values(P + "    ", f"o{u}_", dense, u, finite=finite))
                for n, j in enumerate(outs_j):
                    e(f"{P}    pw{j}[i] = {packed_word([lane[n] for lane in lanes], 16)}")

            self.finite_or_not(indent, words)
            loop(indent, f"{end} // 2 * 2, {end}")

        if self.stream:
            k = 4 // min(4, self.isz[0])
            e(f"{I}if cfg:")
            e(f"{I}    addr = s0 + g0 * {self.isz[0]}")
            e(f"{I}    head = ((64 - (addr & 63)) & 63) // {self.isz[0]}")
            e(f"{I}    if addr % {self.isz[0]} != 0 or head > {end}:")
            e(f"{I}        head = {end}")
            for j in outs_j[1:]:  # every streamed output shares the first one's alignment
                e(f"{I}    if (s{j} + g{j} * {self.isz[j]} - addr) & 63 != 0:")
                e(f"{I}        head = {end}")
            S = I + "    "
            if self.defer:  # stored during the next row's exp pass (see deferral)
                d = self.defer
                cond = f"head == 0 and r + 1 < r1 and {_DEFER_MIN} * lp <= v <= {_DEFER_MAX}"
                if d.inputs:  # not where the deferred loop's stores alias its loads
                    cond += f" and not ({self.aliasing_risk(outs_j)})"
                e(f"{S}if {cond}:")
                e(f"{S}    dq = 1")
                if p.cached is not None:
                    e(f"{S}    dcache = pcache")
                for j in outs_j:
                    e(f"{S}    dp{j} = q{j}")
                for j in sorted(set(d.inputs.values())):
                    e(f"{S}    dpi{j} = q{j}")
                for name, _ in self.defer.state:
                    e(f"{S}    df_{name} = {name}")
                e(f"{S}else:")
                S += "    "
            loop(S, "head")
            self.streamed(S, outs_j, end, k, values, sorted(dense) if pairs else None)
            loop(S, f"head + words * {k}, {end}")
            e(f"{I}else:")
            I += "    "
        same = self.in_place(outs_j)
        if p.causal:  # the row's v elements, then its zeros as they are (see masked_block)
            if same:  # see in_place; no select per element (see unmasked_block): (32, 128,
                # 128) float32 in place 1.5x the out-of-place time before, ~1.05x now (AMD EPYC
                # Zen 3, one process each tree, 301 alternating calls: 401 / 269 -> 343 / 324 us)
                e(f"{I}if {same}:")
                self.staged_rows(I + "    ", outs_j, "v", functools.partial(values, masked=False))
                e(f"{I}else:")
            self.finite_or_not(I + "    " * bool(same),
                               lambda J, finite: loop(J, "v", masked=False, finite=finite))
            e(f"{I}for j in range(v, n):")
            for j in outs_j:
                e(f"{I}    q{j}[{self.index(j)}] = np.{self.st[j]}(0)")
            return
        if same:  # see in_place
            e(f"{I}if {same}:")
            self.staged_rows(I + "    ", outs_j, end, values)
            e(f"{I}else:")
            I += "    "
        if pairs:
            paired(I)
        else:
            self.finite_or_not(I, lambda J, finite: loop(J, end, finite=finite))

    def streamed(self, I: str, outs_j: list[int], end: str, k: int, values,
                 word_loads: list[int] | None = None) -> None:
        """The whole cache lines of elements [head, end) of the row outputs (64-byte aligned at
        head) with non-temporal stores; the row's last, partial line is stored as the head is
        (a line written partly by non-temporal stores and partly by the next row's ordinary ones
        cost 2x: softmax (16384, 1024) float32 with NumPy's 16-byte aligned output 7.2 ms, 5.0
        with a 64-byte aligned one; AMD EPYC Zen 4, same process). ``words`` 32-bit words of k
        elements each (k = 1 for 4-byte outputs; bf16 ones are packed in pairs, fp16 ones
        stored as elements, :meth:`direct_block`). Blocks of _BLOCK elements: vector stores stay
        aligned to their size, and each block asks for the next row's lines of
        :meth:`prefetched`. ``word_loads`` (a light bf16 epilogue's dense bf16 operands, as
        ``paired`` reads them): rows whose operands start on a 32-bit word where the output's
        aligned part does read them as words, two lanes each, instead of deinterleaving
        element loads (AMD EPYC Zen 4, (2048, 4096), the two kernels alternating in one
        process, same bits: layer_norm 1.95 -> 1.91 and 2.93 -> 2.47 ms, add_rms_norm 2.07 ->
        1.89, rms_norm 0.88 -> 0.86; faster in 26, 27 and 17 of 30 rounds)."""
        e = self.e
        if k > 1:
            for j in outs_j:
                e(f"{I}w{j} = address_as_pointer(s{j} + (g{j} + head) * {self.isz[j]}, np.uint32)")
        line = 64 // self.isz[outs_j[0]]  # elements a cache line holds
        e(f"{I}words = ({end} - head) // {line} * {line // k}")
        split = len(outs_j) > 1 and not any(self.slots[j].dtype is DType.BF16 for j in outs_j)
        if split:  # two outputs' rows at one offset mod 4096 (see _store_loops)
            pairs = [(a, b) for n, a in enumerate(outs_j) for b in outs_j[n + 1:]]
            test = " or ".join(f"((pointer_address(q{a}) - pointer_address(q{b})) & 4095) == 0"
                               for a, b in pairs)
            e(f"{I}one_offset = {test}")
        if word_loads:  # bf16 operands read as words too where theirs start like the output's
            bases = {j: f"s{j}" if self.kinds[j] == "col" else f"s{j} + g{j} * 2" for j in word_loads}
            for j in word_loads:
                e(f"{I}pd{j} = address_as_pointer({bases[j]} + head * 2, np.uint32)")
            e(f"{I}pok = {' and '.join(f'(({bases[j]} + head * 2) & 3) == 0' for j in word_loads)}")
        e(f"{I}for i0 in range(0, words, {_BLOCK // k}):")
        if self.prefetch_stage() is None:
            self.prefetch_next(I + "    ", f"head + {k} * i0", f"min(head + {k} * i0 + {_BLOCK}, {end})")
        if self.p.causal:
            self.masked_block(I + "    ", outs_j, k)
        B = I + "    "
        risk = self.aliasing_risk(outs_j)
        if self.p.causal:  # see unmasked_block
            self.unmasked_block(B, outs_j, k, values, risk)
        if risk:  # see aliasing_risk
            e(f"{B}if {risk}:")
            self.staged_block(B + "    ", outs_j, k, values)
            e(f"{B}    continue")
        if split:  # see _store_loops
            e(f"{B}if one_offset:")
            self.block(B + "    ", outs_j, k, values, word_loads, split=True)
            e(f"{B}    continue")
        self.block(B, outs_j, k, values, word_loads)

    def unmasked_block(self, I: str, outs_j: list[int], k: int, values, risk: str) -> None:
        """A causal row's block that ends at or before its v elements: no element is masked,
        so the block's loop stores its values without selecting 0 past ``v`` (only a row's
        last partial block does). The select per element made the block loop 1.4-1.5x
        slower. AMD EPYC Zen 3, 2026-11-29, both generated kernels
        alternating in one process, same bits, medians: (4, 2048, 2048) one thread float32
        10.9 -> 7.9 ms, float16 10.6 -> 7.1, bfloat16 12.3 -> 9.6; (32, 2048, 2048) on the pool
        float32 69-70 -> 49-51, float16 44-47 -> 31-38, bfloat16 61 -> 45. In place (blocks
        staged, ``aliasing_risk``) likewise: (32, 2048, 2048) took 1.4x the time out of place,
        now the same (alternating processes, three rounds: float32 52-71 -> 37-45 ms, float16
        42-64 -> 31-55)."""
        e, J = self.e, I + "    "
        plain = functools.partial(values, masked=False)
        e(f"{I}if head + {k} * min(i0 + {_BLOCK // k}, words) <= v:")
        if risk:  # in place, or 4K aliasing: staged (see aliasing_risk)
            e(f"{J}if {risk}:")
            self.staged_block(J + "    ", outs_j, k, plain)
            e(f"{J}    continue")
        self.block(J, outs_j, k, plain, None)
        e(f"{J}continue")

    def block(self, B: str, outs_j: list[int], k: int, values, word_loads,
              split: bool = False) -> None:
        """One block of whole lines of the row outputs, stored non-temporally as computed; one
        loop an output where ``split`` (see :func:`_store_loops`)."""
        if k > 1 and all(self.slots[j].dtype is DType.F16 for j in outs_j):
            self.direct_block(B, outs_j, k, values, split)
            return
        self.finite_or_not(B, lambda J, finite: self.block_loops(
            J, outs_j, k, functools.partial(values, finite=finite), word_loads, split))

    def block_loops(self, B: str, outs_j: list[int], k: int, values, word_loads,
                    split: bool) -> None:
        e = self.e
        if word_loads:
            e(f"{B}if pok:")
            for only, js in _store_loops(outs_j, split):
                e(f"{B}    for i in range(i0, min(i0 + {_BLOCK // k}, words)):")
                J = B + "        "
                for jw in word_loads:
                    e(f"{J}wd{jw} = pd{jw}[i]")
                lanes = []
                for u in range(2):
                    e(f"{J}j = head + 2 * i + {u}")
                    lanes.append(values(J, f"p{u}_", word_loads, u, only=only))
                for n, j in enumerate(js):
                    e(f"{J}nt_store(w{j}, i, {packed_word([lane[n] for lane in lanes], 16)})")
            e(f"{B}    continue")
        for only, js in _store_loops(outs_j, split):
            e(f"{B}for i in range(i0, min(i0 + {_BLOCK // k}, words)):")
            J = B + "    "
            lanes = []
            for u in range(k):
                e(f"{J}j = head + {k} * i + {u}")
                lanes.append(values(J, f"o{u}_", only=only))
            for n, j in enumerate(js):
                if k == 1:
                    e(f"{J}nt_store(q{j}, j, {lanes[0][n]})")
                else:
                    e(f"{J}nt_store(w{j}, i, {packed_word([lane[n] for lane in lanes], 32 // k)})")

    def masked_block(self, I: str, outs_j: list[int], k: int) -> None:
        """A causal row's block that starts at or past its v elements: zeros, stored as they are
        (the block loop would compute each element and select 0). AMD EPYC Zen 4, generated
        kernels in one process, one thread, same bits: causal_softmax float16 (4096, 4096)
        5.22 -> 4.56 ms, (1024, 1024) 417 -> 384 us."""
        e = self.e
        e(f"{I}if head + {k} * i0 >= v:")
        e(f"{I}    for i in range(i0, min(i0 + {_BLOCK // k}, words)):")
        for j in outs_j:
            self.nt_word(I + "        ", j, k, "i", "np.uint32(0)", f"np.{self.st[j]}(0)")
        e(f"{I}    continue")

    def nt_word(self, I: str, j: int, k: int, i: str, word: str, element: str) -> None:
        """Store word ``i`` of row output j non-temporally: 32 bits of k packed elements
        (``w<j>``, from the row's aligned head) or, for k = 1, the element itself."""
        if k > 1:
            self.e(f"{I}nt_store(w{j}, {i}, {word})")
        else:
            self.e(f"{I}nt_store(q{j}, head + {i}, {element})")

    def in_place(self, outs_j: list[int]) -> str:
        """Generated condition: a row output starts where a row input of its element size does
        (updated in place). Such rows go through a stack chunk (``staged_rows``): with the same
        array behind two pointers, LLVM's overlap check sends the output loop to its scalar
        version (rms_norm (64, 1024) in place 2-5x, layer_norm 3-5x the time out of place; AMD
        EPYC Zen 4)."""
        sizes = {self.isz[j] for j in outs_j}
        reads = [j for j in range(self.ns) if self.slots[j].store is None
                 and self.kinds[j] == "row" and self.pattern[j] != "0" and self.isz[j] in sizes]
        return " or ".join(f"pointer_address(q{o}) == pointer_address(q{r})"
                           for o in outs_j for r in reads)

    def staged_rows(self, I: str, outs_j: list[int], end: str, values) -> None:
        """The row outputs a block at a time: computed into a stack chunk, then copied out with
        ordinary stores (see :meth:`in_place`)."""
        e = self.e
        e(f"{I}for b0 in range(0, {end}, {_BLOCK}):")
        B = I + "    "
        for j in outs_j:
            e(f"{B}sc{j} = stack_scratch({_BLOCK * self.isz[j]})")
            e(f"{B}sh{j} = address_as_pointer(sc{j}, np.{self.st[j]})")
        e(f"{B}cw = min({_BLOCK}, {end} - b0)")
        e(f"{B}for u in range(cw):")
        e(f"{B}    j = b0 + u")
        for j, v in zip(outs_j, values(B + "    ", "o_")):
            e(f"{B}    sh{j}[u] = {v}")
        e(f"{B}for u in range(cw):")
        e(f"{B}    j = b0 + u")
        for j in outs_j:
            e(f"{B}    q{j}[{self.index(j)}] = sh{j}[u]")

    def aliasing_risk(self, outs_j: list[int]) -> str:
        """The condition under which the streamed block would meet 4K aliasing (see
        elementwise_kernels' ``aliasing_risk``) or updates an input in place (bf16 rms_norm
        (4096, 4096) in place: 805 ms streamed straight, 2.3 staged): an output row starting
        1-80 bytes ahead of a unit-stride operand of its element size, mod 4096, or at it;
        such blocks are staged. Measured
        (AMD EPYC, 2 threads, (2048, 4096), input at 16 mod 4096): rms_norm bfloat16 1.40 ms at
        most offsets, 2.35 at 48 bytes ahead (staged: 1.88), 2.05 at 112; float32 1.39-1.45 vs
        1.85 at 48 (staged: 1.42) and 1.84 at 112. A window to 256 bytes also caught 112 but
        staged bf16 at 240 (1.40 -> 1.86), hence 80 as in the elementwise kernels."""
        size = self.isz[outs_j[0]]
        reads = [j for j in range(self.ns) if self.slots[j].store is None
                 and self.pattern[j] == "1" and self.isz[j] == size]
        return aliasing_test([f"q{o}" for o in outs_j], [f"q{r}" for r in reads])

    def direct_block(self, I: str, outs_j: list[int], k: int, values, split: bool) -> None:
        """One block of fp16 outputs stored non-temporally element by element as computed (F16C
        converts 16 lanes to one 256-bit store; LLVM 22 keeps such stores vectors), where no
        store would alias a load (``aliasing_risk``; those blocks are staged). Against staging
        every block (AMD EPYC Zen 4, 2026-11-29, old and new kernels alternating in one process,
        31 rounds, two runs, same bits; 2048 x 4096, softmax 4096 x 4096): layer_norm -17% /
        -18%, rms_norm 0 / -15%, add_rms_norm -2% / -14%, softmax -4% / -6%; compiled for AVX2
        (``NUMBA_CPU_NAME=haswell``) -13%, -2%, -6 to +2%, -5 to -7%. bf16 outputs this way
        (rounded in integer operations) were 4-17% slower than their packed words: they keep
        those."""
        e = self.e
        for j in outs_j:
            e(f"{I}h{j} = address_as_pointer(s{j} + (g{j} + head) * {self.isz[j]}, np.{self.st[j]})")
        e(f"{I}cw = min(i0 + {_BLOCK // k}, words) - i0")
        for only, js in _store_loops(outs_j, split):
            e(f"{I}for u in range(cw * {k}):")
            e(f"{I}    j = head + {k} * i0 + u")
            for j, v in zip(js, values(I + "    ", "o_", only=only)):
                e(f"{I}    nt_store(h{j}, {k} * i0 + u, {v})")

    def staged_block(self, I: str, outs_j: list[int], k: int, values) -> None:
        """One block of outputs computed into a stack chunk with ordinary stores, then streamed
        from L1 as words, as elementwise_kernels' ``staged_loop`` does: where stores straight
        from the compute loop would alias its loads (``aliasing_risk``). (fp16 blocks were all
        staged until 2026-11-29: on an AMD EPYC (AVX2) rms_norm (8192, 4096) 8.3 -> 5.9 ms
        against packed words; see :meth:`direct_block`.)"""
        e = self.e
        for j in outs_j:
            e(f"{I}sc{j} = stack_scratch({_BLOCK * self.isz[j]})")
            e(f"{I}sh{j} = address_as_pointer(sc{j}, np.{self.st[j]})")
            if k > 1:
                e(f"{I}sw{j} = address_as_pointer(sc{j}, np.uint32)")
        e(f"{I}cw = min(i0 + {_BLOCK // k}, words) - i0")

        def compute(C: str, finite: bool) -> None:
            e(f"{C}for u in range(cw * {k}):")
            e(f"{C}    j = head + {k} * i0 + u")
            for j, v in zip(outs_j, values(C + "    ", "o_", finite=finite)):
                e(f"{C}    sh{j}[u] = {v}")

        self.finite_or_not(I, compute)
        for j in outs_j:  # one stream a loop (see _store_loops; nothing to recompute here)
            e(f"{I}for i in range(cw):")
            self.nt_word(I + "    ", j, k, "i0 + i", f"sw{j}[i]", f"sh{j}[i]")

    def stat_outputs(self, I: str, sub: str, index: str) -> None:
        p, e = self.p, self.e
        outs_j = [j for j in range(self.ns) if self.kinds[j] == "stat"]
        if not outs_j:
            return
        roots = [p.results[self.slots[j].store] for j in outs_j]
        lines, outs = self.render(roots, self.names("st{k}" + sub, "0"), "z_")
        for line in lines:
            e(I + line)
        for i, j in enumerate(outs_j):
            e(f"{I}q{j}[{index.format(j=j)}] = {_store(self.slots[j].dtype, outs[i], roots[i].dtype)}")

    # -- col kind -----------------------------------------------------------------------------------
    def col_kernel(self) -> None:
        p, e = self.p, self.e
        self.header()
        e("    inner = shape[nd - 1]")
        e("    outer = 1")
        e("    for d in range(nd - 1):")
        e("        outer *= shape[d]")
        e("    cb = cfg")
        e("    nblk = (inner + cb - 1) // cb")
        e("    total = outer * nblk")
        e("    ntask = (total + per_task - 1) // per_task")
        for j in range(self.ns):
            if self.kinds[j] == "stat":
                e(f"    i{j} = strides[{j}, nd - 1]")
        self.tasks()
        self.scratch("        ", "({lanes}, cb)", "(max(n, 1), cb)")
        for k, r in enumerate(self.reds):
            e(f"        st{k} = np.empty(cb, {NP[r.dtype]})")
        e("        b1 = min(total, (t + 1) * per_task)")
        e("        for b in range(t * per_task, b1):")
        I = "            "
        e(f"{I}o = b // nblk")
        e(f"{I}c0 = (b - o * nblk) * cb")
        e(f"{I}cw = min(cb, inner - c0)")
        e(f"{I}rem = o")
        for j in range(self.ns):
            e(f"{I}g{j} = c0 * strides[{j}, nd - 1]")
        e(f"{I}for d in range(nd - 2, -1, -1):")
        e(f"{I}    ext = shape[d]")
        e(f"{I}    idx = rem % ext")
        e(f"{I}    rem //= ext")
        for j in range(self.ns):
            if self.kinds[j] != "col":
                e(f"{I}    g{j} += idx * strides[{j}, d]")
        self.pointers(I)
        names = self.names("st{k}[c]", "cache[j, c]")
        is_col = [kd == "col" for kd in self.kinds]
        k0 = 0
        for s, stage in enumerate(p.stages):
            roots = [r.expr for r in stage]
            used = _used(roots, p.nelem)
            for k in range(k0, k0 + len(stage)):
                e(f"{I}for l in range(lp):")
                e(f"{I}    for c in range(cw):")
                e(f"{I}        acc{k}[l, c] = {_const(IDENTITY[self.reds[k].op], self.reds[k].dtype)}")
            e(f"{I}for j in range(n):")
            e(f"{I}    l = j & (lp - 1)")
            if any(self.reds[k].op == "max" for k in range(k0, k0 + len(stage))):
                e(f"{I}    ls = l + ((j // lp) & 1) * lp")   # see max_chunks
                e(f"{I}    ld = l + lp - ((j // lp) & 1) * lp")
            self.loads(I + "    ", used, lambda j: is_col[j])
            e(f"{I}    for c in range(cw):")
            J = I + "        "
            self.loads(J, used, lambda j: not is_col[j])
            lines, outs = self.render(roots, names, f"s{s}_")
            for line in lines:
                e(J + line)
            for i, r in enumerate(stage):
                k = k0 + i
                if self.reds[k].op == "max":
                    e(f"{J}acc{k}[ld, c] = {self.combine(k, f'acc{k}[ls, c]', outs[i])}")
                else:
                    e(f"{J}acc{k}[l, c] = {self.combine(k, f'acc{k}[l, c]', outs[i])}")
                if r.cached:
                    e(f"{J}cache[j, c] = {outs[i]}")
            for k in range(k0, k0 + len(stage)):
                if self.reds[k].op == "max":
                    self.col_max_tree(I, k)
                    continue
                e(f"{I}h = lp >> 1")
                e(f"{I}while h > 0:")
                e(f"{I}    for l in range(h):")
                e(f"{I}        for c in range(cw):")
                e(f"{I}            acc{k}[l, c] = "
                  f"{self.combine(k, f'acc{k}[l, c]', f'acc{k}[l + h, c]')}")
                e(f"{I}    h >>= 1")
                e(f"{I}for c in range(cw):")
                e(f"{I}    st{k}[c] = acc{k}[0, c]")
            k0 += len(stage)
        outs_j = [j for j in range(self.ns) if self.slots[j].store is not None
                  and self.kinds[j] == "row"]
        roots = [p.results[self.slots[j].store] for j in outs_j]
        used = _used(roots, p.nelem)
        e(f"{I}for j in range(n):")
        self.loads(I + "    ", used, lambda j: is_col[j])
        e(f"{I}    for c in range(cw):")
        J = I + "        "
        self.loads(J, used, lambda j: not is_col[j])
        lines, outs = self.render(roots, names, "o_")
        for line in lines:
            e(J + line)
        for i, j in enumerate(outs_j):
            e(f"{J}q{j}[{self.index(j)}] = {_store(self.slots[j].dtype, outs[i], roots[i].dtype)}")
        if any(kd == "stat" for kd in self.kinds):
            e(f"{I}for c in range(cw):")
            self.stat_outputs(I + "    ", "[c]", "c * i{j}")

    def col_max_tree(self, I: str, k: int) -> None:
        """The col kind's maximum, as :meth:`max_chunks` does it: lane l's last value is in the
        half its number of updates (elements j = l mod lp) says; odd ones move to the first
        half, then each level of the pairwise tree writes the other half."""
        e, a = self.e, f"acc{k}"
        e(f"{I}for l in range(lp):")
        e(f"{I}    if ((n - l + lp - 1) // lp) & 1:")
        e(f"{I}        for c in range(cw):")
        e(f"{I}            {a}[l, c] = {a}[l + lp, c]")
        e(f"{I}hs = 0")
        e(f"{I}h = lp >> 1")
        e(f"{I}while h > 0:")
        e(f"{I}    hd = lp - hs")
        e(f"{I}    for l in range(h):")
        e(f"{I}        for c in range(cw):")
        e(f"{I}            {a}[hd + l, c] = {self.combine(k, f'{a}[hs + l, c]', f'{a}[hs + l + h, c]')}")
        e(f"{I}    hs = hd")
        e(f"{I}    h >>= 1")
        e(f"{I}for c in range(cw):")
        e(f"{I}    st{k}[c] = {a}[hs, c]")


def source(program, kind: str, pattern: str, inner: str, stream: bool) -> str:
    g = _Gen(program, kind, pattern, inner, stream)
    if kind == "col":
        g.col_kernel()
    else:
        g.row_kernel()
    g.e("    return 0")
    ilv = interleave(program)
    return PRELUDE + "\n".join(g.L) + "\n" + (f"\nLOOP_INTERLEAVE = {ilv}\n" if ilv else "")


def interleave(program) -> int:
    """``LOOP_INTERLEAVE`` for a row program (see jit.loop_interleave): as for elementwise
    bodies, over the per-element part; HEAVY_INTERLEAVE for bf16 row outputs too. A/B, (2048,
    4096), 2 threads: softmax -5/-9/-12% (f32/f16/bf16), logsoftmax -1/-9/-15%, rms_norm bf16
    -22%; rms_norm f32/f16 were 13%/6% slower with it, so light bodies keep LLVM's choice."""
    per_element = _per_element(program)
    bf16 = any(s.dtype is DType.BF16 and k == "row" and s.store is not None
               for s, k in zip(program.slots, program.kinds))
    return interleave_for(per_element) or (HEAVY_INTERLEAVE if bf16 else 0)


def _per_element(program) -> list:
    """The expressions a row program computes per element (row statistics hoisted out)."""
    cache = program.nelem + len(program.reductions) + 1      # the last stage's kept values
    _, per_element = hoist([r.expr for st in program.stages for r in st] + list(program.results),
                           lambda k: k < program.nelem or k == cache, 1 << 20)
    return per_element


def math_heavy(program) -> bool:
    """Whether a row program's per-element work is math-heavy (the softmax family's exp; not
    the norms): see ``rows.pool_threshold``."""
    return is_heavy(_per_element(program))


def row_driver(kind: str, nslots: int, nparams: int):
    """``parallel(s0.., p0.., ROW_ARGS)``: a row kernel's tasks (counted as the kernel counts
    them) on the thread pool, each a call of its ``serial_at``; shared by every row kernel of
    the kind with as many slots and parameters. Each row kernel compiled its own prange
    ``parallel`` before, about twice as long as its ``serial`` (AMD EPYC, empty cache:
    softmax float16 5.3 against 1.7 s, layer_norm bfloat16 7.6 against 2.6); now a driver
    compiles once per structure."""
    args = ", ".join([f"s{j}" for j in range(nslots)] + [f"p{k}" for k in range(nparams)])
    L = [f"def parallel({args}, {ROW_ARGS}):", "    nd = shape.shape[0]", "    units = 1"]
    if kind == "col":  # blocks of cfg adjacent rows of the innermost dim
        L += ["    for d in range(nd - 1):", "        units *= shape[d]",
              "    units *= (shape[nd - 1] + cfg - 1) // cfg"]
    else:
        L += ["    for d in range(nd):", "        units *= shape[d]"]
    L += ["    ntask = (units + per_task - 1) // per_task",
          "    for t in prange(ntask):",
          f"        call_kernel(serial_at, ({args}, n, shape, strides, astr, per_task, cfg, 0, "
          "t, t + 1))", "    return 0"]
    return _driver(f"rows_{kind}", L)


def kernel_functions(program, kind: str, pattern: str, inner: str, stream: bool,
                     operands: list[int], pairs: list[tuple[int, int]]) -> dict:
    """This variant's ``serial``, its pool driver as ``parallel`` (:func:`row_driver`) and the
    array ``launch`` as ``native.Kernel`` objects (see elementwise_kernels'
    ``kernel_functions``). The launch's ``at`` table holds ``serial``'s address."""
    src = source(program, kind, pattern, inner, stream)
    tag = f"{kind}_{pattern}_{inner}{'_nt' if stream else ''}"
    fns = kernels(f"rows_{program.name}_{program.key[:10]}_{tag}", src, ("serial",))
    fns["parallel"] = row_driver(kind, len(program.slots), len(program.params))
    fns["launch"] = launcher([operands.index(sl.operand) for sl in program.slots], len(operands),
                             len(program.params), pairs,
                             [("shape", 1), ("strides", 2), ("astr", 1), ("at", 1)],
                             ["meta[0]", "shape", "strides", "astr", "meta[1]", "meta[2]",
                              "at[0]", "0", "-1"])
    return fns
