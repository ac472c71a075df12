"""The C probes of ``benchmarks/bench_elementwise_probe.py`` build for CPUs with and without
AVX-512 (``probe_simd.h`` pairs AVX2 operations where AVX-512 is missing: the probe bench failed
to compile on an AVX2 AMD EPYC until 2026-11-29), and the AVX2 build gives infiniop's results:
float32 softmax in the contract's reduction order bit for bit, bf16 subtraction exactly."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import infiniop
from infiniop.memory import empty_aligned

SOURCE = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "probe_elementwise.c")
pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"),
    reason="needs gcc on x86-64")


def _build(tmp_path, march: str) -> str:
    known = subprocess.run(["gcc", f"-march={march}", "-E", "-x", "c", os.devnull],
                           capture_output=True)
    if known.returncode:
        pytest.skip(f"this gcc does not know -march={march}")
    out = str(tmp_path / f"probe-{march}.so")
    subprocess.run(["gcc", "-O2", f"-march={march}", "-Wno-psabi", "-fopenmp", "-shared", "-fPIC",
                    SOURCE, "-o", out, "-lm"], check=True, capture_output=True)
    return out


@pytest.mark.parametrize("march", ["x86-64-v4", "sapphirerapids"])
def test_builds_for_avx512_cpus(tmp_path, march):
    """x86-64-v4: AVX-512 without AVX512_BF16 (Skylake-X, Ice Lake); Sapphire Rapids with it."""
    _build(tmp_path, march)


def _flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(ln for ln in f if ln.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return set()


@pytest.fixture(scope="module")
def avx2_probe(tmp_path_factory):
    if not {"avx2", "fma", "f16c"} <= _flags():
        pytest.skip("the AVX2 build runs on CPUs with AVX2, FMA and F16C")
    lib = ctypes.CDLL(_build(tmp_path_factory.mktemp("probe"), "x86-64-v3"))
    assert lib.probe_bf16_hw() == 0
    return lib


def _p(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def test_avx2_softmax_in_the_contract_order_has_our_bits(avx2_probe):
    rng = np.random.default_rng(5)
    x = empty_aligned((6, 4096), np.float32)
    x[...] = rng.standard_normal(x.shape) * 8
    x[2, 100] = 300.0  # a row with one dominant element
    got = empty_aligned(x.shape, np.float32)
    avx2_probe.softmax_order_f32(_p(got), _p(x), ctypes.c_long(6), ctypes.c_long(4096))
    assert np.array_equal(got.view(np.uint32), infiniop.softmax(x, axis=-1).view(np.uint32))


def test_avx2_bf16_subtraction_has_our_bits(avx2_probe):
    rng = np.random.default_rng(6)
    a, b = (empty_aligned((4096,), ml_dtypes.bfloat16) for _ in range(2))
    a[...] = rng.standard_normal(4096) * 100
    b[...] = rng.standard_normal(4096)
    got = empty_aligned((4096,), ml_dtypes.bfloat16)
    avx2_probe.sub_bf16(_p(got), _p(a), _p(b), ctypes.c_long(4096))
    assert np.array_equal(got.view(np.uint16), infiniop.sub(a, b).view(np.uint16))
