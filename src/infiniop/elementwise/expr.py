"""Typed scalar expressions: an operator's body, traced once per signature, rendered by every backend.

An operator is written as ``lambda m, a, b: a - b`` (or with ``m.maximum``, ``m.where``, ``m.exp``...).
Calling it with typed placeholders records a DAG of :class:`Expr` nodes, each with a compute type
(``"f32"``, ``"f64"``, ``"i32"``, ``"i64"``, ``"u32"``, ``"u64"``, ``"bool"``). Each backend renders
the DAG as one statement per node (Numba source on the CPU, Triton source on GPUs), so the
primitives below are the whole contract between an operator and a backend: IEEE
round-to-nearest-even arithmetic with no contraction into FMA, an explicit ``fma``, exact
conversions and bit casts. The math functions (``m.exp``, ``m.tanh``...) are written in these
primitives (mathlib.py), which is why they give the same bits on every backend.

Typing follows NumPy/torch where they agree: an operation on two values of one type keeps it;
``bool`` joins any type; an integer meeting a float becomes that float; two floats give the
wider; two integers the wider (signed if the signedness differs). A Python number takes the type
of the value it meets (a float meeting an integer value gives ``f64``, NumPy's rule).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

FLOAT = ("f32", "f64")
INT = ("i32", "i64", "u32", "u64")
TYPES = ("bool",) + INT + FLOAT
WIDTH = {"bool": 8, "i32": 32, "u32": 32, "f32": 32, "i64": 64, "u64": 64, "f64": 64}

# Binary operators: name -> Python symbol (used by both backends' renderers).
BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
          "and_": "&", "or_": "|", "xor": "^", "shl": "<<", "shr": ">>"}
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
# Primitives every backend renders (beyond BINARY, leaves, cast and bitcast).
PRIMITIVES = ("neg", "abs", "invert", "fma", "minimum", "maximum", "where", "sqrt", "floor",
              "ceil", "trunc", "rint", "isnan")
# Functions left to the backend's math library (not bit-identical across backends); a name that
# mathlib.py defines is taken from there instead.
LIBM = ("sin", "cos", "tan", "exp", "log", "tanh", "exp2", "expm1", "log2", "log10", "log1p",
        "erf", "erfc", "atanh")


def is_float(t: str) -> bool:
    return t in FLOAT


def is_int(t: str) -> bool:
    return t in INT


def promote(a: str, b: str) -> str:
    """The type two values are combined in (see the module docstring)."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if is_float(a) or is_float(b):
        if is_float(a) and is_float(b):
            return "f64"
        return a if is_float(a) else b
    if a[0] == b[0]:  # same signedness: the wider
        return a if WIDTH[a] >= WIDTH[b] else b
    return "i64"


def const_value(value, t: str):
    """``value`` as the exact Python number a constant of type ``t`` holds."""
    if t == "bool":
        return bool(value)
    if is_float(t):
        v = float(value)
        if t == "f32" and math.isfinite(v):
            try:
                v = struct.unpack("<f", struct.pack("<f", v))[0]  # rounded once to f32
            except OverflowError:
                v = math.copysign(math.inf, v)
        return v
    if isinstance(value, float):
        if not value.is_integer():
            raise TypeError(f"the constant {value!r} is not an integer ({t})")
        value = int(value)
    bits = WIDTH[t]
    v = int(value) & ((1 << bits) - 1)
    if t[0] == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


@dataclass(frozen=True, eq=False)
class Expr:
    """A node. ``op`` is 'input' (args = (index,)), 'param' (args = (index,)), 'const'
    (args = (value,)), 'cast'/'bitcast' (args = (x,), target = ``dtype``) or a primitive."""

    op: str
    args: tuple
    dtype: str

    # -- arithmetic ------------------------------------------------------------------------
    def _bin(self, name, other, swap=False):
        a, b = (other, self) if swap else (self, other)
        return binary(name, a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("truediv", o)
    def __rtruediv__(self, o): return self._bin("truediv", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __rfloordiv__(self, o): return self._bin("floordiv", o, True)
    def __mod__(self, o): return self._bin("mod", o)
    def __rmod__(self, o): return self._bin("mod", o, True)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __and__(self, o): return self._bin("and_", o)
    def __rand__(self, o): return self._bin("and_", o, True)
    def __or__(self, o): return self._bin("or_", o)
    def __ror__(self, o): return self._bin("or_", o, True)
    def __xor__(self, o): return self._bin("xor", o)
    def __rxor__(self, o): return self._bin("xor", o, True)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rshift__(self, o): return self._bin("shr", o)
    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return unary("abs", self)
    def __invert__(self): return unary("invert", self)

    def eq(self, o): return self._bin("eq", o)  # m.eq / x.eq: == cannot return an Expr here
    def ne(self, o): return self._bin("ne", o)

    def __eq__(self, o):
        raise TypeError("== on a traced value would compare the objects, not the values: "
                        "use m.eq(x, y) (m.ne(x, y) for !=)")

    def __ne__(self, o):
        raise TypeError("!= on a traced value would compare the objects, not the values: "
                        "use m.ne(x, y) (m.eq(x, y) for ==)")

    def __bool__(self):
        raise TypeError("an elementwise expression has no truth value here: "
                        "use m.where(cond, x, y) instead of if/else, & | ~ instead of and/or/not")

    __hash__ = object.__hash__


def const(value, t: str) -> Expr:
    if isinstance(value, Expr):
        return value
    if t not in TYPES:
        raise TypeError(f"unknown type {t!r}; known: {', '.join(TYPES)}")
    value = _python_number(value)
    return Expr("const", (const_value(value, t),), t)


def _python_number(value):
    """A Python bool, int or float for a constant: NumPy's real scalars (``np.float32(0.5)``,
    ``np.int64(1)``) too, as their exact value."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    raise TypeError(f"constants must be numbers, got {value!r}")


def _number_type(value, other: str) -> str:
    """The type a Python number takes next to a value of type ``other``."""
    if isinstance(value, float) and not is_float(other):
        return "f64"
    if isinstance(value, int) and not isinstance(value, bool) and other == "bool":
        return "i64"
    return other


def _as_expr(x, like: str) -> Expr:
    """A Python number next to a value of type ``like``, typed as NumPy 2 types it: an int
    takes ``like``'s integer type, where it must fit (``x > -1`` on uint8 was ``x > 255``:
    NumPy raises OverflowError there too), a float next to an integer is float64."""
    if isinstance(x, Expr):
        return x
    x = _python_number(x)
    t = _number_type(x, like)
    if type(x) is int and t in INT:
        bits = WIDTH[t]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t[0] == "i" else (0, (1 << bits) - 1)
        if not lo <= x <= hi:
            raise OverflowError(f"the constant {x} does not fit {t}, the type of the value it "
                                f"meets (NumPy refuses it too); cast that value first, e.g. "
                                f"m.cast(v, 'i64'), or write m.const({x}, '{t}') to wrap it")
    return const(x, t)


def cast(x, t: str) -> Expr:
    """Value conversion to type ``t`` (float->int truncates; int->float and float->float round
    to nearest even; int->int wraps)."""
    if t not in TYPES:
        raise TypeError(f"unknown type {t!r}; known: {', '.join(TYPES)}")
    if not isinstance(x, Expr):
        return const(x, t)
    if x.dtype == t:
        return x
    if x.op == "const":
        v = x.args[0]
        if is_float(t) or (is_float(x.dtype) and math.isfinite(v)) or not is_float(x.dtype):
            return const(math.trunc(v) if is_float(x.dtype) and not is_float(t) else v, t)
    return Expr("cast", (x,), t)


def bitcast(x: Expr, t: str) -> Expr:
    """Reinterpret the bits of ``x`` as type ``t`` of the same width."""
    if not isinstance(x, Expr) or x.dtype == "bool" or t == "bool" or WIDTH[x.dtype] != WIDTH[t]:
        raise TypeError(f"bitcast needs a value and a type of the same width, got "
                        f"{getattr(x, 'dtype', x)!r} -> {t!r}")
    return x if x.dtype == t else Expr("bitcast", (x,), t)


def binary(name: str, a, b) -> Expr:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TypeError("an elementwise expression needs at least one traced value")
    a = _as_expr(a, b.dtype if isinstance(b, Expr) else "f64")
    b = _as_expr(b, a.dtype)
    t = promote(a.dtype, b.dtype)
    if name in ("and_", "or_", "xor"):
        if is_float(t):
            raise TypeError(f"{BINARY[name]} needs integers or booleans, got {t}")
    elif name in ("shl", "shr"):
        if not is_int(t):
            raise TypeError(f"{BINARY[name]} needs integers, got {a.dtype} and {b.dtype}")
    elif t == "bool" and name not in COMPARE:
        t = "i64"  # arithmetic on booleans counts them, as in NumPy's integer promotion
    if name == "truediv" and not is_float(t):
        t = "f64"
    a, b = cast(a, t), cast(b, t)
    known = b.args[0] if b.op == "const" else None  # a constant count or divisor: no guard
    if name in ("shl", "shr") and not (known is not None and 0 <= known < WIDTH[t]):
        return _shift(name, a, b, t)
    if name in ("floordiv", "mod") and t in ("i32", "i64") and known in (None, -1):
        return _signed_division(name, a, b, t)
    return Expr(name, (a, b), "bool" if name in COMPARE else t)


def _shift(name: str, a: Expr, b: Expr, t: str) -> Expr:
    """NumPy's shifts: a count outside [0, width) gives 0 (``<<``, unsigned ``>>``) or the sign
    (signed ``>>``). A raw shift by such a count is undefined in LLVM: scalar and vector code
    disagreed (3 >> 65: 1 in a strided call, 0 in a contiguous one)."""
    zero = const(0, t)
    ok = Expr("and_", (Expr("ge", (b, zero), "bool"), Expr("lt", (b, const(WIDTH[t], t)), "bool")),
              "bool")
    raw = Expr(name, (a, Expr("where", (ok, b, zero), t)), t)
    fill = zero
    if name == "shr" and t.startswith("i"):
        fill = Expr("where", (Expr("lt", (a, zero), "bool"), const(-1, t), zero), t)
    return Expr("where", (ok, raw, fill), t)


def _signed_division(name: str, a: Expr, b: Expr, t: str) -> Expr:
    """a // b and a % b with b = -1 apart: the minimum integer // -1 overflows (undefined in
    LLVM, 0 here), where NumPy wraps to the minimum itself; a % -1 is 0."""
    minus_one = Expr("eq", (b, const(-1, t)), "bool")
    q = Expr(name, (a, Expr("where", (minus_one, const(1, t), b), t)), t)
    return Expr("where", (minus_one, Expr("neg", (a,), t) if name == "floordiv" else const(0, t), q), t)


def unary(name: str, x) -> Expr:
    if not isinstance(x, Expr):
        raise TypeError(f"{name} needs a traced value, got {x!r}")
    if name == "invert":
        if is_float(x.dtype):
            raise TypeError("~ needs an integer or boolean")
        return Expr("invert", (x,), x.dtype)
    if name == "isnan":
        return Expr("isnan", (x,), "bool") if is_float(x.dtype) else const(False, "bool")
    t = x.dtype
    if t == "bool":
        t = "i64"
    if name in ("sqrt", "floor", "ceil", "trunc", "rint") + LIBM:
        if not is_float(t):
            t = "f64"
    return Expr(name, (cast(x, t),), t)


def fma(a, b, c) -> Expr:
    t = None
    for v in (a, b, c):
        if isinstance(v, Expr):
            t = v.dtype if t is None else promote(t, v.dtype)
    if t is None:
        raise TypeError("fma needs at least one traced value")
    if not is_float(t):
        t = "f64"
    return Expr("fma", tuple(cast(_as_expr(v, t), t) for v in (a, b, c)), t)


def where(c, a, b) -> Expr:
    if isinstance(c, Expr) and c.dtype != "bool":
        c = binary("ne", c, 0)
    if not isinstance(c, Expr):
        c = const(bool(c), "bool")
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        t = _number_type(a, "f64") if isinstance(a, float) or isinstance(b, float) else "i64"
    else:
        t = promote(a.dtype if isinstance(a, Expr) else _number_type(a, b.dtype),
                    b.dtype if isinstance(b, Expr) else _number_type(b, a.dtype))
    return Expr("where", (c, cast(_as_expr(a, t), t), cast(_as_expr(b, t), t)), t)


def extremum(name: str, a, b) -> Expr:
    e = binary("sub", a, b)  # only to type the pair
    x, y = e.args
    return Expr(name, (x, y), e.dtype)


class Math:
    """The ``m`` namespace of operator expressions; every backend understands each name.

    ``result_bits``: the significand bits of the narrowest floating-point type the traced
    expression's results are stored in (24 for float32, 11 for fp16, 8 for bf16): math
    functions whose result is rounded to a half type may use a cheaper evaluation that still
    rounds correctly there.

    Primitives: ``minimum``/``maximum`` (NaN-propagating), ``where``, ``fma``, ``abs``, ``sqrt``,
    ``floor``, ``ceil``, ``trunc``, ``rint``, ``isnan``, ``eq``, ``ne``, ``cast``, ``bitcast``,
    ``const``. Math functions (``exp``, ``log``, ``tanh``, ``sigmoid``, ``erf``...) come from
    mathlib.py, written in those primitives; ``sin``/``cos``/``tan`` use the backend's libm.
    """

    def __init__(self, result_bits: int = 24):
        self.result_bits = result_bits

    def minimum(self, x, y): return extremum("minimum", x, y)
    def maximum(self, x, y): return extremum("maximum", x, y)
    def where(self, c, x, y): return where(c, x, y)
    def fma(self, a, b, c): return fma(a, b, c)
    def eq(self, x, y): return binary("eq", x, y)
    def ne(self, x, y): return binary("ne", x, y)
    def cast(self, x, t: str): return cast(x, t)
    def bitcast(self, x, t: str): return bitcast(x, t)
    def const(self, v, t: str): return const(v, t)

    def __getattr__(self, name):
        from . import mathlib

        fn = mathlib.FUNCTIONS.get(name)
        if fn is not None:
            return lambda *args: fn(self, *args)
        if name in ("neg", "abs", "invert", "sqrt", "floor", "ceil", "trunc", "rint",
                    "isnan") + LIBM:
            return lambda x: unary(name, x)
        raise AttributeError(f"m.{name} is not an elementwise function; known: "
                             f"{', '.join(known_names())}")


NAMES = ("minimum", "maximum", "where", "fma", "eq", "ne", "cast", "bitcast", "const", "neg",
         "abs", "invert", "sqrt", "floor", "ceil", "trunc", "rint", "isnan") + LIBM


def known_names() -> list[str]:
    from . import mathlib

    return sorted(set(NAMES) | set(mathlib.FUNCTIONS))

def trace(fn, input_types: list[str | None], param_types: list[str] = (),
          param_names: tuple[str, ...] = (), result_bits: int = 24,
          m: Math | None = None) -> tuple[Expr, ...]:
    """Run ``fn(m, x0, x1, ..., **params)`` on typed placeholders and return its results (a tuple,
    one per output). An input whose type is None is absent (an optional operand): ``fn`` gets
    None for it. ``result_bits``: see :class:`Math`. ``m``: the namespace passed to ``fn``
    instead of ``Math(result_bits)`` (row operators pass one that adds row reductions)."""
    xs = [None if t is None else Expr("input", (k,), t) for k, t in enumerate(input_types)]
    ps = {n: Expr("param", (k,), t) for k, (n, t) in enumerate(zip(param_names, param_types))}
    result = fn(Math(result_bits) if m is None else m, *xs, **ps)
    results = result if isinstance(result, tuple) else (result,)
    return tuple(r if isinstance(r, Expr) else const(r, "f64" if isinstance(r, float) else "i64")
                 for r in results)


def topo(roots, stop=frozenset()) -> list[Expr]:
    """Every node reachable from ``roots``, each once, operands before users (for SSA code);
    nodes whose id is in ``stop`` are listed but not entered (values computed elsewhere)."""
    order: list[Expr] = []
    seen: set[int] = set()
    stack = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if node.op not in ("input", "param", "const") and id(node) not in stop:
            stack.extend((a, False) for a in reversed(node.args) if id(a) not in seen)
    return order


def fingerprint(roots) -> str:
    """A canonical text of the DAG (same DAG -> same text), for cache keys."""
    names: dict[int, str] = {}
    lines = []
    for k, node in enumerate(topo(roots)):
        if node.op in ("input", "param", "const"):
            arg = repr(node.args[0])
        else:
            arg = ",".join(names[id(a)] for a in node.args)
        names[id(node)] = f"v{k}"
        lines.append(f"{node.dtype} {node.op}({arg})")
    lines.append("-> " + ",".join(names[id(r)] for r in roots))
    return ";".join(lines)
