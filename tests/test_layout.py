"""layout.py: broadcasting, self-overlap, normalisation and aliasing, checked against brute force."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from conftest import raises  # the shared exact-Status assertion
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from infiniop import DType, Status, TensorDescriptor
from infiniop.layout import (
    Layout,
    broadcast_shape,
    broadcast_strides,
    check_writable_layout,
    normalize,
    overlap,
    self_overlaps,
)

F32 = DType.F32




# ---------------------------------------------------------------------------------------------
# brute-force references
# ---------------------------------------------------------------------------------------------

def naive_offsets(shape, strides_per_operand, origins=None):
    """Every (offset_0, offset_1, ...) tuple an N-d loop over ``shape`` visits (a Counter)."""
    k = len(strides_per_operand)
    origins = origins or (0,) * k
    out = Counter()
    for idx in itertools.product(*(range(n) for n in shape)):
        out[tuple(origins[j] + sum(i * s for i, s in zip(idx, strides_per_operand[j]))
                  for j in range(k))] += 1
    return out


def brute_self_overlaps(shape, strides):
    seen = set()
    for idx in itertools.product(*(range(n) for n in shape)):
        off = sum(i * s for i, s in zip(idx, strides))
        if off in seen:
            return True
        seen.add(off)
    return False


def element_starts(addr, desc):
    """Byte address of every element, in index order."""
    isz = desc.dtype.itemsize
    return [addr + isz * sum(i * s for i, s in zip(idx, desc.strides))
            for idx in itertools.product(*(range(n) for n in desc.shape))]


def brute_overlap(addr_a, a, addr_b, b):
    sa, sb = element_starts(addr_a, a), element_starts(addr_b, b)
    if not sa or not sb:
        return "none"
    if a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and sa == sb:
        return "same"
    bytes_a = {p + k for p in sa for k in range(a.dtype.itemsize)}
    bytes_b = {p + k for p in sb for k in range(b.dtype.itemsize)}
    return "partial" if bytes_a & bytes_b else "none"


def test_references_can_fail():
    """The brute-force references are not tautologies."""
    assert naive_offsets((2, 2), [(2, 1)]) == Counter({(0,): 1, (1,): 1, (2,): 1, (3,): 1})
    assert naive_offsets((2, 2), [(1, 1)]) == Counter({(0,): 1, (1,): 2, (2,): 1})
    assert brute_self_overlaps((2, 2), (1, 1)) and not brute_self_overlaps((2, 2), (1, 2))
    a = TensorDescriptor(F32, (4,))
    assert brute_overlap(0, a, 0, a) == "same"
    assert brute_overlap(0, a, 4, a) == "partial"
    assert brute_overlap(0, a, 16, a) == "none"
    assert brute_overlap(0, a, 0, TensorDescriptor(DType.I16, (4,))) == "partial"


# ---------------------------------------------------------------------------------------------
# broadcast_shape / broadcast_strides
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes,expected", [
    ([(2, 3), (2, 3)], (2, 3)),
    ([(2, 3), (3,)], (2, 3)),
    ([(2, 1), (1, 3)], (2, 3)),
    ([(4, 1, 5), (3, 1), ()], (4, 3, 5)),
    ([(), ()], ()),
    ([(0,), (1,)], (0,)),
    ([(2, 0), (2, 1)], (2, 0)),
    ([(1,), (5, 1, 1)], (5, 1, 1)),
    ([], ()),
])
def test_broadcast_shape(shapes, expected):
    assert broadcast_shape(shapes, [f"x{i}" for i in range(len(shapes))]) == expected
    if shapes:
        assert expected == np.broadcast_shapes(*shapes)


@pytest.mark.parametrize("shapes", [[(2, 3), (3, 2)], [(2,), (3,)], [(0,), (2,)],
                                    [(2, 3), (4, 1, 2)]])
def test_broadcast_shape_mismatch(shapes):
    raises(Status.BAD_TENSOR_SHAPE, broadcast_shape, shapes, ["a", "b"])


def test_broadcast_strides_numpy_style():
    d = TensorDescriptor(F32, (3,))
    assert broadcast_strides(d, (2, 3), "a") == (0, 1)
    d = TensorDescriptor(F32, (2, 1), (5, 7))
    assert broadcast_strides(d, (4, 2, 3), "a") == (0, 5, 0)
    d = TensorDescriptor(F32, ())
    assert broadcast_strides(d, (2, 2), "a") == (0, 0)
    d = TensorDescriptor(F32, (3, -2 + 4), (-2, 1))  # negative strides survive
    assert broadcast_strides(d, (3, 2), "a") == (-2, 1)
    d = TensorDescriptor(F32, (1,), (9,))
    assert broadcast_strides(d, (1,), "a") == (0,)  # size-1 dims never move
    d = TensorDescriptor(F32, (1, 0), (3, 1))
    assert broadcast_strides(d, (4, 0), "a") == (0, 1)


def test_broadcast_strides_infinicore_style():
    """Same shape as the output with 0 strides: the descriptor itself says 'broadcast'."""
    d = TensorDescriptor(F32, (4, 3), (0, 1))
    assert broadcast_strides(d, (4, 3), "a") == (0, 1)
    d = TensorDescriptor(F32, (4, 3), (0, 0))
    assert broadcast_strides(d, (2, 4, 3), "a") == (0, 0, 0)


def test_broadcast_strides_errors():
    d = TensorDescriptor(F32, (2, 3))
    e = raises(Status.BAD_TENSOR_SHAPE, broadcast_strides, d, (3,), "in1")
    assert "'in1'" in str(e)
    e = raises(Status.BAD_TENSOR_SHAPE, broadcast_strides, d, (2, 4), "b")
    assert "'b'" in str(e)
    raises(Status.BAD_TENSOR_SHAPE, broadcast_strides, d, (3, 3), "b")
    raises(Status.BAD_TENSOR_SHAPE, broadcast_strides, TensorDescriptor(F32, (0,)), (1,), "b")


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_broadcast_strides_match_numpy(data):
    out = tuple(data.draw(st.lists(st.integers(0, 4), max_size=4)))
    k = data.draw(st.integers(0, len(out)))
    shape = tuple(n if data.draw(st.booleans()) else 1 for n in out[len(out) - k:])
    strides = tuple(data.draw(st.integers(-3, 3)) for _ in shape)
    d = TensorDescriptor(DType.F64, shape, strides)
    got = broadcast_strides(d, out, "a")
    base = np.zeros(64)
    src = np.lib.stride_tricks.as_strided(base[32:], shape=shape,
                                          strides=[s * 8 for s in strides])
    ref = np.broadcast_to(src, out)
    assert len(got) == len(out)
    for n, g, r in zip(out, got, ref.strides):
        if n > 1:  # numpy keeps arbitrary strides on size-1 dims; only the moving ones matter
            assert g * 8 == r
        elif n == 1:
            assert g == 0  # (extent 0: no element, any stride)
    assert broadcast_shape([shape, out], ["a", "out"]) == out


# ---------------------------------------------------------------------------------------------
# self_overlaps / check_writable_layout
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,strides,expected", [
    ((), (), False),
    ((5,), (1,), False),
    ((5,), (0,), True),
    ((1,), (0,), False),
    ((0,), (0,), False),
    ((3, 0), (0, 0), False),
    ((2, 3), (3, 1), False),
    ((2, 3), (1, 2), False),
    ((2, 3), (2, 1), True),
    ((2, 3), (-3, -1), False),
    ((2, 3), (-2, 1), True),
    ((2, 2, 2), (1, 2, 4), False),
    ((3, 3), (2, 3), False),  # non-nested, yet distinct: 0,2,4,3,5,7,6,8,10
    ((3, 3), (2, 4), True),   # 0+4 == 2*2+0
    ((4, 3), (3, -4), False),  # 3*i == 4*j needs i == 4
    ((5, 4), (3, -4), True),  # 3*4 == 4*3
    ((2, 1, 3), (3, 0, 1), False),
])
def test_self_overlaps_examples(shape, strides, expected):
    assert self_overlaps(shape, strides) is expected
    assert brute_self_overlaps(shape, strides) is expected


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_self_overlaps_matches_brute_force(data):
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.integers(0, 4)) for _ in range(ndim))
    strides = tuple(data.draw(st.integers(-7, 7)) for _ in range(ndim))
    assert self_overlaps(shape, strides) == brute_self_overlaps(shape, strides)


def test_check_writable_layout():
    check_writable_layout(TensorDescriptor(F32, (2, 3)), "out")
    check_writable_layout(TensorDescriptor(F32, (2, 3), (-1, 2)), "out")
    check_writable_layout(TensorDescriptor(F32, (1, 3), (0, 1)), "out")
    check_writable_layout(TensorDescriptor(F32, (4, 0), (0, 1)), "out")
    check_writable_layout(TensorDescriptor(F32, ()), "out")
    e = raises(Status.BAD_TENSOR_STRIDES, check_writable_layout,
               TensorDescriptor(F32, (2, 3), (0, 1)), "out")
    assert "'out'" in str(e) and "dim 0" in str(e)
    e = raises(Status.BAD_TENSOR_STRIDES, check_writable_layout,
               TensorDescriptor(F32, (3, 3), (2, 4)), "y")
    assert "'y'" in str(e)
    raises(Status.BAD_TENSOR_STRIDES, check_writable_layout,
           TensorDescriptor(F32, (2, 3), (1, 1)), "out")


# ---------------------------------------------------------------------------------------------
# normalize
# ---------------------------------------------------------------------------------------------

def layout_offsets(lay: Layout) -> Counter:
    return naive_offsets(lay.shape, list(lay.strides), lay.offsets)


def check_layout_invariants(shape, operand_strides, lay: Layout):
    k = len(operand_strides)
    assert len(lay.strides) == k and len(lay.offsets) == k
    assert lay.ndim >= 1 and all(len(s) == lay.ndim for s in lay.strides)
    assert lay.numel == int(np.prod(shape, dtype=np.int64))
    moving = [n for n in shape if n != 1]
    assert lay.ndim <= max(1, len(moving))
    assert all(s >= 0 for s in lay.strides[0]), "the output walks forwards"
    assert layout_offsets(lay) == naive_offsets(shape, operand_strides)


def test_normalize_examples():
    lay = normalize((2, 3, 4), [(12, 4, 1), (12, 4, 1)])
    assert lay.shape == (24,) and lay.strides == ((1,), (1,)) and lay.offsets == (0, 0)
    lay = normalize((2, 3), [(3, 1), (1, 2)])  # transposed input: cannot merge
    assert lay.shape == (2, 3) and lay.strides == ((3, 1), (1, 2))
    lay = normalize((3, 2), [(1, 3), (1, 3)])  # column-major everywhere: merges after sorting
    assert lay.shape == (6,) and lay.strides == ((1,), (1,))
    lay = normalize((4,), [(-1,), (1,)])  # reversed output: walk it forwards
    assert lay.strides == ((1,), (-1,)) and lay.offsets == (-3, 3)
    lay = normalize((2, 3), [(3, 1), (0, 1)])  # broadcast input row
    assert lay.shape == (2, 3) and lay.strides == ((3, 1), (0, 1))
    lay = normalize((), [(), ()])
    assert lay.shape == (1,) and lay.strides == ((0,), (0,)) and lay.offsets == (0, 0)
    lay = normalize((1, 1), [(5, 7), (3, 9)])
    assert lay.shape == (1,) and lay.numel == 1
    lay = normalize((3, 0), [(1, 3), (0, 1)])
    assert lay.numel == 0 and layout_offsets(lay) == Counter()
    for shape, ops in [((2, 3, 4), [(1, 2, 6), (12, 4, 1), (0, 0, 1)]),
                       ((5, 1, 3), [(-3, 7, -1), (1, 0, 5)]),
                       ((2, 2, 2), [(4, 2, 1), (-4, 2, -1), (0, 1, 0)])]:
        check_layout_invariants(shape, ops, normalize(shape, ops))


@st.composite
def iteration_spaces(draw):
    """Random shapes (0..6 dims, extents 0..5 incl. 1) and strides for 1..4 operands; operand 0
    (the output) never has a 0 stride on an extent > 1, inputs may."""
    ndim = draw(st.integers(0, 6))
    shape = tuple(draw(st.sampled_from([0, 1, 1, 2, 3, 4, 5])) for _ in range(ndim))
    assume(int(np.prod(shape, dtype=np.int64)) <= 4096)
    k = draw(st.integers(1, 4))
    ops = []
    for j in range(k):
        strides = []
        for n in shape:
            if j == 0 and n > 1:
                s = draw(st.integers(1, 40)) * draw(st.sampled_from([1, -1]))
            else:
                s = draw(st.integers(-40, 40))
            strides.append(s)
        ops.append(tuple(strides))
    # often make operands share a (permuted, possibly flipped) dense layout so merging happens
    if draw(st.booleans()) and ndim:
        perm = draw(st.permutations(range(ndim)))
        dense, step = [0] * ndim, 1
        for d in reversed(perm):
            dense[d] = step
            step *= max(shape[d], 1)
        for j in range(k):
            if draw(st.booleans()):
                ops[j] = tuple(s * draw(st.sampled_from([1, 1, -1])) for s in dense)
    return shape, ops


@settings(max_examples=400, deadline=None)
@given(space=iteration_spaces())
def test_normalize_visits_the_same_offset_tuples(space):
    shape, ops = space
    lay = normalize(shape, ops)
    check_layout_invariants(shape, ops, lay)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_normalize_coalesces_dense_layouts(data):
    """A layout that every operand walks densely in the same order collapses to one dim."""
    ndim = data.draw(st.integers(0, 5))
    shape = tuple(data.draw(st.integers(1, 4)) for _ in range(ndim))
    perm = data.draw(st.permutations(range(ndim)))
    dense, step = [0] * ndim, 1
    for d in reversed(perm):
        dense[d] = step
        step *= shape[d]
    sign = data.draw(st.sampled_from([1, -1]))
    ops = [tuple(dense), tuple(sign * s for s in dense)]
    lay = normalize(shape, ops)
    assert lay.ndim == 1 and lay.shape == (max(1, int(np.prod(shape))),)
    check_layout_invariants(shape, ops, lay)


# ---------------------------------------------------------------------------------------------
# overlap
# ---------------------------------------------------------------------------------------------

def test_overlap_examples():
    base = np.zeros(64, np.float32)
    p = base.__array_interface__["data"][0]
    d = TensorDescriptor(F32, (4, 4))
    assert overlap(p, d, p, d) == "same"
    assert overlap(p, d, p + 64, d) == "none"
    assert overlap(p, d, p + 60, d) == "partial"
    assert overlap(p, d, p + 4, d) == "partial"
    t = TensorDescriptor(F32, (4, 4), (1, 4))
    assert overlap(p, d, p, t) == "partial"  # same memory, different placement
    ev = TensorDescriptor(F32, (8,), (2,))
    assert overlap(p, ev, p + 4, ev) == "none"  # interleaved, disjoint
    assert overlap(p, ev, p + 2, TensorDescriptor(DType.I16, (8,), (4,))) == "partial"
    assert overlap(p, ev, p + 6, TensorDescriptor(DType.I16, (8,), (4,))) == "none"
    assert overlap(p, TensorDescriptor(F32, (0,)), p, d) == "none"
    r = TensorDescriptor(F32, (16,), (-1,))
    assert overlap(p + 60, r, p, TensorDescriptor(F32, (16,))) == "partial"
    assert overlap(p + 60, r, p + 60, r) == "same"
    s1 = TensorDescriptor(F32, (1, 4), (7, 1))
    s2 = TensorDescriptor(F32, (1, 4), (3, 1))
    assert overlap(p, s1, p, s2) == "same"  # size-1 dims: strides do not matter
    assert overlap(p, TensorDescriptor(F32, (16,)), p, d) == "partial"  # different shapes
    assert overlap(p, d, p, TensorDescriptor(DType.I32, (4, 4))) == "same"
    # same element strides, different itemsize: byte placement differs
    assert overlap(p, d, p, TensorDescriptor(DType.I16, (4, 4))) == "partial"
    assert overlap(p, d, p, TensorDescriptor(DType.F64, (4, 4))) == "partial"


@st.composite
def views_of_one_buffer(draw, nbytes=96):
    """A random (itemsize, shape, strides, byte offset) view that lies inside ``nbytes``."""
    dt = draw(st.sampled_from([DType.I8, DType.I16, DType.F32, DType.F64]))
    isz = dt.itemsize
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    strides = tuple(draw(st.integers(-4, 4)) for _ in range(ndim))
    d = TensorDescriptor(dt, shape, strides)
    lo, hi = d.reach
    first, last = -lo * isz, nbytes - (hi + 1) * isz  # allowed byte offsets of element 0
    assume(first <= last)
    off = draw(st.integers(first // isz + (first % isz > 0), last // isz)) * isz
    return off, d


@settings(max_examples=400, deadline=None)
@given(a=views_of_one_buffer(), b=views_of_one_buffer(), data=st.data())
def test_overlap_matches_brute_force(a, b, data):
    base = np.zeros(96, np.uint8)
    p = base.__array_interface__["data"][0]
    (oa, da) = a
    (ob, db) = b
    if data.draw(st.integers(0, 3)) == 0:  # often: the same view, or one that differs slightly
        ob, db = oa, da
        if data.draw(st.booleans()):  # reinterpret as another dtype, same element strides
            dt = data.draw(st.sampled_from([DType.I8, DType.I16, DType.F32, DType.F64]))
            cand = TensorDescriptor(dt, db.shape, db.strides)
            lo, hi = cand.reach
            if ob + lo * dt.itemsize >= 0 and ob + (hi + 1) * dt.itemsize <= 96:
                db = cand
        if db.ndim and data.draw(st.booleans()):
            i = data.draw(st.integers(0, db.ndim - 1))
            st_ = list(db.strides)
            st_[i] += data.draw(st.sampled_from([-1, 1]))
            cand = TensorDescriptor(db.dtype, db.shape, st_)
            lo, hi = cand.reach
            if ob + lo * cand.dtype.itemsize >= 0 and ob + (hi + 1) * cand.dtype.itemsize <= 96:
                db = cand
    got = overlap(p + oa, da, p + ob, db)
    assert got == brute_overlap(p + oa, da, p + ob, db)
    assert overlap(p + ob, db, p + oa, da) == got  # symmetric
