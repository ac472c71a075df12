"""Triton row kernels generated from a traced row operator (rows.spec.RowProgram).

A program handles a tile of ``BR`` rows x ``L`` lanes (``L = min(LANES, next_pow2(n))``, baked
into the source) and loops over the row in chunks of ``L`` columns, once per reduction stage and
once for the outputs, exactly in the order rows/spec.py fixes: lane ``l`` accumulates columns
``l, l + L, ...`` (masked lanes keep their value), then the lanes halve pairwise, ``lane[l]``
with ``lane[l + h]``, first operand first, as on the CPU. Each level reduces the axis of 2 of
``reshape([BR, 2, h])``: a sum of two has the same bits in either order; a maximum is not
symmetric (+-0, NaN payloads), so lo and hi are taken apart exactly (integer sums of their bits
with zeros) and combined in order. (``permute`` + ``split`` of that reshape, the form before,
spilled kilobytes of registers under Triton 3.6: rms_norm (2048, 4096) f16 took 1.5 ms on an
H200, torch 17 us.) Expressions are rendered by the elementwise renderer; the value the CPU
keeps from the last stage (softmax's ``exp(x - max)``) is recomputed here.
"""

from __future__ import annotations

import re

from ...elementwise.expr import topo
from ...rows.spec import IDENTITY, lanes_for, substitute
from . import codegen
from .codegen import (
    POINTER,
    PRELUDE,
    KernelSource,
    _const,
    _kernel_header,
    _load,
    _param_decls,
    _param_types,
    _store,
    render_body,
)
from .elementwise import Launch, _cdiv, check_dtypes, grid_for
from .memory import Operand

_TEMP = re.compile(r"\bt(\d+)\b")


def _used(roots, nelem: int) -> set[int]:
    return {nd.args[0] for nd in topo(roots) if nd.op == "input" and nd.args[0] < nelem}


def row_source(program, pattern: str, ndim: int, lanes: int, tag: str) -> KernelSource:
    """The row kernel for a normalised outer layout of rank ``ndim`` (>= 1)."""
    p = program
    ns = len(p.slots)
    kinds = p.kinds
    reds = p.reductions
    ptrs = [f"s{j}_ptr" for j in range(ns)]
    extents = [f"e{d}" for d in range(1, ndim)]
    strides = []
    for j in range(ns):
        if kinds[j] != "col":
            strides += [f"s{j}_{d}" for d in range(ndim)]
        if pattern[j] == "g":
            strides.append(f"a{j}")
    scalars = ["rows", "n"] + (["cr"] if p.causal else []) + extents + strides + [
        "tiles_per_prog", "nprog"]
    pnames, pdecode, pvalues = _param_decls(p.params)
    no_spec = ["rows", "tiles_per_prog", "nprog"] + [x for x in pnames if "_" in x]
    L = [PRELUDE, _kernel_header(ptrs + scalars + pnames + ["BR: tl.constexpr"], no_spec)]
    e = L.append
    e("    tile = tl.program_id(0).to(tl.int64)")
    e("    lr = tl.arange(0, BR).to(tl.int64)")
    e(f"    ll = tl.arange(0, {lanes}).to(tl.int64)")
    # m.n as a value: Triton passes an int argument equal to 1 as a constant (no .to() there)
    e("    nv = tl.zeros([], tl.int64) + n")
    for line in pdecode:
        e(f"    {line}")
    for k, t in enumerate(p.params):  # a float32 parameter as a tensor (the interpreter passes a
        if t == "f32":                # Python float, which has no .to() for a cast)
            e(f"    p{k} = tl.full([], -0.0, tl.float32) + p{k}")
    e("    for _ in range(0, tiles_per_prog):")
    I = "        "
    e(f"{I}r = tile * BR + lr")
    e(f"{I}rmask = r < rows")
    e(f"{I}rem = r")
    for d in range(ndim - 1, 0, -1):
        e(f"{I}i{d} = rem % e{d}")
        e(f"{I}rem = rem // e{d}")
    e(f"{I}i0 = rem")
    for j in range(ns):
        if kinds[j] != "col":
            e(f"{I}ro{j} = " + " + ".join(f"i{d} * s{j}_{d}" for d in range(ndim)))
    if p.causal:
        e(f"{I}v = tl.minimum(i{ndim - 1} + n - cr + 1, n)[:, None]")
    else:
        e(f"{I}v = n")

    def col(j: int) -> str:
        cls = pattern[j]
        return "jj" if cls == "1" else f"jj * a{j}" if cls == "g" else "jj * 0"

    def loads(indent: str, used: set[int]) -> None:
        for k in sorted(used):
            j = next(j for j, s in enumerate(p.slots) if s.load == k)
            s = p.slots[j]
            if kinds[j] == "col":
                src = f"tl.load({ptrs[j]} + {col(j)}, mask=jj < n, other=0)"
                e(f"{indent}x{k} = {_load(s.dtype, src)}[None, :]")
            else:
                src = f"tl.load({ptrs[j]} + ro{j}[:, None] + ({col(j)})[None, :], mask=m, other=0)"
                e(f"{indent}x{k} = {_load(s.dtype, src)}")

    def names(stat: str) -> list[str]:
        return ([f"x{k}" for k in range(p.nelem)] + [stat.format(k=k) for k in range(len(reds))]
                + ["nv", "NO_CACHE"])

    def render(roots, nm, prefix):
        lines, outs = render_body(roots, nm, pvalues)
        return ([_TEMP.sub(lambda mt: f"{prefix}{mt.group(1)}", x) for x in lines],
                [_TEMP.sub(lambda mt: f"{prefix}{mt.group(1)}", x) for x in outs])

    def chunk_header(indent: str) -> None:
        e(f"{indent}for c0 in range(0, n, {lanes}):")
        e(f"{indent}    jj = c0 + ll")
        e(f"{indent}    m = rmask[:, None] & (jj[None, :] < v)")

    k0 = 0
    for s, stage in enumerate(p.stages):
        roots = [r.expr for r in stage]
        for i, r in enumerate(stage):
            k = k0 + i
            zeros = f"tl.zeros([BR, {lanes}], {codegen._TLT[r.dtype]})"
            if r.op == "sum":  # -0.0 exactly: +0.0 + -0.0 would be +0.0 (a row of -0.0 sums to -0.0)
                e(f"{I}acc{k} = neg({zeros})")
            else:
                e(f"{I}acc{k} = {zeros} + {_const(IDENTITY[r.op], r.dtype)}")
        chunk_header(I)
        J = I + "    "
        loads(J, _used(roots, p.nelem))
        lines, outs = render(roots, names("st{k}[:, None]"), f"tmp{s}_")
        for line in lines:
            e(J + line)
        for i, r in enumerate(stage):
            k = k0 + i
            new = f"acc{k} + {outs[i]}" if r.op == "sum" else f"maximum(acc{k}, {outs[i]})"
            e(f"{J}acc{k} = tl.where(m, {new}, acc{k})")
        for i, r in enumerate(stage):
            k = k0 + i
            h = lanes
            while h > 1:
                h //= 2
                # maximum(lo, hi) is not symmetric (+-0, NaN payloads): take lo and hi apart
                # exactly, as integer sums of their bits with zeros, then combine them in order
                ft, it = codegen._TLT[r.dtype], "tl.int64" if r.dtype == "f64" else "tl.int32"
                e(f"{I}bits = tl.reshape(acc{k}.to({it}, bitcast=True), [BR, 2, {h}])")
                for side, name in ((0, "lo"), (1, "hi")):
                    e(f"{I}{name} = tl.sum(tl.where(tl.arange(0, 2).to(tl.int64)[None, :, None] == {side}, "
                      f"bits, 0), axis=1).to({it}).to({ft}, bitcast=True)")
                e(f"{I}acc{k} = " + ("lo + hi" if r.op == "sum" else "maximum(lo, hi)"))
            e(f"{I}st{k} = tl.reshape(acc{k}, [BR])")
        k0 += len(stage)

    # outputs: the cached value is recomputed from its expression
    cached = p.cached
    results = list(p.results)
    if cached is not None:
        leaf = next((nd for r in results for nd in topo([r])
                     if nd.op == "input" and nd.args[0] == p.cache), None)
        if leaf is not None:
            results = substitute(results, {id(leaf): cached.expr})
    row_j = [j for j in range(ns) if p.slots[j].store is not None and kinds[j] == "row"]
    stat_j = [j for j in range(ns) if kinds[j] == "stat"]
    roots = [results[p.slots[j].store] for j in row_j]
    chunk_header(I)
    J = I + "    "
    loads(J, _used(roots, p.nelem))
    lines, outs = render(roots, names("st{k}[:, None]"), "tmpo_")
    for line in lines:
        e(J + line)
    if p.causal:
        e(f"{J}sm = rmask[:, None] & (jj < n)[None, :]")
    for i, j in enumerate(row_j):
        value = outs[i]
        if p.causal:
            zero = _const(0, roots[i].dtype)
            value = f"tl.where(m, {value}, {zero})"
        e(f"{J}tl.store({ptrs[j]} + ro{j}[:, None] + ({col(j)})[None, :], "
          f"{_store(p.slots[j].dtype, value, roots[i].dtype)}, mask={'sm' if p.causal else 'm'})")
    if stat_j:
        roots = [results[p.slots[j].store] for j in stat_j]
        lines, outs = render(roots, names("st{k}"), "tmpz_")
        for line in lines:
            e(I + line)
        for i, j in enumerate(stat_j):
            e(f"{I}tl.store({ptrs[j]} + ro{j}, {_store(p.slots[j].dtype, outs[i], roots[i].dtype)}"
              ", mask=rmask)")
    e(f"{I}tile += nprog")
    src = "\n".join(L) + "\n"
    cz = "c" if p.causal else ""
    return KernelSource(f"{tag}_rows{ndim}{cz}_{pattern}_L{lanes}", src,
                        tuple(POINTER[d] for d in p.dtypes), tuple(scalars), ("BR",),
                        _param_types(p))


def row_warps(cfg, program, br: int, lanes: int) -> int:
    """Warps for a ``br`` x ``lanes`` program: its tile of the widest row operand counted in
    8-byte units (rows of 1024 lanes: f16/bf16 1 warp, f32 2, f64 4). On an H200 (Triton 3.6)
    the 4 warps that counting elements gave were 1.3-3.2x slower for f16/bf16 rms_norm,
    softmax and causal_softmax and up to 1.5x for f32; every variant had the CPU's bits. (The
    AOT check's ``ptxas -v`` finds small spills at these warps, at most 288 bytes, in
    layer_norm/add_rms_norm/strided bf16 rms_norm; untimed on a GPU.)"""
    width = max(s.dtype.itemsize for s, kd in zip(program.slots, program.kinds) if kd == "row")
    return cfg.warps_for(br * lanes * width // 8)


class RowKernel:
    """``launch_pointers(addresses, stream=None)``: element 0 of each operand in the operator's
    order (None for an absent optional one), checked by the descriptor."""

    def __init__(self, info, cfg, interpret: bool, device_id=None):
        prog = info.program
        check_dtypes(prog.dtypes, cfg, info.spec.name)
        lay = info.layout
        lanes = lanes_for(info.n)
        tag = f"rows_{prog.name}_{prog.key[:10]}"
        ks = row_source(prog, info.pattern, lay.ndim, lanes, tag)
        rows = info.rows
        br = 1
        while br * 2 <= rows and br * 2 * lanes <= cfg.block:
            br *= 2
        nprog, per = grid_for(_cdiv(rows, br), cfg)
        strides = []
        for j, kd in enumerate(prog.kinds):
            if kd != "col":
                strides += list(lay.strides[j])
            if info.pattern[j] == "g":
                strides.append(info.axis_strides[j])
        scalars = [rows, info.n] + ([info.shape[-2]] if prog.causal else []) + list(
            lay.shape[1:]) + strides + [per, nprog]
        scalars += codegen.param_args(info.params, prog.params)
        operands = []
        for j, s in enumerate(prog.slots):
            d = info.descs[s.operand]
            isz = d.dtype.itemsize
            lo, hi = d.reach
            operands.append(Operand(POINTER[s.dtype], isz, info.slot_offsets[j] * isz,
                                    lo * isz, (hi + 1) * isz))
        self._slot_operand = [s.operand for s in prog.slots]
        self.launch = Launch(ks, scalars, {"BR": br}, nprog, row_warps(cfg, prog, br, lanes),
                             operands, interpret, device_id)

    def launch_pointers(self, addresses, stream=None) -> None:
        self.launch.launch([addresses[o] for o in self._slot_operand], stream)

    def fast_launcher(self):
        """Launch.fast_launcher for user-order addresses."""
        return self.launch.fast_launcher(self._slot_operand)
