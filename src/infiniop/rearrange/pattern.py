"""einops-style patterns, the language of ``rearrange(x, "b (h w) c -> b c h w", h=4)``
(the function itself is in ``__init__.py``, with ``copy_``).

Names are axes; parentheses split (left) and merge (right) axes in C order; ``...`` stands for
the axes not named; ``1`` and ``()`` are axes of extent 1. Splitting and permuting only change
strides: the data moves once, through the rearrange kernel, into a new C-contiguous array of the
input's kind (NumPy array or torch tensor).

Parsing is cached per pattern string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..status import InfiniError, Status

ELLIPSIS = "..."
# a digit run glued to a name ("1a") is one bad token: read as "1 a" it was two axes
_TOKEN = re.compile(r"\s*(?:(\.\.\.)|([A-Za-z_][A-Za-z0-9_]*)|(\d+[A-Za-z_][A-Za-z0-9_]*)|(\d+)"
                    r"|([()])|(\S))")


def _err(pattern: str, pos: int | None, message: str) -> InfiniError:
    if pos is None:
        return InfiniError(Status.BAD_PARAM, f"pattern {pattern!r}: {message}")
    caret = " " * pos + "^"
    return InfiniError(Status.BAD_PARAM, f"pattern {pattern!r}: {message}\n    {pattern}\n    {caret}")


@dataclass(frozen=True)
class Side:
    """One side of a pattern: a tuple of groups, each a tuple of axis names. A name is an
    identifier, ``...``, or ``1`` (an anonymous axis of extent 1, kept only for shape)."""

    groups: tuple[tuple[str, ...], ...]
    bracketed: tuple[bool, ...]     # group written in parentheses (merged on the right)
    names: tuple[str, ...]          # identifiers in order of appearance (no '...' / '1')
    has_ellipsis: bool


@dataclass(frozen=True)
class Pattern:
    text: str
    left: Side
    right: Side


def _parse_side(pattern: str, text: str, start: int, is_left: bool) -> tuple[Side, dict]:
    groups: list[tuple[str, ...]] = []
    bracketed: list[bool] = []
    names: list[str] = []
    where: dict[str, int] = {}
    current: list[str] | None = None
    open_pos = 0
    has_ellipsis = False
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing whitespace left
            break
        pos = m.end()
        at = start + m.start(m.lastindex)
        ell, ident, glued, num, paren, other = m.groups()
        if other is not None:
            raise _err(pattern, at, f"unexpected character {other!r}")
        if glued is not None:
            raise _err(pattern, at, f"{glued!r} is not an axis name (names start with a letter "
                                    "or '_')")
        if paren == "(":
            if current is not None:
                raise _err(pattern, at, "nested parentheses are not allowed")
            current, open_pos = [], at
            continue
        if paren == ")":
            if current is None:
                raise _err(pattern, at, "')' without a matching '('")
            groups.append(tuple(current))
            bracketed.append(True)
            current = None
            continue
        if ell is not None:
            if has_ellipsis:
                raise _err(pattern, at, "'...' may appear only once on each side")
            if current is not None and is_left:
                raise _err(pattern, at, "'...' cannot be inside parentheses on the left side")
            has_ellipsis = True
            token = ELLIPSIS
        elif num is not None:
            if int(num) != 1:
                raise _err(pattern, at, f"anonymous axis {num} is not supported by rearrange "
                                        "(only 1 is); name the axis and pass its size")
            token = "1"
        else:
            if ident in where:
                raise _err(pattern, at, f"axis '{ident}' appears twice on the same side")
            where[ident] = at
            names.append(ident)
            token = ident
        if current is not None:
            current.append(token)
        else:
            groups.append((token,))
            bracketed.append(False)
    if current is not None:
        raise _err(pattern, open_pos, "'(' is never closed")
    return Side(tuple(groups), tuple(bracketed), tuple(names), has_ellipsis), where


def parse(pattern: str) -> Pattern:
    """Parse ``"left -> right"`` once (cached). Errors are BAD_PARAM and point at the culprit."""
    if not isinstance(pattern, str):
        raise InfiniError(Status.BAD_PARAM, f"pattern must be a str, got {type(pattern).__name__}")
    return _parse(pattern)


@lru_cache(maxsize=512)
def _parse(pattern: str) -> Pattern:
    if pattern.count("->") != 1:
        pos = pattern.find("->", pattern.find("->") + 2) if "->" in pattern else None
        raise _err(pattern, pos if pos is not None and pos >= 0 else None,
                   "a pattern needs exactly one '->' (like 'b c h w -> b h w c')")
    arrow = pattern.index("->")
    left, lwhere = _parse_side(pattern, pattern[:arrow], 0, True)
    right, rwhere = _parse_side(pattern, pattern[arrow + 2:], arrow + 2, False)
    for name in left.names:
        if name not in rwhere:
            raise _err(pattern, lwhere[name], f"axis '{name}' is on the left but not on the right")
    for name in right.names:
        if name not in lwhere:
            raise _err(pattern, rwhere[name], f"axis '{name}' is on the right but not on the left")
    if left.has_ellipsis != right.has_ellipsis:
        side = "left" if left.has_ellipsis else "right"
        other = "right" if left.has_ellipsis else "left"
        at = pattern.index(ELLIPSIS, 0 if left.has_ellipsis else arrow)
        raise _err(pattern, at, f"'...' is on the {side} side but not on the {other}")
    return Pattern(pattern, left, right)


def _axis_size(name, value, pattern) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        if name == "out":
            raise _err(pattern, None, "rearrange has no out= (keywords are axis sizes); "
                                      "infiniop.copy_(out, infiniop.rearrange(x, pattern)) writes "
                                      "the result into an existing array")
        shown = repr(value) if np.ndim(value) == 0 else f"a {type(value).__name__} of shape {np.shape(value)}"
        raise _err(pattern, None, f"size of axis '{name}' must be an int >= 0, got {shown}")
    return int(value)


def resolve(pat: Pattern, shape: tuple[int, ...], sizes: dict):
    """Every axis's extent, and the axes each input dim splits into, for an input of ``shape``:
    ``(extent by axis name, axes per input dim, the ellipsis axes)``. The ellipsis dims are named
    ``...0``, ``...1``...; ``1`` stays in the groups (extent 1). Errors are BAD_PARAM."""
    text = pat.text
    for name in sizes:
        if name not in pat.left.names:
            raise _err(text, None, f"axis size given for '{name}', which is not in the pattern")
    groups = pat.left.groups
    n_fixed = len(groups) - (1 if pat.left.has_ellipsis else 0)
    if (len(shape) < n_fixed) if pat.left.has_ellipsis else (len(shape) != n_fixed):
        want = f"at least {n_fixed}" if pat.left.has_ellipsis else str(n_fixed)
        raise _err(text, None, f"the left side describes {want} dims, the input has "
                               f"{len(shape)} (shape {shape})")
    n_ell = len(shape) - n_fixed
    size: dict[str, int] = {"1": 1}
    dims: list[tuple[str, ...]] = []
    ell_names: list[str] = []
    for group in groups:
        if group == (ELLIPSIS,):
            for k in range(n_ell):
                nm = f"...{k}"
                ell_names.append(nm)
                size[nm] = shape[len(dims)]
                dims.append((nm,))
            continue
        dim = len(dims)
        n = shape[dim]
        known, unknown = 1, None
        for ax in group:
            if ax == "1":
                continue
            if ax in sizes:
                known *= _axis_size(ax, sizes[ax], text)
            elif unknown is None:
                unknown = ax
            else:
                raise _err(text, None, f"cannot infer the sizes of both '{unknown}' and '{ax}' "
                                       f"from dim {dim} (extent {n}); pass one of them")
        if unknown is not None:
            if known == 0 or n % known:
                raise _err(text, None, f"dim {dim} has extent {n}, which the known axes of "
                                       f"({' '.join(group)}) (product {known}) do not divide")
            size[unknown] = n // known
        elif known != n:
            raise _err(text, None, f"dim {dim} has extent {n} but ({' '.join(group)}) has "
                                   f"{known} elements")
        for ax in group:
            if ax != "1" and ax != unknown:
                size[ax] = int(sizes[ax])
        dims.append(group)
    return size, dims, ell_names


def _plan_shapes(pat: Pattern, shape: tuple[int, ...], strides: tuple[int, ...], sizes: dict):
    """(iteration shape, source strides, output shape) in elements for an input layout."""
    size, dims, ell_names = resolve(pat, shape, sizes)
    stride: dict[str, int] = {}
    for group, step in zip(dims, strides):
        for ax in reversed(group):
            if ax != "1":
                stride[ax] = step
                step *= size[ax]
    it_shape, it_strides, out_shape = [], [], []
    for group, merged in zip(pat.right.groups, pat.right.bracketed):
        extent = 1
        for ax in group:
            axes = ell_names if ax == ELLIPSIS else () if ax == "1" else (ax,)
            for a in axes:
                it_shape.append(size[a])
                it_strides.append(stride[a])
                extent *= size[a]
        if group == (ELLIPSIS,) and not merged:
            out_shape += [size[a] for a in ell_names]
        else:
            out_shape.append(extent)
    return tuple(it_shape), tuple(it_strides), tuple(out_shape)
