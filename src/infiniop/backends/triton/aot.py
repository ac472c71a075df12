"""Ahead-of-time compile check: ``triton.compile`` every kernel variant for real GPU targets.

No GPU is needed (Triton ships ptxas), so CI catches what the interpreter accepts but the
compiler rejects. A variant is one generated kernel (operator x dtype x layout class, or a
rearrange kernel) with its constexprs; it is compiled for each target (default: NVIDIA sm_80
and sm_90) with every scalar argument typed int64 (the widest the launcher can pass).

    python -m infiniop.backends.triton.aot                 # the representative matrix
    INFINIOP_FULL_AOT=1 python -m infiniop.backends.triton.aot   # every variant
    python -m infiniop.backends.triton.aot --list          # print the variants only
    python -m infiniop.backends.triton.aot --targets cuda:80,cuda:90,hip:gfx942 --jobs 2

Exit status 0 when every variant compiled for every target; the failures are printed.
``TRITON_INTERPRET`` must be unset (the interpreter replaces ``triton.jit``): the module
removes it from the environment of the worker processes it starts.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from ...dtype import DType
from . import codegen

DEFAULT_TARGETS = ("cuda:80", "cuda:90")


@dataclass(frozen=True)
class Variant:
    name: str
    build: tuple  # how to regenerate the KernelSource in a worker: (kind, args...)
    constexprs: tuple  # ((name, value), ...)
    num_warps: int
    ones: bool = False  # every specialisable int argument 1, as Triton passes it (a 1-element call)

    def program(self):
        """The traced row program of a ``rows`` variant."""
        from ...rows import ops as row_ops  # noqa: F401  (registers the row operators)
        from ...rows.spec import REGISTRY as ROWS

        op, dts, *_ = self.build[1:]
        spec = ROWS[op]
        dtypes = tuple(None if d is None else DType[d] for d in dts)
        return spec.program(spec.match(dtypes), tuple(d is not None for d in dtypes))

    def source(self) -> codegen.KernelSource:
        kind, *args = self.build
        if kind in ("ew", "expr"):
            op, dts, layout, pattern, ndim = args
            if kind == "ew":
                from ...elementwise.spec import REGISTRY
                from ...ops import ALL  # noqa: F401  (defines every built-in operator)

                spec = REGISTRY[op]
            else:
                spec = _expr_specs()[op]
            prog = spec.program(spec.match(tuple(DType[d] for d in dts)))
            tag = f"ew_{prog.name}_{prog.key[:10]}"
            if layout == "flat":
                return codegen.flat_source(prog, pattern, tag=tag)
            source = codegen.tiled_source if layout == "tiled" else codegen.strided_source
            return source(prog, pattern, ndim, tag=tag)
        if kind == "copy":
            word, layout, pattern, ndim = args
            dt = {1: DType.U8, 2: DType.U16, 4: DType.U32, 8: DType.U64}[word]
            if layout == "flat":
                return codegen.flat_source(codegen.copy_program(dt), pattern, tag="copy")
            source = codegen.tiled_source if layout == "tiled" else codegen.strided_source
            return source(codegen.copy_program(dt), pattern, ndim, tag="copy")
        if kind == "transpose":
            word, batch, k, affine = args
            return codegen.transpose_source(word, batch, k, affine=affine)
        if kind == "rows":
            from .rows import row_source

            op, dts, pattern, ndim, lanes = args
            prog = self.program()
            return row_source(prog, pattern, ndim, lanes, f"rows_{op}_{prog.key[:10]}")
        if kind == "rope":
            from ...rows import rope
            from .rope import rope_source

            dts, ndim = args
            prog = rope.program(rope._match(tuple(DType[d] for d in dts)))
            return rope_source(prog, ndim, f"rope_{prog.key[:10]}")
        raise ValueError(kind)


# ------------------------------------------------------------------------------- the matrix

_EXPR_SPECS: dict = {}


def _expr_specs() -> dict:
    """Two user-style operators that use every function of the math namespace ``m`` (the
    built-in operators use only a few): one for float outputs, one for integer outputs."""
    if not _EXPR_SPECS:
        from ...elementwise.operator import elementwise
        from ...elementwise.spec import FLOATS, INTEGERS

        _EXPR_SPECS["float"] = elementwise(
            "aot_every_float_function", ("a", "b", "c"), FLOATS,
            lambda m, a, b, c: m.where(
                m.isnan(a) | (a < b) | (b >= c) & a.ne(c),
                m.minimum(a, b) // c + a % c - (-a) / b,
                m.maximum(m.exp(a), m.log(b)) + m.sqrt(m.abs(c)) - m.sin(a) * m.cos(b)
                + m.tanh(c) + m.floor(a) - m.ceil(b) * 1.5) + (a > 2.5) - (b <= -1) * a.eq(c),
            register=False)
        _EXPR_SPECS["int"] = elementwise(
            "aot_every_int_function", ("a", "b", "c"), INTEGERS,
            lambda m, a, b, c: m.where(
                (a & b) > (c | a), (a ^ ~b) // c, -(a % c)) + m.minimum(a, b) * m.maximum(b, c)
            - m.abs(a) + (a >= b) + a.ne(c) - (b <= 3) * (a < c) + (a / (b + 1) > 2) * 7,
            register=False)
    return _EXPR_SPECS


def _expr_variants(full: bool) -> list:
    out = []
    picks = {"float": (DType.F32, DType.F64, DType.F16, DType.BF16),
             "int": (DType.I8, DType.I32, DType.I64, DType.U8, DType.U64)}
    for which, dts in picks.items():
        for dt in dts:
            for layout in (("flat", "strided2", "rank6") if full else ("flat", "strided2")):
                kind, pat, ndim = _LAYOUTS[layout]
                ce = (("BLOCK", 1024),) if kind == "flat" else (("BR", 4), ("BC", 256))
                out.append(Variant(f"expr_{which}-{dt.short_name}-{layout}",
                                   ("expr", which, (dt.name,) * 4, kind, pat(3), ndim), ce, 4))
    return out


_LAYOUTS = {  # layout class -> (kind, pattern builder, rank)
    "flat": ("flat", lambda a: "1" * (a + 1), 1),
    "flat_bcast": ("flat", lambda a: "1" + "0" + "1" * (a - 1), 1),
    "strided1": ("strided", lambda a: "g" * (a + 1), 1),
    "strided2": ("strided", lambda a: "1" + "".join("g0"[k % 2] for k in range(a)), 2),
    "strided3": ("strided", lambda a: "g" + "1" * a, 3),
    "tiled3": ("tiled", lambda a: "1" + "g" * a, 3),
    "rank6": ("strided", lambda a: "1" + "01"[0] * a, 6),
}
_WORDS = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}


def _ew(op: str, dt: DType, layout: str) -> Variant:
    """The variant of operator ``op`` whose first written operand has dtype ``dt``."""
    from ...elementwise.spec import REGISTRY
    from ...ops import ALL  # noqa: F401  (defines every built-in operator)

    spec = REGISTRY[op]
    j = next(k for k, o in enumerate(spec.operands) if o.writes)
    sig = next(s for s in spec.signatures if s.dtypes[j] is dt)
    program = spec.program(sig)
    kind, pat, ndim = _LAYOUTS[layout]
    pattern = pat(len(program.slots) - 1)
    warps = 4
    if kind == "flat":  # the block and warps a launch picks
        from ...device import Device
        from .elementwise import flat_block
        from .vendors import VENDORS

        block, warps = flat_block(VENDORS[Device.NVIDIA], program, pattern)
        ce = (("BLOCK", block),)
    elif layout == "tiled3":
        ce = (("BR", 64), ("BC", 64))
    else:
        ce = (("BR", 4), ("BC", 256))
    return Variant(f"{op}-{dt.short_name}-{layout}",
                   ("ew", op, tuple(d.name for d in sig.dtypes), kind, pattern, ndim), ce, warps)


def _rearrange_variants(full: bool) -> list[Variant]:
    out = []
    words = (1, 2, 4, 8) if full else (2, 4)
    for w in words:
        out.append(Variant(f"copy-u{8 * w}-flat", ("copy", w, "flat", "11", 1),
                           (("BLOCK", 1024),), 4))
        out.append(Variant(f"copy-u{8 * w}-flat_bcast", ("copy", w, "flat", "10", 1),
                           (("BLOCK", 1024),), 4))
        for ndim, pattern in ((1, "gg"), (2, "1g"), (3, "10"), (5, "11")):
            if full or (ndim, w) in ((2, 2), (3, 4), (5, 4)):
                out.append(Variant(f"copy-u{8 * w}-strided{ndim}-{pattern}",
                                   ("copy", w, "strided", pattern, ndim),
                                   (("BR", 8), ("BC", 128)), 4))
        for ndim in (2, 3):  # rearrange's plain transposes (the elementwise tiled copy)
            if full or (ndim, w) == (3, 2):
                out.append(Variant(f"copy-u{8 * w}-tiled{ndim}-1g",
                                   ("copy", w, "tiled", "1g", ndim), (("BR", 64), ("BC", 64)), 8))
        for batch in (0, 1, 3):
            for k in (1, 2):
                for affine in (False, True):
                    if full or (batch, k, affine) in ((0, 1, False), (1, 2, False), (3, 1, False),
                                                      (0, 1, True), (1, 1, True)):
                        out.append(Variant(
                            f"transpose-{_WORDS[w]}x{k}-batch{batch}{'-affine' if affine else ''}",
                            ("transpose", _WORDS[w], batch, k, affine),
                            (("TR", 64), ("TC", 64)), 8))
    return out


# Row operators: (operator, operand dtypes (None: an absent optional one), axis pattern, rank
# of the row layout, lanes): every operator, every dtype class, both kinds of axis, one lane and
# many lanes.
_ROW_VARIANTS = [
    ("rms_norm", ("F16", "F16", "F32"), "111", 1, 1024),
    ("rms_norm", ("BF16", "BF16", "BF16"), "1g1", 2, 64),
    ("rms_norm", ("F32", "F32", "F32"), "111", 3, 1),
    ("rms_norm", ("F64", "F64", "F64"), "111", 1, 1024),
    ("add_rms_norm", ("BF16", "BF16", "BF16", "BF16", "F32"), "11111", 2, 1024),
    ("layer_norm", ("F16",) * 6, "110111", 2, 512),
    ("layer_norm", ("F32", "F32", "F32", "F32", "F32", None), "11011", 1, 8),
    ("softmax", ("F32", "F32"), "11", 1, 1024),
    ("softmax", ("F16", "F16"), "gg", 3, 16),
    ("softmax", ("F64", "F64"), "g1", 2, 2),
    ("causal_softmax", ("BF16", "BF16"), "11", 2, 1024),
    ("causal_softmax", ("F32", "F32"), "gg", 3, 4),
    ("logsoftmax", ("F32", "F16"), "11", 1, 1024),
    ("logsoftmax", ("BF16", "BF16"), "g1", 2, 128),
]
_ROPE_VARIANTS = [(("F16", "I32", "F32", "F32"), 1), (("BF16", "I64", "BF16", "BF16"), 2),
                  (("F32", "I32", "F32", "F32"), 3), (("F64", "U8", "F64", "F64"), 1)]


def _row_variants() -> list[Variant]:
    from ...device import Device
    from .rows import row_warps
    from .vendors import VENDORS

    out = []
    for op, dts, pattern, ndim, lanes in _ROW_VARIANTS:
        br = max(1, min(1024 // lanes, 16))
        name = f"rows_{op}-{'-'.join(d or 'none' for d in dts)}-{pattern}-rank{ndim}-L{lanes}"
        v = Variant(name, ("rows", op, dts, pattern, ndim, lanes), (("BR", br),), 0)
        # the warps a launch on an NVIDIA GPU picks (fewer warps: more registers per thread)
        out.append(replace(v, num_warps=row_warps(VENDORS[Device.NVIDIA], v.program(), br,
                                                  lanes)))
    for dts, ndim in _ROPE_VARIANTS:
        name = f"rope_{'-'.join(dts)}-rank{ndim}"
        out.append(Variant(name, ("rope", (dts[0],) + dts, ndim), (("BR", 4), ("BH", 64)), 4))
    return out


def variants(full: bool = False) -> list[Variant]:
    """Every variant (``full``) or a representative matrix: every dtype of every operator once
    (contiguous), every layout class for a few (operator, dtype) pairs, every rearrange family."""
    from ... import ops
    from ...elementwise.spec import REGISTRY

    specs = [REGISTRY[s.name] for s in ops.ALL]
    out: list[Variant] = []
    if full:
        for spec in specs:
            for dt in sorted(spec.dtypes):
                for layout in _LAYOUTS:
                    out.append(_ew(spec.name, dt, layout))
    else:
        seen = set()
        for spec in specs:  # every (operator, dtype) on the contiguous path
            for dt in sorted(spec.dtypes):
                out.append(_ew(spec.name, dt, "flat"))
                seen.add((spec.name, dt, "flat"))
        picks = [("sub", DType.F32), ("clip", DType.F16), ("add", DType.BF16),
                 ("mul", DType.I8), ("where", DType.U64), ("maximum", DType.F64),
                 ("neg", DType.BF16), ("div", DType.F32)]
        for op, dt in picks:  # every layout class
            for layout in _LAYOUTS:
                if (op, dt, layout) not in seen:
                    out.append(_ew(op, dt, layout))
    out += _expr_variants(full) + _rearrange_variants(full) + _row_variants()
    return out + _ones_variants(out)


def _ones_variants(variants: list[Variant]) -> list[Variant]:
    """Triton launches an int argument equal to 1 as the constant 1 (the interpreter does not): a
    kernel that calls a method on one (``n.to(...)``) compiles for every shape but a length-1
    one. Every row and rope kernel, each elementwise layout class and rearrange family once."""
    picked = [v for v in variants
              if v.build[0] in ("rows", "rope") or v.name.startswith("sub-float32-")]
    first = {}
    for v in variants:
        if v.build[0] in ("copy", "transpose"):
            first.setdefault(v.build[0], v)
    return [replace(v, name=f"{v.name}-ones", ones=True) for v in picked + list(first.values())]


# ---------------------------------------------------------------------------------- compile

def _target(spec: str):
    from triton.backends.compiler import GPUTarget

    backend, arch = spec.split(":")
    if backend == "cuda":
        return GPUTarget("cuda", int(arch), 32)
    return GPUTarget(backend, arch, 64)


def _ast_source(fn, ks: codegen.KernelSource, constexprs: dict):
    """ASTSource across Triton versions: 3.2+ takes ``constexprs=`` with constexpr entries in
    the signature (and per-argument ``attrs``: pointers are marked 16-byte aligned there);
    3.0/3.1 take ``constants=`` and leave constexprs out of the signature."""
    from triton.compiler import ASTSource

    types = [f"*{t}" for t in ks.pointers] + ["i64"] * len(ks.scalars) + list(ks.params)
    names = fn.arg_names
    params = inspect.signature(ASTSource.__init__).parameters
    if "constexprs" in params:
        sig = dict(zip(names, types))
        sig.update({k: "constexpr" for k in constexprs})
        # pointers 16-byte aligned (as torch allocates them) and sizes multiples of 16: what
        # Triton's specialisation sees for large tensors, i.e. the vectorised code path
        aligned = list(range(len(ks.pointers))) + [
            len(ks.pointers) + k for k, name in enumerate(ks.scalars)
            if name in ("n", "inner") and name not in constexprs]
        attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
        return ASTSource(fn, signature=sig, constexprs=dict(constexprs), attrs=attrs)
    sig = {i: t for i, t in enumerate(types)}
    return ASTSource(fn, signature=sig, constants=dict(constexprs))


def compile_variant(v: Variant, target: str) -> dict:
    import triton

    t0 = time.perf_counter()
    ks = v.source()
    fn = codegen.load(ks)
    constexprs = dict(v.constexprs)
    if v.ones:
        constexprs.update({q.name: 1 for q in fn.params
                           if q.name in ks.scalars and not q.do_not_specialize})
    src = _ast_source(fn, ks, constexprs)
    k = triton.compile(src, target=_target(target),
                       options={"num_warps": v.num_warps, "enable_fp_fusion": False})
    asm = k.asm
    binary = asm.get("cubin") or asm.get("hsaco") or b""
    out = {"variant": v.name, "target": target, "ok": True,
           "seconds": round(time.perf_counter() - t0, 3), "binary_bytes": len(binary),
           "shared": k.metadata.shared}
    if target.startswith("cuda:") and (v.build[0] in ("rows", "rope") or SPILLS):
        out["spill_stores"] = spill_stores(asm["ptx"], int(target.split(":")[1]))
    return out


SPILLS = os.environ.get("INFINIOP_AOT_SPILLS", "") not in ("", "0")  # every variant, not rows only


def spill_stores(ptx: str, arch: int) -> int | None:
    """Bytes of register spill stores that ``ptxas -v`` (Triton's own) reports for ``ptx``;
    None where it cannot be run. Spills are what made the row kernels' first tree 17-90x slower
    than torch on an H200 (Triton 3.6), while the interpreter and the AOT compile were fine."""
    import re
    import tempfile

    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError:  # a Triton without it (or without the NVIDIA backend)
        return None
    gpu = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            p = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={gpu}", src, "-o",
                                os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
        except OSError:
            return None
    m = re.search(r"(\d+) bytes spill stores", p.stderr)
    return int(m.group(1)) if p.returncode == 0 and m else None


def _worker(names: list[str], targets: list[str], full: bool) -> list[dict]:
    table = {v.name: v for v in variants(full)}
    results = []
    for name in names:
        for t in targets:
            try:
                results.append(compile_variant(table[name], t))
            except Exception as e:  # noqa: BLE001 - report every failure, keep going
                msg = f"{type(e).__name__}: {e}"
                results.append({"variant": name, "target": t, "ok": False, "error": msg[-4000:]})
    return results


def run(full: bool, targets: list[str], jobs: int, only: list[str] | None = None) -> list[dict]:
    """Compile in ``jobs`` subprocesses (a compiler crash is a failure, not a dead run)."""
    names = [v.name for v in variants(full)]
    if only:
        names = [n for n in names if any(o in n for o in only)]
    chunks = [names[i::jobs] for i in range(jobs) if names[i::jobs]]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    procs = []
    for chunk in chunks:
        cmd = [sys.executable, "-m", "infiniop.backends.triton.aot", "--worker",
               "--targets", ",".join(targets)] + (["--full"] if full else []) + chunk
        procs.append((chunk, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True)))
    results = []
    for chunk, p in procs:
        out, err = p.communicate()
        got = []
        for line in out.splitlines():
            if line.startswith("{"):
                got.append(json.loads(line))
        done = {(r["variant"], r["target"]) for r in got}
        for name in chunk:
            for t in targets:
                if (name, t) not in done:
                    got.append({"variant": name, "target": t, "ok": False,
                                "error": f"worker exited with {p.returncode}: {err[-2000:]}"})
        results += got
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infiniop.backends.triton.aot",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true",
                    default=os.environ.get("INFINIOP_FULL_AOT", "") not in ("", "0"))
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON object per result")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    targets = [t for t in a.targets.split(",") if t]
    if a.list:
        for v in variants(a.full):
            print(v.name)
        return 0
    if a.worker:
        for r in _worker(a.names, targets, a.full):
            print(json.dumps(r), flush=True)
        return 0
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        os.environ.pop("TRITON_INTERPRET")
    t0 = time.perf_counter()
    results = run(a.full, targets, max(1, a.jobs), a.names or None)
    bad = [r for r in results if not r["ok"]]
    if a.json:
        for r in results:
            print(json.dumps(r))
    else:
        for r in bad:
            print(f"FAILED {r['variant']} [{r['target']}]: {r['error']}")
        for r in results:
            if r.get("spill_stores"):
                print(f"SPILLS {r['variant']} [{r['target']}]: {r['spill_stores']} bytes")
        nv = len({r["variant"] for r in results})
        print(f"{len(results) - len(bad)} compiled, {len(bad)} failed: {nv} variants x "
              f"{len(targets)} targets ({', '.join(targets)}) in {time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
