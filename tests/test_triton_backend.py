"""The Triton backend outside the interpreter: device discovery, the vendor table, and the rules
every generated kernel follows (checked on the generated source of every variant)."""

from __future__ import annotations

import importlib.util
import os
import re
from types import SimpleNamespace

import pytest

import infiniop
from infiniop import Device, InfiniError, Status, TensorDescriptor
from infiniop.backends import triton as tb
from infiniop.backends.triton import codegen, vendors

HAS_TRITON = importlib.util.find_spec("triton") is not None
TRITON_DEVICES = ["nvidia", "metax", "moore", "iluvatar", "kunlun", "hygon"]


def _raises(status, fn, *args):
    with pytest.raises(InfiniError) as ei:
        fn(*args)
    assert ei.value.status is status, ei.value
    return str(ei.value)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_without_triton_the_device_type_is_not_supported(monkeypatch, device):
    monkeypatch.setattr(tb, "_installed", lambda name: name != "triton")
    msg = _raises(Status.DEVICE_TYPE_NOT_SUPPORTED, infiniop.create_handle, device)
    assert device in msg and "pip install 'infiniop[gpu]'" in msg


def test_without_torch_the_device_type_is_not_supported(monkeypatch):
    monkeypatch.setattr(tb, "_installed", lambda name: name != "torch")
    msg = _raises(Status.DEVICE_TYPE_NOT_SUPPORTED, infiniop.create_handle, "nvidia")
    assert "torch" in msg


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
@pytest.mark.skipif(tb.INTERPRET, reason="this process runs the interpreter")
@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_without_a_gpu_the_device_is_not_found(device):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    msg = _raises(Status.DEVICE_NOT_FOUND, infiniop.create_handle, device)
    assert device in msg and "TRITON_INTERPRET=1" in msg
    assert tb.MEMORY_KIND == "cuda"


def test_vendor_table():
    assert set(vendors.VENDORS) == {Device[d.upper()] for d in TRITON_DEVICES}
    for dev, cfg in vendors.VENDORS.items():
        assert cfg.vendor == dev.name.lower()
        for v in (cfg.block, cfg.tile, cfg.max_warps):
            assert v & (v - 1) == 0, (cfg, v)
        assert cfg.block % (cfg.warps_for(cfg.block) * cfg.warp_size) == 0
        for n in (1, 16, 1000, 1 << 20):
            w = cfg.warps_for(n)
            assert 1 <= w <= cfg.max_warps and w & (w - 1) == 0
        assert cfg.max_grid >= 65535
    metax = vendors.VENDORS[Device.METAX]
    assert metax.warp_size == 64 and metax.max_warps <= 8
    assert not vendors.VENDORS[Device.KUNLUN].fp64
    interp = vendors.config_for(Device.METAX, interpret=True)
    assert interp.block == vendors.INTERPRETER_BLOCK and interp.warp_size == 64


def test_flat_block_gives_a_thread_16_bytes_of_its_widest_dense_operand():
    """f16/bf16 programs keep 8 elements per thread, f32 take 4 and f64 2 (at 8, float32 math
    needed 93-136 registers on sm_90); a broadcast scalar operand does not count."""
    from infiniop.backends.triton.elementwise import flat_block
    from infiniop.dtype import DType
    from infiniop.elementwise.spec import REGISTRY
    from infiniop.ops import ALL  # noqa: F401  (defines every built-in: they load on first use)

    nv = vendors.VENDORS[Device.NVIDIA]

    def block(op, dts, pattern):
        spec = REGISTRY[op]
        sig = next(s for s in spec.signatures if s.dtypes == dts)
        return flat_block(nv, spec.program(sig), pattern)

    assert block("silu", (DType.F16,) * 2, "11") == (1024, 4)
    assert block("silu", (DType.BF16,) * 2, "11") == (1024, 4)
    assert block("silu", (DType.F32,) * 2, "11") == (512, 4)
    assert block("sub", (DType.F64,) * 3, "111") == (256, 4)
    assert block("sub", (DType.F16,) * 3, "110") == (1024, 4)
    eq = next(s for s in REGISTRY["equal"].signatures if s.dtypes[1] is DType.F32)
    assert flat_block(nv, REGISTRY["equal"].program(eq), "111") == (512, 4)   # bool <- f32
    assert flat_block(nv, REGISTRY["equal"].program(eq), "100") == (1024, 4)  # scalars only
    for cfg in vendors.VENDORS.values():   # whole warps of whole threads, a power of 2
        for width in (1, 2, 4, 8):
            per = max(1, min(cfg.elems_per_thread, 16 // width))
            b = cfg.block * per // cfg.elems_per_thread
            assert b & (b - 1) == 0 and b == cfg.warps_for(cfg.block) * cfg.warp_size * per


def _all_sources():
    from infiniop.backends.triton import aot

    return [(v.name, v.source()) for v in aot.variants(full=True)]


def test_generated_kernels_follow_the_rules():
    """int64 offsets, every load/store masked, no libdevice / inline asm / tuple parameters,
    fp16/bf16 widened to float32 and bf16 stored through the explicit RNE helper."""
    sources = _all_sources()
    assert len(sources) > 500
    for name, ks in sources:
        src = ks.source
        body = src.split("def kernel(", 1)[1]
        for call in re.findall(r"tl\.(?:load|store)\((.*)", body):
            assert "mask=" in call, (name, call)
        assert "tl.program_id(0).to(tl.int64)" in body, name
        for ar in re.findall(r"tl\.arange\([^)]*\)(\.to\(tl\.int64\))?", body):
            assert ar, name
        for banned in ("libdevice", "inline_asm", "tl.extra", "tl.bfloat16", "tl.clamp"):
            assert banned not in src, (name, banned)
        params = body.split(")", 1)[0]
        assert "(" not in params and "tuple" not in params, name
        loads = "tl.load(" in body  # ones/zeros read nothing
        stores = re.findall(r"tl\.store\((.*)", body)
        if all(re.search(r", v\d+, mask=", st) for st in stores) or len(set(ks.pointers)) > 1:
            continue  # raw copies (swap, blas_copy) convert nothing; mixed dtypes: per operand
        if "-bfloat16-" in name:
            assert ("bf16_to_f32(" in body or not loads) and "f32_to_bf16(" in body, name
        if "-float16-" in name:
            assert (".to(tl.float32)" in body or not loads) and ".to(tl.float16)" in body, name


def test_rank_is_specialised_not_limited():
    src = codegen.strided_source(codegen.copy_program(infiniop.DType.F32), "1g", 12).source
    assert "e10" in src and "s1_11" in src and "i10 = rem % e10" in src


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_gpu_benchmark_script_runs(tmp_path):
    """benchmarks/bench_gpu.py: without a GPU it says so; --smoke runs every row under the
    interpreter (tiny sizes) and writes its JSON."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "benchmarks", "bench_gpu.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    import torch

    if not torch.cuda.is_available():
        assert "nothing measured" in p.stdout
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, script, "--smoke", "--json", str(out)],
                       env=dict(env, TRITON_INTERPRET="1"), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    got = json.loads(out.read_text())
    rows = got["rows"]
    assert {r["op"] for r in rows} == {"sub", "clip", "rearrange", "silu", "sigmoid", "tanh",
                                       "gelu", "swiglu", "rms_norm", "softmax", "causal_softmax",
                                       "logsoftmax", "add_rms_norm", "layer_norm", "rope"}
    assert got["per_call_4k"]["ours"] > 0 and got["per_call_4k"]["torch"] > 0
    assert all(r["ours_us"] > 0 and r["torch_us"] > 0 and r["pct_same_size_copy"] > 0
               for r in rows)


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_rearrange_numpy_fast_path_only_on_host_memory():
    """A GPU handle's rearrange descriptor took NumPy arrays laid out as it says through its
    fast path, past the device check, and handed host addresses to its kernel (or np.copyto).
    Imitated in a fresh interpreter process: the Triton handle with a real GPU's memory kind."""
    import subprocess
    import sys

    code = (
        "import numpy as np, infiniop\n"
        "from infiniop import TensorDescriptor as TD\n"
        "h = infiniop.create_handle('nvidia')\n"
        "h.backend.MEMORY_KIND = 'cuda'\n"
        "d = infiniop.create_rearrange_descriptor(h, TD('float32', (4, 5)), TD('float32', (4, 5)))\n"
        "dst = np.zeros((4, 5), np.float32)\n"
        "try:\n"
        "    d.calculate(dst, np.ones((4, 5), np.float32))\n"
        "except infiniop.InfiniError as e:\n"
        "    print(e.status.name, 'lives on cpu' in str(e), dst.any())\n")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TRITON_INTERPRET="1"),
                       capture_output=True, text=True, timeout=300)
    assert p.stdout.split() == ["BAD_PARAM", "True", "False"], (p.stdout + p.stderr)[-2000:]


def test_gpu_tile_sweep_script_without_a_gpu():
    """benchmarks/sweep_gpu_tiles.py: its rows are bench_gpu.py's transposed ones; without a
    GPU (or under the interpreter) it says so and exits 0."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "benchmarks"))
    try:
        import sweep_gpu_tiles
    finally:
        sys.path.pop(0)
    rows = sweep_gpu_tiles.rows(64, (2, 8, 5, 7))
    assert [r[3] for r in rows].count("transposed") == 3 and len(rows) == 9
    p = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "sweep_gpu_tiles.py")],
                       env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "nothing to time" in p.stdout, (p.stdout + p.stderr)[-2000:]


def test_device_fast_path_takes_only_what_the_descriptor_describes():
    """The GPU descriptors' per-call check (elementwise/descriptor.py), exercised on CPU tensors
    (whose get_device() is -1): exact layouts launch with the addresses; anything else (another
    layout, dtype or device, an overlap, a raw address) is left to the general path."""
    import torch

    from infiniop.elementwise.descriptor import _device_fast_path

    h = infiniop.create_handle("cpu")
    a, b = torch.randn(4, 6), torch.randn(6, 4).t()
    c = torch.empty(4, 6)
    d = infiniop.create_sub_descriptor(h, *(TensorDescriptor.from_array(t) for t in (c, a, b)))
    calls = []
    fast = _device_fast_path(lambda addrs, stream: calls.append((addrs, stream)), d.info,
                             d.spec.operands, -1)
    assert fast((c, a, b), "s")
    assert calls == [((c.data_ptr(), a.data_ptr(), b.data_ptr()), "s")]
    assert not fast((c, a, b.contiguous()), None)          # other strides
    assert not fast((c, a.double(), b), None)              # other dtype
    assert not fast((c, c, b), None)                       # in place: the exact check decides
    big = torch.empty(48)
    assert not fast((big[:24].view(4, 6), big[12:36].view(4, 6), b), None)  # partial overlap
    assert not fast((c.data_ptr(), a, b), None)            # raw address
    assert not fast((c, a), None)                          # too few
    gd = _device_fast_path(lambda *x: None, d.info, d.spec.operands, 0)
    assert not gd((c, a, b), None)                         # not on that device
    assert len(calls) == 1


def test_row_and_rope_descriptors_share_the_device_fast_path():
    """Row and rope descriptors get the same per-call check as elementwise ones on a GPU (their
    general checks cost 30-110 us per call on an H200 machine's host, the kernels 1.5-43 us).
    Exercised on CPU tensors: exact layouts launch through it and give the general path's
    values; in place (allowed, but decided by the exact check), an absent optional operand
    passed as a tensor and host positions on another device go the general way."""
    import torch

    from infiniop.elementwise.descriptor import device_fast_path
    from infiniop.rows.rope import _OPERANDS as ROPE_OPERANDS

    h = infiniop.create_handle("cpu")
    td = TensorDescriptor.from_array
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(6, 40, generator=g), torch.randn(40, generator=g)
    pos = torch.tensor([5, 0, 3], dtype=torch.int32)
    ang = torch.rand(8, 4, generator=g)
    sin, cos = ang.sin(), ang.cos()
    q = torch.randn(3, 2, 8, generator=g)
    cases = [  # (descriptor maker, buffers, ops)
        (lambda *b: infiniop.create_rms_norm_descriptor(h, *map(td, b), epsilon=1e-6),
         [torch.empty(6, 40), x, w], None),
        (lambda *b: infiniop.create_layer_norm_descriptor(
            h, *(None if t is None else td(t) for t in b), eps=1e-5),
         [torch.empty(6, 40), torch.empty(6, 40), torch.empty(6), x, w, None], None),
        (lambda *b: infiniop.create_rope_descriptor(h, *map(td, b), 1),
         [torch.empty(3, 2, 8), q, pos, sin, cos], ROPE_OPERANDS)]
    gpu = SimpleNamespace(backend=SimpleNamespace(MEMORY_KIND="cuda"), device_id=-1)
    for make, bufs, ops in cases:
        want = [t if t is None else t.clone() for t in bufs]
        make(*want).calculate(None, *want)  # the general path
        d = make(*bufs)
        launched = []

        class Recorded:  # the CPU kernel, counting the launches that come through the fast path
            def launch_pointers(self, addrs, stream=None, d=d, launched=launched):
                launched.append(addrs)
                return d._kernel.launch_pointers(list(addrs))

        d._fast_device = fast = device_fast_path(gpu, Recorded(), d.info, ops or d.spec.operands)
        d.calculate(None, *bufs)
        assert len(launched) == 1
        assert all(torch.equal(a, b) for a, b in zip(bufs, want) if a is not None)
        if len(bufs) == 3:
            assert not fast([x, x, w], None)                      # in place: the general path
            assert not fast([bufs[0], x.t().contiguous().t(), w], None)  # other strides
        if len(bufs) == 6:
            assert not fast(bufs[:5] + [w], None)                 # bias given where none was
        if ops is not None:
            assert not fast(bufs[:2] + [pos.long()] + bufs[3:], None)  # other position dtype
        assert len(launched) == 1
    assert device_fast_path(h, d._kernel, d.info, ROPE_OPERANDS) is None  # host memory: none


def test_direct_launch_passes_what_the_jit_was_given():
    """direct_launch.py without a GPU: a fake compiled kernel records the launcher call; the
    unrolled ``fast`` form and ``launch`` pass the same arguments, keyed by alignment."""
    from infiniop.backends.triton import direct_launch as dlm

    runs = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *args):
            runs.append(args)

    from triton import knobs

    dl = dlm.DirectLaunch([0, 8, 16], 7, ("tail", 3), 0)
    assert not dl.launch([64, 128, 256], None)           # nothing compiled yet: the JIT's turn
    dl._knobs = knobs.runtime                            # as a GPU's driver would answer:
    dl._device, dl._stream = (lambda: 0), (lambda dev: 1234)
    dl.remember([64, 128, 256], Compiled())
    assert dl.launch([64, 128, 256], None)
    go = dl.fast([2, 0, 1])                               # kernel pointer j = user operand order[j]
    assert go((128, 256, 64), 99)
    assert not go((128, 264, 64), None)                   # another alignment: not compiled yet
    want = (7, 1, 1, 1234, "fn", "meta", None, None, None, 64, 136, 272, "tail", 3)
    assert runs == [want, want[:3] + (99,) + want[4:]]
    dl._device = lambda: 1
    assert not dl.launch([64, 128, 256], None) and not go((128, 256, 64), None)  # other device


def test_functional_gpu_shortcut_defers_to_the_descriptor_check():
    """The functional front end's shortcut for GPU calls (functional._last_device_call): a
    CPU descriptor is given a device fast path that accepts CPU tensors (get_device() == -1)
    and runs through raw addresses, so the shortcut's bookkeeping runs without a GPU."""
    import torch

    from infiniop.elementwise import functional as F
    from infiniop.elementwise.descriptor import _device_fast_path

    F.clear_cache()
    a, b = torch.randn(5, 7), torch.randn(7)
    first = infiniop.sub(a, b)                       # general path: plans, caches the descriptor
    assert torch.equal(first, a - b)                 # float32 sub: torch rounds the same
    (desc, *_), = [v for k, v in F._cache.items() if k[1] == "torch"]
    launched = []

    def launch(addrs, stream):
        launched.append(addrs)
        desc.calculate(None, *addrs)                 # trusted raw addresses: the CPU kernel

    desc._fast_device = _device_fast_path(launch, desc.info, desc.spec.operands, -1)
    second = infiniop.sub(a, b)                      # keyed hit: the descriptor's fast path
    third = infiniop.sub(a, b)                       # the shortcut: no key built
    out = torch.empty(5, 7)
    assert infiniop.sub(a, b, out=out) is out
    assert len(launched) == 3 and F._last_device_call
    for got in (second, third, out):
        assert torch.equal(got, first) and got.shape == (5, 7)
    other = infiniop.sub(a[:, :3], b[:3])            # other shapes: past the shortcut, correct
    assert torch.equal(other, a[:, :3] - b[:3]) and len(launched) == 3
    at = a.t().contiguous().t()                      # same shape, other strides / dtype: the
    for x, y in ((at, b), (a.double(), b.double())):  # descriptor's check sends them past it
        got = infiniop.sub(x, y)
        assert torch.equal(got, x - y) and got.dtype == x.dtype and got.stride() == (x - y).stride()
    assert len(launched) == 3
    assert torch.equal(infiniop.sub(a, b), first) and len(launched) == 4  # still the shortcut
    F.clear_cache()
    assert not F._last_device_call
