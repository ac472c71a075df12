"""Tile sweep for the Triton backend's tiled kernels on a GPU: which (tile edge, warps) of a
vendor row moves transposes fastest.

    python benchmarks/sweep_gpu_tiles.py [--device nvidia] [--tiles 32,64,128] [--warps 4,8,16]

For each configuration the vendor row is replaced (``tile``; ``max_warps`` with one element per
thread, so a tile gets min(warps, tile^2 / warp_size) warps), fresh descriptors are made and
bench_gpu.py's transposed rows are timed in the same run: sub with a transposed operand,
rearrange transposes and NCHW->NHWC. Prints % of the copy bandwidth per row and configuration
(the vendor table's figures come from this script). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_gpu  # noqa: E402

import infiniop  # noqa: E402
from infiniop.backends.triton import vendors  # noqa: E402
from infiniop.device import Device  # noqa: E402


def rows(side: int, nchw) -> list:
    ew = [r for r in bench_gpu.elementwise_rows(side) if r[3] == "transposed"]
    return ew + bench_gpu.rearrange_rows(side, nchw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="nvidia")
    ap.add_argument("--tiles", default="32,64,128")
    ap.add_argument("--warps", default="4,8,16")
    ap.add_argument("--quick", action="store_true", help="bench_gpu.py's --quick sizes")
    ap.add_argument("--json", help="write the measurements here")
    a = ap.parse_args(argv)
    try:
        bench_gpu.H = infiniop.create_handle(a.device)
    except infiniop.InfiniError as e:
        print(f"no {a.device} device to sweep: {e}")
        return 0
    if bench_gpu.H.backend.INTERPRET:
        print("TRITON_INTERPRET=1: nothing to time")
        return 0
    dev = Device[a.device.upper()]
    base = vendors.VENDORS[dev]
    bench = bench_gpu.timer(False)
    side = 4096 if a.quick else 8192
    nchw = (32, 64, 56, 56) if a.quick else (64, 256, 56, 56)
    ceiling = bench_gpu.copy_bandwidth("cuda", side * side * 16, bench)
    print(f"{torch.cuda.get_device_name()}: copy {ceiling:.0f} GB/s; row {base}")
    configs = [(t, w) for t in map(int, a.tiles.split(",")) for w in map(int, a.warps.split(","))]
    out = []
    for op, dt, shape, layout, make in rows(side, nchw):
        line = f"{op:<10}{str(dt).split('.')[-1]:<9}{str(tuple(shape)):<20}{layout:<12}"
        torch_ms = None
        for t, w in configs:
            vendors.VENDORS[dev] = replace(base, tile=t, max_warps=w, elems_per_thread=1)
            try:
                ours, theirs, nbytes = make("cuda", dt, shape)
                ms = bench(ours)
                torch_ms = torch_ms or bench(theirs)
            finally:
                vendors.VENDORS[dev] = base
            pct = 100 * nbytes / (ms * 1e-3) / 1e9 / ceiling
            out.append(dict(op=op, dtype=str(dt), shape=list(shape), layout=layout, tile=t,
                            warps=w, us=ms * 1e3, pct_copy=pct, torch_us=torch_ms * 1e3))
            line += f" {t}/{w}:{pct:3.0f}%"
            torch.cuda.empty_cache()
        print(line + f"  torch {100 * nbytes / (torch_ms * 1e-3) / 1e9 / ceiling:.0f}%", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"copy_gbps": ceiling, "rows": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
