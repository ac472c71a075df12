"""Fuzz target (hypothesis) over the rearrange pattern parser and front end (issue #7).

Random strings (from the pattern alphabet, and arbitrary text) with random axis sizes (ints,
huge, negative, and non-ints) on small arrays: ``rearrange`` returns an array holding exactly the
input's elements, or raises ``InfiniError(BAD_PARAM)``; ``parse`` returns a pattern or raises
the same. Brief in CI; ``--long`` runs 50x more.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from infiniop import InfiniError, Status
from infiniop.rearrange import parse, rearrange

LONG = os.environ.get("INFINIOP_LONG") == "1"
TOKENS = ["a", "b", "c", "d", "h", "w", "b1", "b2", "(", ")", "...", "->", "1", "()", " ", " ",
          " ", "2", "0", "_x", ".", "-", ">", "é", "\t", "a1", "((", "))"]
AXES = ["a", "b", "c", "d", "h", "w", "b1", "b2", "a1", "_x", "z"]

junk_patterns = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=16).map("".join),
    st.lists(st.sampled_from(TOKENS), max_size=8).map(" ".join).flatmap(
        lambda left: st.lists(st.sampled_from(TOKENS), max_size=8).map(
            lambda right: f"{left} -> {' '.join(right)}")),
    st.text(max_size=20),
)
junk_sizes = st.dictionaries(
    st.sampled_from(AXES),
    st.one_of(st.integers(0, 6), st.integers(-3, 2**70), st.sampled_from([2.0, True, "2", None,
                                                                          np.int64(2),
                                                                          np.float32(2)])),
    max_size=3)


@st.composite
def valid_then_mutated(draw, shape):
    """A pattern that fits ``shape`` (splits, ellipsis, merges, permutations, unit axes), with
    its axis sizes; then, half the time, one mutation that probably breaks it."""
    names = iter(["a", "b", "c", "d", "e", "f", "g", "k", "m", "n", "p", "q"])
    left, axes, sizes = [], [], {}
    dims = list(shape)
    ell_at = draw(st.integers(-1, len(dims))) if dims else -1
    ell_len = draw(st.integers(0, len(dims) - ell_at)) if ell_at >= 0 else 0
    i = 0
    while i < len(dims):
        if i == ell_at:  # '...' stands for the next ell_len dims (maybe none)
            left.append("...")
            axes.append("...")
            ell_at = -1
            i += ell_len
            continue
        n = dims[i]
        if n > 1 and n % 2 == 0 and draw(st.booleans()):  # split (x y) with x given
            x, y = next(names), next(names)
            left.append(f"({x} {y})")
            axes += [x, y]
            sizes[x] = 2
        else:
            x = next(names)
            left.append(x)
            axes.append(x)
        i += 1
    if ell_at == len(dims):
        left.append("...")
        axes.append("...")
    order = draw(st.permutations(axes))
    right, k = [], 0
    while k < len(order):
        take = draw(st.integers(1, 3))
        group = list(order[k:k + take])
        k += take
        if len(group) > 1 and "..." in group and draw(st.booleans()):
            right += group
        else:
            right.append(f"({' '.join(group)})" if len(group) > 1 or draw(st.booleans())
                         else group[0])
        if draw(st.integers(0, 5)) == 0:
            right.append(draw(st.sampled_from(["1", "()"])))
    text = f"{' '.join(left)} -> {' '.join(right)}"
    if draw(st.booleans()):
        how = draw(st.sampled_from(["delete", "insert", "swap_sizes", "bad_size"]))
        pos = draw(st.integers(0, len(text)))
        if how == "delete" and text:
            text = text[:pos] + text[pos + 1:]
        elif how == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos:]
        elif how == "swap_sizes" and sizes:
            sizes = {k: v + 1 for k, v in sizes.items()}
        else:
            sizes[draw(st.sampled_from(AXES))] = draw(st.sampled_from([-1, 0, 2**70, 2.0, "2"]))
    return text, sizes


@st.composite
def calls(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    if draw(st.integers(0, 3)):
        pattern, axis_sizes = draw(valid_then_mutated(shape))
    else:
        pattern, axis_sizes = draw(junk_patterns), draw(junk_sizes)
    return shape, pattern, axis_sizes


def budget(ci: int):
    return settings(max_examples=ci * 50 if LONG else ci, deadline=None,
                    suppress_health_check=list(HealthCheck))


@budget(150)
@given(call=calls(), reverse=st.booleans())
def test_fuzz_rearrange_pattern(call, reverse):
    shape, pattern, axis_sizes = call
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if reverse and x.ndim:
        x = x[..., ::-1]
    try:
        parse(pattern)
    except InfiniError as e:
        assert e.status is Status.BAD_PARAM, repr(e)
    try:
        r = rearrange(x, pattern, **axis_sizes)
    except InfiniError as e:
        assert e.status is Status.BAD_PARAM, repr(e)
        event("refused")
        return
    event("rearranged")
    assert isinstance(r, np.ndarray) and r.dtype == x.dtype and r.flags.c_contiguous
    assert r.size == x.size
    assert np.array_equal(np.sort(r, axis=None), np.sort(x, axis=None))  # the same elements


@budget(60)
@given(pattern=st.lists(st.sampled_from(TOKENS), max_size=20).map("".join))
def test_fuzz_parse_only(pattern):
    try:
        p = parse(pattern)
    except InfiniError as e:
        assert e.status is Status.BAD_PARAM, repr(e)
        assert "pattern" in str(e)
        return
    assert set(p.left.names) == set(p.right.names)
