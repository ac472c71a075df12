"""Type signatures: which operand dtypes an operator accepts, like a ufunc's type list.

Written ufunc-style, inputs then outputs, e.g. ``"T, T -> bool"`` (``T`` ranges over the
operator's dtypes), ``"i8, f32 -> f16 | bf16 | f32"`` (``|`` gives alternatives at one position).
Operands that are both input and output appear on both sides with the same type. Each accepted
combination is a :class:`Signature`: one dtype per operand, in the operator's (C) order.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from ..dtype import DType
from ..status import InfiniError, Status

CODES = {
    "f16": DType.F16, "bf16": DType.BF16, "f32": DType.F32, "f64": DType.F64,
    "i8": DType.I8, "i16": DType.I16, "i32": DType.I32, "i64": DType.I64,
    "u8": DType.U8, "u16": DType.U16, "u32": DType.U32, "u64": DType.U64,
    "bool": DType.BOOL, "byte": DType.BYTE,
}
_CODE_OF = {v: k for k, v in CODES.items()}

# The type an operand is computed in once loaded (fp16/bf16 in float32, integers in 64 bits).
COMPUTE = {
    DType.F16: "f32", DType.BF16: "f32", DType.F32: "f32", DType.F64: "f64",
    DType.I8: "i64", DType.I16: "i64", DType.I32: "i64", DType.I64: "i64",
    DType.U8: "u64", DType.U16: "u64", DType.U32: "u64", DType.U64: "u64", DType.BYTE: "u64",
    DType.BOOL: "bool",
}


def code(dt: DType) -> str:
    return _CODE_OF[dt]


@dataclass(frozen=True)
class Signature:
    """One accepted combination: ``dtypes[k]`` is operand k's dtype (C order)."""

    dtypes: tuple[DType, ...]


@dataclass(frozen=True)
class Pattern:
    """One written signature: per input / output position the allowed codes (or 'T')."""

    text: str
    ins: tuple[tuple[str, ...], ...]
    outs: tuple[tuple[str, ...], ...]


def parse(text: str) -> Pattern:
    if text.count("->") != 1:
        raise ValueError(f"signature {text!r} needs exactly one '->'")
    left, right = text.split("->")

    def side(s: str) -> tuple[tuple[str, ...], ...]:
        items = [p.strip() for p in s.split(",")] if s.strip() else []
        out = []
        for item in items:
            alts = tuple(a.strip() for a in item.split("|"))
            for a in alts:
                if a != "T" and a not in CODES:
                    raise ValueError(f"signature {text!r}: unknown type {a!r}; known: T, "
                                     f"{', '.join(CODES)}")
            out.append(alts)
        return tuple(out)

    return Pattern(text.strip(), side(left), side(right))


def expand(patterns: list[Pattern], roles: tuple[str, ...], tvars) -> tuple[Signature, ...]:
    """Every Signature the patterns allow, for operands with these roles (C order): 'in' operands
    take the input positions in order, 'out' the output positions, 'inout' one of each (the two
    must agree)."""
    n_in = sum(r in ("in", "inout") for r in roles)
    n_out = sum(r in ("out", "inout") for r in roles)
    sigs: dict[tuple[DType, ...], Signature] = {}  # in order, each once
    for p in patterns:
        if len(p.ins) != n_in or len(p.outs) != n_out:
            raise ValueError(f"signature {p.text!r} has {len(p.ins)} inputs and {len(p.outs)} "
                             f"outputs; the operator has {n_in} and {n_out}")
        for t in sorted(tvars) if any("T" in a for a in p.ins + p.outs) else [None]:
            def resolve(alts, t=t):
                return [t if a == "T" else CODES[a] for a in alts]

            for ins in product(*[resolve(a) for a in p.ins]):
                for outs in product(*[resolve(a) for a in p.outs]):
                    dts, i, o, ok = [], 0, 0, True
                    for r in roles:
                        if r == "in":
                            dts.append(ins[i])
                            i += 1
                        elif r == "out":
                            dts.append(outs[o])
                            o += 1
                        else:
                            ok &= ins[i] is outs[o]
                            dts.append(ins[i])
                            i, o = i + 1, o + 1
                    if ok and tuple(dts) not in sigs:
                        sigs[tuple(dts)] = Signature(tuple(dts))
    return tuple(sigs.values())


def describe(patterns: list[Pattern], tvars) -> str:
    """The accepted signatures in one line, for error messages."""
    names = ", ".join(d.short_name for d in sorted(tvars))
    parts = []
    for p in patterns:
        def show(side):
            return ", ".join(" | ".join(DTYPE_NAME.get(a, a) for a in alts) for alts in side)
        text = f"({show(p.ins)}) -> ({show(p.outs)})"
        if any("T" in a for a in p.ins + p.outs):
            text += f" for T in {{{names}}}"
        parts.append(text)
    return "; ".join(parts)


DTYPE_NAME = {k: v.short_name for k, v in CODES.items()}


def match(name: str, operands, signatures, dtypes, accepted) -> Signature:
    """The first signature these operand dtypes allow (None: an absent optional operand), or
    BAD_TENSOR_DTYPE naming the first operand (C order) that no signature agreeing with the ones
    before it allows, and what it may be there (``accepted()`` describes every signature)."""
    for s in signatures:
        if all(d is None or d is t for d, t in zip(dtypes, s.dtypes)):
            return s
    cands = list(signatures)
    for k, (o, d) in enumerate(zip(operands, dtypes)):
        if d is None:
            continue
        left = [s for s in cands if s.dtypes[k] is d]
        if not left:
            given = [(p.name, g) for p, g in zip(operands[:k], dtypes[:k]) if g is not None]
            raise dtype_error(name, o.name, d, {s.dtypes[k] for s in cands}, given, accepted())
        cands = left
    raise AssertionError("unreachable: some operand must mismatch")


def dtype_error(op: str, operand: str, dtype, allowed, given, accepted: str) -> InfiniError:
    """BAD_TENSOR_DTYPE for the first operand (C order) no signature allows, naming the operands
    before it that decided what it may be (often the output, which a functional call's
    ``out=`` supplies: the input is not always the operand to fix)."""
    after = ", ".join(f"'{n}' {g}" for n, g in given)
    return InfiniError(Status.BAD_TENSOR_DTYPE,
                       f"{op}: operand '{operand}' has dtype {dtype}, expected "
                       f"{', '.join(x.short_name for x in sorted(allowed))} here"
                       + (f" (with {after})" if after else "") + f" (accepted: {accepted})")
