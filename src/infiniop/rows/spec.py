"""What a row operator is: operands, type signatures, scalar parameters, one traced function.

A row operator works on rows: the 1-D slices of a tensor along one axis. Its function is written
like an elementwise one, plus row reductions from ``m``: ``m.sum(v)``, ``m.max(v)``,
``m.mean(v)`` (= sum / ``m.n``, the row length). Tracing it once per signature gives a
:class:`RowProgram`: the reductions in stages (a reduction that needs another's result comes in a
later stage: softmax's ``sum(exp(x - max(x)))`` is stage 2), and one expression per output over
the elements, the per-column operands (weight, bias) and the row statistics. Every backend runs a
stage as one pass over the row and the outputs as a last pass.

Operands have a role ('in' or 'out') and a kind: 'row' (the tensor the rows are cut from),
'col' (a vector along the axis, one value per column: a weight) or 'stat' (one value per row: the
tensor without the axis, e.g. layer_norm's standard deviation).

**The reduction order is fixed** (part of the numerical contract, the same on every backend and
whatever the layout or thread count): with ``L = min(LANES, next_pow2(n))`` lane ``l``
accumulates the row's elements ``l, l + L, l + 2L, ...`` in order, starting from the identity
(-0.0 for sums, -inf for max); then the lanes combine pairwise, ``lane[l] = op(lane[l],
lane[l + h])`` for ``h = L/2, L/4, ..., 1``; the row's value is lane 0. Sums and maxima are in
the expression's compute type (float32 for fp16/bf16/fp32 rows, float64 for float64).

This module is data only: the callable operator (descriptor API, functional form, pickling) is
``operator.RowOperator``, a subclass built above the planner and the front end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import _forksafe
from ..elementwise import signature as sigs
from ..elementwise.expr import Expr, Math, fingerprint, is_float, topo, trace
from ..elementwise.spec import Operand, Param, Slot, _typed_result, positional_scalars, result_bits
from ..kernel_cache import sha1
from ..status import InfiniError, Status

LANES = 1024
REDUCTIONS = {"row_sum": "sum", "row_max": "max"}
IDENTITY = {"sum": -0.0, "max": float("-inf")}
KINDS = ("row", "col", "stat")

REGISTRY: dict[str, RowSpec] = {}


def lanes_for(n: int) -> int:
    """The lane count L of a row of length n (see the module docstring)."""
    p = 1
    while p < min(n, LANES):
        p *= 2
    return p


# --------------------------------------------------------------------------------- operands

@dataclass(frozen=True)
class RowOperand(Operand):
    """An operand with a ``kind``: 'row', 'col' (one value per column) or 'stat' (per row)."""

    kind: str = "row"


def parse_operands(text: str) -> tuple[RowOperand, ...]:
    """``"y:out, x, w:col, b?:col, std:out:stat"``: name (``?`` = optional), role, kind."""
    out = []
    for item in text.split(","):
        name, *tags = [t.strip() for t in item.strip().split(":")]
        role = next((t for t in tags if t in ("in", "out")), "in")
        kind = next((t for t in tags if t in KINDS), "row")
        unknown = [t for t in tags if t not in ("in", "out") + KINDS]
        if unknown or not name.rstrip("?"):
            raise ValueError(f"operand {item.strip()!r}: expected name[?][:in|out][:row|col|stat]")
        out.append(RowOperand(name.rstrip("?"), role, name.endswith("?"), kind=kind))
    return tuple(out)


# ------------------------------------------------------------------------------ m for rows

class RowMath(Math):
    """``m`` of a row operator: the elementwise namespace plus row reductions."""

    def sum(self, v):
        return _reduce("row_sum", v)

    def max(self, v, *more):
        if more:
            raise TypeError("m.max(v) is the row maximum; the elementwise one is m.maximum(a, b)")
        return _reduce("row_max", v)

    def mean(self, v):
        return self.sum(v) / self.n

    @property
    def n(self) -> Expr:
        """The row length (an int64 value; it converts to the float it meets)."""
        return Expr("rowlen", (), "i64")


def _reduce(op: str, v) -> Expr:
    if not isinstance(v, Expr) or not is_float(v.dtype):
        raise TypeError(f"m.{REDUCTIONS[op]}() reduces a float row value, got {v!r}")
    return Expr(op, (v,), v.dtype)


# ---------------------------------------------------------------------------------- program

@dataclass(frozen=True)
class Reduction:
    """One row reduction of a stage: ``op`` ('sum' or 'max') of ``expr`` per element.
    ``cached``: the outputs reuse ``expr`` (the backend may keep its values from this pass)."""

    op: str
    expr: Expr
    cached: bool = False

    @property
    def dtype(self) -> str:
        return self.expr.dtype


@dataclass(frozen=True, eq=False)
class RowProgram:
    """A traced row operator for one signature: what a backend compiles, whatever the layout.

    ``slots`` in kernel order: row outputs, stat outputs, row inputs, col inputs (``kinds[j]``
    says which). Expressions are over input leaves: 0..nelem-1 the loaded operands
    (``Slot.load``), then the statistics (stage by stage, ``nelem + k`` for reduction k), then
    the row length (``rowlen``) and the cached value of the last stage (``cache``).
    ``results[j]`` is stored to the slot whose ``store == j``."""

    name: str
    slots: tuple[Slot, ...]
    kinds: tuple[str, ...]
    stages: tuple[tuple[Reduction, ...], ...]
    results: tuple[Expr, ...]
    params: tuple[str, ...]
    nelem: int
    causal: bool
    key: str
    nan_free_if_finite: bool = False

    @property
    def dtypes(self):
        return [s.dtype for s in self.slots]

    @property
    def reductions(self) -> list[Reduction]:
        return [r for st in self.stages for r in st]

    @property
    def rowlen(self) -> int:
        return self.nelem + len(self.reductions)

    @property
    def cache(self) -> int:
        return self.rowlen + 1

    @property
    def cached(self) -> Reduction | None:
        return next((r for r in self.reductions if r.cached), None)


# ------------------------------------------------------------------------------------ spec

@dataclass(frozen=True, eq=False)
class RowSpec:
    """One row operator (see the module docstring). ``axis``: the name of the keyword that picks
    the axis (default -1), or None for the last axis always; ``causal``: rows along the last axis
    keep columns ``j <= i + n - r`` (``i`` the index along the second-to-last axis of extent
    ``r``); the others are left out of the reductions and written as 0. ``nan_free_if_finite``:
    the operator promises that its row outputs hold no NaN wherever the row's statistics (and
    the values derived from them once a row) and its column operands are all finite; the CPU
    kernels then round such rows' bf16 outputs without a NaN select (same bits)."""

    name: str
    operands: tuple[RowOperand, ...]
    patterns: tuple[sigs.Pattern, ...]
    tvars: frozenset
    fn: Callable
    params: tuple[Param, ...] = ()
    axis: str | None = None
    causal: bool = False
    doc: str = ""
    nan_free_if_finite: bool = False
    signatures: tuple[sigs.Signature, ...] = field(init=False)

    def __post_init__(self):
        roles = tuple(o.role for o in self.operands)
        object.__setattr__(self, "signatures", sigs.expand(list(self.patterns), roles, self.tvars))
        if not self.signatures:  # dtypes=(): every call failed with "T in {}"
            raise ValueError(f"{self.name}: no type signature: dtypes is empty and every "
                             "signature uses T")
        object.__setattr__(self, "_programs", {})
        object.__setattr__(self, "_lock", _forksafe.Lock())
        for o in self.operands:
            if o.kind == "stat" and o.role != "out":
                raise ValueError(f"{self.name}: operand '{o.name}': 'stat' operands are outputs")
            if o.role == "out" and o.optional:
                raise ValueError(f"{self.name}: output '{o.name}' cannot be optional")
        if not any(o.kind == "row" and o.role == "out" for o in self.operands):
            raise ValueError(f"{self.name}: needs a row output")

    # -- names ---------------------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.operands if o.reads)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.operands if o.writes)

    @property
    def scalars(self) -> tuple[str, ...]:
        """Names of the scalar arguments of create, in the C API's order (after the tensors)."""
        return tuple(p.name for p in self.params) + ((self.axis,) if self.axis else ())

    def describe_signatures(self) -> str:
        return sigs.describe(list(self.patterns), self.tvars)

    # -- signatures ------------------------------------------------------------------------------
    def match(self, dtypes) -> sigs.Signature:
        """The first signature these operand dtypes allow (None: absent or not yet known)."""
        return sigs.match(self.name, self.operands, self.signatures, dtypes,
                          self.describe_signatures)

    # -- parameters --------------------------------------------------------------------------------
    def scalar_values(self, args: tuple, given: dict) -> tuple[tuple, int | None]:
        """(kernel parameter values, axis or None) from positional scalars (C order) and
        keywords; unknown or doubly given ones are BAD_PARAM."""
        names = self.scalars
        given = positional_scalars(self.name, len(self.operands), names, args, given)
        unknown = set(given) - set(names)
        if unknown:
            raise InfiniError(Status.BAD_PARAM, f"{self.name}: unknown parameter(s) "
                              f"{', '.join(sorted(unknown))}; it takes: {', '.join(names) or 'none'}")
        values = tuple(p.convert(self.name, given.get(p.name, p.default)) for p in self.params)
        axis = None
        if self.axis:
            axis = given.get(self.axis, -1)
            if isinstance(axis, bool) or not hasattr(axis, "__index__"):
                raise InfiniError(Status.BAD_PARAM, f"{self.name}: '{self.axis}' must be an int, "
                                  f"got {axis!r}")
            axis = int(axis)
        return values, axis

    # -- tracing ---------------------------------------------------------------------------------
    def program(self, sig: sigs.Signature, present: tuple[bool, ...] | None = None) -> RowProgram:
        present = present or tuple(True for _ in self.operands)
        key = (sig, present)
        prog = self._programs.get(key)
        if prog is None:
            with self._lock:
                prog = self._programs.get(key) or _trace(self, sig, present)
                self._programs[key] = prog
        return prog

    def __repr__(self) -> str:
        return f"<row operator {self.name}({', '.join(o.name for o in self.operands)})>"


# --------------------------------------------------------------------------------- tracing

_LEAVES = ("input", "param", "const", "rowlen")


def _trace(spec: RowSpec, sig: sigs.Signature, present: tuple[bool, ...]) -> RowProgram:
    ops = spec.operands
    in_types: list[str | None] = []
    loads: dict[int, int] = {}
    for k, o in enumerate(ops):
        if o.reads:
            if present[k]:
                loads[k] = len(in_types)
            in_types.append(sigs.COMPUTE[sig.dtypes[k]] if present[k] else None)
    written = [k for k, o in enumerate(ops) if o.writes]
    try:  # math rounded to a half type may take its cheaper form (softmax fp16: 10% faster)
        results = trace(spec.fn, in_types, [p.dtype for p in spec.params],
                        tuple(p.name for p in spec.params), m=RowMath(result_bits(sig, written)))
    except TypeError as e:
        raise TypeError(f"{spec.name}: {e}") from e
    if len(results) != len(written):
        raise TypeError(f"{spec.name}: the function returns {len(results)} values for "
                        f"{len(written)} outputs ({', '.join(spec.outputs)})")
    results = [_typed_result(r, sigs.COMPUTE[sig.dtypes[k]], sig.dtypes[k])
               for r, k in zip(results, written)]

    # stages: a reduction's stage is 1 + the highest stage among the reductions it reads
    stage: dict[int, int] = {}
    elem: dict[int, bool] = {}  # depends on per-element values
    order = topo(results)
    for node in order:
        sub = [a for a in node.args if isinstance(a, Expr)] if node.op not in _LEAVES else []
        if node.op in REDUCTIONS:
            stage[id(node)] = 1 + stage[id(node.args[0])]
            elem[id(node)] = False
        else:
            stage[id(node)] = max((stage[id(a)] for a in sub), default=0)
            elem[id(node)] = node.op == "input" or any(elem[id(a)] for a in sub)
    reduce_nodes = [nd for nd in order if nd.op in REDUCTIONS]
    nstages = max((stage[id(nd)] for nd in reduce_nodes), default=0)
    by_stage = [[nd for nd in reduce_nodes if stage[id(nd)] == s] for s in range(1, nstages + 1)]
    for r, k in zip(results, written):
        if ops[k].kind == "stat" and elem[id(r)]:
            raise TypeError(f"{spec.name}: output '{ops[k].name}' has one value per row; its "
                            "expression may use row statistics and parameters, not elements")

    # rewrite: reductions and the row length become input leaves after the loaded operands
    # (one substitution for everything, so nodes shared by passes stay shared)
    nelem = len(in_types)
    reduce_nodes = [nd for nodes in by_stage for nd in nodes]
    mapping = {id(nd): Expr("input", (nelem + i,), nd.dtype) for i, nd in enumerate(reduce_nodes)}
    rowlen = Expr("input", (nelem + len(reduce_nodes),), "i64")
    mapping.update({id(nd): rowlen for nd in order if nd.op == "rowlen"})
    new = substitute([nd.args[0] for nd in reduce_nodes] + results, mapping)
    exprs, outs = iter(new[:len(reduce_nodes)]), new[len(reduce_nodes):]
    stages = [[Reduction(REDUCTIONS[nd.op], next(exprs)) for nd in nodes] for nodes in by_stage]
    # the last stage's reduced value, if an output reuses it, is kept per element (softmax's exp)
    row_out = [ops[k].kind == "row" for k in written]
    for i, (nd, red) in enumerate(zip(by_stage[-1] if by_stage else [], stages[-1] if stages else [])):
        if red.expr.op in _LEAVES or not elem[id(nd.args[0])]:
            continue
        if any(ro and any(x is red.expr for x in topo([r])) for r, ro in zip(outs, row_out)):
            cache = Expr("input", (rowlen.args[0] + 1,), red.dtype)
            outs = [_replace(r, red.expr, cache) if ro else r for r, ro in zip(outs, row_out)]
            stages[-1][i] = Reduction(red.op, red.expr, True)
            break

    slots = []
    order_of = {"row": 0, "stat": 1}
    for k in sorted(written, key=lambda k: order_of[ops[k].kind]):
        slots.append((k, Slot(k, 0, sig.dtypes[k], None, written.index(k))))
    for kind in ("row", "col"):
        for k, o in enumerate(ops):
            if o.role == "in" and o.kind == kind and present[k]:
                slots.append((k, Slot(k, 0, sig.dtypes[k], loads[k], None)))
    kinds = tuple(ops[k].kind for k, _ in slots)
    slot_list = tuple(s for _, s in slots)
    roots = [r.expr for st in stages for r in st] + outs
    text = "|".join([fingerprint(roots), ",".join(f"{r.op}{int(r.cached)}" for st in stages
                                                  for r in st),
                     ",".join(f"{s.dtype.name}:{s.load}:{s.store}:{kd}"
                              for s, kd in zip(slot_list, kinds)), str(spec.causal),
                     str([len(st) for st in stages]), str(spec.nan_free_if_finite)])
    key = sha1(text.encode()).hexdigest()[:16]
    return RowProgram(spec.name, slot_list, kinds, tuple(tuple(st) for st in stages),
                      tuple(outs), tuple(p.dtype for p in spec.params), nelem, spec.causal, key,
                      spec.nan_free_if_finite)


def _replace(root: Expr, old: Expr, new: Expr) -> Expr:
    """``root`` with every use of node ``old`` replaced by ``new``."""
    return substitute([root], {id(old): new})[0]


def substitute(roots, mapping: dict[int, Expr]) -> list[Expr]:
    """``roots`` with the nodes whose ids are in ``mapping`` replaced (shared nodes stay shared)."""
    memo = dict(mapping)
    for nd in topo(roots):
        if id(nd) in memo:
            continue
        if nd.op in _LEAVES:
            memo[id(nd)] = nd
            continue
        args = tuple(memo[id(a)] if isinstance(a, Expr) else a for a in nd.args)
        memo[id(nd)] = nd if all(x is y for x, y in zip(args, nd.args)) else Expr(nd.op, args,
                                                                                   nd.dtype)
    return [memo[id(r)] for r in roots]


def hoist(roots, per_element, first: int) -> tuple[list[Expr], list[Expr]]:
    """Split ``roots`` into the values that are the same for every element of a row and the
    rest: returns (invariant values, roots with those replaced by input leaves ``first``,
    ``first + 1``, ...). ``per_element(k)`` says whether input leaf k varies along the row. A
    backend computes the invariant values once per row (same operations, same bits)."""
    elem: dict[int, bool] = {}
    order = topo(roots)
    for nd in order:
        if nd.op == "input":
            elem[id(nd)] = per_element(nd.args[0])
        elif nd.op in _LEAVES:
            elem[id(nd)] = False
        else:
            elem[id(nd)] = any(elem[id(a)] for a in nd.args if isinstance(a, Expr))
    inv: list[Expr] = []
    seen: set[int] = set()

    def keep(a: Expr) -> None:
        if not elem[id(a)] and a.op not in _LEAVES and id(a) not in seen:
            seen.add(id(a))
            inv.append(a)

    for nd in order:
        if elem[id(nd)] and nd.op not in _LEAVES:
            for a in nd.args:
                if isinstance(a, Expr):
                    keep(a)
    for r in roots:
        keep(r)
    mapping = {id(a): Expr("input", (first + i,), a.dtype) for i, a in enumerate(inv)}
    return inv, substitute(roots, mapping)
