"""Memory: a bounded soak shows no growth of resident memory, and the caches stay bounded
(issue #7).

The soak creates and destroys descriptors, runs them (NumPy fast path, torch general path, raw
addresses), calls the functional front end, ``rearrange`` and ``copy_``, and makes calls that
fail (an exception that kept its frames alive would keep their arrays alive). A warm-up long
enough to compile every kernel and fill every cache comes first; then resident memory
(``/proc/self/statm``) is measured, the soak runs, and it is measured again.

Two workloads, two bounds:

- steady (every layout fits the caches): ``STEADY_BOUND`` = 6 MiB. Every array the soak
  allocates is at most 256 KiB and freed within its round and no cache grows, so a correct
  library keeps RSS flat. Measured: +0.04 to +0.3 MiB over the 4 s CI soak; over 5M operations
  one step of +1.9 MiB early on (allocator arenas), then flat to the KiB. The bound is that
  step with 3x headroom. A leak of ~90 bytes per operation exceeds it within the CI soak
  (~70k operations); the long run (3M operations) catches ~2 bytes per operation.
- churn (more distinct layouts than the functional LRU's 1024 entries and rearrange's 256
  plans, so every round evicts): descriptors are created and dropped by the caches all the time,
  and pymalloc/glibc arenas fragment: measured RSS steps of 1-4 MiB that stop growing (up to
  13 MiB in 15 s, +10 MiB over 3M operations). Raw RSS is a weak signal here, so
  ``CHURN_BOUND`` = 32 MiB, and the precise check is a census: the number of live descriptor
  objects never exceeds what the bounded caches can hold (no Python object count grows: checked
  with gc.get_objects() over 400k operations while writing this).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import torch

import infiniop
from infiniop import DType, InfiniError, memory
from infiniop import TensorDescriptor as TD
from infiniop.elementwise import functional
from infiniop.rearrange import copy_, create_rearrange_descriptor, pattern, rearrange

REARRANGE = sys.modules["infiniop.rearrange.functional"]  # (infiniop.rearrange is the function)

LONG = os.environ.get("INFINIOP_LONG") == "1"
STEADY_BOUND = 6 << 20  # bytes; see the module docstring
CHURN_BOUND = 32 << 20
CI_SECONDS = float(os.environ.get("INFINIOP_SOAK_SECONDS", 4))  # per workload, after warm-up
LONG_CALLS = 3_000_000  # operations in the long run
F32 = DType.F32
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """Resident set size in bytes (/proc/self/statm: pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Soak:
    """One round of every kind of call; ``round(i)`` returns how many operations it made."""

    def __init__(self, handle):
        self.h = handle
        rng = np.random.default_rng(0)
        self.a = rng.integers(-9, 9, (64, 64)).astype(np.float32)
        self.b = rng.integers(-9, 9, (64,)).astype(np.float32)
        self.c = rng.random((64, 64)) < 0.5
        self.out = np.empty((64, 64), np.float32)
        self.big = np.ones(1 << 16, np.float32)
        self.big_out = np.empty(1 << 16, np.float32)
        d = TD(F32, (64, 64))
        self.long_lived = infiniop.create_mul_descriptor(self.h, d, d, TD(F32, (64,)))
        self.ta, self.tout = torch.from_numpy(self.a), torch.from_numpy(self.out)
        self.tb = torch.from_numpy(self.b)
        self.n_layouts = functional.CACHE_SIZE + 300  # more distinct layouts than the LRU holds

    def round(self, i: int, churn: bool) -> int:
        """One round; with ``churn`` the functional and rearrange layouts cycle over more
        distinct layouts than their caches hold."""
        h, a, b, out = self.h, self.a, self.b, self.out
        ops = 0
        # a descriptor created, used, destroyed (a few shapes: kernels are shared)
        n = 1 + i % 61
        d = TD(F32, (n, 64))
        desc = infiniop.create_add_descriptor(h, d, d, TD(F32, (64,)))
        desc.calculate(None, out[:n], a[:n], b)
        desc.destroy()
        with infiniop.create_where_descriptor(h, TD(F32, (64, 64)), TD(DType.BOOL, (64, 64)),
                                              TD(F32, (64, 64)), TD(F32, ())) as w:
            w.calculate(None, out, self.c, a, np.float32(1))
        ops += 4
        # the long-lived descriptor, many times: NumPy fast path, torch, raw addresses
        ll = self.long_lived
        for _ in range(20):
            ll.calculate(None, out, a, b)
        ll.calculate(None, self.tout, self.ta, self.tb)
        ll.calculate(None, out.ctypes.data, a.ctypes.data, b.ctypes.data)
        ops += 22
        # the functional front end over more layouts than its LRU holds
        k = 1 + (i * 7) % (self.n_layouts if churn else 200)
        infiniop.neg(self.big[:k], out=self.big_out[:k])
        infiniop.add(a, b, out=out)
        infiniop.clip(a, -1.0, b, out=out)
        r = infiniop.sub(a, b)  # allocates
        ops += 4
        # rearrange: descriptor, einops front end (more layouts than its plan cache), copy_
        m = 1 + i % (300 if churn else 100)
        with create_rearrange_descriptor(h, TD(F32, (m, 64), (1, m)), TD(F32, (m, 64))) as rd:
            t = np.empty((64, m), np.float32)
            rd.calculate(t.T, self.big[:m * 64].reshape(m, 64))
        r = rearrange(self.big[:m * 64].reshape(m, 64), "p q -> q p")
        copy_(out, b)
        ops += 4
        # failing calls: the exception and its traceback must not keep anything alive
        for bad in (lambda: infiniop.add(a, self.big[:3]),
                    lambda: ll.calculate(None, out[:1], a, b),
                    lambda: rearrange(a, "p q -> q"),
                    lambda: infiniop.create_add_descriptor(h, TD(F32, (2,)), TD(F32, (3,)),
                                                           TD(F32, (2,)))):
            try:
                bad()
            except InfiniError:
                pass
            ops += 1
        del r
        return ops


def soak(seconds: float, max_ops: int, churn: bool) -> tuple[int, int, int]:
    """(operations, rss before, rss after) for a soak of at most ``seconds`` / ``max_ops``."""
    s = Soak(infiniop.create_handle("cpu"))
    i = 0
    for i in range(s.n_layouts + 400 if churn else 300):  # warm-up: compile, fill the caches
        s.round(i, churn)
    gc.collect()
    before = rss()
    ops, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline and ops < max_ops:
        i += 1
        ops += s.round(i, churn)
    gc.collect()
    after = rss()
    check_cache_bounds()
    check_descriptor_census()
    return ops, before, after


def check_cache_bounds() -> None:
    assert len(functional._cache) <= functional.CACHE_SIZE
    assert len(functional._descriptors) <= functional.CACHE_SIZE
    assert len(REARRANGE._COPIES) <= REARRANGE._CACHE_SIZE
    assert len(REARRANGE._PLANS) <= REARRANGE._PLAN_CACHE_SIZE
    info = pattern._parse.cache_info()  # parse() checks the type, then the cached _parse
    assert info.currsize <= info.maxsize


def check_descriptor_census() -> None:
    """Live descriptor objects: no more than the bounded caches (and this test) hold."""
    from infiniop.elementwise import ElementwiseDescriptor
    from infiniop.rearrange import RearrangeDescriptor

    gc.collect()
    live = gc.get_objects()
    # type(), not isinstance(): a dead weakref.proxy (Numba leaves some) raises on the latter
    ew = sum(issubclass(type(o), ElementwiseDescriptor) for o in live)
    rd = sum(issubclass(type(o), RearrangeDescriptor) for o in live)
    assert ew <= 2 * functional.CACHE_SIZE + 16, f"{ew} live elementwise descriptors"
    assert rd <= REARRANGE._PLAN_CACHE_SIZE + REARRANGE._CACHE_SIZE + 16, \
        f"{rd} live rearrange descriptors"


def report(ops, before, after, seconds, bound) -> str:
    return (f"{ops} operations in {seconds:.1f} s: RSS {before / 2**20:.1f} -> "
            f"{after / 2**20:.1f} MiB (growth {(after - before) / 2**10:+.0f} KiB, bound "
            f"{bound >> 20} MiB)")


@pytest.mark.parametrize("churn, bound", [(False, STEADY_BOUND), (True, CHURN_BOUND)],
                         ids=["steady", "churn"])
def test_soak_rss_stays_flat(churn, bound):
    t = time.perf_counter()
    ops, before, after = soak(CI_SECONDS, 10**9, churn)
    msg = report(ops, before, after, time.perf_counter() - t, bound)
    print(msg)
    assert ops > 10_000, "the soak did too little to mean anything: " + msg
    assert after - before < bound, msg


@pytest.mark.long
@pytest.mark.skipif(not LONG, reason="long soak: run with --long or INFINIOP_LONG=1")
@pytest.mark.parametrize("churn, bound", [(False, STEADY_BOUND), (True, CHURN_BOUND)],
                         ids=["steady", "churn"])
def test_soak_long_millions_of_calls(churn, bound):
    t = time.perf_counter()
    ops, before, after = soak(3600, LONG_CALLS, churn)
    msg = report(ops, before, after, time.perf_counter() - t, bound)
    print(msg)
    assert ops >= LONG_CALLS, msg
    assert after - before < bound, msg


def test_functional_lru_bound_is_enforced_and_documented():
    """The front end's two descriptor caches hold at most CACHE_SIZE (1024, the README's
    number) layouts each, dropping the least recently used."""
    assert functional.CACHE_SIZE == 1024
    readme = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
    with open(readme) as f:
        assert "LRU of 1024 layouts" in f.read(), "README no longer documents the LRU bound"
    functional.clear_cache()
    x = np.arange(2000, dtype=np.float32)
    n = functional.CACHE_SIZE + 100
    for k in range(1, n + 1):
        assert infiniop.neg(x[:k])[-1] == -(k - 1)
        assert len(functional._cache) <= functional.CACHE_SIZE
        assert len(functional._descriptors) <= functional.CACHE_SIZE
    assert len(functional._cache) == functional.CACHE_SIZE
    assert len(functional._descriptors) == functional.CACHE_SIZE
    keys = list(functional._cache)
    # the most recent layouts are kept, the oldest dropped
    assert any(key[2][0] == (n,) for key in keys)
    assert not any(key[2][0] == (1,) for key in keys)
    functional.clear_cache()
    assert len(functional._cache) == 0 and len(functional._descriptors) == 0


@pytest.mark.parametrize("shape", [(-1,), (2, -3), (-1, -2), (0, -1)])
def test_empty_aligned_refuses_negative_dimensions(shape):
    """As np.empty does (a buffer-backed constructor would take -1 as "whatever fits")."""
    with pytest.raises(ValueError, match="negative"):
        infiniop.empty_aligned(shape, np.float32)


# ---------------------------------------------------------------------------------------------
# Recycled output buffers (memory.py): outputs of RECYCLE_MIN bytes and more
# ---------------------------------------------------------------------------------------------

BIG = memory.RECYCLE_MIN // 4 + 16  # float32 elements of a recycled output


def test_large_outputs_are_recycled_only_when_nothing_refers_to_them():
    x = infiniop.empty_aligned((BIG,), np.float32)
    assert x.ctypes.data % 64 == 0 and x.shape == (BIG,) and x.dtype == np.float32
    addr = x.ctypes.data
    view = x[3:]  # a view keeps the buffer busy
    del x
    y = infiniop.empty_aligned((BIG,), np.float32)
    assert y.ctypes.data != addr
    del view
    z = infiniop.empty_aligned((2, BIG // 2), np.int32)  # the same bytes: the idle buffer again
    assert z.ctypes.data == addr and z.shape == (2, BIG // 2) and z.dtype == np.int32
    small = infiniop.empty_aligned((memory.RECYCLE_MIN // 8,), np.float32)
    assert small.nbytes not in memory._pool  # below the minimum: malloc's, as before
    del y, z
    assert infiniop.release_idle_buffers() >= 2 * 4 * BIG
    assert not memory._pool.get(4 * BIG)


def test_recycled_buffers_stay_within_the_bound(monkeypatch):
    monkeypatch.setattr(memory, "POOL_BYTES", memory._pooled + (8 << 20))
    five, six = 5 << 20, 6 << 20
    w = memory.recycled_empty((five // 4,), np.float32, five)
    kept = memory.recycled_empty((six // 4,), np.float32, six)  # no room left: not pooled
    assert six not in memory._pool or not memory._pool[six]
    del w, kept
    v = memory.recycled_empty((six // 4,), np.float32, six)  # the idle 5 MiB buffer makes room
    assert not memory._pool[five] and len(memory._pool[six]) == 1
    assert memory._pooled <= memory.POOL_BYTES
    too_big = memory.recycled_empty((memory.POOL_BYTES // 4 + 1,), np.float32,
                                    memory.POOL_BYTES + 4)
    assert too_big.nbytes not in memory._pool and too_big.ctypes.data % 64 == 0
    del v, too_big


def _pooled_addresses() -> set[int]:
    return {b.ctypes.data + -b.ctypes.data % 64 for bufs in memory._pool.values() for b in bufs}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
def test_functional_outputs_in_recycled_buffers_keep_their_values(dtype):
    """A freed output's buffer serves the next call; a live one is never written again."""
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    n = memory.RECYCLE_MIN // dt.itemsize + 64
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(dt)
    b = rng.standard_normal(n).astype(dt)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want_ab, want_ba = ((p - q).astype(np.float32).astype(dt) for p, q in ((a64, b64), (b64, a64)))
    y = infiniop.sub(a, b)
    assert np.array_equal(y.view(np.uint8), want_ab.view(np.uint8))
    del y
    pooled = memory._pooled
    y2 = infiniop.sub(b, a)  # a freed buffer again: no new memory
    addr = y2.ctypes.data
    assert memory._pooled == pooled and addr in _pooled_addresses()
    assert np.array_equal(y2.view(np.uint8), want_ba.view(np.uint8))
    y3 = infiniop.sub(a, b)  # y2 is alive: another buffer
    assert y3.ctypes.data != addr
    assert np.array_equal(y2.view(np.uint8), want_ba.view(np.uint8))
    rows = a.reshape(-1, 64)  # row operators take theirs from the same pool
    s = infiniop.softmax(rows, axis=-1)
    assert s.ctypes.data not in (addr, y3.ctypes.data)
    want = np.exp(rows.astype(np.float64) - rows.astype(np.float64).max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(s.astype(np.float64), want, rtol=1e-2 if dt.itemsize == 2 else 1e-6,
                               atol=1e-3 if dt.itemsize == 2 else 1e-7)
    del y2, y3, s
    infiniop.release_idle_buffers()


def test_recycled_buffers_under_threads():
    """Threads allocating and dropping large outputs at once: no live array shares memory with
    another (each thread's marks survive the others' allocations)."""
    errors = []

    def work(tid):
        held = []
        for k in range(12):
            x = infiniop.empty_aligned((BIG,), np.float32)
            mark = np.float32(tid * 100 + k)
            x[:1024] = mark
            x[-1024:] = mark
            held.append((x, mark))
            if len(held) > 2:
                held.pop(0)
            time.sleep(0)
            for arr, m in held:
                if not (arr[:1024] == m).all() or not (arr[-1024:] == m).all():
                    errors.append((tid, k))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert memory._pooled <= memory.POOL_BYTES
    infiniop.release_idle_buffers()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_and_rearrange_outputs_in_recycled_buffers(dtype):
    """CPU tensors the front end allocates (elementwise, rows, rearrange) and rearrange's NumPy
    outputs come from the same buffers."""
    isz = torch.empty((), dtype=dtype).element_size()
    n = memory.RECYCLE_MIN // isz + 64
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=gen).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    want = (a.double() - b.double()).float().to(dtype)
    y = infiniop.sub(a, b)
    assert torch.equal(y, want) and y.data_ptr() % 64 == 0
    del y
    pooled = memory._pooled
    y2 = infiniop.sub(a, b)  # a freed buffer again
    assert memory._pooled == pooled and y2.data_ptr() in _pooled_addresses()
    assert torch.equal(y2, want)
    s = infiniop.softmax(a.view(-1, 64), axis=-1)  # y2 is alive: another buffer
    assert s.data_ptr() != y2.data_ptr() and s.data_ptr() in _pooled_addresses()
    torch.testing.assert_close(s.double(), torch.softmax(a.view(-1, 64).double(), -1),
                               rtol=1e-2, atol=1e-3)
    t = infiniop.rearrange(a.view(64, -1), "a b -> b a")
    assert torch.equal(t, a.view(64, -1).T) and t.data_ptr() in _pooled_addresses()
    assert torch.equal(y2, want)
    x = np.arange(n, dtype=np.float32).reshape(64, -1)
    r = infiniop.rearrange(x, "a b -> b a")
    r2 = infiniop.rearrange(x, "a b -> b a")  # the planned fast path
    assert np.array_equal(r, x.T) and np.array_equal(r2, x.T)
    assert {r.ctypes.data, r2.ctypes.data} <= _pooled_addresses()
    del y2, s, t, r, r2
    infiniop.release_idle_buffers()


def test_empty_aligned_reads_dtypes_as_tensor_descriptors_do():
    """infiniop's dtypes and names were a TypeError (bfloat16, "BF16") or read by NumPy ("f16"
    as float128, which TensorDescriptor refuses)."""
    from infiniop import InfiniError, Status

    for d in (infiniop.bfloat16, "BF16", "bfloat16", torch.bfloat16, ml_dtypes.bfloat16):
        a = infiniop.empty_aligned((2, 3), d)
        assert a.dtype == ml_dtypes.bfloat16 and a.shape == (2, 3) and a.ctypes.data % 64 == 0
    assert infiniop.empty_aligned(4, "f4").dtype == np.float32
    assert infiniop.empty_aligned(4, infiniop.float16).dtype == np.float16
    with pytest.raises(InfiniError) as e:
        infiniop.empty_aligned(4, "f16")
    assert e.value.status is Status.BAD_TENSOR_DTYPE and "float128" in str(e.value)
