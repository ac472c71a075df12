"""Bind a planned elementwise call (ElementwiseInfo) to its generated Triton kernel.

Everything that depends only on the plan is computed here, once: the kernel variant
(op x dtype x layout class x rank), block/tile shape, warps, grid, the tile loop count and the
full list of scalar arguments (extents and strides are passed by value: nothing is uploaded to
the device, per call or ever). ``launch_pointers`` only wraps the addresses and launches.
"""

from __future__ import annotations

import threading

import numpy as np

from ...dtype import DType
from ...status import InfiniError, Status
from . import codegen, direct_launch
from .memory import Operand, StagedMemory, adapter, stream_context
from .vendors import LaunchConfig, next_pow2

# The interpreter keeps the launch grid in global state: launches from threads must not overlap.
_INTERPRETER_LOCK = threading.Lock()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid_for(tiles: int, cfg: LaunchConfig) -> tuple[int, int]:
    """(programs, tiles per program): at most ``cfg.max_grid`` programs loop over the tiles."""
    nprog = max(1, min(tiles, cfg.max_grid))
    return nprog, _cdiv(tiles, nprog)


def check_dtypes(dtypes, cfg: LaunchConfig, what: str) -> None:
    for d in dtypes:
        if d not in codegen.SUPPORTED:
            raise InfiniError(Status.BAD_TENSOR_DTYPE,
                              f"{what}: dtype {d} has no Triton kernel (supported: "
                              f"{', '.join(sorted(x.short_name for x in codegen.SUPPORTED))})")
        if d is DType.F64 and not cfg.fp64:
            raise InfiniError(Status.BAD_TENSOR_DTYPE,
                              f"{what}: {cfg.vendor} devices have no float64 in Triton")


class Launch:
    """A kernel with its launch fixed: ``launch(pointers, stream)``."""

    def __init__(self, ks: codegen.KernelSource, scalars, constexprs: dict, grid: int,
                 num_warps: int, operands: list[Operand], interpret: bool, device_id,
                 extra=()):
        self.source = ks
        self.scalars = tuple(s if isinstance(s, float) else int(s) for s in scalars)
        self.constexprs = dict(constexprs)
        self.grid = (int(grid),)
        self.num_warps = num_warps
        self._kernel = codegen.load(ks)[self.grid]
        self._kw = dict(self.constexprs, num_warps=num_warps, enable_fp_fusion=False)
        self._memory = adapter(operands, interpret, device_id)
        self._interpret = interpret
        self._device_id = device_id
        self._extra = tuple(extra)  # pointer arguments owned by the kernel (e.g. offset tables)
        self._direct = None
        if isinstance(self._memory, StagedMemory):
            self.launch = self._launch_staged
        elif not interpret and direct_launch.ENABLED:
            self._direct = direct_launch.DirectLaunch(
                [op.origin for op in operands], self.grid[0],
                [*self._extra, *self.scalars, *self.constexprs.values()], device_id)
            self.launch = self._launch_direct

    def fast_launcher(self, order):
        """``go(addresses, stream) -> bool`` for addresses in the caller's order (``order[j]``:
        the index of the kernel's j-th pointer): the direct launch without the per-call list
        building, or None where launches go through the JIT."""
        return None if self._direct is None else self._direct.fast(order)

    def _launch_direct(self, addresses, stream=None) -> None:
        if self._direct.launch(addresses, stream):
            return
        with stream_context(stream, self._device_id, False):  # first launch of this alignment
            self._direct.remember(addresses, self._kernel(
                *self._memory(addresses), *self._extra, *self.scalars, **self._kw))

    def _launch_staged(self, addresses, stream=None) -> None:
        ptrs, finish = self._memory.stage(addresses)
        if self._interpret:
            with _INTERPRETER_LOCK, np.errstate(all="ignore"):
                self._kernel(*ptrs, *self._extra, *self.scalars, **self._kw)
        else:
            with stream_context(stream, self._device_id, False):
                self._kernel(*ptrs, *self._extra, *self.scalars, **self._kw)
        finish()

    def launch(self, addresses, stream=None) -> None:
        ptrs = self._memory(addresses)
        if self._extra:
            ptrs += self._extra
        if self._interpret:
            # NumPy warnings for IEEE results (x/0, inf-inf) are not errors here
            with _INTERPRETER_LOCK, np.errstate(all="ignore"):
                self._kernel(*ptrs, *self.scalars, **self._kw)
            return
        with stream_context(stream, self._device_id, False):
            self._kernel(*ptrs, *self.scalars, **self._kw)


def flat_block(cfg: LaunchConfig, program, pattern: str) -> tuple[int, int]:
    """(BLOCK, num_warps) of a full flat program: a thread handles 16 bytes of the widest dense
    operand (f16/bf16: 8 elements, f32: 4, f64: 2; at most the vendor's elements per thread),
    with the vendor's warps. On an H200 (Triton 3.6), 8 float32 elements per thread took 93-136
    registers in silu/sigmoid/tanh/gelu (ptxas -v) and 4 took 55-73: silu float32 32M 148 ->
    110 us, tanh 124 -> 112, gelu 137 -> 129, sigmoid 103 -> 98; sub/clip float32 unchanged
    (98 us), and 8 stayed the fastest for f16/bf16 (4 per thread: 10-20% slower). Same bits."""
    width = max(s.dtype.itemsize for s, p in zip(program.slots, pattern) if p == "1")
    per_thread = max(1, min(cfg.elems_per_thread, 16 // width))
    block = cfg.block * per_thread // cfg.elems_per_thread
    return block, cfg.warps_for(cfg.block)


def plan_launch(info, cfg: LaunchConfig) -> tuple[codegen.KernelSource, list, dict, int, int]:
    """(kernel source, scalar args, constexprs, grid, num_warps) for an ElementwiseInfo."""
    lay = info.layout
    prog = info.program
    n = lay.numel
    tag = f"ew_{prog.name}_{prog.key[:10]}"
    if info.kind == "flat":
        full, warps = flat_block(cfg, prog, info.pattern)
        block = min(full, next_pow2(n))
        nprog, per = grid_for(_cdiv(n, block), cfg)
        ks = codegen.flat_source(prog, info.pattern, tag=tag)
        return ks, [n, per, nprog], {"BLOCK": block}, nprog, min(warps, cfg.warps_for(block))
    tiled = info.kind == "tiled"
    source = codegen.tiled_source if tiled else codegen.strided_source
    ks = source(prog, info.pattern, lay.ndim, tag=tag)
    return (ks, *row_tiles(lay, info.pattern, cfg, tiled=tiled))


def row_tiles(lay, pattern: str, cfg: LaunchConfig, tiled: bool = False):
    """Scalar arguments, tile constexprs, program count and warps of the strided kernel (or,
    ``tiled``, of codegen.tiled_source's) for a normalised layout (shared by elementwise and
    rearrange)."""
    inner = lay.shape[-1]
    strides = []
    for j, st in enumerate(lay.strides):
        strides += list(st[:-1])
        if pattern[j] == "g":
            strides.append(st[-1])
    if tiled:  # near-square tiles over (dim ndim - 2, innermost), one outer index per tile
        mid = lay.shape[-2]
        br = min(next_pow2(mid), cfg.tile)
        bc = min(next_pow2(inner), cfg.tile * cfg.tile // br)
        tiles_c = _cdiv(inner, bc)
        tiles_rc = _cdiv(mid, br) * tiles_c
        tiles = lay.numel // (mid * inner) * tiles_rc
        nprog, per = grid_for(tiles, cfg)
        scalars = [tiles, tiles_c, tiles_rc, per, nprog, mid, inner] + list(lay.shape[1:-2])
        return scalars + strides, {"BR": br, "BC": bc}, nprog, cfg.warps_for(br * bc)
    rows = lay.numel // inner
    bc = min(next_pow2(inner), cfg.block)
    br = min(next_pow2(rows), max(1, cfg.block // bc))
    tiles_c = _cdiv(inner, bc)
    nprog, per = grid_for(_cdiv(rows, br) * tiles_c, cfg)
    scalars = [rows, inner, tiles_c, per, nprog] + list(lay.shape[1:-1]) + strides
    return scalars, {"BR": br, "BC": bc}, nprog, cfg.warps_for(br * bc)


class ElementwiseKernel:
    """``launch_pointers(addresses, stream=None)``: addresses of element 0 of each operand in the
    operator's order (None for an absent optional one), already checked by the descriptor."""

    def __init__(self, info, cfg: LaunchConfig, interpret: bool, device_id=None):
        prog = info.program
        check_dtypes(prog.dtypes, cfg, info.spec.name)
        self.info = info
        self.launch = None
        if info.numel == 0:
            return
        ks, scalars, consts, grid, warps = plan_launch(info, cfg)
        operands = []
        for j, s in enumerate(prog.slots):
            d = info.descs[s.operand]
            isz = d.dtype.itemsize
            lo, hi = d.reach
            operands.append(Operand(codegen.POINTER[s.dtype], isz, info.slot_offsets[j] * isz,
                                    lo * isz, (hi + 1) * isz))
        self._slot_operand = [s.operand for s in prog.slots]
        scalars = list(scalars) + codegen.param_args(info.params, prog.params)
        self.launch = Launch(ks, scalars, consts, grid, warps, operands, interpret, device_id)

    def launch_pointers(self, addresses, stream=None) -> None:
        if self.launch is not None:
            self.launch.launch([addresses[o] for o in self._slot_operand], stream)

    def fast_launcher(self):
        """Launch.fast_launcher for user-order addresses."""
        return self.launch.fast_launcher(self._slot_operand)
