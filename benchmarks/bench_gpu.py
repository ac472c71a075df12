"""GPU benchmark of the Triton backend: ours vs PyTorch, GB/s vs the device's copy bandwidth.

    python benchmarks/bench_gpu.py [--device nvidia] [--device-id 0] [--quick] [--json out.json]
    TRITON_INTERPRET=1 python benchmarks/bench_gpu.py --smoke     # plumbing check on the CPU

Needs a GPU that the Triton backend runs (``create_handle(--device)`` must succeed without the
interpreter). At the start it measures the device's copy bandwidth (``torch`` copy of a large
contiguous tensor); every row then shows our time and PyTorch's for the same operation, the
ratio (PyTorch time / ours: > 1 means we are faster), our GB/s (bytes read + written / time)
and that as a share of the copy bandwidth, and of a copy moving the same bytes (what the size
allows: a 32 MiB copy does not reach the large-copy bandwidth). Timing: ``triton.testing.do_bench`` (median of
CUDA-event timed repetitions after warm-up), descriptors created once, outside the timing.

Without a GPU it says so and exits 0 (the README's GPU table was measured with this script on
an H200). ``--smoke`` runs every row once at tiny sizes under the interpreter, to keep the
script working in CI-like environments.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

import infiniop
from infiniop import TensorDescriptor
from infiniop.rearrange import create_rearrange_descriptor

SMOKE_SCALE = 1 << 10


def timer(smoke: bool):
    if smoke:
        def bench(fn):
            fn()
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        return bench
    from triton.testing import do_bench

    return lambda fn: do_bench(fn, warmup=25, rep=200, return_mode="median")


def copy_bandwidth(dev, nbytes: int, bench) -> float:
    """GB/s (read + written) of a torch copy of ``nbytes``: the ceiling, with ``nbytes`` large;
    the same-size column, with a row's bytes (small copies pay launch and L2 effects too)."""
    x = torch.empty(max(1, nbytes // 4), dtype=torch.float32, device=dev)
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _td(t):
    return TensorDescriptor.from_array(t)


def elementwise_rows(side: int):
    """(op, dtype, shape, layout, make) rows; make(dev, dtype, shape) -> (ours, theirs, bytes).
    ``bytes`` counts what must move: each distinct input element read once, the output
    written once (a broadcast operand's few bytes are left out)."""
    rows = []
    dts = [torch.float32, torch.float16, torch.bfloat16]

    def binary(op, tfn, layout):
        def make(dev, dt, shape):
            a = torch.randn(shape, device=dev).to(dt)
            b = torch.randn(shape, device=dev).to(dt)
            c = torch.empty(shape, device=dev, dtype=dt)
            if layout == "broadcast":  # numpy-style: b is one row, broadcast over the rows
                b = torch.randn(shape[-1], device=dev).to(dt)
            elif layout == "transposed":
                a = torch.randn(shape[::-1], device=dev).to(dt).t()
            elif layout == "strided-out":
                c = torch.empty((shape[0], 2 * shape[1]), device=dev, dtype=dt)[:, ::2]
            bb = b.expand(shape)
            d = getattr(infiniop, f"create_{op}_descriptor")(H, _td(c), _td(a), _td(bb))
            nbytes = (c.numel() * 2 + (b.numel() if layout != "broadcast" else 0)) * c.element_size()
            return (lambda: d.calculate(None, c, a, bb)), (lambda: tfn(a, b, out=c)), nbytes
        return make

    def clip(layout):
        def make(dev, dt, shape):
            x = torch.randn(shape, device=dev).to(dt)
            lo = torch.full(shape, -0.5, device=dev, dtype=dt)
            hi = torch.full(shape, 0.5, device=dev, dtype=dt)
            if layout == "broadcast":
                lo, hi = lo[:1, :1].expand(shape), hi[:1, :1].expand(shape)
            y = torch.empty_like(x)
            d = infiniop.create_clip_descriptor(H, _td(y), _td(x), _td(lo), _td(hi))
            k = 4 if layout != "broadcast" else 2
            return ((lambda: d.calculate(None, y, x, lo, hi)),
                    (lambda: torch.clamp(x, lo, hi, out=y)), k * x.numel() * x.element_size())
        return make

    shape = (side, side)
    for dt in dts:
        for layout in ("contiguous", "broadcast", "transposed", "strided-out"):
            rows.append(("sub", dt, shape, layout, binary("sub", torch.sub, layout)))
        rows.append(("clip", dt, shape, "contiguous", clip("contiguous")))
        rows.append(("clip", dt, shape, "broadcast", clip("broadcast")))
    return rows


def rearrange_rows(side: int, nchw):
    def transpose(dev, dt, shape):
        src = torch.randn(shape, device=dev).to(dt)
        dst = torch.empty(shape[::-1], device=dev, dtype=dt).t()
        d = create_rearrange_descriptor(H, _td(dst), _td(src))
        return (lambda: d.calculate(dst, src)), (lambda: dst.copy_(src)), 2 * src.numel() * src.element_size()

    def to_nhwc(dev, dt, shape):
        n, c, h, w = shape
        src = torch.randn(shape, device=dev).to(dt)
        dst = torch.empty((n, h, w, c), device=dev, dtype=dt).permute(0, 3, 1, 2)
        d = create_rearrange_descriptor(H, _td(dst), _td(src))
        return (lambda: d.calculate(dst, src)), (lambda: dst.copy_(src)), 2 * src.numel() * src.element_size()

    rows = []
    for dt in (torch.float32, torch.float16):
        for edge in sorted({side // 2, side}):  # 4096^2 and 8192^2 at full size
            rows.append(("rearrange", dt, (edge, edge), "transpose", transpose))
        rows.append(("rearrange", dt, nchw, "nchw->nhwc", to_nhwc))
    return rows


def activation_rows(side: int):
    """The math activations (issue 11) on ``side * side / 2`` elements: our vectorised,
    CPU-identical math against torch's own kernels (which allocate their output)."""
    import torch.nn.functional as F

    def act(op, tfn, arity=1):
        def make(dev, dt, shape):
            xs = [(4 * torch.randn(shape, device=dev)).to(dt) for _ in range(arity)]
            y = torch.empty_like(xs[0])
            d = getattr(infiniop, f"create_{op}_descriptor")(H, _td(y), *map(_td, xs))
            nbytes = (arity + 1) * y.numel() * y.element_size()
            return (lambda: (d.calculate(None, y, *xs), y)[1]), (lambda: tfn(*xs)), nbytes
        return make

    shape = (side // 2, side)
    return [(op, dt, shape, "contiguous", act(op, tfn, arity))
            for op, tfn, arity in (("silu", F.silu, 1), ("sigmoid", torch.sigmoid, 1),
                                   ("tanh", torch.tanh, 1), ("gelu", F.gelu, 1),
                                   ("swiglu", lambda a, b: a * F.silu(b), 2))
            for dt in (torch.float32, torch.float16, torch.bfloat16)]


def normalisation_rows(smoke: bool):
    """The row operators and rope (issue 12) at LLaMA shapes, against torch's kernels
    (``F.rms_norm``, ``F.layer_norm``, softmax, log_softmax) or what a torch user composes
    (mask then softmax; add then rms_norm; rope in float32 from gathered tables). Bytes: every
    row operand read or written once (rope: x and y)."""
    import torch.nn.functional as F

    def rms(dev, dt, shape):
        x, w = torch.randn(shape, device=dev).to(dt), torch.rand(shape[-1], device=dev).to(dt)
        y = torch.empty_like(x)
        d = infiniop.create_rms_norm_descriptor(H, _td(y), _td(x), _td(w), epsilon=1e-6)
        return ((lambda: (d.calculate(None, y, x, w), y)[1]),
                (lambda: F.rms_norm(x, (shape[-1],), w, 1e-6)), 2 * x.numel() * x.element_size())

    def x_to_y(create, theirs):
        """A one-input row operator: ours made by ``create(y, x)`` (descriptors), torch's
        ``theirs(x)``."""
        def make(dev, dt, shape):
            x = (4 * torch.randn(shape, device=dev)).to(dt)
            y = torch.empty_like(x)
            d = create(_td(y), _td(x))
            return ((lambda: (d.calculate(None, y, x), y)[1]), (lambda: theirs(x)),
                    2 * x.numel() * x.element_size())
        return make

    softmax = x_to_y(lambda y, x: infiniop.create_softmax_descriptor(H, y, x, axis=-1),
                     lambda x: torch.softmax(x, -1))
    logsoftmax = x_to_y(lambda y, x: infiniop.create_logsoftmax_descriptor(H, y, x, dim=-1),
                        lambda x: torch.log_softmax(x, -1))

    def causal(dev, dt, shape):
        x = (4 * torch.randn(shape, device=dev)).to(dt)
        y = torch.empty_like(x)
        n, m = shape[-2:]
        masked = torch.ones(n, m, device=dev, dtype=torch.bool).triu(m - n + 1)
        d = infiniop.create_causal_softmax_descriptor(H, _td(y), _td(x))
        return ((lambda: (d.calculate(None, y, x), y)[1]),
                (lambda: torch.softmax(x.masked_fill(masked, float("-inf")), -1)),
                2 * x.numel() * x.element_size())

    def add_rms(dev, dt, shape):
        a, b = torch.randn(shape, device=dev).to(dt), torch.randn(shape, device=dev).to(dt)
        w = torch.rand(shape[-1], device=dev).to(dt)
        y, r = torch.empty_like(a), torch.empty_like(a)
        d = infiniop.create_add_rms_norm_descriptor(H, _td(y), _td(r), _td(a), _td(b), _td(w),
                                                    epsilon=1e-6)
        return ((lambda: (d.calculate(None, y, r, a, b, w), y)[1]),
                (lambda: F.rms_norm(a + b, (shape[-1],), w, 1e-6)), 4 * a.numel() * a.element_size())

    def layer_norm(dev, dt, shape):
        x = torch.randn(shape, device=dev).to(dt)
        w, b = torch.rand(shape[-1], device=dev).to(dt), torch.randn(shape[-1], device=dev).to(dt)
        y, z = torch.empty_like(x), torch.empty_like(x)
        std = torch.empty(shape[:-1], device=dev, dtype=dt)
        d = infiniop.create_layer_norm_descriptor(H, _td(y), _td(z), _td(std), _td(x), _td(w),
                                                  _td(b), eps=1e-5)
        return ((lambda: (d.calculate(None, y, z, std, x, w, b), y)[1]),
                (lambda: F.layer_norm(x, (shape[-1],), w, b, 1e-5)), 3 * x.numel() * x.element_size())

    def rope(dev, dt, shape):  # GPT-NeoX, positions not in order; torch: what a user composes
        seq, _, dh = shape
        x = torch.randn(shape, device=dev).to(dt)
        pos = torch.randperm(max(4096, seq), device=dev)[:seq].to(torch.int32)
        ang = 10 * torch.rand(max(4096, seq), dh // 2, device=dev)
        sin, cos = ang.sin().to(dt), ang.cos().to(dt)
        y = torch.empty_like(x)
        d = infiniop.create_rope_descriptor(H, _td(y), _td(x), _td(pos), _td(sin), _td(cos), 1)

        def theirs():
            s, c = sin[pos.long()].unsqueeze(1).float(), cos[pos.long()].unsqueeze(1).float()
            a, b = x[..., :dh // 2].float(), x[..., dh // 2:].float()
            return torch.cat([a * c - b * s, a * s + b * c], -1).to(dt)
        return ((lambda: (d.calculate(None, y, x, pos, sin, cos), y)[1]), theirs,
                2 * x.numel() * x.element_size())

    shapes = ({"rms_norm": (64, 256), "softmax": (64, 256), "causal_softmax": (2, 32, 32),
               "logsoftmax": (64, 256), "add_rms_norm": (64, 256), "layer_norm": (64, 256),
               "rope": (16, 4, 32), "rope decode": (1, 4, 32)} if smoke
              else {"rms_norm": (2048, 4096), "softmax": (4096, 4096),
                    "causal_softmax": (32, 2048, 2048), "logsoftmax": (4096, 4096),
                    "add_rms_norm": (2048, 4096), "layer_norm": (2048, 4096),
                    "rope": (2048, 32, 128), "rope decode": (1, 32, 128)})
    makers = (("rms_norm", rms), ("softmax", softmax), ("causal_softmax", causal),
              ("logsoftmax", logsoftmax), ("add_rms_norm", add_rms), ("layer_norm", layer_norm),
              ("rope", rope), ("rope decode", rope))
    return [(op.split()[0], dt, shapes[op], "rows" if op != "rope decode" else "decode", make)
            for op, make in makers for dt in (torch.float32, torch.float16, torch.bfloat16)]


def per_call_rows(dev, n: int, calls: int, smoke: bool):
    """Host time per call of a small sub (what a launch costs end to end), ours vs torch:
    ``calls`` back-to-back calls, then one synchronize; the best of 5 such runs. Also two
    lighter paths of ours: the compiled kernel launched directly (no Triton JIT dispatch) and
    a CUDA graph of 100 calls replayed (per call)."""
    a = torch.randn(n, device=dev)
    b = torch.randn(n, device=dev)
    c = torch.empty(n, device=dev)
    d = infiniop.create_sub_descriptor(H, _td(c), _td(a), _td(b))
    sync = (lambda: None) if smoke else torch.cuda.synchronize

    def per_call(fn, k=calls):
        fn()
        sync()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            sync()
            best = min(best, (time.perf_counter() - t0) / k)
        return best * 1e6

    out = {"ours": per_call(lambda: d.calculate(None, c, a, b)),
           "torch": per_call(lambda: torch.sub(a, b, out=c)),
           "torch_functional": per_call(lambda: torch.sub(a, b)),
           "ours_functional": per_call(lambda: infiniop.sub(a, b))}
    if smoke:
        return out
    try:  # the compiled kernel, launched without the JIT's per-call binding
        launch = d._kernel.launch
        ptrs = launch._memory([c.data_ptr(), a.data_ptr(), b.data_ptr()])
        args = (*ptrs, *launch.scalars)
        ck = launch._kernel(*args, **launch._kw)
        from triton import knobs

        dev_idx = torch.cuda.current_device()
        from triton.runtime import driver

        st = driver.active.get_current_stream(dev_idx)
        allargs = (*args, *launch.constexprs.values())
        g = launch.grid

        def direct():
            ck.run(g[0], 1, 1, st, ck.function, ck.packed_metadata, None,
                   knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *allargs)
        direct()
        sync()
        want = a - b
        c.zero_()
        direct()
        sync()
        out["ours_direct_ok"] = bool(torch.equal(c, want))
        out["ours_direct"] = per_call(direct)
    except Exception as e:  # noqa: BLE001 - a probe: report what broke
        out["ours_direct_error"] = repr(e)[:300]
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                d.calculate(None, c, a, b)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(100):
                d.calculate(None, c, a, b)
        out["ours_graph100_per_call"] = per_call(graph.replay, max(1, calls // 100)) / 100
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            for _ in range(100):
                torch.sub(a, b, out=c)
        out["torch_graph100_per_call"] = per_call(tg.replay, max(1, calls // 100)) / 100
    except Exception as e:  # noqa: BLE001
        out["graph_error"] = repr(e)[:300]
    return out


def main(argv=None) -> int:
    global H
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="nvidia")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller tensors (64 MiB class)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run each (interpreter)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    try:
        H = infiniop.create_handle(a.device, a.device_id)
    except infiniop.InfiniError as e:
        print(f"no {a.device} device to benchmark: {e}")
        print("nothing measured here (the README's GPU table comes from an H200).")
        return 0
    smoke = a.smoke or H.backend.INTERPRET
    if smoke and not a.smoke:
        print("TRITON_INTERPRET=1: running the smoke configuration (tiny sizes, not a benchmark)")
    dev = "cpu" if H.backend.MEMORY_KIND == "cpu" else f"cuda:{a.device_id}"
    bench = timer(smoke)
    side = 64 if smoke else (4096 if a.quick else 8192)
    nchw = (2, 8, 5, 7) if smoke else ((32, 64, 56, 56) if a.quick else (64, 256, 56, 56))
    ceiling = copy_bandwidth(dev, (SMOKE_SCALE if smoke else side * side) * 16, bench)
    name = "cpu (interpreter)" if dev == "cpu" else torch.cuda.get_device_name(a.device_id)
    print(f"device: {name}; copy bandwidth {ceiling:.1f} GB/s; triton "
          f"{__import__('triton').__version__}; torch {torch.__version__}")
    hdr = (f"{'op':<15}{'dtype':<10}{'shape':<20}{'layout':<13}{'ours us':>10}{'torch us':>10}"
           f"{'torch/ours':>11}{'GB/s':>9}{'% copy':>8}{'% same-size copy':>17}")
    print(hdr)
    print("-" * len(hdr))
    out = []
    rows = (elementwise_rows(side) + rearrange_rows(side, nchw) + activation_rows(side)
            + normalisation_rows(smoke))
    for op, dt, shape, layout, make in rows:
        ours, theirs, nbytes = make(dev, dt, shape)
        got, want = ours(), theirs()  # rows whose ``ours`` returns its output: agreement too
        diff = None if got is None else float((got.double() - want.double()).abs().max())
        t_ours, t_torch = bench(ours), bench(theirs)
        gbs = nbytes / (t_ours * 1e-3) / 1e9
        same = copy_bandwidth(dev, nbytes // 2, bench)
        row = dict(op=op, dtype=str(dt).split(".")[-1], shape=list(shape), layout=layout,
                   ours_us=t_ours * 1e3, torch_us=t_torch * 1e3, ratio=t_torch / t_ours,
                   gbps=gbs, pct_copy=100 * gbs / ceiling, pct_same_size_copy=100 * gbs / same,
                   max_abs_diff_vs_torch=diff)
        out.append(row)
        print(f"{op:<15}{row['dtype']:<10}{str(tuple(shape)):<20}{layout:<13}"
              f"{row['ours_us']:>10.1f}{row['torch_us']:>10.1f}{row['ratio']:>11.2f}"
              f"{gbs:>9.1f}{row['pct_copy']:>7.0f}%{row['pct_same_size_copy']:>16.0f}%"
              + ("" if diff is None else f"  |ours - torch| <= {diff:.2g}"))
    small = per_call_rows(dev, 4096, 20 if smoke else 2000, smoke)
    print("per call, sub of 4096 float32 (host us per call, calls queued back to back): "
          + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in small.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": name, "copy_gbps": ceiling, "smoke": smoke,
                       "platform": platform.platform(), "rows": out, "per_call_4k": small},
                      f, indent=1)
    return 0


H = None

if __name__ == "__main__":
    sys.exit(main())
