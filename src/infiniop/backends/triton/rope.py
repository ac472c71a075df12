"""The Triton rope kernel: tiles of ``BR`` rows of x (``[..., seq, nhead]``) x ``BH`` pairs.

Pair steps are strides (both algorithms are one kernel); sin/cos rows are gathered by position.
A position outside ``[0, max_pos)`` is never read: its token's outputs are NaN (the descriptor
refuses such positions before launching when they are in host memory).
"""

from __future__ import annotations

from .codegen import (
    POINTER,
    PRELUDE,
    KernelSource,
    _const,
    _kernel_header,
    _load,
    _store,
    render_body,
)
from .elementwise import Launch, _cdiv, check_dtypes, grid_for
from .memory import Operand
from .rows import _TEMP
from .vendors import next_pow2


def rope_source(prog, ndim: int, tag: str) -> KernelSource:
    dts = prog.dtypes
    ptrs = [f"s{j}_ptr" for j in range(5)]
    extents = [f"e{d}" for d in range(1, ndim)]
    strides = [f"s{j}_{d}" for j in range(3) for d in range(ndim)]
    scalars = (["rows", "half"] + extents + strides
               + ["ya", "yb", "xa", "xb", "t3", "st3", "t4", "st4", "maxpos", "tiles_per_prog",
                  "nprog"])
    no_spec = ["rows", "tiles_per_prog", "nprog", "maxpos"]
    L = [PRELUDE, _kernel_header(ptrs + scalars + ["BR: tl.constexpr", "BH: tl.constexpr"],
                                 no_spec)]
    e = L.append
    e("    tile = tl.program_id(0).to(tl.int64)")
    e("    lr = tl.arange(0, BR).to(tl.int64)")
    e("    lh = tl.arange(0, BH).to(tl.int64)")
    e("    for _ in range(0, tiles_per_prog):")
    I = "        "
    e(f"{I}r = tile * BR + lr")
    e(f"{I}rmask = r < rows")
    e(f"{I}rem = r")
    for d in range(ndim - 1, 0, -1):
        e(f"{I}i{d} = rem % e{d}")
        e(f"{I}rem = rem // e{d}")
    e(f"{I}i0 = rem")
    for j in range(3):
        e(f"{I}ro{j} = " + " + ".join(f"i{d} * s{j}_{d}" for d in range(ndim)))
    e(f"{I}p = tl.load(s2_ptr + ro2, mask=rmask, other=0).to(tl.int64)")
    e(f"{I}ok = rmask & (p >= 0) & (p < maxpos)")
    e(f"{I}p = tl.where(ok, p, 0)")
    e(f"{I}for c0 in range(0, half, BH):")
    J = I + "    "
    e(f"{J}i = c0 + lh")
    e(f"{J}m = rmask[:, None] & (i < half)[None, :]")
    e(f"{J}mt = ok[:, None] & (i < half)[None, :]")
    loads = {"a": (1, "ro1[:, None] + (i * xa)[None, :]", "m"),
             "b": (1, "ro1[:, None] + (i * xa + xb)[None, :]", "m"),
             "sn": (3, "(p * t3)[:, None] + (i * st3)[None, :]", "mt"),
             "cs": (4, "(p * t4)[:, None] + (i * st4)[None, :]", "mt")}
    for name, (j, off, mask) in loads.items():
        e(f"{J}{name} = {_load(dts[j], f'tl.load({ptrs[j]} + {off}, mask={mask}, other=0)')}")
    nan = _const(float("nan"), prog.results[0].dtype)
    lines, outs = render_body(prog.results, ["a", "b", "sn", "cs"], [])
    for line in lines:
        e(J + _TEMP.sub(lambda mt: f"r_{mt.group(1)}", line))
    outs = [_TEMP.sub(lambda mt: f"r_{mt.group(1)}", o) for o in outs]
    for k, off in ((0, "(i * ya)"), (1, "(i * ya + yb)")):
        v = f"tl.where(mt, {outs[k]}, {nan})"
        e(f"{J}tl.store(s0_ptr + ro0[:, None] + {off}[None, :], "
          f"{_store(dts[0], v, prog.results[k].dtype)}, mask=m)")
    e(f"{I}tile += nprog")
    return KernelSource(f"{tag}_rope{ndim}", "\n".join(L) + "\n",
                        tuple(POINTER[d] for d in dts), tuple(scalars), ("BR", "BH"))


class RopeKernel:
    """``launch_pointers(addresses, stream=None)``; positions are checked by the descriptor
    when they are in host memory (``checks_positions`` is False)."""

    checks_positions = False

    def __init__(self, info, cfg, interpret: bool, device_id=None):
        prog = info.program
        check_dtypes(prog.dtypes, cfg, "rope")
        lay = info.layout
        ks = rope_source(prog, lay.ndim, f"rope_{prog.key[:10]}")
        bh = min(next_pow2(info.half), cfg.block)
        br = 1
        while br * 2 <= info.rows and br * 2 * bh <= cfg.block:
            br *= 2
        nprog, per = grid_for(_cdiv(info.rows, br), cfg)
        (ya, yb), (xa, xb) = info.pairs
        (t3, s3), (t4, s4) = info.tables
        scalars = ([info.rows, info.half] + list(lay.shape[1:])
                   + [s for st in lay.strides for s in st]
                   + [ya, yb, xa, xb, t3, s3, t4, s4, info.max_pos, per, nprog])
        operands = []
        origins = list(lay.offsets) + [0, 0]
        for d, o in zip(info.descs, origins):
            isz = d.dtype.itemsize
            lo, hi = d.reach
            operands.append(Operand(POINTER[d.dtype], isz, o * isz, lo * isz, (hi + 1) * isz))
        self._operands = len(operands)
        self.launch = Launch(ks, scalars, {"BR": br, "BH": bh}, nprog, cfg.warps_for(br * bh),
                             operands, interpret, device_id)

    def launch_pointers(self, addresses, stream=None) -> int:
        self.launch.launch(list(addresses), stream)
        return 0

    def fast_launcher(self):
        """Launch.fast_launcher (the kernel's pointers are the operands, in order)."""
        return self.launch.fast_launcher(range(self._operands))
