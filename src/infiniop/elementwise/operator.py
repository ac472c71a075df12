"""The elementwise operator as users hold it: ``infiniop.sub`` and what ``elementwise()`` makes.

An :class:`ElementwiseOperator` is its definition (spec.py) plus the entry points built on top
of it: the descriptor API, the functional form, its own help() and pickling. It sits above the
planner, the descriptor and the functional front end, which only read the definition.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from dataclasses import fields

from ..dtype import DType
from ..tensor import TensorDescriptor
from . import signature as sigs
from .descriptor import ElementwiseDescriptor
from .functional import _last_call, call
from .spec import (
    NUMERIC,
    REGISTRY,
    ElementwiseSpec,
    Operand,
    Param,
    dtype_set,
    parse_operands,
    positional_scalars,
)


class ElementwiseOperator(ElementwiseSpec):
    """An elementwise operator: call it on arrays, or create descriptors from it."""

    def create_descriptor(self, handle, *args, **params):
        """Validate and plan a call: ``(handle, *tensor_descriptors, *scalars)`` in the C API's
        order, as the row operators take them; scalars may also be keywords. See
        :class:`ElementwiseDescriptor`."""
        n = len(self.operands)
        extra = args[n:]
        if extra and self.params and not any(isinstance(a, TensorDescriptor) for a in extra):
            params = positional_scalars(self.name, n, tuple(p.name for p in self.params),
                                        extra, params)
            args = args[:n]
        return ElementwiseDescriptor(handle, self, args, params)

    def __call__(self, *arrays, out=None, **params):
        """Functional form on arrays: broadcasts like NumPy, returns the input's array kind."""
        last = _last_call.get(self)  # call()'s first step, inlined for out= (a frame less)
        if last is not None and out is not None and not params and last[0]((out, *arrays)) == 0:
            return out
        return call(self, arrays, out, params)

    def __reduce__(self):
        """Built-in operators pickle by name; every other one as its definition, registered or
        not, so a user's operator reaches processes that never defined it (Dask workers, a
        notebook's cluster): ``fn`` travels by value with cloudpickle (a lambda) or by
        reference with pickle (a module-level function); the receiver traces it again."""
        if REGISTRY.get(self.name) is self and _is_builtin(self.name):
            return (_registered, (self.name,))
        init = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return _unpickle, (init, self.key)


def call_signature(ops, params) -> inspect.Signature:
    """The functional form's signature (what help() and IDEs show)."""
    P = inspect.Parameter
    ps = [P(o.name, P.POSITIONAL_OR_KEYWORD, default=None if o.optional else P.empty)
          for o in ops if o.reads]
    if any(o.role == "out" for o in ops):
        ps.append(P("out", P.KEYWORD_ONLY, default=None))
    ps += [P(p.name, P.KEYWORD_ONLY, default=p.default) for p in params]
    return inspect.Signature(ps)


def help_text(name, ops, patterns, tvars, params, doc, example) -> str:
    """The operator's own help: call forms, signatures, parameters, what it computes."""
    outs = [o.name for o in ops if o.role == "out"]
    names = ", ".join(o.name for o in ops)
    returns = ", ".join(o.name for o in ops if o.writes)
    lines = [doc or f"The {name} operator.", "",
             f"Returns {returns}" + (" (allocated unless given as out=)." if outs else "."),
             f"Descriptor API: {_creator(name)}(handle, {names}"
             + "".join(f", {p.name}=..." for p in params) + ")",
             f"                desc.calculate(workspace, {names}, stream=None)",
             f"Signatures (inputs -> outputs): {sigs.describe(list(patterns), tvars)}"]
    inout = [o.name for o in ops if o.role == "inout"]
    if inout:
        lines.append(f"Updated in place: {', '.join(inout)}.")
    optional = [o.name for o in ops if o.optional]
    if optional:
        lines.append(f"Optional (may be None): {', '.join(optional)}.")
    if params:
        lines.append("Parameters (fixed at create): " + ", ".join(
            f"{p.name} ({p.dtype}, default {p.default!r})" for p in params))
    lines.append("fp16/bf16 are computed in float32 and rounded once to nearest even.")
    if example:
        lines += ["", "Example:", "", example]
    return "\n".join(lines)


def _creator(name: str) -> str:
    """How the descriptor API is reached: built-ins have a function of their own in infiniop;
    a user's operator creates descriptors itself."""
    return f"infiniop.create_{name}_descriptor" if _is_builtin(name) else f"{name}.create_descriptor"


def _registered(name: str) -> ElementwiseOperator:
    """A built-in or registered operator by name (a built-in is defined when its module of
    ``infiniop.ops`` is first imported)."""
    if name not in REGISTRY:
        from .. import ops

        if name in ops.MODULE_OF:
            getattr(ops, name.upper())
    return REGISTRY[name]


def _is_builtin(name: str) -> bool:
    from ..ops import MODULE_OF

    return name in MODULE_OF


def _defined_here(fn) -> bool:
    """Whether ``fn`` is one of infiniop's own (a built-in's definition)."""
    return getattr(fn, "__module__", "").startswith("infiniop.")


def builtin_name_error(name: str) -> str:
    """Why a user's operator may not be registered under a built-in's name: the registry
    entry is what create_<name>_descriptor and pickling by name (Dask workers) resolve."""
    return (f"{name!r} is a built-in operator's name: registered under it, your operator would "
            f"stand for infiniop.{name} (and a pickled infiniop.{name} would not be the "
            "built-in); pick another name, or pass register=False")


_UNPICKLED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _unpickle(init: dict, key: str) -> ElementwiseOperator:
    """One operator object per process for one definition (the first copy unpickled), so
    per-operator caches keep hitting."""
    known = REGISTRY.get(init["name"])  # the process that defined it gets its own object back
    if known is not None and known.key == key:
        return known
    known = _UNPICKLED.get(key)
    if known is not None and all(getattr(known, k) == v for k, v in init.items() if k != "fn"):
        return known
    spec = _make(**init)
    _UNPICKLED[key] = spec
    return spec


def _make(name, operands, patterns, tvars, fn, params=(), doc="", example="", validate=None):
    """The operator, as an instance of a class of its own so that help(infiniop.<op>) shows the
    operator's help."""
    cls = type(name, (ElementwiseOperator,), {
        "__doc__": help_text(name, operands, patterns, tvars, params, doc, example),
        "__signature__": call_signature(operands, params), "__module__": "infiniop"})
    return cls(name, operands, patterns, tvars, fn, params, doc, example, validate)


def elementwise(name: str, inputs=("x",), dtypes=NUMERIC, expr: Callable | None = None, *,
                outputs=("out",), input_dtypes: dict[int, DType] | None = None,
                signatures=None, params=(), operands=None, validate=None, doc: str = "",
                example: str = "", register: bool = True) -> ElementwiseOperator:
    """Define an elementwise operator from a scalar expression.

    >>> import numpy as np, infiniop
    >>> axpy = infiniop.elementwise("axpy2", ("x", "y"), infiniop.FLOATS,
    ...                             lambda m, x, y: 2 * x + y)
    >>> axpy(np.ones(3, np.float32), np.arange(3, dtype=np.float32))
    array([2., 3., 4.], dtype=float32)

    ``inputs``/``outputs`` name the operands (C order: outputs first, then inputs), or
    ``operands`` gives them in any order with roles (``"x:inout, alpha"``, or
    :class:`Operand` objects). ``dtypes`` is the set ``T`` ranges over; ``signatures`` are
    ufunc-style type lists (``"T, T -> bool"``); without them every operand has the output's
    dtype, except inputs pinned by ``input_dtypes`` (``{0: DType.BOOL}``). ``params`` are
    scalar parameters (:class:`Param`, or names of float32 ones), passed to ``expr`` as keyword
    arguments. ``m`` offers NaN-propagating ``minimum``/``maximum``, ``where``, ``fma``, ``abs``,
    ``sqrt``, ``floor``, ``ceil``, ``trunc``, ``rint``, ``isnan``, ``cast``, ``bitcast`` and the
    math functions of mathlib.py. Integer arithmetic wraps like NumPy; fp16/bf16 are computed in
    float32 and rounded once.
    """
    if expr is None:
        raise TypeError("elementwise() needs an expression")
    if register and _is_builtin(name) and not _defined_here(expr):
        raise ValueError(builtin_name_error(name))
    if operands is None:
        ops = tuple(Operand(n, "out") for n in outputs) + tuple(Operand(n) for n in inputs)
    elif isinstance(operands, str):
        ops = parse_operands(operands)
    else:
        ops = tuple(operands)
    params = tuple(p if isinstance(p, Param) else Param(p) for p in params)
    if signatures is None:
        n_in = sum(o.reads for o in ops)
        n_out = sum(o.writes for o in ops)
        pins = dict(input_dtypes or {})
        ins = ", ".join(sigs.code(pins[k]) if k in pins else "T" for k in range(n_in))
        signatures = [f"{ins} -> {', '.join(['T'] * n_out)}"]
    elif isinstance(signatures, str):
        signatures = [signatures]
    patterns = tuple(sigs.parse(s) for s in signatures)
    spec = _make(name, ops, patterns, dtype_set(dtypes), expr, params, doc, example, validate)
    if register:
        REGISTRY[name] = spec
    return spec
