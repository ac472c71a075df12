"""Concurrency: descriptors, the functional front end and the kernel cache under threads and
processes (issue #7).

- one descriptor used from several threads at once, small (serial kernel) and large (parallel
  kernel, more than ``PARALLEL_THRESHOLD`` = 262144 elements) calls, results checked every time;
- many descriptors created, used and destroyed concurrently;
- the functional front end (and ``rearrange`` / ``copy_``) from threads while its LRU evicts;
- the kernel cache on first use: threads of one process, and two processes started at the same
  moment on the same EMPTY cache directory (``INFINIOP_CACHE_DIR``): both get correct results,
  and every generated module file is whole (its name carries the hash of its content).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from test_isolation import PRELUDE, check_isolated, child_env, describe_exit

import infiniop
from infiniop import DType
from infiniop import TensorDescriptor as TD
from infiniop.backends.cpu import codegen, runtime
from infiniop.elementwise import functional
from infiniop.rearrange import copy_, create_rearrange_descriptor, rearrange

F32 = DType.F32
THREADS = 4  # more threads than the 2 vCPUs: they really interleave
LARGE = runtime.PARALLEL_THRESHOLD + 37_851  # a parallel (TBB) kernel, odd length


def run_threads(fn, n=THREADS, timeout=120):
    """Run ``fn(index)`` in n threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below with its thread
            errors.append((i, e))

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        i, e = errors[0]
        raise AssertionError(f"thread {i} of {n} failed ({len(errors)} failed): {e!r}") from e


@pytest.fixture(scope="module")
def handle():
    return infiniop.create_handle("cpu")


@pytest.mark.parametrize("n, iters", [(1000, 300), (LARGE, 6)], ids=["serial", "parallel"])
@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_one_descriptor_many_threads(handle, n, iters, path):
    d = TD(F32, (n,))
    desc = infiniop.create_sub_descriptor(handle, d, d, d)
    shared = np.arange(n, dtype=np.float32)  # every thread reads it

    def work(i):
        rng = np.random.default_rng(i)
        for it in range(iters):
            a = rng.integers(-1000, 1000, n).astype(np.float32)
            out = np.full(n, np.nan, np.float32)
            if path == "torch":
                import torch

                desc.calculate(None, torch.from_numpy(out), torch.from_numpy(a),
                               torch.from_numpy(shared))
            else:
                desc.calculate(None, out, a, shared)
            assert np.array_equal(out, a - shared), (i, it)

    run_threads(work)


@pytest.mark.parametrize("shape, iters", [((40, 50), 200), ((600, 500), 4)],
                         ids=["serial", "parallel"])
def test_one_rearrange_descriptor_many_threads(handle, shape, iters):
    rows, cols = shape
    desc = create_rearrange_descriptor(handle, TD(F32, shape, (1, rows)), TD(F32, shape))

    def work(i):
        for it in range(iters):
            src = np.arange(rows * cols, dtype=np.float32).reshape(shape) + (i * 1000 + it)
            dst = np.empty((cols, rows), np.float32)
            desc.calculate(dst.T, src)
            assert np.array_equal(dst.T, src), (i, it)

    run_threads(work)


def test_many_descriptors_created_and_used_concurrently(handle):
    ops = [(infiniop.create_add_descriptor, np.add, 2), (infiniop.create_mul_descriptor,
                                                         np.multiply, 2),
           (infiniop.create_neg_descriptor, np.negative, 1),
           (infiniop.create_clip_descriptor, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), 3)]

    def work(i):
        rng = np.random.default_rng(100 + i)
        for it in range(60):
            create, ref, arity = ops[(i + it) % len(ops)]
            n = int(rng.integers(1, 400))
            transposed = it % 3 == 0
            shape = (n, 3)
            ins = [rng.integers(-50, 50, shape).astype(np.float32) for _ in range(arity)]
            out = np.empty((3, n), np.float32).T if transposed else np.empty(shape, np.float32)
            od = TD.from_array(out)
            with create(handle, od, *[TD.from_array(x) for x in ins]) as desc:
                desc.calculate(None, out, *ins)
                assert np.array_equal(out, ref(*ins)), (i, it)
            r = create_rearrange_descriptor(handle, od, TD(F32, shape))
            src = ins[0]
            r.calculate(out, src)
            r.destroy()
            assert np.array_equal(out, src)

    run_threads(work)


def test_functional_front_end_from_threads(monkeypatch):
    """Threads call the front end with more distinct layouts than a (shrunk) LRU holds, so they
    evict each other's descriptors while using them; results stay right and the bound holds."""
    monkeypatch.setattr(functional, "CACHE_SIZE", 8)
    functional.clear_cache()

    def work(i):
        rng = np.random.default_rng(200 + i)
        for it in range(150):
            n = int(rng.integers(1, 40))
            a = rng.integers(-9, 9, (n, 2)).astype(np.float32)
            b = rng.integers(-9, 9, (2,)).astype(np.float32)
            k = it % 5
            if k == 0:
                assert np.array_equal(infiniop.add(a, b), a + b)
            elif k == 1:
                assert np.array_equal(infiniop.clip(a, -3.0, b), np.minimum(np.maximum(a, -3), b))
            elif k == 2:
                out = np.empty((2, n), np.float32).T
                infiniop.mul(a, a, out=out)
                assert np.array_equal(out, a * a)
            elif k == 3:
                assert np.array_equal(rearrange(a, "n two -> two n"), a.T)
            else:
                dst = np.zeros((n, 2), np.float32)
                copy_(dst, b)
                assert np.array_equal(dst, np.broadcast_to(b, (n, 2)))
            assert len(functional._cache) <= functional.CACHE_SIZE
            assert len(functional._descriptors) <= functional.CACHE_SIZE

    run_threads(work)
    assert len(functional._cache) <= 8 and len(functional._descriptors) <= 8
    functional.clear_cache()


# ---------------------------------------------------------------------------------------------
# The kernel cache on first use: fresh processes, empty cache directories
# ---------------------------------------------------------------------------------------------

# What each fresh process runs: the same kernels, first use, checked results. A file barrier
# (``go``) releases the processes together once both have imported everything.
WORKLOAD = """
import os, time, threading
from infiniop.rearrange import create_rearrange_descriptor, rearrange

def workload(tag):
    rng = np.random.default_rng(abs(hash(tag)) % 2**32)
    a = rng.integers(-50, 50, (37, 41)).astype(np.float32)
    b = rng.integers(-50, 50, (41,)).astype(np.float32)
    assert np.array_equal(infiniop.add(a, b), a + b), tag
    x = a.astype(np.float64)
    assert np.array_equal(infiniop.neg(x.T), -x.T), tag
    r = create_rearrange_descriptor(h, TD(DType.F32, (37, 41), (1, 37)), TD(DType.F32, (37, 41)))
    out = np.empty((41, 37), np.float32)
    r.calculate(out.T, a)
    assert np.array_equal(out.T, a), tag
    assert np.array_equal(rearrange(a, "p q -> q p"), a.T), tag
"""


def _clean_env(cache_dir) -> dict:
    return {"INFINIOP_CACHE_DIR": str(cache_dir), "NUMBA_CACHE_DIR": None}


def check_cache_dir(cache_dir) -> list[str]:
    """Every generated module in the cache is whole: its name ends with the hash of its text."""
    tags = [d for d in os.listdir(cache_dir) if d.startswith("k")]
    assert len(tags) == 1, f"one versioned kernel folder expected, found {tags}"
    kdir = cache_dir / tags[0] / "cpu"
    files = sorted(os.listdir(kdir))
    assert files, "no kernel module was written"
    leftovers = [f for f in files if not f.endswith(".py")]
    assert not leftovers, f"temporary files left in the kernel cache: {leftovers}"
    for f in files:
        text = (kdir / f).read_text()
        digest = hashlib.sha1((codegen.GENERATOR_VERSION + text).encode()).hexdigest()[:10]
        assert f[:-3].endswith("_" + digest), f"{f} is not the module its name promises " \
                                              f"(half-written or corrupted)"
        compile(text, f, "exec")
    assert os.listdir(cache_dir / tags[0] / "numba"), "numba's cache is not under INFINIOP_CACHE_DIR"
    return files


def test_kernel_cache_first_use_from_threads(tmp_path):
    """Threads of one fresh process hit the same never-compiled kernels at the same moment."""
    cache = tmp_path / "cache"
    check_isolated(WORKLOAD + f"""
errors = []
barrier = threading.Barrier({THREADS})
def body(i):
    try:
        barrier.wait()
        workload(f"thread{{i}}")
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=body, args=(i,)) for i in range({THREADS})]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors
print("ok")
""", env=_clean_env(cache), timeout=300)
    check_cache_dir(cache)


def test_kernel_cache_two_processes_at_once(tmp_path):
    """Two processes start together on an empty cache dir, compile and write the same kernels at
    the same moment, and both compute correctly; a third process then loads what they wrote."""
    cache = tmp_path / "cache"
    sync = tmp_path / "sync"
    sync.mkdir()
    script = PRELUDE + WORKLOAD + f"""
open(os.path.join({str(sync)!r}, f"ready-{{os.getpid()}}"), "w").close()
t0 = time.monotonic()
while not os.path.exists(os.path.join({str(sync)!r}, "go")):
    assert time.monotonic() - t0 < 120, "never released"
    time.sleep(0.001)
workload(f"process{{os.getpid()}}")
print("ok")
"""
    env = _clean_env(cache)
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", script],
                              env=child_env(env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        t0 = time.monotonic()
        while len(os.listdir(sync)) < len(procs):
            if any(p.poll() is not None for p in procs) or time.monotonic() - t0 > 120:
                break
            time.sleep(0.005)
        (sync / "go").touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r in results:
        if r.returncode != 0:
            pytest.fail(describe_exit(r), pytrace=False)
    files = check_cache_dir(cache)
    # the third process reuses both caches (no new module: same sources, same names)
    check_isolated(WORKLOAD + "workload('after')\nprint('ok')", env=env, timeout=300)
    assert check_cache_dir(cache) == files


def test_thread_count_ignores_a_numba_import_in_progress(monkeypatch):
    """While one thread's first compilation imports Numba, sys.modules already holds the
    half-made module: other threads' descriptors asked it for the thread count and failed
    with AttributeError (found with 3 threads creating softmax descriptors from the disk cache
    while the main thread compiled). The count comes from our own setting until jit.py says
    Numba is ready."""
    import types

    monkeypatch.setattr(runtime, "_numba_ready", False)
    monkeypatch.setitem(sys.modules, "numba", types.ModuleType("numba"))  # no attributes yet
    monkeypatch.setitem(sys.modules, "infiniop.backends.cpu.jit", types.ModuleType("jit"))
    assert runtime.num_threads() == runtime._threads
    runtime.set_num_threads(runtime._threads)


def test_a_forked_child_gets_the_library_locks_unlocked():
    """A thread of the parent inside one of the library's locked sections at fork() (a
    compilation holds native._lock for seconds, a large output memory._pool_lock) does not
    exist in the child, which inherited the lock held: its first call needing the lock hung for
    ever (multiprocessing's default start method on Linux is fork). Each lock is fresh in the
    child now. The parent's threads hold every such lock across the fork here; the child takes
    each one and computes, in both the compile path and the recycled-buffer path."""
    import multiprocessing as mp

    from infiniop import _forksafe, memory
    from infiniop.backends.cpu import native

    held, release = threading.Event(), threading.Event()

    def hold():
        with memory._pool_lock, native._lock, codegen._lock, functional._cache_lock:
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        ctx = mp.get_context("fork")
        with ctx.Pool(1) as pool:
            got = pool.apply_async(_child_after_fork).get(timeout=120)
    finally:
        release.set()
        t.join()
    assert got == (len(list(_forksafe._all)) > 0, 2.0, (1 << 23,))


def _child_after_fork():
    from infiniop import _forksafe, memory
    from infiniop.backends.cpu import native

    for lock in list(_forksafe._all):
        assert lock.acquire(timeout=10), "a lock stayed held in the child"
        lock.release()
    with native._lock, codegen._lock:
        pass
    big = memory.empty_aligned((1 << 23,), np.float32)      # 32 MiB: the recycled pool
    x = np.ones(4, np.float32)
    return True, float(infiniop.add(x, x)[0]), big.shape
