"""Scalar expressions: an operator's body, traced once, rendered for every backend.

An operator is written as ``lambda m, a, b: a - b`` (or with ``m.maximum``, ``m.where``...).
Calling it with :class:`Expr` placeholders records a small tree; each backend renders the tree
to its own source (Numba Python, Triton). The tree is the single definition of the operator.
"""

from __future__ import annotations

from dataclasses import dataclass

# name -> arity. Semantics are NumPy's for the compute dtype (float32 for fp16/bf16 storage):
# minimum/maximum propagate NaN, where(c, x, y) picks x where c is true, comparisons give bool.
BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
          "and_": "&", "or_": "|", "xor": "^"}
UNARY = {"neg", "abs", "invert", "exp", "log", "sqrt", "sin", "cos", "tanh", "floor", "ceil",
         "isnan"}
FUNCS = {"minimum": 2, "maximum": 2, "where": 3, **{u: 1 for u in UNARY}}


@dataclass(frozen=True, eq=False)
class Expr:
    """A node: ``op`` is 'input' (arg = index), 'const' (arg = Python number) or an op name."""

    op: str
    args: tuple = ()

    def _bin(self, name, other, swap=False):
        o = other if isinstance(other, Expr) else const(other)
        return Expr(name, (o, self) if swap else (self, o))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("truediv", o)
    def __rtruediv__(self, o): return self._bin("truediv", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __mod__(self, o): return self._bin("mod", o)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __and__(self, o): return self._bin("and_", o)
    def __or__(self, o): return self._bin("or_", o)
    def __xor__(self, o): return self._bin("xor", o)
    def __neg__(self): return Expr("neg", (self,))
    def __pos__(self): return self
    def __abs__(self): return Expr("abs", (self,))
    def __invert__(self): return Expr("invert", (self,))

    def eq(self, o): return self._bin("eq", o)  # == is kept for identity; use m.eq / x.eq
    def ne(self, o): return self._bin("ne", o)

    def __bool__(self):
        raise TypeError("an elementwise expression has no truth value here: "
                        "use m.where(cond, x, y) instead of if/else, & | ~ instead of and/or/not")


def const(value) -> Expr:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"constants must be int or float, got {value!r}")
    return Expr("const", (value,))


class Math:
    """The ``m`` namespace that operator expressions use; every backend understands each name."""

    def minimum(self, x, y): return _call("minimum", x, y)
    def maximum(self, x, y): return _call("maximum", x, y)
    def where(self, c, x, y): return _call("where", c, x, y)
    def eq(self, x, y): return _call("eq", x, y)
    def ne(self, x, y): return _call("ne", x, y)
    def __getattr__(self, name):
        if name in UNARY:
            return lambda x: _call(name, x)
        raise AttributeError(f"m.{name} is not an elementwise function; known: "
                             f"{', '.join(sorted(FUNCS))}")


def _call(name, *args) -> Expr:
    return Expr(name, tuple(a if isinstance(a, Expr) else const(a) for a in args))


def trace(fn, arity: int) -> Expr:
    """Run ``fn(m, x0, x1, ...)`` on placeholders and return the recorded tree."""
    result = fn(Math(), *[Expr("input", (i,)) for i in range(arity)])
    if not isinstance(result, Expr):
        result = const(result)
    return result


def render(e: Expr, leaf, call) -> str:
    """Render a tree to source: ``leaf(node)`` for input/const, ``call(op, [arg sources])``."""
    if e.op in ("input", "const"):
        return leaf(e)
    return call(e.op, [render(a, leaf, call) for a in e.args])


def is_bool_valued(e: Expr) -> bool:
    """True if the node produces a boolean (comparisons, isnan, logic on booleans)."""
    return e.op in ("lt", "le", "gt", "ge", "eq", "ne", "isnan")
