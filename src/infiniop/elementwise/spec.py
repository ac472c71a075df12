"""What an elementwise operator is: operands, type signatures, scalar parameters, one expression.

An operator lists its operands in the C API's order, each an input, an output, or both
(BLAS-style in-place updates); the accepted dtypes as ufunc-style signatures; its scalar
parameters (fixed at create, passed to the kernel at run time); and a function
``fn(m, *inputs, **params)`` returning one value per output. The function is traced once per
signature into a :class:`Program`, the backend-independent description of the kernel.

This module is data only: the callable operator (descriptor API, functional form, pickling) is
``operator.ElementwiseOperator``, a subclass built above the planner and the front end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import _forksafe
from ..dtype import DType
from ..kernel_cache import sha1
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from . import signature as sigs
from .expr import Expr, const, fingerprint, trace

FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})
SIGNED = frozenset({DType.I8, DType.I16, DType.I32, DType.I64})
UNSIGNED = frozenset({DType.U8, DType.U16, DType.U32, DType.U64})
INTEGERS = SIGNED | UNSIGNED
NUMERIC = FLOATS | INTEGERS
HALF_AND_SINGLE = frozenset({DType.F16, DType.BF16, DType.F32})


def dtype_set(dtypes) -> frozenset:
    """An operator's ``dtypes`` argument as a set of DTypes: one dtype or an iterable of them,
    each spelled as TensorDescriptor accepts it (``infiniop.float32``, ``"float32"``, ``"f4"``,
    ``np.float32``, a torch dtype)."""
    from ..dtype import as_dtype

    if isinstance(dtypes, DType | str) or not hasattr(dtypes, "__iter__"):
        dtypes = (dtypes,)
    return frozenset(as_dtype(d) for d in dtypes)


# significand bits of the float storage types (what m.result_bits reports to math functions)
_SIGNIFICAND = {DType.F16: 11, DType.BF16: 8, DType.F32: 24, DType.F64: 53}


def result_bits(sig: sigs.Signature, written: list[int]) -> int:
    """``m.result_bits`` of a trace: the significand bits of the narrowest float type among
    the written operands (24 when none is a float)."""
    return min((_SIGNIFICAND.get(sig.dtypes[k], 24) for k in written), default=24)

REGISTRY: dict[str, ElementwiseSpec] = {}


# --------------------------------------------------------------------------------- operands

def split_last(desc: TensorDescriptor, parts: int, name: str) -> list[tuple[TensorDescriptor, int]]:
    """``parts`` equal views along the last dim: [..., parts*d] -> parts x [..., d] (offsets in
    elements). silu_and_mul's ``input`` is one operand seen as two."""
    if desc.ndim == 0 or desc.shape[-1] % parts:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{name}': last dim of shape "
                          f"{desc.shape} must be a multiple of {parts}")
    d = desc.shape[-1] // parts
    view = TensorDescriptor(desc.dtype, desc.shape[:-1] + (d,), desc.strides)
    return [(view, k * d * (desc.strides[-1] if desc.ndim else 0)) for k in range(parts)]


def entries(desc: TensorDescriptor, count: int, name: str) -> list[tuple[TensorDescriptor, int]]:
    """The first ``count`` entries of a vector, each a 0-d view (rotm's 5-element ``param``)."""
    if desc.ndim != 1 or desc.shape[0] != count:
        raise InfiniError(Status.BAD_TENSOR_SHAPE, f"operand '{name}': shape {desc.shape}, "
                          f"expected ({count},)")
    return [(TensorDescriptor(desc.dtype, ()), k * desc.strides[0]) for k in range(count)]


@dataclass(frozen=True)
class Operand:
    """One tensor of the C call. ``role``: 'in', 'out' or 'inout'; ``optional``: may be None;
    ``views``: (function, count) when the tensor is read as ``count`` views (see split_last)."""

    name: str
    role: str = "in"
    optional: bool = False
    views: tuple[Callable, int] | None = None

    @property
    def reads(self) -> bool:
        return self.role in ("in", "inout")

    @property
    def writes(self) -> bool:
        return self.role in ("out", "inout")

    @property
    def nviews(self) -> int:
        return 1 if self.views is None else self.views[1]

    def view(self, desc: TensorDescriptor) -> list[tuple[TensorDescriptor, int]]:
        if self.views is None:
            return [(desc, 0)]
        fn, count = self.views
        return fn(desc, count, self.name)


def parse_operands(spec_text: str) -> tuple[Operand, ...]:
    """Operands from a compact string: ``"y:inout, alpha, x"``; ``?`` marks optional ones."""
    out = []
    for item in spec_text.split(","):
        name, _, role = item.strip().partition(":")
        opt = name.endswith("?")
        out.append(Operand(name.rstrip("?"), role or "in", opt))
    return tuple(out)


# ------------------------------------------------------------------------------- parameters

_PARAM_TYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64}


@dataclass(frozen=True)
class Param:
    """A scalar fixed at create (a C ``float`` is 'f32'). ``check(value)`` returns an error
    message for values the operator cannot use, or None."""

    name: str
    dtype: str = "f32"
    default: float | int | None = None
    check: Callable | None = None

    def __post_init__(self):
        if self.dtype not in _PARAM_TYPES:  # was a KeyError at the first call
            raise TypeError(f"parameter {self.name!r}: dtype {self.dtype!r} is not one of "
                            f"{', '.join(_PARAM_TYPES)}")

    def convert(self, op: str, value):
        where = f"{op}: parameter '{self.name}'"
        if value is None:
            raise InfiniError(Status.BAD_PARAM, f"{where} is required")
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise InfiniError(Status.BAD_PARAM, f"{where} must be a real number, got {value!r}")
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:24]}... (an int of " \
            f"{int(value).bit_length()} bits)"
        integer = isinstance(value, int | np.integer)
        try:
            f = float(value)
        except OverflowError:  # a Python int beyond float64
            f = math.inf if value > 0 else -math.inf
        if self.dtype == "i64":
            if not (f.is_integer() or integer) or not -(2**63) <= int(value) < 2**63:
                raise InfiniError(Status.BAD_PARAM, f"{where} must be an int64, got {shown}")
            v = np.int64(int(value))
        else:
            with np.errstate(over="ignore"):
                v = _PARAM_TYPES[self.dtype](f)
            if (integer or math.isfinite(f)) and not math.isfinite(float(v)):
                raise InfiniError(Status.BAD_PARAM, f"{where} = {shown} overflows {self.dtype}")
        if self.check is not None:
            msg = self.check(v)
            if msg:
                raise InfiniError(Status.BAD_PARAM, f"{where} = {shown}: {msg}")
        return v


# ---------------------------------------------------------------------------------- program

@dataclass(frozen=True)
class Slot:
    """One kernel pointer: a view of user operand ``operand`` (view ``view``), its dtype,
    which expression input it feeds (``load``) and which result it stores (``store``)."""

    operand: int
    view: int
    dtype: DType
    load: int | None
    store: int | None


@dataclass(frozen=True, eq=False)
class Program:
    """A traced operator for one signature: what a backend compiles, whatever the layout.

    ``slots`` are in kernel order: the written operands first (slot 0 decides the iteration
    order), then the views of the read-only ones. ``results[j]`` is stored to the slot whose
    ``store == j``; expression input k is loaded from the slot whose ``load == k``."""

    name: str
    slots: tuple[Slot, ...]
    results: tuple[Expr, ...]
    params: tuple[str, ...]
    key: str

    @property
    def dtypes(self) -> list[DType]:
        return [s.dtype for s in self.slots]


def positional_scalars(op: str, ndescs: int, names: tuple[str, ...], args: tuple,
                       given: dict) -> dict:
    """Keyword parameters from the scalars given after the tensor descriptors, in the C API's
    order (``create_hardtanh_descriptor(h, y, x, -1.0, 1.0)``), merged with the keywords;
    too many, or one given both ways, is BAD_PARAM."""
    if len(args) > len(names):
        raise InfiniError(Status.BAD_PARAM, f"{op} takes {ndescs} tensor descriptors and at most "
                          f"{len(names)} scalars ({', '.join(names) or 'none'}), got "
                          f"{len(args)} more arguments")
    given = dict(given)
    for name, v in zip(names, args):
        if name in given:
            raise InfiniError(Status.BAD_PARAM, f"{op}: '{name}' given twice")
        given[name] = v
    return given


# ------------------------------------------------------------------------------------ spec

@dataclass(frozen=True, eq=False)
class ElementwiseSpec:
    """One elementwise operator (see the module docstring)."""

    name: str
    operands: tuple[Operand, ...]
    patterns: tuple[sigs.Pattern, ...]
    tvars: frozenset[DType]
    fn: Callable
    params: tuple[Param, ...] = ()
    doc: str = ""
    example: str = ""
    validate: Callable | None = None  # validate({name: value}) -> message for bad combinations
    signatures: tuple[sigs.Signature, ...] = field(init=False)

    def __post_init__(self):
        roles = tuple(o.role for o in self.operands)
        object.__setattr__(self, "signatures", sigs.expand(list(self.patterns), roles, self.tvars))
        if not self.signatures:  # dtypes=(): every call failed with "T in {}"
            raise ValueError(f"{self.name}: no type signature: dtypes is empty and every "
                             "signature uses T")
        object.__setattr__(self, "_programs", {})
        object.__setattr__(self, "_lock", _forksafe.Lock())
        object.__setattr__(self, "_key", None)

    @property
    def key(self) -> str:
        """Name + a digest of the traced bodies of every signature (what the kernels do);
        computed on first use (tracing every signature at import would slow the import)."""
        if self._key is None:
            h = sha1()
            for s in self.signatures:
                h.update(self.program(s).key.encode())
            object.__setattr__(self, "_key", f"{self.name}_{h.hexdigest()[:12]}")
        return self._key

    # -- names ---------------------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of the operands the expression reads (inputs and in-place operands)."""
        return tuple(o.name for o in self.operands if o.reads)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Names of the operands written (outputs and in-place operands)."""
        return tuple(o.name for o in self.operands if o.writes)

    @property
    def arity(self) -> int:
        return len(self.inputs)

    @property
    def dtypes(self) -> frozenset[DType]:
        """The dtypes of the first written operand over every signature."""
        j = next(k for k, o in enumerate(self.operands) if o.writes)
        return frozenset(s.dtypes[j] for s in self.signatures)

    def input_dtype(self, index: int, out: DType) -> DType:
        """Input ``index``'s dtype in the signature whose first output is ``out`` (the classic
        same-type operators: the output's dtype, or the pinned one, e.g. where's BOOL)."""
        j = next(k for k, o in enumerate(self.operands) if o.writes)
        ins = [k for k, o in enumerate(self.operands) if o.reads]
        for s in self.signatures:
            if s.dtypes[j] is out:
                return s.dtypes[ins[index]]
        return out

    def describe_signatures(self) -> str:
        return sigs.describe(list(self.patterns), self.tvars)

    # -- signatures ------------------------------------------------------------------------------
    def match(self, dtypes: tuple[DType | None, ...]) -> sigs.Signature:
        """The signature of these operand dtypes (None: an absent optional operand), or
        BAD_TENSOR_DTYPE naming the accepted ones."""
        return sigs.match(self.name, self.operands, self.signatures, dtypes,
                          self.describe_signatures)

    def candidates(self, dtypes: tuple[DType | None, ...]) -> list[sigs.Signature]:
        return [s for s in self.signatures
                if all(d is None or d is t for d, t in zip(dtypes, s.dtypes))]

    # -- tracing ---------------------------------------------------------------------------------
    def program(self, sig: sigs.Signature, present: tuple[bool, ...] | None = None) -> Program:
        """The traced kernel program for a signature (and which optional operands are given)."""
        present = present or tuple(True for _ in self.operands)
        cache_key = (sig, present)
        prog = self._programs.get(cache_key)
        if prog is None:
            with self._lock:
                prog = self._programs.get(cache_key) or self._trace(sig, present)
                self._programs[cache_key] = prog
        return prog

    def _trace(self, sig: sigs.Signature, present: tuple[bool, ...]) -> Program:
        in_types: list[str | None] = []
        loads: dict[tuple[int, int], int] = {}
        for k, o in enumerate(self.operands):
            if not o.reads:
                continue
            for v in range(o.nviews):
                if present[k]:
                    loads[(k, v)] = len(in_types)
                    in_types.append(sigs.COMPUTE[sig.dtypes[k]])
                else:
                    in_types.append(None)
        param_types = [p.dtype for p in self.params]
        written = [k for k, o in enumerate(self.operands) if o.writes]
        try:
            results = trace(self.fn, in_types, param_types, tuple(p.name for p in self.params),
                            result_bits(sig, written))
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from e
        if len(results) != len(written):
            raise TypeError(f"{self.name}: the expression returns {len(results)} values for "
                            f"{len(written)} outputs ({', '.join(self.outputs)})")
        slots = []
        for j, k in enumerate(written):
            slots.append(Slot(k, 0, sig.dtypes[k], loads.get((k, 0)), j))
        for k, o in enumerate(self.operands):
            if o.role == "in" and present[k]:
                for v in range(o.nviews):
                    slots.append(Slot(k, v, sig.dtypes[k], loads[(k, v)], None))
        results = tuple(_typed_result(r, sigs.COMPUTE[sig.dtypes[k]], sig.dtypes[k])
                        for r, k in zip(results, written))
        text = fingerprint(results) + "|" + ",".join(
            f"{s.dtype.name}:{s.load}:{s.store}" for s in slots)
        key = sha1(text.encode()).hexdigest()[:16]
        return Program(self.name, tuple(slots), results, tuple(param_types), key)

    # -- parameters --------------------------------------------------------------------------------
    def param_values(self, given: dict) -> tuple:
        """Validated parameter values (defaults filled in), in declaration order."""
        unknown = set(given) - {p.name for p in self.params}
        if unknown:
            known = ", ".join(p.name for p in self.params) or "none"
            raise InfiniError(Status.BAD_PARAM, f"{self.name}: unknown parameter(s) "
                              f"{', '.join(sorted(unknown))}; it takes: {known}")
        values = tuple(p.convert(self.name, given.get(p.name, p.default)) for p in self.params)
        if self.validate is not None:
            msg = self.validate({p.name: v for p, v in zip(self.params, values)})
            if msg:
                raise InfiniError(Status.BAD_PARAM, f"{self.name}: {msg}")
        return values

    def __repr__(self) -> str:
        return f"<elementwise operator {self.name}({', '.join(o.name for o in self.operands)})>"


def _typed_result(r: Expr, compute: str, dtype: DType | None = None) -> Expr:
    """A constant result (ones, zeros) takes the output's compute type; a 64-bit integer stored
    to fp16/bf16 is handed on as float64 rounded to odd (:func:`_int_to_f64_odd`)."""
    if r.op == "const" and r.dtype != compute:
        return const(r.args[0], compute)
    if dtype in (DType.F16, DType.BF16) and r.dtype in ("i64", "u64"):
        return _int_to_f64_odd(r)
    return r


def _int_to_f64_odd(r: Expr) -> Expr:
    """A 64-bit integer as float64 rounded to odd, so that the store's rounding to fp16/bf16
    (through float32 rounded to odd) is the only one: the integer went through a float64
    rounded to nearest first, two roundings for magnitudes beyond 2^53 (2^53 + 2^45 + 1 gave
    bf16 2^53, not 2^53 + 2^46). r = hi + lo with hi's low 11 bits clear (at most 53
    significant bits: exact in float64) and lo in [0, 2048); their float64 sum's error is
    exact (|hi| >= 2048 > lo, or hi = 0)."""
    from .expr import Math, cast
    from .mathlib import _to_odd

    hi = r & const(-2048, r.dtype)                         # wraps to 2^64 - 2048 for u64
    fh, fl = cast(hi, "f64"), cast(r - hi, "f64")
    s = fh + fl
    return _to_odd(Math(), s, fl - (s - fh))
