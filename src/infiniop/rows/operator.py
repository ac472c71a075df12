"""The row operator as users hold it: ``infiniop.rms_norm`` and what ``row_operator()`` makes.

A :class:`RowOperator` is its definition (spec.py) plus the entry points built on top of it: the
descriptor API, the functional form and pickling. It sits above the planner, the descriptor and
the functional front end, which only read the definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from ..elementwise import signature as sigs
from ..elementwise.operator import _defined_here, builtin_name_error
from ..elementwise.spec import FLOATS, Param, dtype_set
from ..ops import ROW_OPERATORS
from .descriptor import RowDescriptor
from .functional import call
from .spec import REGISTRY, RowSpec, parse_operands


class RowOperator(RowSpec):
    """A row operator: call it on arrays, or create descriptors from it."""

    def create_descriptor(self, handle, *args, **params):
        """Validate and plan a call: ``(handle, *tensor_descriptors, *scalars)`` in the C API's
        order; scalars may also be keywords. See :class:`RowDescriptor`."""
        n = len(self.operands)
        return RowDescriptor(handle, self, args[:n], self.scalar_values(args[n:], params))

    def __call__(self, *arrays, out=None, **params):
        """Functional form: the read operands in order, scalars as keywords; returns the
        outputs (a tuple when there are several) as the kind of array it was given."""
        return call(self, arrays, out, params)

    def __reduce__(self):
        """Built-ins pickle by name, every other operator (registered or not) by value: a
        process that never defined it (a Dask worker) gets the definition."""
        if REGISTRY.get(self.name) is self and self.name in ROW_OPERATORS:
            return (_registered, (self.name,))
        init = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return _unpickle, (init,)


def _registered(name: str) -> RowOperator:
    """A built-in or registered row operator by name (the built-ins are defined on first use:
    importing ``infiniop.rows.ops`` defines them all)."""
    if name not in REGISTRY:
        from . import ops  # noqa: F401
    return REGISTRY[name]


def _unpickle(init: dict) -> RowOperator:
    """The definition, rebuilt (its caches and lock are the receiver's own); the operator the
    receiver registered itself when that is this very definition."""
    known = REGISTRY.get(init["name"])
    if known is not None and all(getattr(known, k) is v or getattr(known, k) == v
                                 for k, v in init.items()):
        return known
    return RowOperator(**init)


def row_operator(name: str, operands, fn: Callable, *, dtypes=FLOATS, signatures=None,
                 params=(), axis: str | None = None, causal: bool = False, doc: str = "",
                 nan_free_if_finite: bool = False, register: bool = True) -> RowOperator:
    """Define a row operator.

    >>> import numpy as np, infiniop
    >>> center = infiniop.row_operator("center", "y:out, x", lambda m, x: x - m.mean(x),
    ...                                axis="axis")
    >>> center(np.array([[1, 2, 6], [0, 0, 3]], np.float32))
    array([[-2., -1.,  3.],
           [-1., -1.,  2.]], dtype=float32)
    >>> center(np.array([[1, 2], [5, 8]], np.float32), axis=0)
    array([[-2., -3.],
           [ 2.,  3.]], dtype=float32)

    ``operands``: ``"y:out, x, w:col, b?:col, std:out:stat"`` in the C API's order (or
    :class:`RowOperand` objects). ``fn(m, *inputs, **params)`` returns one value per output
    (outputs in order); ``m`` adds ``m.sum(v)``, ``m.max(v)``, ``m.mean(v)`` and ``m.n`` to the
    elementwise namespace. ``dtypes`` is the set ``T`` ranges over; ``signatures`` ufunc-style
    type lists (default: every operand ``T``); ``params``: :class:`Param` or names of float32
    ones; ``axis``: the keyword that picks the axis (None: the last one);
    ``nan_free_if_finite``: a promise that the row outputs hold no NaN where the row's
    statistics and the column operands are finite (faster bf16 outputs; a false promise gives
    wrong NaN results).
    """
    if register and name in ROW_OPERATORS and not _defined_here(fn):
        raise ValueError(builtin_name_error(name))
    ops = parse_operands(operands) if isinstance(operands, str) else tuple(operands)
    if signatures is None:
        n_in = sum(o.reads for o in ops)
        n_out = sum(o.writes for o in ops)
        signatures = [f"{', '.join(['T'] * n_in)} -> {', '.join(['T'] * n_out)}"]
    elif isinstance(signatures, str):
        signatures = [signatures]
    params = tuple(p if isinstance(p, Param) else Param(p) for p in params)
    spec = RowOperator(name, ops, tuple(sigs.parse(s) for s in signatures), dtype_set(dtypes), fn,
                   params, axis, causal, doc, nan_free_if_finite)
    if register:
        REGISTRY[name] = spec
    return spec
