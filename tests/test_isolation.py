"""Crash isolation: whatever can crash the interpreter runs in a child process.

Kernels that take raw integer addresses trust them (README: unsafe by design), and a few
descriptor layouts reach so far that a wrong bounds check would send a kernel into unmapped
memory. Those calls run in ``python -X faulthandler -c ...`` children, so a segfault becomes a
failed test whose message has the exit code, the signal name and the child's stderr (with the
faulthandler traceback), not a dead pytest run.

``run_isolated`` / ``check_isolated`` are used by test_robustness.py and test_concurrency.py too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

LONG = os.environ.get("INFINIOP_LONG") == "1"  # --long: every operator, not representatives
TESTS = os.path.dirname(os.path.abspath(__file__))  # for children that use test helpers

# Prepended to every child script: the same imports and a tiny assertion helper.
PRELUDE = """\
import sys, numpy as np, infiniop
from infiniop import DType, InfiniError, Status, TensorDescriptor as TD
h = infiniop.create_handle("cpu")

def expect_error(status, fn, *args):
    try:
        fn(*args)
    except InfiniError as e:
        assert e.status is status, f"expected {status.name}, got {e!r}"
        return e
    raise AssertionError(f"expected InfiniError({status.name}), the call succeeded")
"""


def run_isolated(code: str, *, timeout: float = 600, env: dict | None = None,
                 prelude: bool = True, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented, after PRELUDE) in a fresh interpreter; never raises on a crash.
    ``env`` adds to (a value of None: removes from) this process's environment."""
    script = (PRELUDE if prelude else "") + textwrap.dedent(code)
    full_env = child_env(env)
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", script],
                          capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def child_env(changes: dict | None = None) -> dict:
    env = dict(os.environ)
    for k, v in (changes or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def describe_exit(proc: subprocess.CompletedProcess) -> str:
    rc = proc.returncode
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        what = f"killed by {name} (exit code {rc})"
    else:
        what = f"exit code {rc}"
    tail = lambda s: "\n".join(s.strip().splitlines()[-40:])  # noqa: E731
    return f"child process {what}\n--- stderr ---\n{tail(proc.stderr)}\n--- stdout ---\n{tail(proc.stdout)}"


def check_isolated(code: str, **kw) -> str:
    """Run ``code`` isolated; fail the test with the exit code and stderr unless it exits 0.
    Returns the child's stdout."""
    proc = run_isolated(code, **kw)
    if proc.returncode != 0:
        pytest.fail(describe_exit(proc), pytrace=False)
    return proc.stdout


# ---------------------------------------------------------------------------------------------
# The harness itself: a segfault is reported, not fatal
# ---------------------------------------------------------------------------------------------


def test_a_segfault_is_a_reported_failure():
    proc = run_isolated("import ctypes; print('before', flush=True); ctypes.string_at(1)",
                        prelude=False)
    assert proc.returncode == -signal.SIGSEGV
    msg = describe_exit(proc)
    assert "SIGSEGV" in msg and "before" in msg
    assert "Fatal Python error" in proc.stderr  # faulthandler's traceback names the line
    with pytest.raises(pytest.fail.Exception, match="SIGSEGV"):
        check_isolated("import ctypes; ctypes.string_at(1)", prelude=False)


# ---------------------------------------------------------------------------------------------
# Raw integer addresses: every operator and every rearrange kernel, small and large
# ---------------------------------------------------------------------------------------------


def test_raw_addresses_every_elementwise_operator():
    check_isolated(f"""
    from infiniop.ops import ALL, ADD, CLIP, NEG, WHERE
    rng = np.random.default_rng(1)
    ref = {{"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "abs": np.abs,
           "relu": lambda x: np.maximum(x, np.float32(0)), "where": np.where,
           "clip": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)}}
    # parallel and tiled kernels: every arity and the bool operand (every such operator with
    # --long); the catalogue's operators (any operand roles) below
    big_ops = [s for s in ALL if s.name in ref] if {LONG} else [NEG, ADD, CLIP, WHERE]
    for n in (37, 300_001):  # serial and parallel kernels
        for spec in ([s for s in ALL if s.name in ref] if n < 1000 else big_ops):
            dts = [spec.input_dtype(k, DType.F32) for k in range(spec.arity)]
            ins = [rng.random(n) < 0.5 if d is DType.BOOL else
                   (rng.integers(1, 26, n) * rng.choice([-1, 1], n)).astype(np.float32) for d in dts]
            out = np.full(n + 32, 7, np.float32)
            desc = spec.create_descriptor(h, TD(DType.F32, (n,)), *[TD(d, (n,)) for d in dts])
            desc.calculate(None, out[16:].ctypes.data, *[x.ctypes.data for x in ins])
            want = ref[spec.name](*ins).astype(np.float32)
            assert np.array_equal(out[16:n + 16], want), spec.name
            assert (out[:16] == 7).all() and (out[n + 16:] == 7).all(), spec.name
            if spec not in big_ops:
                continue
            # strided and transposed layouts through raw addresses too
            m = int(np.sqrt(n))
            t = TD(DType.F32, (m, m), (1, m))
            desc = spec.create_descriptor(h, t, *[TD(d, (m, m)) for d in dts])
            sq = [x[:m * m].reshape(m, m).copy() for x in ins]
            o = np.zeros((m, m), np.float32)
            desc.calculate(None, o.ctypes.data, *[x.ctypes.data for x in sq])
            assert np.array_equal(o.T, ref[spec.name](*sq).astype(np.float32)), spec.name
    sys.path.insert(0, {TESTS!r})
    from test_catalogue import ENTRY, check_results, reference
    n = 37
    for e in ENTRY.values():  # every operand in a guarded buffer, passed as its raw address
        spec = e.spec
        sig = max(spec.signatures, key=lambda s: sum(d is DType.F32 for d in s.dtypes))
        shapes = [e.own_shapes((n,)).get(o.name, (n,)) for o in spec.operands]
        raws, views = [], []
        for o, d, shp in zip(spec.operands, sig.dtypes, shapes):
            k = int(np.prod(shp))
            raw = np.full((k + 32) * d.itemsize, 0xA5, np.uint8)
            v = raw[16 * d.itemsize:(k + 16) * d.itemsize].view(d.numpy).reshape(shp)
            if o.reads:
                v[...] = (rng.random(shp) < 0.5 if d is DType.BOOL else
                          rng.integers(1, 9, shp) * rng.choice([-1, 1], shp)).astype(d.numpy)
            raws.append(raw)
            views.append(v)
        before = [r.copy() for r in raws]
        want = reference(e, sig, [np.array(v) for o, v in zip(spec.operands, views) if o.reads],
                         {{p.name: p.default for p in spec.params}})
        desc = spec.create_descriptor(h, *[TD(d, shp) for d, shp in zip(sig.dtypes, shapes)])
        desc.calculate(None, *[v.ctypes.data for v in views])
        check_results(e, sig, views, want, views[0])
        for o, d, r, b in zip(spec.operands, sig.dtypes, raws, before):
            g = 16 * d.itemsize
            if o.writes:
                assert (r[:g] == b[:g]).all() and (r[-g:] == b[-g:]).all(), spec.name
            else:
                assert (r == b).all(), spec.name
    print("ok")
    """)


def test_raw_addresses_every_rearrange_kernel():
    check_isolated(f"""
    from infiniop.rearrange import create_rearrange_descriptor
    rng = np.random.default_rng(2)
    cases = [((1000,), (1,), (1,)),                 # memcpy
             ((40, 50), (1, 40), (50, 1)),           # transpose, serial
             ((30, 20, 7), (1, 30, 600), (140, 7, 1)),
             ((64, 33), (-33, 1), (1, 64)),          # negative destination strides
             ((70, 50), (50, 1), (0, 1)),            # broadcast source, units kernel
             ((50, 40), (80, 2), (40, 1))]           # stepped destination
    large = [((600, 700), (1, 600), (700, 1)),       # transpose (parallel: 420000 elements)
             ((700, 500), (500, 1), (0, 1))]         # parallel units kernel
    for dt in (np.uint8, np.float16, np.float32, np.float64):
        # parallel kernels compile per word size (seconds each): float32 only, all with --long
        for shape, ds, ss in cases + (large if {LONG} or dt is np.float32 else []):
            dd, sd = TD(dt, shape, ds), TD(dt, shape, ss)
            isz = np.dtype(dt).itemsize
            def buf(d):
                lo, hi = d.reach
                b = np.full((hi - lo + 1 + 64) * isz, 0xA5, np.uint8)
                return b, 32 * isz - lo * isz
            db, doff = buf(dd); sb, soff = buf(sd)
            sb[:] = rng.integers(0, 255, sb.size, dtype=np.uint8)
            with create_rearrange_descriptor(h, dd, sd) as r:
                r.calculate(db.ctypes.data + doff, sb.ctypes.data + soff)
            view = lambda b, off, d: np.ndarray(d.shape, dt, b, off, [s * isz for s in d.strides])
            got, src = view(db, doff, dd), view(sb, soff, sd)
            assert np.array_equal(got.view("u%d" % isz), src.view("u%d" % isz)), (dt, shape)
            covered = np.zeros(db.size, bool)
            mark = np.ndarray(dd.shape, "V%d" % isz, covered, doff, [s * isz for s in dd.strides])
            mark[...] = np.void(b"\\x01" * isz)
            assert (db[~covered] == 0xA5).all(), (dt, shape)
    print("ok")
    """)


# ---------------------------------------------------------------------------------------------
# Descriptors whose reach is near 2**63 bytes, run on small arrays: must be refused, not run
# ---------------------------------------------------------------------------------------------

HUGE_BYTES = 2**63 - 2**44  # element 1 this many bytes past element 0: the span fits 2**63


@pytest.mark.parametrize("path", ["numpy", "general"])
def test_huge_reach_descriptor_on_small_arrays_is_refused(path):
    """Valid descriptors (span < 2**63 bytes) whose far element lies beyond 2**64 once added to a
    real address, for every operator and every operand: the check must not wrap around (it did:
    the compiled bounds check computed ``address + reach`` in int64, which overflowed, passed, and
    the kernel wrote 9 EiB away). Arrays must now be laid out as their descriptors, so a small
    (2, 2) array is refused for its strides, a (64,) one for its shape."""
    check_isolated(f"""
    from infiniop.ops import ALL, ADD, CLIP, NEG, WHERE
    sys.path.insert(0, {TESTS!r})
    from test_catalogue import ENTRY
    # every arity and the bool operand (the launchers come from one template); all with --long
    ops = ALL if {LONG} or "{path}" == "general" else [NEG, ADD, CLIP, WHERE]
    class Sub(np.ndarray):  # not exactly ndarray: takes the general (Python) path
        pass
    wrap = (lambda a: a) if "{path}" == "numpy" else (lambda a: a.view(Sub))
    for spec in ops:  # (2, 2) layouts: one kernel variant per operator whichever operand is huge
        sig = max(spec.signatures, key=lambda s: sum(d is DType.F32 for d in s.dtypes))
        dts = sig.dtypes
        own = ENTRY[spec.name].own_shapes((2, 2)) if spec.name in ENTRY else {{}}
        shapes = [own.get(o.name, (2, 2)) for o in spec.operands]  # alpha (), param (5,)...
        for j in range(len(dts)):
            if not shapes[j] or shapes[j][0] != 2:
                continue  # a 0-d/one-element dim has no second element; param (5,) spans more
            big = ({HUGE_BYTES} // dts[j].itemsize,) + (1,) * (len(shapes[j]) - 1)
            descs = [TD(d, s, big) if i == j else TD(d, s)
                     for i, (d, s) in enumerate(zip(dts, shapes))]
            desc = spec.create_descriptor(h, *descs)
            bufs = [np.zeros(64, d.numpy) for d in dts]
            for sl in (slice(None), slice(32, None), slice(None, None, -1)):
                # every operand laid out as described, the huge one as a small array
                arrays = [wrap(b[:int(np.prod(s))].reshape(s)) for b, s in zip(bufs, shapes)]
                arrays[j] = wrap(bufs[j][sl][:int(np.prod(shapes[j]))].reshape(shapes[j]))
                expect_error(Status.BAD_TENSOR_STRIDES, desc.calculate, None, *arrays)
                arrays[j] = wrap(bufs[j][sl])
                expect_error(Status.BAD_TENSOR_SHAPE, desc.calculate, None, *arrays)
            written = [b for o, b in zip(spec.operands, bufs) if o.writes]
            assert not any(b.any() for b in written), (spec.name, j)
    print("ok")
    """)


def test_huge_reach_rearrange_on_small_arrays_is_refused():
    check_isolated(f"""
    from infiniop.rearrange import create_rearrange_descriptor
    huge = TD(DType.I8, (2,), ({HUGE_BYTES},))
    small = TD(DType.I8, (2,))
    for dd, sd in [(huge, small), (small, huge)]:
        r = create_rearrange_descriptor(h, dd, sd)
        out, x = np.zeros(64, np.int8), np.ones(64, np.int8)
        for o, i in [(out, x), (out[32:], x[32:]), (out[::-1], x[::-1])]:
            expect_error(Status.BAD_TENSOR_SHAPE, r.calculate, o, i)
            expect_error(Status.BAD_TENSOR_STRIDES, r.calculate, o[:2], i[:2])
        assert (out == 0).all()
    print("ok")
    """)


# ---------------------------------------------------------------------------------------------
# Huge (valid) layouts are planned in bounded memory
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, dst_strides", [
    # a transpose plan once allocated O(extent) int64 offset tables: 16 GiB here, MemoryError
    ((2**31, 2**31), (1, 2**31)),
    ((2**24, 2**24), (1, 2**24)),
    ((2**40, 3), (1, 2**40)),
])
def test_huge_rearrange_plans_stay_small(shape, dst_strides):
    """Creating a descriptor allocates nothing proportional to the extents: a huge (valid) layout
    is planned in bounded memory and time, or refused with an InfiniError."""
    check_isolated(f"""
    import resource, time
    from infiniop.rearrange import create_rearrange_descriptor
    # warm up: create compiles the kernel a plan picks; these plans pick the one timed below
    create_rearrange_descriptor(h, TD(DType.I8, (8, 8), (1, 8)), TD(DType.I8, (8, 8)))
    create_rearrange_descriptor(h, TD(DType.I8, (2**22, 2), (1, 2**22)), TD(DType.I8, (2**22, 2)))
    limit = 2 * 1024**3  # address space: imports and the JIT fit well below; a 16 GiB table not
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    t = time.perf_counter()
    try:
        d = create_rearrange_descriptor(h, TD(DType.I8, {shape}, {dst_strides}),
                                        TD(DType.I8, {shape}))
        print("planned", d.meta.describe()[:60])
    except InfiniError as e:
        print("refused", e.status.name)
    assert time.perf_counter() - t < 5, "planning took too long"
    """)


def test_huge_elementwise_plans_stay_small():
    check_isolated("""
    import resource, time
    infiniop.create_add_descriptor(h, TD(DType.F32, (2,)), TD(DType.F32, (2,)), TD(DType.F32, (2,)))
    limit = 2 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    t = time.perf_counter()
    big = [((2**30, 2**30), (1, 2**30)), ((2**20,) * 3, None), ((2**61 - 1,), None),
           ((2**30, 2**30), (2**30 + 1, 2**30 + 3))]
    for shape, strides in big:
        for bcast in (False, True):
            try:
                ins = ((TD(DType.F32, shape, (0,) * len(shape)), TD(DType.F32, (1,))) if bcast
                       else (TD(DType.F32, shape), TD(DType.F32, shape)))
                infiniop.create_add_descriptor(h, TD(DType.F32, shape, strides), *ins)
            except InfiniError as e:
                print("refused", shape, e.status.name)
    assert time.perf_counter() - t < 10, "planning took too long"
    print("ok")
    """)
