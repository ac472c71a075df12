"""The per-vendor launch table: one row per device, no per-vendor copies of kernels.

Every Triton kernel in this backend is generated once; what differs between vendors is only how
it is launched. A row says how wide a warp is, how many warps a program (CTA) may use, how many
elements a program handles, the edge of a transpose tile, how many programs fit on grid axis 0
(kernels loop over tiles when there are more), and what the vendor's compiler supports.

Values marked "measured" were checked on this project's machines; the rest come from vendor
documentation or from FlagGems' per-vendor codegen table and are untested here (no such device).
Under ``TRITON_INTERPRET=1`` the same row is used except that programs are made large (the
interpreter pays ~1-8 ms per program, whatever its size), see :func:`config_for`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...device import Device

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class LaunchConfig:
    vendor: str
    warp_size: int          # threads per warp (Metax, Iluvatar, Hygon: 64)
    max_warps: int          # warps per program (CTA); threads = warps x warp_size
    elems_per_thread: int   # elements a thread handles in a full elementwise block
    block: int              # elements per program for elementwise / copies (power of 2)
    tile: int               # edge of a 2-D transpose tile (power of 2)
    max_grid: int           # programs on grid axis 0; more tiles -> each program loops
    fp64: bool = True       # the vendor compiler handles float64
    target: str | None = None   # Triton target backend expected on a real device, if known

    def warps_for(self, elements: int) -> int:
        """num_warps for a program of ``elements`` elements: enough threads for
        ``elems_per_thread`` each, at least 1, at most ``max_warps`` (a power of 2)."""
        want = max(1, elements // (self.warp_size * self.elems_per_thread))
        w = 1
        while w * 2 <= min(want, self.max_warps):
            w *= 2
        return w


# One table. Block sizes are a multiple of warps x warp_size x elems_per_thread.
VENDORS: dict[Device, LaunchConfig] = {
    # NVIDIA: 32-wide warps, up to 32 warps (1024 threads); grid x up to 2**31-1.
    Device.NVIDIA: LaunchConfig("nvidia", warp_size=32, max_warps=8, elems_per_thread=8,
                                block=1024, tile=64, max_grid=INT32_MAX, target="cuda"),
    # Metax (MACA, FlagTree 3.1): 64-wide warps, at most 8 warps per CTA (issue #5);
    # FlagGems uses 2048-element tiles and a 65536 grid.
    Device.METAX: LaunchConfig("metax", warp_size=64, max_warps=8, elems_per_thread=8,
                               block=2048, tile=64, max_grid=65536),
    # Moore Threads (MUSA): FlagGems keeps <= 4 warps; grid up to 2**31-1.
    Device.MOORE: LaunchConfig("moore", warp_size=32, max_warps=4, elems_per_thread=8,
                               block=1024, tile=32, max_grid=INT32_MAX),
    # Iluvatar CoreX: 64-wide warps (assumed); FlagGems uses the NVIDIA defaults.
    Device.ILUVATAR: LaunchConfig("iluvatar", warp_size=64, max_warps=8, elems_per_thread=8,
                                  block=1024, tile=64, max_grid=65536),
    # Kunlunxin XPU (FlagTree 3.0 'xpu'): 1-D tiles preferred, no float64 (FlagGems flags).
    Device.KUNLUN: LaunchConfig("kunlun", warp_size=64, max_warps=1, elems_per_thread=16,
                                block=1024, tile=32, max_grid=65536, fp64=False),
    # Hygon DCU (HIP, 64-wide wavefronts): FlagGems uses 2048-element tiles, 65536 grid.
    Device.HYGON: LaunchConfig("hygon", warp_size=64, max_warps=16, elems_per_thread=8,
                               block=2048, tile=64, max_grid=65536, target="hip"),
}

INTERPRETER_BLOCK = 1 << 16   # elements per program under TRITON_INTERPRET=1
INTERPRETER_TILE = 256        # transpose tile edge under the interpreter (64K elements)


def config_for(device: Device, interpret: bool) -> LaunchConfig:
    """The launch row for ``device`` (NVIDIA's for a device without a row of its own)."""
    cfg = VENDORS.get(device, VENDORS[Device.NVIDIA])
    if interpret:
        cfg = replace(cfg, block=max(cfg.block, INTERPRETER_BLOCK),
                      tile=max(cfg.tile, INTERPRETER_TILE))
    return cfg


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
