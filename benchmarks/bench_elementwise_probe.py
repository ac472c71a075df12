"""Issue 13's elementwise rows and float32 transpose, and issue 12's rms_norm, add_rms_norm and
layer_norm prefill, softmax and rope rows, through `infiniop bench`, with a C probe of the same
access pattern timed in the same rounds (column "probe %ceil"; bf16 rms_norm adds "probe.hw
%ceil", the hardware's bf16 rounding; float32 softmax "probe.order %ceil", a probe keeping our
contract's reduction order, whose results must equal ours bit for bit).

    PYTHONPATH=src python benchmarks/bench_elementwise_probe.py [--rows sub-f16,transposed]
        [--rounds 5] [--json out.jsonl]

The probe (``probe_elementwise.c``, built here with gcc) is what a hand-written kernel does at
that pattern: AVX-512 (pairs of AVX2 operations on CPUs without it, ``probe_simd.h``),
non-temporal stores, OpenMP on the same number of threads; "probe.hw" only where the CPU has
AVX512_BF16. When
our kernel is below a target and the probe is too, the probe shows what the machine allows.
Its results are checked bit for bit against ours like every other implementation's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

from infiniop.bench import run
from infiniop.bench.suite import ROW_TOLERANCE, Case, _agreeing, _elementwise, _rearrange, _rows
from infiniop.memory import empty_aligned

HERE = os.path.dirname(os.path.abspath(__file__))
N = 1 << 25
SQUARE = 1 << 24
PREFILL = (2048, 4096)
SQUARE_ROWS = (4096, 4096)
ROPE = (2048, 32, 128)  # (seq, heads, head dim): GPT-NeoX halves, positions not in order

# name -> (op, dtype, layout, size, probe function)
ROWS = {
    "sub-f32": ("sub", "float32", "contiguous", N, "sub_f32"),
    "sub-f16": ("sub", "float16", "contiguous", N, "sub_f16"),
    "sub-bf16": ("sub", "bfloat16", "contiguous", N, "sub_bf16"),
    "clip-f32": ("clip", "float32", "contiguous", N, "clip_f32"),
    "rowbcast": ("sub", "float32", "numpy_bcast", SQUARE, "sub_rowbcast_f32"),
    "transposed": ("sub", "float32", "transposed", SQUARE, "sub_transposed_f32"),
    "transpose2d": ("rearrange", "float32", "transpose2d", SQUARE, "transpose_f32"),
    "rms-f32": ("rms_norm", "float32", "prefill", PREFILL, "rms_norm_f32"),
    "rms-f16": ("rms_norm", "float16", "prefill", PREFILL, "rms_norm_f16"),
    "rms-bf16": ("rms_norm", "bfloat16", "prefill", PREFILL, "rms_norm_bf16"),
    "softmax-f32": ("softmax", "float32", "rows", SQUARE_ROWS, "softmax_f32"),
    "softmax-f16": ("softmax", "float16", "rows", SQUARE_ROWS, "softmax_f16"),
    "softmax-bf16": ("softmax", "bfloat16", "rows", SQUARE_ROWS, "softmax_bf16"),
    "layer-norm-f32": ("layer_norm", "float32", "prefill", PREFILL, "layer_norm_f32"),
    "layer-norm-f16": ("layer_norm", "float16", "prefill", PREFILL, "layer_norm_f16"),
    "layer-norm-bf16": ("layer_norm", "bfloat16", "prefill", PREFILL, "layer_norm_bf16"),
    "add-rms-f32": ("add_rms_norm", "float32", "prefill", PREFILL, "add_rms_norm_f32"),
    "add-rms-f16": ("add_rms_norm", "float16", "prefill", PREFILL, "add_rms_norm_f16"),
    "add-rms-bf16": ("add_rms_norm", "bfloat16", "prefill", PREFILL, "add_rms_norm_bf16"),
    "rope-f32": ("rope", "float32", "prefill", ROPE, "rope_neox_f32"),
    "rope-f16": ("rope", "float16", "prefill", ROPE, "rope_neox_f16"),
    "rope-bf16": ("rope", "bfloat16", "prefill", ROPE, "rope_neox_bf16"),
}


def build_probe(threads: int) -> ctypes.CDLL:
    out = os.path.join(tempfile.mkdtemp(prefix="infiniop-probe-"), "probe.so")
    subprocess.run(["gcc", "-O3", "-march=native", "-Wno-psabi", "-fopenmp", "-shared", "-fPIC",
                    os.path.join(HERE, "probe_elementwise.c"), "-o", out, "-lm"], check=True)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    return ctypes.CDLL(out)


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def with_probe(case: Case, lib, fname: str) -> Case:
    inner = case.build

    def build():
        prep = inner()
        ins = prep.inputs
        a = ins[0]
        out = empty_aligned(a.shape[::-1] if case.op == "rearrange" else a.shape, a.dtype)
        fn = getattr(lib, fname)
        result = lambda: out  # noqa: E731
        extra = {}  # more implementations: name -> (call, result)
        held = [out]  # arrays the probe writes through raw pointers: alive as long as it runs
        if case.op == "rearrange":  # out holds src.T contiguously, as ours does
            args = (_ptr(out), _ptr(a), ctypes.c_long(a.shape[0]), ctypes.c_long(a.shape[1]))
        elif case.op in ("rms_norm", "softmax"):
            rows, n = a.shape
            args = (_ptr(out), _ptr(a), ctypes.c_long(rows), ctypes.c_long(n))
            if case.op == "rms_norm":
                args = args[:2] + (_ptr(ins[1]),) + args[2:] + (ctypes.c_float(1e-5),)
            if case.op == "rms_norm" and case.dtype == "bfloat16":
                if lib.probe_bf16_hw():  # bound now: args gains the flag below
                    hw = empty_aligned(a.shape, a.dtype)
                    extra["probe.hw"] = (lambda bound=args: fn(_ptr(hw), *bound[1:], 1), hw)
                args = args + (0,)
            # the sums in another order: agreeing within the rows' tolerance
            tol = ROW_TOLERANCE[case.dtype]
            result = _agreeing(prep.results["infiniop"], lambda: out, tol)
            extra = {k: (f, _agreeing(prep.results["infiniop"], lambda o=o: o, tol))
                     for k, (f, o) in extra.items()}
            if case.op == "softmax" and case.dtype == "float32" and n % 1024 == 0:
                # the contract's reduction order: our bits exactly (checked bit for bit)
                same = empty_aligned(a.shape, a.dtype)
                extra["probe.order"] = (lambda: lib.softmax_order_f32(_ptr(same), *args[1:]),
                                        lambda: same)
        elif case.op in ("layer_norm", "add_rms_norm"):  # more outputs; y compared
            rows, n = a.shape
            more = [empty_aligned(a.shape, a.dtype)]
            if case.op == "layer_norm":
                more.append(empty_aligned((rows,), a.dtype))
            held += more
            args = (_ptr(out), *map(_ptr, more), *map(_ptr, ins), ctypes.c_long(rows),
                    ctypes.c_long(n), ctypes.c_float(1e-5))
            result = _agreeing(prep.results["infiniop"], lambda: out, ROW_TOLERANCE[case.dtype])
        elif case.op == "rope":
            seq, heads, dh = a.shape
            args = (_ptr(out), *(_ptr(t) for t in ins), ctypes.c_long(seq), ctypes.c_long(heads),
                    ctypes.c_long(dh))
            result = _agreeing(prep.results["infiniop"], lambda: out, ROW_TOLERANCE[case.dtype])
        elif case.layout == "contiguous" and case.op == "clip":
            lo, hi = (ctypes.c_float(float(x.reshape(-1)[0])) for x in ins[1:])
            args = (_ptr(out), _ptr(a), lo, hi, ctypes.c_long(a.size))
        elif case.layout == "contiguous":
            args = (_ptr(out), _ptr(a), _ptr(ins[1]), ctypes.c_long(a.size))
        else:  # 2-D: the transposed input's own memory is (cols, rows) row-major
            rows, cols = case.shape
            args = (_ptr(out), _ptr(a), _ptr(ins[1]), ctypes.c_long(rows), ctypes.c_long(cols))
        prep.impls["probe"] = lambda held=held: fn(*args)
        prep.results["probe"] = result
        for k, (f, r) in extra.items():
            prep.impls[k], prep.results[k] = f, r
        return prep

    return Case(case.op, case.dtype, case.layout, case.shape, build)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated: {', '.join(ROWS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int)
    p.add_argument("--json")
    args = p.parse_args(argv)
    from infiniop.backends.cpu import runtime

    if args.threads:
        runtime.set_num_threads(args.threads)
    threads = runtime.num_threads()
    lib = build_probe(threads)
    cases = []
    for name in args.rows.split(","):
        op, dtype, layout, size, fname = ROWS[name]
        rows_ops = ("rms_norm", "add_rms_norm", "layer_norm", "softmax", "rope")
        make = _rearrange if op == "rearrange" else _rows if op in rows_ops else None
        case = (make(dtype, layout, size, threads) if op == "rearrange"
                else make(op, dtype, layout, size, threads) if make else
                _elementwise(op, dtype, layout, size, threads))
        cases.append(with_probe(case, lib, fname))
    records = run(cases=cases, rounds=args.rounds, json_path=args.json)
    return 1 if any("error" in r for r in records[1:]) else 0


if __name__ == "__main__":
    sys.exit(main())
