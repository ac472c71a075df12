"""Triton kernels for rearrange (strided copies), chosen once per descriptor by ``build(meta)``.

The plan (``RearrangeMeta``, in bytes) is turned into words of 1, 2, 4 or 8 bytes: the widest
word that divides the unit, every stride, every table entry and both origins. Then:

- ``memcpy``: the flat identity kernel over words (codegen.flat_source, pattern '11');
- ``units``: the rank-specialised strided identity kernel over the loop dims, plus one dim for
  the words of a unit when a unit is several words (normalised again, so contiguous dims merge);
- ``transpose``: a tiled transpose (codegen.transpose_source). A ``TR x TC`` tile is read along
  the source's contiguous side and written along the destination's; Triton stages it through
  shared memory. The row/column offset tables are uploaded to the device once, here.

At launch, when an address is not aligned to the chosen word, a narrower-word variant is built
(once) and used instead: misaligned wide accesses fault on a GPU.
"""

from __future__ import annotations

from math import gcd, prod

import numpy as np

from ...dtype import DType
from ...layout import normalize
from ...status import InfiniError, Status
from . import codegen
from .elementwise import Launch, _cdiv, grid_for, row_tiles
from .memory import Operand
from .vendors import LaunchConfig, next_pow2

_UINT = {1: DType.U8, 2: DType.U16, 4: DType.U32, 8: DType.U64}


def _word(*values) -> int:
    g = 0
    for v in values:
        g = gcd(g, int(v))
    for w in (8, 4, 2, 1):
        if g % w == 0:
            return w
    return 1


def _reach(origin: int, dims, table=None, unit: int = 1) -> tuple[int, int]:
    """[lo, hi) bytes from element 0 touched by ``origin + sum(i_d * s_d) (+ table[k])``."""
    lo = hi = origin
    for n, s in dims:
        if n > 1:
            lo += min(0, (n - 1) * s)
            hi += max(0, (n - 1) * s)
    if table is not None and table.size:
        lo += int(table.min())
        hi += int(table.max())
    return lo, hi + unit


def _pitches(row_src: np.ndarray, col_dst: np.ndarray) -> tuple[int, int] | None:
    """(row pitch, column pitch) when the tables are ``r * pitch`` and ``c * pitch``."""
    out = []
    for t in (row_src, col_dst):
        p = int(t[1]) if t.size > 1 else 0
        if t.size and (int(t[0]) != 0 or not np.array_equal(t, np.arange(t.size) * p)):
            return None
        out.append(p)
    return out[0], out[1]


class RearrangeRun:
    """``run(dst_address, src_address, stream=None)``: addresses of element 0."""

    def __init__(self, meta, cfg: LaunchConfig, interpret: bool, device_id):
        self.meta = meta
        self._cfg, self._interpret, self._device_id = cfg, interpret, device_id
        self._doff, self._soff = meta.dst_offset, meta.src_offset
        m = meta
        if m.kind == "memcpy":
            self.word = _word(m.unit, m.dst_offset, m.src_offset)
        elif m.kind == "units":
            self.word = _word(m.unit, m.dst_offset, m.src_offset, *m.dst_strides, *m.src_strides)
        elif m.kind == "transpose":
            self.word = _word(m.unit, m.dst_offset, m.src_offset, *m.dst_strides, *m.src_strides,
                              np.gcd.reduce(m.row_src) if m.row_src.size else 0,
                              np.gcd.reduce(m.col_dst) if m.col_dst.size else 0)
        else:
            raise InfiniError(Status.BAD_PARAM, f"rearrange plan kind {m.kind!r} has no kernel")
        self._variants: dict[int, Launch] = {}
        self.launch = self._variant(self.word)

    def _variant(self, w: int) -> Launch:
        v = self._variants.get(w)
        if v is None:
            v = self._variants[w] = self._build(w)
        return v

    def _build(self, w: int) -> Launch:
        m, cfg = self.meta, self._cfg
        ty = codegen.POINTER[_UINT[w]]
        tiled = False
        if m.kind == "transpose":
            pitches = _pitches(m.row_src // w, m.col_dst // w)
            if pitches is None or m.unit != w:
                return self._transpose(w, ty)
            # a plain transpose of single words: the elementwise tiled copy (square tiles
            # along the destination's rows, the source read down its columns), which moved an
            # A.T - B at 88-98% of the copy bandwidth on an H200 where the transpose kernel
            # reached 21-57%
            dims = [(int(n), int(d), int(s)) for n, d, s in
                    zip(m.shape, m.dst_strides, m.src_strides)]
            dims += [(int(m.cols), pitches[1] * w, w), (int(m.rows), w, pitches[0] * w)]
            tiled = True
        elif m.kind == "memcpy":
            dims = [(m.unit // w, w, w)]
        else:
            dims = [(int(n), int(d), int(s)) for n, d, s in
                    zip(m.shape, m.dst_strides, m.src_strides)]
            if m.unit > w:
                dims.append((m.unit // w, w, w))
        shape = tuple(n for n, _, _ in dims)
        lay = normalize(shape, [tuple(d // w for _, d, _ in dims),
                                tuple(s // w for _, _, s in dims)])
        doff = self._doff + lay.offsets[0] * w
        soff = self._soff + lay.offsets[1] * w
        ops = [
            Operand(ty, w, doff, *_reach(doff, zip(lay.shape, (s * w for s in lay.strides[0])),
                                         unit=w)),
            Operand(ty, w, soff, *_reach(soff, zip(lay.shape, (s * w for s in lay.strides[1])),
                                         unit=w)),
        ]
        dt = _UINT[w]
        pattern = "".join("1" if st[-1] == 1 else "0" if st[-1] == 0 else "g"
                          for st in lay.strides)
        n = lay.numel
        if lay.ndim == 1 and pattern[0] == "1" and pattern[1] != "g":
            block = min(cfg.block, next_pow2(n))
            nprog, per = grid_for(_cdiv(n, block), cfg)
            ks = codegen.flat_source(codegen.copy_program(dt), pattern, tag="copy")
            return Launch(ks, [n, per, nprog], {"BLOCK": block}, nprog, cfg.warps_for(block),
                          ops, self._interpret, self._device_id)
        tiled = tiled and pattern[1] == "g"
        source = codegen.tiled_source if tiled else codegen.strided_source
        ks = source(codegen.copy_program(dt), pattern, lay.ndim, tag="copy")
        return Launch(ks, *row_tiles(lay, pattern, cfg, tiled=tiled), ops,
                      self._interpret, self._device_id)

    def _transpose(self, w: int, ty: str) -> Launch:
        import torch

        m, cfg = self.meta, self._cfg
        k = m.unit // w
        batch = [(int(n), int(d), int(s)) for n, d, s in zip(m.shape, m.dst_strides, m.src_strides)]
        row_src = np.ascontiguousarray(m.row_src // w, dtype=np.int64)
        col_dst = np.ascontiguousarray(m.col_dst // w, dtype=np.int64)
        pitches = _pitches(row_src, col_dst)
        if pitches is None:
            tables = [torch.from_numpy(row_src), torch.from_numpy(col_dst)]
            if not self._interpret:
                dev = f"cuda:{self._device_id or 0}"
                tables = [t.to(dev) for t in tables]
        else:
            tables = []
        doff, soff = self._doff, self._soff
        dlo, dhi = _reach(doff, [(n, d) for n, d, _ in batch] + [(m.rows, m.unit)],
                          m.col_dst, m.unit)
        slo, shi = _reach(soff, [(n, s) for n, _, s in batch] + [(m.cols, m.unit)],
                          m.row_src, m.unit)
        ops = [Operand(ty, w, doff, dlo, dhi), Operand(ty, w, soff, slo, shi)]
        tr = min(next_pow2(m.rows), cfg.tile)
        tc = min(next_pow2(m.cols), cfg.tile)
        tiles_c = _cdiv(m.cols, tc)
        tiles_rc = _cdiv(m.rows, tr) * tiles_c
        nb = prod(n for n, _, _ in batch)
        nprog, per = grid_for(nb * tiles_rc, cfg)
        scalars = ([m.rows, m.cols, tiles_c, tiles_rc, per, nprog]
                   + [n for n, _, _ in batch[1:]]
                   + [d // w for _, d, _ in batch] + [s // w for _, _, s in batch]
                   + list(pitches or ()))
        ks = codegen.transpose_source(ty, len(batch), k, affine=pitches is not None)
        return Launch(ks, scalars, {"TR": tr, "TC": tc}, nprog, cfg.warps_for(tr * tc), ops,
                      self._interpret, self._device_id, extra=tables)

    def __call__(self, dst: int, src: int, stream=None) -> None:
        launch = self.launch
        w = self.word
        if (dst + self._doff) % w or (src + self._soff) % w:
            launch = self._variant(_word(w, dst + self._doff, src + self._soff))
        launch.launch([dst, src], stream)


def build(meta, handle=None):
    """A callable ``run(dst_address, src_address, stream=None)``, or None for an empty copy."""
    if meta.kind == "empty" or meta.numel == 0:
        return None
    from . import INTERPRET, _device_of
    from .vendors import config_for

    dev, dev_id = _device_of(handle)
    return RearrangeRun(meta, config_for(dev, INTERPRET), INTERPRET, dev_id)
