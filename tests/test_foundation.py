"""Foundation (issue #2): Status, DType, Device/handles, TensorDescriptor, interop, descriptor base.

Every error test asserts the exact Status; messages are checked to name the operand where the
API takes one.
"""

from __future__ import annotations

import importlib.util
import io
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import raises  # the shared exact-Status assertion
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import infiniop
from infiniop import Device, DType, InfiniError, Status, TensorDescriptor, create_handle, interop
from infiniop import dtype as dtmod
from infiniop.descriptor import OperatorDescriptor, check_descriptor, check_fits, check_handle
from infiniop.interop import inspect_buffer
from infiniop.tensor import contiguous_strides, create_tensor_descriptor

ALL_DTYPES = list(DType)
F32 = DType.F32

# ---------------------------------------------------------------------------------------------
# Status / InfiniError
# ---------------------------------------------------------------------------------------------

REFERENCE_STATUS = {  # InfiniCore infiniStatus_t
    "SUCCESS": 0, "INTERNAL_ERROR": 1, "NOT_IMPLEMENTED": 2, "BAD_PARAM": 3, "NULL_POINTER": 4,
    "DEVICE_TYPE_NOT_SUPPORTED": 5, "DEVICE_NOT_FOUND": 6, "DEVICE_NOT_INITIALIZED": 7,
    "DEVICE_ARCHITECTURE_NOT_SUPPORTED": 8, "BAD_TENSOR_DTYPE": 10, "BAD_TENSOR_SHAPE": 11,
    "BAD_TENSOR_STRIDES": 12, "INSUFFICIENT_WORKSPACE": 13,
}


def test_status_numbering_matches_reference():
    assert {s.name: int(s) for s in Status} == REFERENCE_STATUS
    assert issubclass(Status, int)


def test_infini_error_carries_status_and_message():
    e = InfiniError(Status.BAD_PARAM, "operand 'a': not an array")
    assert isinstance(e, Exception)
    assert e.status is Status.BAD_PARAM
    assert str(e) == "operand 'a': not an array"
    assert repr(e) == "InfiniError(BAD_PARAM, \"operand 'a': not an array\")"
    # a raw int is coerced to the enum member
    e2 = InfiniError(12, "x")
    assert e2.status is Status.BAD_TENSOR_STRIDES
    with pytest.raises(ValueError):
        InfiniError(9, "no such status")


def _shape_mismatch(n):
    """Module level: a process pool pickles it by reference."""
    infiniop.sub(np.ones(n, np.float32), np.ones(n + 1, np.float32))


def test_infini_error_pickles_with_its_status_and_crosses_a_process_pool():
    import concurrent.futures as cf
    import multiprocessing
    import pickle

    e = InfiniError(Status.BAD_TENSOR_SHAPE, "operand 'b': shape (4,)")
    e.note = "kept"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is InfiniError and back.status is Status.BAD_TENSOR_SHAPE
    assert str(back) == str(e) and back.note == "kept"
    # a worker's InfiniError reaches the caller as itself, and the pool stays usable
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        with pytest.raises(InfiniError) as got:
            pool.submit(_shape_mismatch, 3).result(timeout=300)
        assert got.value.status is Status.BAD_TENSOR_SHAPE and "(4,)" in str(got.value)
        assert pool.submit(abs, -2).result(timeout=300) == 2


def print_of(x) -> str:
    buf = io.StringIO()
    print(x, file=buf)
    return buf.getvalue()


def test_status_prints_its_name_and_keeps_its_number():
    s = Status.BAD_PARAM
    assert str(s) == f"{s}" == "BAD_PARAM" and print_of(s) == "BAD_PARAM\n"
    assert f"[{s:>10}]" == "[ BAD_PARAM]"
    assert int(s) == 3 and s == 3 and f"{s:d}" == "3"
    assert repr(s) == "<Status.BAD_PARAM: 3>"
    e = InfiniError(Status.BAD_TENSOR_SHAPE, "x")
    assert f"{e.status}: {e}" == "BAD_TENSOR_SHAPE: x"


def test_public_api_exports():
    for name in infiniop.__all__:
        assert hasattr(infiniop, name), name
    aliases = {
        "float16": DType.F16, "bfloat16": DType.BF16, "float32": DType.F32, "float64": DType.F64,
        "int8": DType.I8, "int16": DType.I16, "int32": DType.I32, "int64": DType.I64,
        "uint8": DType.U8, "uint16": DType.U16, "uint32": DType.U32, "uint64": DType.U64,
        "bool_": DType.BOOL,
    }
    for name, d in aliases.items():
        assert getattr(infiniop, name) is d, name



_FIRST_USE = """
import sys, infiniop
def loaded():
    return sorted(m for m in sys.modules if m.startswith(("infiniop.ops.", "infiniop.rows")))
assert loaded() == [], loaded()
assert "ml_dtypes" not in sys.modules and "numba" not in sys.modules   # ~17 ms and ~0.4 s
infiniop.sub
assert loaded() == ["infiniop.ops.arithmetic"], loaded()
infiniop.create_silu_descriptor
assert loaded() == ["infiniop.ops.activation", "infiniop.ops.arithmetic"], loaded()
infiniop.softmax
assert "infiniop.rows.ops" in loaded() and "infiniop.ops.mathfn" not in loaded(), loaded()
print(len(infiniop.OPERATORS))
"""


def test_operators_are_defined_on_first_use():
    """``import infiniop`` defines no operator; the first use of one imports its own module
    (PEP 562), ``OPERATORS`` all of them; ``ops.MODULE_OF`` says where each is defined."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FIRST_USE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(infiniop.ops.MODULE_OF))]
    for spec in infiniop.ops.ALL:
        module = importlib.import_module(f"infiniop.ops.{infiniop.ops.MODULE_OF[spec.name]}")
        assert getattr(module, spec.name.upper()) is spec is getattr(infiniop, spec.name)
        assert infiniop.OPERATORS[spec.name] is spec
    assert len(infiniop.OPERATORS) == len(infiniop.ops.MODULE_OF) == 41


def test_import_asks_openmp_to_sleep_unless_told_otherwise():
    """``import infiniop`` sets OMP_WAIT_POLICY=passive unless it is set, before torch (imported
    after it, as sorted imports do) reads it: torch's threads then sleep between its calls
    instead of spinning on our cores. A value the user set stays."""
    import os
    import subprocess
    import sys

    code = "import os, infiniop; print(os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for setting, want in ((None, "passive"), ("active", "active")):
        run_env = env if setting is None else {**env, "OMP_WAIT_POLICY": setting}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [want]


def test_builtin_operators_unpickle_by_name_in_a_fresh_process():
    """A pickled built-in is its name; the receiving process has not defined it yet."""
    import pickle
    import subprocess
    import sys

    blob = pickle.dumps([infiniop.silu, infiniop.softmax, infiniop.ops.ALL[-1]])
    code = ("import pickle, sys; ops = pickle.loads(sys.stdin.buffer.read()); "
            "print(*[o.name for o in ops])")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["silu", "softmax", infiniop.ops.ALL[-1].name]



def test_user_operators_cannot_take_a_builtins_name():
    """Registering a user's operator as "sub" replaced the registry entry that pickling by name
    and create_sub_descriptor resolve: pickling infiniop.sub then failed (its definition went by
    value, a lambda), and a user operator defined before the built-in was loaded would have
    pickled as the name "sub" and run as the built-in on a Dask worker. Refused now (ValueError);
    register=False and other names are fine, and the built-ins still pickle by name."""
    import pickle

    for define in (lambda: infiniop.elementwise("sub", ("a", "b"), infiniop.FLOATS,
                                                lambda m, a, b: a * b),
                   lambda: infiniop.row_operator("softmax", "y:out, x", lambda m, x: x)):
        with pytest.raises(ValueError, match="built-in operator's name"):
            define()
    mine = infiniop.elementwise("sub", ("a", "b"), infiniop.FLOATS, lambda m, a, b: a * b,
                                register=False)
    a = np.array([3.0, 4.0], np.float32)
    assert mine(a, a).tolist() == [9.0, 16.0] and infiniop.sub(a, a).tolist() == [0.0, 0.0]
    assert pickle.loads(pickle.dumps(infiniop.sub)) is infiniop.sub
    assert pickle.loads(pickle.dumps(infiniop.softmax)) is infiniop.softmax


# ---------------------------------------------------------------------------------------------
# DType
# ---------------------------------------------------------------------------------------------

REFERENCE_DTYPE = {  # InfiniCore infiniDtype_t
    "BYTE": 1, "BOOL": 2, "I8": 3, "I16": 4, "I32": 5, "I64": 6, "U8": 7, "U16": 8, "U32": 9,
    "U64": 10, "F8": 11, "F16": 12, "F32": 13, "F64": 14, "BF16": 19,
}
ITEMSIZE = {"BYTE": 1, "BOOL": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "U8": 1, "U16": 2,
            "U32": 4, "U64": 8, "F8": 1, "F16": 2, "F32": 4, "F64": 8, "BF16": 2}


def test_dtype_numbering_and_itemsize():
    assert {d.name: int(d) for d in DType} == REFERENCE_DTYPE
    for d in DType:
        assert d.itemsize == ITEMSIZE[d.name], d
        assert d.numpy.itemsize == d.itemsize, d


def test_dtype_names_are_readable():
    for d in DType:
        if d is DType.BYTE:
            assert d.short_name == "byte"
        else:
            assert d.short_name == d.numpy.name, d  # numpy's spelling, incl. ml_dtypes'
        assert str(d) == d.short_name
        assert repr(d) == f"infiniop.{d.short_name}"
    assert str(infiniop.bfloat16) == "bfloat16" and str(infiniop.bool_) == "bool"


def test_dtype_kind_predicates():
    floats = {DType.F8, DType.F16, DType.BF16, DType.F32, DType.F64}
    signed = {DType.I8, DType.I16, DType.I32, DType.I64}
    unsigned = {DType.U8, DType.U16, DType.U32, DType.U64, DType.BYTE}
    for d in DType:
        assert d.is_float == (d in floats)
        assert d.is_signed_int == (d in signed)
        assert d.is_unsigned_int == (d in unsigned)


@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
def test_dtype_numpy_round_trip(d):
    npdt = d.numpy
    back = dtmod.from_numpy(npdt)
    assert back is (DType.U8 if d is DType.BYTE else d)
    # through a real array, too
    a = np.zeros(3, dtype=npdt)
    assert inspect_buffer(a).dtype is back
    assert TensorDescriptor.from_array(a).dtype is back


def test_bfloat16_maps_through_ml_dtypes():
    assert DType.BF16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert DType.F8.numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert dtmod.from_numpy(ml_dtypes.bfloat16) is DType.BF16


@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
def test_dtype_torch_round_trip(d):
    tdt = dtmod.to_torch(d)
    expect = DType.U8 if d is DType.BYTE else d
    assert dtmod.from_torch(tdt) is expect
    assert torch.empty(0, dtype=tdt).element_size() == d.itemsize
    if d is not DType.BYTE:
        assert str(tdt) == f"torch.{d.short_name}"
    t = torch.zeros(3, dtype=tdt)
    assert inspect_buffer(t).dtype is expect
    # numpy <-> torch agree (where both sides exist without ml_dtypes)
    if d not in (DType.BF16, DType.F8):
        assert torch.from_numpy(np.zeros(1, d.numpy)).dtype == tdt


@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
def test_as_dtype_accepts_every_spelling(d):
    as_dtype = dtmod.as_dtype
    assert as_dtype(d) is d
    assert as_dtype(int(d)) is d
    assert as_dtype(d.short_name) is d
    if d.name.startswith("U"):  # 'U8'..'U64': NumPy's unicode strings, refused (test below)
        raises(Status.BAD_TENSOR_DTYPE, as_dtype, d.name, match=repr(d.short_name))
    else:
        assert as_dtype(d.name) is d
    expect = DType.U8 if d is DType.BYTE else d
    assert as_dtype(d.numpy) is expect
    assert as_dtype(dtmod.to_torch(d)) is expect
    # a NumPy integer is a code too (it read as the scalar's own dtype: np.int64(13) was int64)
    for code in (np.int64(int(d)), np.int32(int(d)), np.uint8(int(d))):
        assert as_dtype(code) is d
        assert TensorDescriptor(code, (2,)).dtype is d


@pytest.mark.parametrize("bad", [
    None, 0, 9 + 6, 20, -1, True, 2.5, np.int64(20), np.int8(-1), "complex64", "nope", "",
    object(), np.complex64,
    np.dtype("O"), np.dtype(">f4"), np.dtype([("a", "f4")]), torch.complex64, torch.float8_e5m2,
])
def test_as_dtype_rejects(bad):
    raises(Status.BAD_TENSOR_DTYPE, dtmod.as_dtype, bad)


def _numpy_type_strings() -> list[str]:
    """Every dtype string NumPy reads: its one-letter codes, its sized codes with and without a
    byte order, and its type names."""
    codes = set(np.typecodes["All"]) | {"c", "a"}
    for kind in "?bBiufcSUVMmO":
        for n in (1, 2, 4, 8, 16):
            codes |= {f"{kind}{n}"} | {f"{order}{kind}{n}" for order in "<>=|"}
    codes |= {k for k in np.sctypeDict if isinstance(k, str)}
    out = []
    for text in sorted(codes):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                np.dtype(text)
            except Exception:  # noqa: BLE001, S112 - not a NumPy dtype string
                continue
        out.append(text)
    return out


def test_as_dtype_follows_every_numpy_type_code():
    """A NumPy dtype string means what it means in NumPy ('i8' is int64, 'f8' float64, 'u8'
    uint64), or is refused (float128, complex, big-endian, strings...); never another size. The
    one documented exception is 'byte' (infiniop's BYTE; np.byte is int8), same size."""
    texts = _numpy_type_strings()
    assert {"i8", "f4", "u1", "b", "?", "e", "<f2", "f16", "half", "byte", "U8"} <= set(texts)
    accepted = 0
    for text in texts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            npdt = np.dtype(text)
        if text == "byte":
            assert dtmod.as_dtype(text) is DType.BYTE and npdt.itemsize == 1
            continue
        want = next((d for d in DType if d is not DType.BYTE and d.numpy == npdt), None)
        if want is None:
            raises(Status.BAD_TENSOR_DTYPE, dtmod.as_dtype, text, match="supported:")
        else:
            got = dtmod.as_dtype(text)
            assert got is want and got.itemsize == npdt.itemsize, (text, got, npdt)
            accepted += 1
    assert accepted >= 40
    as_dtype = dtmod.as_dtype
    assert (as_dtype("i8"), as_dtype("u8"), as_dtype("f8")) == (DType.I64, DType.U64, DType.F64)
    raises(Status.BAD_TENSOR_DTYPE, as_dtype, "f16", match="float128")


def test_as_dtype_member_names_where_numpy_reads_none():
    """Upper-case member names are kept where NumPy gives the string no meaning; lower-case
    spellings are NumPy's (or nothing): 'bf16', 'i16' are refused."""
    for d in DType:
        try:
            np.dtype(d.name)
            numpy_reads_it = True
        except TypeError:
            numpy_reads_it = False
        if numpy_reads_it:
            assert d.name in ("U8", "U16", "U32", "U64")
            e = raises(Status.BAD_TENSOR_DTYPE, dtmod.as_dtype, d.name)
            assert "unicode" in str(e) or "<U" in str(e)
        else:
            assert dtmod.as_dtype(d.name) is d
    for bad in ("bf16", "i16", "i32", "f32", "u16", "Float32", "FLOAT32", "Int8"):
        raises(Status.BAD_TENSOR_DTYPE, dtmod.as_dtype, bad)


def test_unsupported_dtypes_list_the_supported_ones():
    for fn, bad in [(dtmod.from_numpy, np.complex128), (dtmod.from_torch, torch.complex64),
                    (dtmod.as_dtype, "complex64"), (dtmod.as_dtype, np.complex64)]:
        e = raises(Status.BAD_TENSOR_DTYPE, fn, bad)
        assert "supported: bool, int8" in str(e) and "bfloat16" in str(e), str(e)
    e = raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, np.zeros(2, np.complex128), "a")
    assert "'a'" in str(e) and "supported:" in str(e)
    e = raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, torch.zeros(2, dtype=torch.complex64), "b")
    assert "'b'" in str(e) and "supported:" in str(e)


def test_from_numpy_and_torch_reject_unsupported():
    raises(Status.BAD_TENSOR_DTYPE, dtmod.from_numpy, np.complex128)
    raises(Status.BAD_TENSOR_DTYPE, dtmod.from_numpy, "not a dtype")
    raises(Status.BAD_TENSOR_DTYPE, dtmod.from_torch, torch.complex64)
    raises(Status.BAD_TENSOR_DTYPE, dtmod.from_torch, "float32")


# ---------------------------------------------------------------------------------------------
# Device / handles
# ---------------------------------------------------------------------------------------------

REFERENCE_DEVICE = {"CPU": 0, "NVIDIA": 1, "CAMBRICON": 2, "ASCEND": 3, "METAX": 4, "MOORE": 5,
                    "ILUVATAR": 6, "KUNLUN": 7, "HYGON": 8, "QY": 9, "ALI": 10}
TRITON_DEVICES = {Device.NVIDIA, Device.METAX, Device.MOORE, Device.ILUVATAR, Device.KUNLUN,
                  Device.HYGON}
HAS_TRITON_BACKEND = importlib.util.find_spec("infiniop.backends.triton") is not None


def test_device_numbering_and_backends():
    assert {d.name: int(d) for d in Device} == REFERENCE_DEVICE
    for d in Device:
        if d is Device.CPU:
            assert d.backend_name == "cpu"
        elif d in TRITON_DEVICES:
            assert d.backend_name == "triton"
        else:
            assert d.backend_name is None


def test_create_handle_cpu():
    for spelling in (None, "cpu", Device.CPU, 0):
        h = create_handle() if spelling is None else create_handle(spelling)
        assert h.device is Device.CPU and h.device_id == 0
        assert repr(h) == "Handle(cpu:0)"
        assert h.backend.MEMORY_KIND == "cpu"
    h = create_handle("cpu", device_id=0)
    with pytest.raises(AttributeError):
        h.device_id = 1  # frozen
    h.destroy()


@pytest.mark.parametrize("dev", list(Device), ids=lambda d: d.name.lower())
@pytest.mark.parametrize("spelling", ["enum", "name", "int"])
def test_create_handle_every_device(dev, spelling):
    arg = {"enum": dev, "name": dev.name.lower(), "int": int(dev)}[spelling]
    if dev is Device.CPU:
        assert create_handle(arg).device is Device.CPU
        return
    if dev.backend_name is None:  # cambricon, ascend, qy, ali: no backend
        e = raises(Status.DEVICE_TYPE_NOT_SUPPORTED, create_handle, arg)
        assert dev.name.lower() in str(e)
        return
    if not HAS_TRITON_BACKEND:
        e = raises(Status.DEVICE_TYPE_NOT_SUPPORTED, create_handle, arg)
        assert dev.name.lower() in str(e)
        assert "install" in str(e) and "infiniop[gpu]" in str(e)
        return
    try:  # the triton backend has landed: either it runs here or says why not
        h = create_handle(arg)
    except InfiniError as e:
        assert e.status in (Status.DEVICE_TYPE_NOT_SUPPORTED, Status.DEVICE_NOT_FOUND), e
    else:
        assert h.device is dev


@pytest.mark.parametrize("bad", ["gpu", "cuda", "", " cpu", "cpu0", None, 11, -1, 100, True,
                                 1.0, object(), b"cpu"])
def test_create_handle_bad_device(bad):
    raises(Status.BAD_PARAM, create_handle, bad)


def test_create_handle_unknown_name_lists_known_devices():
    e = raises(Status.BAD_PARAM, create_handle, "gpu")
    assert "'gpu'" in str(e) and "nvidia" in str(e)
    e = raises(Status.BAD_PARAM, create_handle, "cpu0")
    assert "use 'nvidia'" not in str(e) and "known: cpu" in str(e)


@pytest.mark.parametrize("name, index", [("cuda", 0), ("CUDA", 0), ("cuda:0", 0), ("cuda:3", 3),
                                         ("gpu", 0), ("gpu:1", 1)])
def test_create_handle_torch_spellings_point_at_nvidia(name, index):
    e = raises(Status.BAD_PARAM, create_handle, name, match="use 'nvidia'")
    assert f"create_handle('nvidia', {index})" in str(e)


@pytest.mark.parametrize("bad_id", [-1, True, False, 1.0, "0", None, 0.5])
def test_create_handle_bad_device_id(bad_id):
    raises(Status.BAD_PARAM, create_handle, "cpu", bad_id)


@pytest.mark.parametrize("missing_id", [1, 2, 7])
def test_create_handle_cpu_missing_device(missing_id):
    raises(Status.DEVICE_NOT_FOUND, create_handle, "cpu", missing_id)


# ---------------------------------------------------------------------------------------------
# TensorDescriptor
# ---------------------------------------------------------------------------------------------

def test_descriptor_properties():
    d = TensorDescriptor(infiniop.float32, (2, 3, 4))
    assert d.dtype is DType.F32
    assert d.shape == (2, 3, 4) and isinstance(d.shape, tuple)
    assert d.strides == (12, 4, 1)
    assert d.ndim == 3 and d.numel == 24
    assert d.is_contiguous() and not d.is_empty and not d.has_broadcast()
    assert d.reach == (0, 23)
    assert repr(d) == "TensorDescriptor(float32, shape=(2, 3, 4), strides=(12, 4, 1))"


def test_descriptor_scalar_and_int_shape():
    d0 = TensorDescriptor(F32, ())
    assert d0.shape == () and d0.strides == () and d0.ndim == 0 and d0.numel == 1
    assert d0.reach == (0, 0) and d0.is_contiguous()
    d1 = TensorDescriptor(F32, 5)
    assert d1.shape == (5,) and d1.strides == (1,)


def test_descriptor_accepts_numpy_ints_and_sequences():
    d = TensorDescriptor("float16", np.array([2, 3]), [np.int64(1), np.int32(2)])
    assert d.shape == (2, 3) and d.strides == (1, 2)
    assert all(type(v) is int for v in d.shape + d.strides)
    assert d.dtype is DType.F16


def test_descriptor_strides_and_reach():
    d = TensorDescriptor(F32, (3, 4), (-4, 2))
    assert d.reach == (-8, 6)
    assert not d.is_contiguous()
    t = TensorDescriptor(F32, (4, 3), (1, 4))  # transposed
    assert not t.is_contiguous() and t.reach == (0, 11)
    b = TensorDescriptor(F32, (4, 3), (0, 1))
    assert b.has_broadcast() and b.reach == (0, 2) and not b.is_contiguous()
    z = TensorDescriptor(F32, (1, 3), (0, 1))
    assert not z.has_broadcast() and z.is_contiguous()  # size-1 dims: any stride
    z2 = TensorDescriptor(F32, (2, 1, 3), (3, 99, 1))
    assert z2.is_contiguous()
    e = TensorDescriptor(F32, (3, 0, 2), (-5, 7, 100))
    assert e.is_empty and e.numel == 0 and e.reach == (0, 0)


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3), (2, 0, 3), (4, 0, 1)])
def test_empty_row_major_descriptor_is_contiguous(shape):
    # the default (row-major) strides of any shape, empty included, are contiguous, as in
    # NumPy (flags.c_contiguous) and torch (is_contiguous())
    d = TensorDescriptor(F32, shape)
    assert d.strides == contiguous_strides(shape)
    assert d.is_contiguous()
    assert np.empty(shape, np.float32).flags.c_contiguous
    assert torch.empty(shape).is_contiguous()


@pytest.mark.parametrize("shape", [(3,), (2, 3), (4, 1, 5), (1,), (2, 3, 4, 5)])
def test_default_strides_match_numpy(shape):
    a = np.empty(shape, np.float64)
    d = TensorDescriptor(DType.F64, shape)
    assert tuple(s * 8 for s in d.strides) == a.strides
    assert create_tensor_descriptor(shape, None, DType.F64) == d


def test_descriptor_equality_hash_and_c_spelling():
    a = TensorDescriptor(F32, (2, 3))
    b = create_tensor_descriptor((2, 3), (3, 1), "float32")
    c = TensorDescriptor(F32, (2, 3), (1, 2))
    assert a == b and hash(a) == hash(b)
    assert a != c and a != TensorDescriptor(DType.I32, (2, 3)) and a != (2, 3)
    assert len({a, b, c}) == 2


def test_descriptor_is_immutable():
    d = TensorDescriptor(F32, (2, 3))
    for attr in ("shape", "strides", "dtype", "_shape", "_strides", "_hi", "new_attr"):
        with pytest.raises(AttributeError):
            setattr(d, attr, (1,))
    for attr in ("_shape", "_hi"):
        with pytest.raises(AttributeError):
            delattr(d, attr)
    assert d.shape == (2, 3) and d.strides == (3, 1) and d.reach == (0, 5)


@pytest.mark.parametrize("shape", [(-1,), (2, -3), (0, -1)])
def test_descriptor_negative_extent(shape):
    raises(Status.BAD_TENSOR_SHAPE, TensorDescriptor, F32, shape, match=str(shape))


@pytest.mark.parametrize("shape,strides", [((2, 3), (1,)), ((2,), (1, 1)), ((), (1,)),
                                           ((3,), ())])
def test_descriptor_stride_count(shape, strides):
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, F32, shape, strides)


@pytest.mark.parametrize("shape,strides", [
    ((2.0,), None), (("2",), None), ("ab", None), (None, None), ((2, None), None),
    ((True, 2), None), ((2,), (1.0,)), ((2,), 5), ((2,), ("1",)), ((2,), (False,)),
    (object(), None),
])
def test_descriptor_non_int_values(shape, strides):
    raises(Status.BAD_PARAM, TensorDescriptor, F32, shape, strides)


@pytest.mark.parametrize("bad", [None, "complex64", 0, 15, object(), np.complex64, 3.5])
def test_descriptor_bad_dtype(bad):
    raises(Status.BAD_TENSOR_DTYPE, TensorDescriptor, bad, (2,))


def test_descriptor_size_limits():
    big = 2**62
    # numel * itemsize over 2**63 - 1 bytes
    raises(Status.BAD_TENSOR_SHAPE, TensorDescriptor, F32, (big, 2), (0, 0))
    raises(Status.BAD_TENSOR_SHAPE, TensorDescriptor, DType.I8, (2**63,), (0,))
    TensorDescriptor(DType.I8, (2**63 - 1,), (0,))  # exactly at the limit: fine
    # reach beyond 2**63 bytes, forwards or backwards
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, DType.I8, (3,), (big,))
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, DType.I8, (3,), (-big,))
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, F32, (2,), (2**61,))
    TensorDescriptor(DType.I8, (2,), (2**63 - 2,))  # last byte at offset 2**63 - 2: fine
    # the span between the lowest and highest byte is what must fit, not each end alone
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, DType.I8, (2, 2), (big, -big))
    # strides or extents that int64 cannot hold, even where no element is reached through them
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, F32, (1,), (2**70,))
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, F32, (0, 3), (2**70, 1))
    raises(Status.BAD_TENSOR_STRIDES, TensorDescriptor, F32, (1,), (-(2**70),))
    raises(Status.BAD_TENSOR_SHAPE, TensorDescriptor, F32, (0, 2**70))


# ---------------------------------------------------------------------------------------------
# Foreign buffers
# ---------------------------------------------------------------------------------------------

class DLPackOnly:
    """Exposes an array only through the DLPack protocol."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


class ArrayInterfaceOnly:
    """Exposes a NumPy array only through ``__array_interface__``."""

    def __init__(self, arr):
        self._arr = arr
        self.__array_interface__ = dict(arr.__array_interface__)


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_inspect_numpy_contiguous():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = inspect_buffer(a)
    assert i.address == addr(a) and i.dtype is DType.F32
    assert i.shape == (3, 4) and i.strides == (4, 1)
    assert (i.lo, i.hi) == (addr(a), addr(a) + 48)
    assert not i.readonly and i.device == "cpu" and not i.trusted and i.owner is a


def test_inspect_numpy_strided_negative_and_broadcast():
    base = np.arange(40, dtype=np.int16)
    s = base[2:30:3]
    i = inspect_buffer(s)
    assert i.strides == (3,) and i.address == addr(base) + 4
    assert (i.lo, i.hi) == (addr(base) + 4, addr(base) + 2 * 30)  # last element: 29
    n = base.reshape(5, 8)[::-1, 1::2]
    i = inspect_buffer(n)
    assert i.strides == (-8, 2) and i.address == addr(base) + 2 * 33
    assert i.lo == addr(base) + 2 and i.hi == addr(base) + 2 * 40
    b = np.broadcast_to(np.arange(3, dtype=np.float64), (4, 3))
    i = inspect_buffer(b)
    assert i.strides == (0, 1) and i.readonly and i.hi - i.lo == 24
    t = np.arange(6.0).reshape(2, 3).T
    assert inspect_buffer(t).strides == (1, 3)


def test_inspect_numpy_scalar_empty_readonly_subclass():
    z = np.array(5.0)
    i = inspect_buffer(z)
    assert i.shape == () and i.strides == () and i.hi - i.lo == 8
    e = np.empty((3, 0), np.float32)
    i = inspect_buffer(e)
    assert i.shape == (3, 0) and i.hi == i.lo
    r = np.zeros(4)
    r.flags.writeable = False
    assert inspect_buffer(r).readonly
    m = np.zeros((2, 2)).view(np.matrix)
    i = inspect_buffer(m)
    assert i.shape == (2, 2) and i.dtype is DType.F64


def test_inspect_numpy_bad_dtype_and_strides():
    e = raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, np.zeros(3, np.complex64), "x")
    assert "'x'" in str(e)
    raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, np.zeros(3, ">f4"), "x")
    raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, np.zeros(3, object), "x")
    raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, np.zeros(3, "U4"), "x")
    odd = as_strided(np.zeros(8, np.int32), shape=(2,), strides=(6,))
    e = raises(Status.BAD_TENSOR_STRIDES, inspect_buffer, odd, "y")
    assert "'y'" in str(e)


def test_inspect_numpy_scalar_object_is_not_writable():
    # np.asarray(np.float64(1)) is a fresh copy: results written there would be lost silently
    i = inspect_buffer(np.float64(1.5))
    assert i.shape == () and i.dtype is DType.F64 and i.readonly


def test_inspect_torch():
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    i = inspect_buffer(t)
    assert i.address == t.data_ptr() and i.dtype is DType.F32
    assert i.shape == (4, 6) and i.strides == (6, 1) and i.hi - i.lo == 96
    assert i.device == "cpu" and not i.readonly and i.owner is t
    v = t[1:, ::2].T
    i = inspect_buffer(v)
    assert i.address == t.data_ptr() + 24 and i.strides == (2, 6) and i.shape == (3, 3)
    assert (i.lo, i.hi) == (t.data_ptr() + 24, t.data_ptr() + 4 * (6 + 12 + 4 + 1))
    x = torch.arange(3, dtype=torch.bfloat16).expand(5, 3)
    i = inspect_buffer(x)
    assert i.dtype is DType.BF16 and i.strides == (0, 1) and i.hi - i.lo == 6
    p = torch.nn.Parameter(torch.zeros(2, 2))
    assert inspect_buffer(p).shape == (2, 2)
    raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, torch.zeros(2, dtype=torch.complex64), "t")


def test_inspect_dlpack_only_object():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = inspect_buffer(DLPackOnly(a))
    assert i.address == addr(a) and i.shape == (3, 4) and i.strides == (4, 1)
    assert i.dtype is DType.F32 and not i.readonly
    v = a[::-1, ::2]
    i = inspect_buffer(DLPackOnly(v))
    assert i.address == addr(v) and i.strides == (-4, 2)
    assert (i.lo, i.hi) == (addr(a), addr(a) + 4 * 11)
    b = np.broadcast_to(np.arange(4.0), (3, 4))
    i = inspect_buffer(DLPackOnly(b))
    assert i.strides == (0, 1) and i.readonly  # the producer is read-only
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)  # bf16 cannot go through numpy
    i = inspect_buffer(DLPackOnly(t))
    assert i.dtype is DType.BF16 and i.address == t.data_ptr() and i.shape == (2, 3)
    e = raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, DLPackOnly(np.zeros(2, np.complex64)),
               "w")
    assert "'w'" in str(e)
    # a dtype only torch reads (not numpy), that infiniop does not support
    f8 = torch.zeros(3, dtype=torch.float8_e5m2)
    e = raises(Status.BAD_TENSOR_DTYPE, inspect_buffer, DLPackOnly(f8), "v")
    assert "'v'" in str(e)


def test_inspect_array_interface_only_object():
    base = np.arange(20, dtype=np.int64)
    v = base.reshape(4, 5)[::-1, 1::2]
    w = ArrayInterfaceOnly(v)
    i = inspect_buffer(w)
    assert i.address == addr(v) and i.shape == (4, 2) and i.strides == (-5, 2)
    assert (i.lo, i.hi) == (addr(base) + 8, addr(base) + 8 * 19)  # elements 1..18
    assert i.dtype is DType.I64 and not i.readonly
    r = np.zeros(3, np.uint16)
    r.flags.writeable = False
    i = inspect_buffer(ArrayInterfaceOnly(r))
    assert i.readonly and i.dtype is DType.U16


def test_inspect_int_address():
    a = np.zeros(4)
    i = inspect_buffer(addr(a))
    assert i.trusted and i.address == addr(a) and i.dtype is None and i.device == "cpu"
    e = raises(Status.NULL_POINTER, inspect_buffer, 0, "out")
    assert "'out'" in str(e)
    raises(Status.BAD_PARAM, inspect_buffer, -8, "x")
    raises(Status.BAD_PARAM, inspect_buffer, 2**64, "x")
    # trusted: check_fits accepts any descriptor
    check_fits(i, TensorDescriptor(DType.I8, (10**6,)), "x", writable=True)


@pytest.mark.parametrize("bad", [[1, 2, 3], (1.0,), "abc", b"abc", None, object(), True, 1.5,
                                 bytearray(8)])
def test_inspect_rejects_non_arrays(bad):
    e = raises(Status.BAD_PARAM, inspect_buffer, bad, "a")
    assert "'a'" in str(e)


def test_from_array():
    a = np.arange(24, dtype=np.uint32).reshape(2, 3, 4)[:, ::-1, 1:3]
    d = TensorDescriptor.from_array(a)
    assert d == TensorDescriptor(DType.U32, (2, 2 + 1, 2), (12, -4, 1))
    assert TensorDescriptor.from_array(torch.zeros(2, 3).T) == TensorDescriptor(F32, (3, 2), (1, 3))
    assert TensorDescriptor.from_array(DLPackOnly(np.zeros(5, np.int8))).shape == (5,)
    assert TensorDescriptor.from_array(ArrayInterfaceOnly(np.zeros((2, 2), bool))).dtype is DType.BOOL
    e = raises(Status.BAD_PARAM, TensorDescriptor.from_array, addr(a))
    assert "address" in str(e)
    raises(Status.BAD_PARAM, TensorDescriptor.from_array, [1, 2])


# ---------------------------------------------------------------------------------------------
# check_fits: dtype, read-only, layout (an array must be laid out as its descriptor, issue 10)
# ---------------------------------------------------------------------------------------------

SHAPE_ERR, STRIDES_ERR = Status.BAD_TENSOR_SHAPE, Status.BAD_TENSOR_STRIDES


def fits(obj, desc, *, writable=False, name="x"):
    check_fits(inspect_buffer(obj, name), desc, name, writable=writable)


def test_check_fits_dtype_and_readonly():
    a = np.zeros(6, np.float32)
    e = raises(Status.BAD_TENSOR_DTYPE, fits, a, TensorDescriptor(DType.I32, (6,)), name="b")
    assert "'b'" in str(e)
    raises(Status.BAD_TENSOR_DTYPE, fits, a, TensorDescriptor(DType.F64, (3,)))
    r = a.copy()
    r.flags.writeable = False
    fits(r, TensorDescriptor(F32, (6,)))  # reading a read-only buffer is fine
    e = raises(Status.BAD_PARAM, fits, r, TensorDescriptor(F32, (6,)), writable=True, name="out")
    assert "'out'" in str(e) and "read-only" in str(e)
    b = np.broadcast_to(a, (2, 6))
    raises(Status.BAD_PARAM, fits, b, TensorDescriptor(F32, (2, 6), (0, 1)), writable=True)
    fits(b, TensorDescriptor(F32, (2, 6), (0, 1)))


def test_check_fits_byte_descriptor_takes_uint8_arrays():
    """BYTE is stored as uint8 (NumPy and torch have no other byte type), so a uint8 array is a
    BYTE tensor's buffer; no array reports BYTE, and int8 or bool arrays stay refused."""
    byte = TensorDescriptor(DType.BYTE, (4,))
    fits(np.zeros(4, np.uint8), byte, writable=True)
    fits(torch.zeros(4, dtype=torch.uint8), byte, writable=True)
    fits(np.zeros(4, np.uint8), TensorDescriptor(DType.U8, (4,)), writable=True)
    for other in (np.int8, np.bool_):
        raises(Status.BAD_TENSOR_DTYPE, fits, np.zeros(4, other), byte)
    raises(Status.BAD_TENSOR_STRIDES, fits, np.zeros(8, np.uint8)[::2], byte)


def test_check_fits_shape_must_match():
    a = np.zeros(12, np.float64)
    fits(a, TensorDescriptor(DType.F64, (12,)), writable=True)
    e = raises(SHAPE_ERR, fits, a, TensorDescriptor(DType.F64, (3, 4)), name="in0")
    msg = str(e)  # both layouts, and how to fix it
    assert "'in0'" in msg and "(12,)" in msg and "(3, 4)" in msg and "(4, 1)" in msg
    assert "TensorDescriptor.from_array(x)" in msg and "np.ascontiguousarray" in msg
    raises(SHAPE_ERR, fits, a, TensorDescriptor(DType.F64, (13,)))
    raises(SHAPE_ERR, fits, a, TensorDescriptor(DType.F64, (11,)))  # a smaller tensor too
    m = a.reshape(3, 4)
    fits(m, TensorDescriptor(DType.F64, (3, 4)))
    raises(SHAPE_ERR, fits, m, TensorDescriptor(DType.F64, (4, 3), (1, 4)))  # same memory
    raises(SHAPE_ERR, fits, m[:, :, None], TensorDescriptor(DType.F64, (3, 4)))
    raises(SHAPE_ERR, fits, m[None], TensorDescriptor(DType.F64, (3, 4)))
    raises(SHAPE_ERR, fits, np.float64(1.0), TensorDescriptor(DType.F64, (1,)))
    raises(SHAPE_ERR, fits, np.zeros(1), TensorDescriptor(DType.F64, ()))


def test_check_fits_strides_must_match():
    base = np.zeros(30, np.int32)
    v = base[3:24:4]  # elements 3, 7, ..., 23: 6 elements, stride 4
    fits(v, TensorDescriptor(DType.I32, (6,), (4,)), writable=True)
    e = raises(STRIDES_ERR, fits, v, TensorDescriptor(DType.I32, (6,)), name="a")
    assert "(4,)" in str(e) and "(1,)" in str(e)
    raises(STRIDES_ERR, fits, v, TensorDescriptor(DType.I32, (6,), (-4,)))
    w = base[2:18][::-1]
    fits(w, TensorDescriptor(DType.I32, (16,), (-1,)), writable=True)
    raises(STRIDES_ERR, fits, w, TensorDescriptor(DType.I32, (16,)))
    m = base[:12].reshape(3, 4)
    raises(STRIDES_ERR, fits, m.T, TensorDescriptor(DType.I32, (4, 3)))
    fits(m.T, TensorDescriptor(DType.I32, (4, 3), (1, 4)))
    raises(STRIDES_ERR, fits, base.reshape(5, 6)[:, ::2], TensorDescriptor(DType.I32, (5, 3)))
    raises(STRIDES_ERR, fits, base.reshape(5, 6)[:, :3], TensorDescriptor(DType.I32, (5, 3)))
    b = np.broadcast_to(np.arange(3.0), (4, 3))
    fits(b, TensorDescriptor(DType.F64, (4, 3), (0, 1)))
    raises(STRIDES_ERR, fits, b, TensorDescriptor(DType.F64, (4, 3)))
    raises(STRIDES_ERR, fits, np.zeros((4, 3)), TensorDescriptor(DType.F64, (4, 3), (0, 1)))


def test_check_fits_extent_one_and_empty_dims():
    """Strides that move to no element do not matter: an extent-1 dim's, an empty tensor's."""
    x = np.zeros((5, 3), np.float32)[::4][:1]  # shape (1, 3), element strides (12, 1)
    fits(x, TensorDescriptor(F32, (1, 3)), writable=True)
    fits(x, TensorDescriptor(F32, (1, 3), (0, 1)))
    fits(x, TensorDescriptor(F32, (1, 3), (-7, 1)))
    raises(STRIDES_ERR, fits, x, TensorDescriptor(F32, (1, 3), (3, 2)))
    one = np.zeros((1, 1, 1), np.float32)
    fits(one, TensorDescriptor(F32, (1, 1, 1), (5, -5, 0)))
    e = np.empty((0, 3), np.float32)
    fits(e, TensorDescriptor(F32, (0, 3), (100, 7)), writable=True)
    raises(SHAPE_ERR, fits, e, TensorDescriptor(F32, (0,)))
    raises(SHAPE_ERR, fits, e, TensorDescriptor(F32, (3, 0)))
    s = np.array(1.0, np.float32)
    fits(s, TensorDescriptor(F32, ()))


def test_check_fits_torch_and_protocols():
    t = torch.zeros(5, 6, dtype=torch.float16)
    v = t[1:4, 2:]  # shape (3, 4), strides (6, 1)
    fits(v, TensorDescriptor.from_array(v), writable=True)
    raises(STRIDES_ERR, fits, v, TensorDescriptor(DType.F16, (3, 4)))
    raises(SHAPE_ERR, fits, v, TensorDescriptor(DType.F16, (16,)))
    raises(STRIDES_ERR, fits, t.T, TensorDescriptor(DType.F16, (6, 5)))
    x = torch.zeros(4).expand(3, 4)
    fits(x, TensorDescriptor(F32, (3, 4), (0, 1)))
    raises(STRIDES_ERR, fits, x, TensorDescriptor(F32, (3, 4)))
    m = np.zeros((3, 4), np.float32)
    for wrap in (DLPackOnly, ArrayInterfaceOnly):
        fits(wrap(m), TensorDescriptor(F32, (3, 4)), writable=True)
        raises(STRIDES_ERR, fits, wrap(m.T), TensorDescriptor(F32, (4, 3)))
        raises(SHAPE_ERR, fits, wrap(m.ravel()), TensorDescriptor(F32, (3, 4)))


def _offsets(shape, strides) -> np.ndarray:
    """The element offset of every index, in C order: what a layout means."""
    if not shape:
        return np.zeros(1, np.int64)
    idx = np.indices(shape, dtype=np.int64).reshape(len(shape), -1)
    return (np.array(strides, np.int64).reshape(-1, 1) * idx).sum(axis=0)


@settings(max_examples=300, deadline=None)
@given(
    itemsize=st.sampled_from([1, 2, 4, 8]),
    shape=st.lists(st.integers(0, 3), max_size=4),
    data=st.data(),
)
def test_check_fits_layout_property(itemsize, shape, data):
    """An array fits iff it has the descriptor's shape and addresses the same element offsets in
    the same order (an independent oracle); the compiled twin used by the elementwise launchers
    (``arrays.layout_end``) agrees, except that it may refuse an empty array (which then takes
    the general path)."""
    from numba import njit

    from infiniop.backends.cpu.arrays import layout_end as _layout_end
    from infiniop.backends.cpu.checked_arrays import descr_address

    @njit
    def layout_end(a, meta, pos):  # as the launchers call it
        return _layout_end(descr_address(a), a.shape, a.strides, meta, pos)

    dt = {1: DType.I8, 2: DType.I16, 4: DType.I32, 8: DType.I64}[itemsize]
    shape = tuple(shape)
    desc_strides = tuple(data.draw(st.integers(-4, 4)) for _ in shape)
    desc = TensorDescriptor(dt, shape, desc_strides)
    arr_shape = data.draw(st.sampled_from([shape, shape[1:], shape + (1,), shape[::-1]]))
    arr_strides = tuple(s if data.draw(st.booleans()) else data.draw(st.integers(-4, 4))
                        for s in (desc_strides + (1,))[:len(arr_shape)])
    pad = 64
    base = np.zeros(2 * pad + 1, dt.numpy)
    arr = as_strided(base[pad:], arr_shape, [s * itemsize for s in arr_strides])
    if arr_shape != shape:
        want = SHAPE_ERR
    elif np.array_equal(_offsets(shape, arr_strides), _offsets(shape, desc_strides)):
        want = None
    else:
        want = STRIDES_ERR
    if want is None:
        check_fits(inspect_buffer(arr), desc, "x", writable=False)
    else:
        raises(want, check_fits, inspect_buffer(arr), desc, "x", writable=False)
    layout = [desc.ndim, *desc.shape, *(s * itemsize for s in desc.strides)]
    for dtype_id in (0, id(arr.dtype)):  # 0: the dtype is checked by the caller
        end = layout_end(arr, np.array([dtype_id, *layout], np.int64), 0)
        assert end in (-1, 2 + 2 * desc.ndim)
        if not desc.is_empty or end != -1:
            assert (end != -1) == (want is None), (end, want)
    # another dtype of the same size is refused whatever the layout
    other = np.dtype({1: np.uint8, 2: np.float16, 4: np.float32, 8: np.float64}[itemsize])
    assert layout_end(arr, np.array([id(other), *layout], np.int64), 0) == -1


# ---------------------------------------------------------------------------------------------
# descriptor.py: the operator-descriptor base
# ---------------------------------------------------------------------------------------------

class _Dummy(OperatorDescriptor):
    name = "dummy"


def test_check_handle_and_descriptor():
    h = create_handle()
    assert check_handle(h) is h
    raises(Status.NULL_POINTER, check_handle, None)
    raises(Status.BAD_PARAM, check_handle, "cpu")
    d = TensorDescriptor(F32, (2,))
    assert check_descriptor(d, "a") is d
    e = raises(Status.NULL_POINTER, check_descriptor, None, "a")
    assert "'a'" in str(e)
    e = raises(Status.BAD_PARAM, check_descriptor, (2,), "b")
    assert "'b'" in str(e)


def test_operator_descriptor_lifetime():
    op = _Dummy(create_handle())
    assert op.device is Device.CPU
    op._check_alive()
    with op as same:
        assert same is op
    raises(Status.BAD_PARAM, op._check_alive)


def test_operator_descriptor_workspace():
    op = _Dummy(create_handle())
    op._check_workspace(None)  # needs none
    op.workspace_size = 64
    raises(Status.INSUFFICIENT_WORKSPACE, op._check_workspace, None)
    raises(Status.INSUFFICIENT_WORKSPACE, op._check_workspace, np.zeros(63, np.uint8))
    raises(Status.INSUFFICIENT_WORKSPACE, op._check_workspace, np.zeros(7, np.float64))
    op._check_workspace(np.zeros(64, np.uint8))
    op._check_workspace(np.zeros(8, np.float64))
    op._check_workspace(torch.zeros(16))
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    e = raises(Status.BAD_PARAM, op._check_workspace, ro)
    assert "'workspace'" in str(e)
    raises(Status.BAD_PARAM, op._check_workspace, np.broadcast_to(np.zeros(8), (8, 8)))
    # a workspace must be dense: a strided view's gaps are not workspace (issue 10)
    op._check_workspace(np.zeros((8, 8), np.uint8))
    op._check_workspace(np.zeros((8, 16), np.uint8)[2:6])  # rows of a bigger array: dense
    for strided in (np.zeros(128, np.uint8)[::2], np.zeros(64, np.uint8)[::-1],
                    np.zeros((8, 16), np.uint8)[:, :8], np.zeros((8, 8), np.uint8).T,
                    as_strided(np.zeros(8, np.uint8), (64,), (0,)), torch.zeros(32)[::2]):
        e = raises(Status.BAD_PARAM, op._check_workspace, strided)
        assert "'workspace'" in str(e) and "contiguous" in str(e)
    op._check_workspace(123456)  # a raw address: trusted


def test_operator_descriptor_buffer_checks():
    op = _Dummy(create_handle())
    d = TensorDescriptor(F32, (2, 3))
    a = np.zeros((2, 3), np.float32)
    info = op._buffer(a, d, "a", writable=True)
    assert info.address == addr(a)
    assert op._buffer(addr(a), d, "a", writable=True).trusted
    e = raises(Status.NULL_POINTER, op._buffer, None, d, "out", writable=True)
    assert "'out'" in str(e)
    raises(Status.NULL_POINTER, op._buffer, 0, d, "out", writable=True)
    raises(Status.BAD_TENSOR_DTYPE, op._buffer, a.astype(np.float64), d, "a", writable=False)
    raises(Status.BAD_TENSOR_SHAPE, op._buffer, a[:, :2], d, "a", writable=False)
    raises(Status.BAD_TENSOR_STRIDES, op._buffer, a.reshape(3, 2).T, d, "a", writable=False)
    raises(Status.BAD_PARAM, op._buffer, [1, 2], d, "a", writable=False)
    m = torch.zeros(2, 3, device="meta")
    e = raises(Status.BAD_PARAM, op._buffer, m, d, "m", writable=False)
    assert "'m'" in str(e) and "meta" in str(e)


def test_interop_module_exports():
    assert interop.BufferInfo is type(inspect_buffer(np.zeros(1)))
