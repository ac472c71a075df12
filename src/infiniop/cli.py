"""Command line: ``infiniop demo | bench | info | warmup | clear-cache`` (also ``python -m infiniop``)."""

from __future__ import annotations

import argparse
import re
import sys


def _demo() -> int:
    """A small tour that prints what it did: descriptor API, broadcasting, fp16, in-place, errors."""
    import time

    import numpy as np

    import infiniop as ip

    t0 = time.perf_counter()
    handle = ip.create_handle("cpu")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([0.5, 1.5, 2.5, 3.5], np.float32)
    c = np.empty_like(a)
    desc = ip.create_sub_descriptor(handle, ip.TensorDescriptor.from_array(c),
                                    ip.TensorDescriptor.from_array(a), ip.TensorDescriptor.from_array(b))
    desc.calculate(None, c, a, b)
    print(f"created {handle} and a sub descriptor for (3, 4) - (4,), workspace {desc.workspace_size} B")
    print("sub(a, b) =\n", c)
    assert np.array_equal(c, a - b)
    h = np.linspace(-3, 3, 7).astype(np.float16)
    print("clip(fp16 x, -1, 2) =", ip.clip(h, -1.0, 2.0), "(computed in fp32, rounded to nearest even)")
    ip.mul(a, a, out=a)
    print("in-place mul(a, a, out=a): a[0] =", a[0])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = ip.rearrange(x, "n c w -> n w c")
    same = np.array_equal(y, x.transpose(0, 2, 1))
    print("rearrange 'n c w -> n w c': shape", y.shape, "equal to numpy:", same)
    try:
        ip.create_sub_descriptor(handle, ip.TensorDescriptor(ip.float32, (4, 5)),
                                 ip.TensorDescriptor(ip.float32, (4, 5)),
                                 ip.TensorDescriptor(ip.float32, (4, 6)))
    except ip.InfiniError as e:
        print(f"a bad call raises InfiniError({e.status.name}): {e}")
    print(f"done in {time.perf_counter() - t0:.2f} s (first run compiles kernels; later runs load them "
          "from the disk cache)")
    return 0


def _info() -> int:
    import infiniop as ip
    from infiniop import kernel_cache
    from infiniop.backends.cpu import runtime
    from infiniop.device import Device

    print(f"infiniop {ip.__version__}")
    states: dict[str, list[str]] = {}  # devices that fail for the same reason share one line
    for dev in Device:
        name = dev.name.lower()
        try:
            ip.create_handle(dev)
            state = "available"
        except ip.InfiniError as e:
            state = re.sub(rf"\b{name}\b", "<device>", f"{e.status}: {e}")
        states.setdefault(state, []).append(name)
    for state, names in states.items():
        if len(names) == 1:
            print(f"  {names[0]:10s} {state.replace('<device>', names[0])}")
        else:
            print(f"  {', '.join(names)}: {state}")
    print(f"threads {runtime.num_threads()} (layer {runtime.threading_layer()}, "
          f"TBB found: {runtime.have_tbb()})")
    print(f"parallel above {runtime.PARALLEL_THRESHOLD} elements (math-heavy elementwise "
          f"bodies: an eighth of it, at least two 64 KiB blocks; the softmax family's rows: an "
          f"eighth); non-temporal stores from "
          f"{runtime.NT_THRESHOLD_BYTES / 2**20:g} MiB moved (read + written)")
    print(f"kernel cache {kernel_cache.root()} ({kernel_cache.usage() / 1e6:.1f} MB)")
    return 0


def _clear_cache(dry_run: bool) -> int:
    from pathlib import Path

    from . import kernel_cache

    where = Path(kernel_cache.root())
    found = kernel_cache.clear(dry_run=dry_run)
    if not found:
        print(f"nothing to remove: no compiled kernels in {where}")
        return 0
    verb = "would remove" if dry_run else "removed"
    total = 0
    for e in found:
        total += e.nbytes
        note = " (written by an older infiniop)" if e.legacy else ""
        print(f"{verb} {where / e.name}: {len(e.files)} files, {_mb(e.nbytes)}{note}")
    print(f"{verb} {sum(len(e.files) for e in found)} files, {_mb(total)} in all "
          "(only files infiniop writes; anything else in the folder is kept)")
    kept = [k for e in found for k in e.kept]
    if kept:
        print(f"could not remove {len(kept)} files, e.g. {kept[0][0]}: {kept[0][1]}",
              file=sys.stderr)
        return 1
    return 0


DESCRIPTION = ("infiniop: tensor operators with one descriptor API on the CPU and on GPUs. "
               "Also runs as: python -m infiniop.")


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB ({nbytes} bytes)"


def main(argv: list[str] | None = None) -> int:
    from . import __version__

    p = argparse.ArgumentParser(prog="infiniop", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"infiniop {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="run a short demo that prints what it does")
    sub.add_parser("info", help="version, devices, threads, kernel cache")
    w = sub.add_parser("warmup", help="compile the kernels of common calls now (once after installing)")
    w.add_argument("--dtype", action="append", default=[],
                   help="float32, float16, bfloat16, float64, int32, ... (default: the first three)")
    w.add_argument("--processes", type=int, help="compile in this many processes (default: cores)")
    c = sub.add_parser("clear-cache", help="delete compiled kernels (only files infiniop wrote)")
    c.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    b = sub.add_parser("bench", help="benchmark against NumPy / PyTorch and the copy bandwidth")
    b.add_argument("--quick", action="store_true", help="a small suite (under a minute, warm cache)")
    b.add_argument("--op", action="append", default=[],
                   help="sub, add, mul, clip, rearrange, rms_norm, add_rms_norm, layer_norm, softmax, "
                   "causal_softmax, logsoftmax, rope, silu, gelu, gelutanh, quickgelu, sigmoid, "
                   "tanh, softplus, hardswish, hardtanh, erf, erfc, erfinv, atanh, log1p, log10, "
                   "reciprocal, swiglu, equal, addcmul")
    b.add_argument("--dtype", action="append", default=[], help="float32, float16, bfloat16, float64")
    b.add_argument("--layout", action="append", default=[],
                   help="contiguous, scalar_bcast, numpy_bcast, transposed, strided_out, "
                        "offset_out, copy, nchw_nhwc, transpose2d, permute6d")
    b.add_argument("--size", action="append", type=int, default=[], help="elements (e.g. 16777216)")
    b.add_argument("--threads", type=int, help="threads for infiniop and torch (default: all cores)")
    b.add_argument("--device", default="cpu",
                   help="cpu (a GPU machine runs benchmarks/bench_gpu.py instead)")
    b.add_argument("--json", metavar="FILE", help="write JSON lines (one per case, first = machine)")
    b.add_argument("--plot", metavar="FILE.png", help="plot GB/s against size (needs matplotlib)")
    args = p.parse_args(argv)
    if args.cmd not in ("bench", "warmup"):
        return _run(args)
    from .status import InfiniError

    try:
        return _run(args)
    except (ValueError, InfiniError) as e:  # a bad argument value: say so, no traceback
        sub.choices[args.cmd].error(str(e) if isinstance(e, ValueError) else f"{e.status}: {e}")


def _run(args) -> int:
    if args.cmd == "demo":
        return _demo()
    if args.cmd == "info":
        return _info()
    if args.cmd == "warmup":
        from .warmup import DTYPES, warmup

        return warmup(tuple(args.dtype) or DTYPES, args.processes)
    if args.cmd == "clear-cache":
        return _clear_cache(args.dry_run)
    from .bench import run

    records = run(quick=args.quick, ops=args.op, dtypes=args.dtype, layouts=args.layout,
                  sizes=args.size, threads=args.threads, json_path=args.json, plot_path=args.plot,
                  device=args.device)
    return 1 if any("error" in r for r in records[1:]) else 0


if __name__ == "__main__":
    sys.exit(main())
