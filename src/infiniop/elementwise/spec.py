"""What an elementwise operator is: a name, its inputs, the dtypes it accepts, one expression."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ..dtype import DType
from .expr import Expr, render, trace

FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})
SIGNED = frozenset({DType.I8, DType.I16, DType.I32, DType.I64})
UNSIGNED = frozenset({DType.U8, DType.U16, DType.U32, DType.U64})
INTEGERS = SIGNED | UNSIGNED
NUMERIC = FLOATS | INTEGERS

REGISTRY: dict[str, ElementwiseSpec] = {}


@dataclass(frozen=True, eq=False)
class ElementwiseSpec:
    """One elementwise operator. ``fn(m, *inputs)`` is traced once into ``expr``.

    ``input_dtypes`` pins some inputs to a fixed dtype (e.g. ``where``'s condition is BOOL);
    every other input must have the output's dtype.
    """

    name: str
    inputs: tuple[str, ...]
    dtypes: frozenset[DType]
    fn: Callable
    input_dtypes: dict[int, DType] = field(default_factory=dict)
    doc: str = ""
    expr: Expr = field(init=False)
    key: str = field(init=False)

    def __post_init__(self):
        e = trace(self.fn, len(self.inputs))
        object.__setattr__(self, "expr", e)
        text = render(e, lambda n: f"{n.op}{n.args}", lambda op, a: f"{op}({','.join(a)})")
        pinned = sorted((i, int(d)) for i, d in self.input_dtypes.items())
        digest = hashlib.sha1(f"{text}|{pinned}".encode()).hexdigest()[:12]
        object.__setattr__(self, "key", f"{self.name}_{digest}")

    @property
    def arity(self) -> int:
        return len(self.inputs)

    def input_dtype(self, index: int, out: DType) -> DType:
        return self.input_dtypes.get(index, out)

    def create_descriptor(self, handle, out_desc, *in_descs):
        """Validate and plan a call; see :class:`ElementwiseDescriptor`."""
        from .descriptor import ElementwiseDescriptor

        return ElementwiseDescriptor(handle, self, out_desc, in_descs)

    def __call__(self, *arrays, out=None):
        """Functional form on arrays: broadcasts like NumPy, returns the input's array kind."""
        return _functional_call(self, arrays, out)

    def __repr__(self) -> str:
        return f"<elementwise operator {self.name}({', '.join(self.inputs)})>"

    def __reduce__(self):
        """Pickle as the constructor's arguments, so an operator reaches other processes (Dask
        workers): ``fn`` travels by value with cloudpickle (a lambda) or by reference with pickle
        (a module-level function); the receiver traces it again."""
        init = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return _unpickle, (type(self), init, self.key)


_UNPICKLED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _unpickle(cls, init: dict, key: str):
    """One operator object per process for the same definition: the registered one when it is
    the same operator, else the first copy unpickled, so per-operator caches keep hitting."""
    for known in (REGISTRY.get(init["name"]), _UNPICKLED.get(key)):
        if (type(known) is cls and known.key == key
                and all(getattr(known, k) == v for k, v in init.items() if k != "fn")):
            return known
    spec = cls(**init)
    _UNPICKLED[key] = spec
    return spec


def _functional_call(spec, arrays, out):
    global _functional_call
    from .functional import call

    _functional_call = call  # bind once: the functional path is called in hot loops
    return call(spec, arrays, out)


def elementwise(name: str, inputs: tuple[str, ...] | list[str], dtypes, expr: Callable, *,
                input_dtypes: dict[int, DType] | None = None, doc: str = "",
                register: bool = True) -> ElementwiseSpec:
    """Define an elementwise operator from a scalar expression.

    >>> import numpy as np, infiniop
    >>> axpy = infiniop.elementwise("axpy2", ("x", "y"), infiniop.FLOATS,
    ...                             lambda m, x, y: 2 * x + y)
    >>> axpy(np.ones(3, np.float32), np.arange(3, dtype=np.float32))
    array([2., 3., 4.], dtype=float32)

    ``m`` offers ``minimum``/``maximum`` (NaN-propagating), ``where``, ``abs``, ``exp``, ``log``,
    ``sqrt``, ``sin``, ``cos``, ``tanh``, ``floor``, ``ceil``, ``isnan``, ``eq``, ``ne``. Integer
    arithmetic wraps like NumPy; fp16/bf16 are computed in float32 and rounded once.
    """
    spec = ElementwiseSpec(name, tuple(inputs), frozenset(dtypes), expr,
                           dict(input_dtypes or {}), doc)
    if register:
        REGISTRY[name] = spec
    return spec
