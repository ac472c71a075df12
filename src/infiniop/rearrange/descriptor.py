"""The rearrange operator descriptor: ``dst[...] = src[...]`` between any two layouts."""

from __future__ import annotations

import importlib

import numpy as np

from ..descriptor import MISSING, OperatorDescriptor, check_descriptor, check_handle
from ..layout import check_writable_layout, overlap
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from .meta import RearrangeMeta, plan

SMALL_COPY_BYTES = 256 << 10  # below this a dense same-layout copy goes through np.copyto


def _backend_kernels(handle):
    try:
        return importlib.import_module(handle.backend.__name__ + ".rearrange_kernels")
    except ImportError as e:
        raise InfiniError(Status.DEVICE_TYPE_NOT_SUPPORTED,
                          f"rearrange has no kernel for device {handle.device.name.lower()} "
                          f"({e})") from e


def _address_of(dtype: np.dtype, ndim: int):
    """``address(a)`` for arrays of this dtype and rank: ``a.ctypes.data`` costs ~0.8 us, the
    compiled lookup ~0.15 us."""
    from ..backends.cpu.native import array, kernel

    return kernel("infiniop.backends.cpu.arrays", "address_of").specialize(array(dtype, ndim))


class RearrangeDescriptor(OperatorDescriptor):
    """Copies a tensor into a tensor of the same shape and dtype with any strides.

    >>> import numpy as np, infiniop
    >>> h = infiniop.create_handle("cpu")
    >>> src = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> dst = np.empty((3, 2), np.float32).T          # column-major (2, 3)
    >>> sd, dd = (infiniop.TensorDescriptor.from_array(a) for a in (src, dst))
    >>> with infiniop.create_rearrange_descriptor(h, dd, sd) as desc:
    ...     desc.calculate(dst, src)
    >>> bool((dst == src).all())
    True
    """

    name = "rearrange"
    workspace_size = 0

    def __init__(self, handle, dst_desc: TensorDescriptor, src_desc: TensorDescriptor):
        super().__init__(handle)
        if dst_desc.dtype is not src_desc.dtype:
            raise InfiniError(Status.BAD_TENSOR_DTYPE,
                              f"operand 'src' is {src_desc.dtype} but 'dst' is {dst_desc.dtype}; "
                              "rearrange does not convert")
        if dst_desc.ndim != src_desc.ndim:
            raise InfiniError(Status.BAD_TENSOR_SHAPE,
                              f"operand 'src' has {src_desc.ndim} dims {src_desc.shape}, 'dst' has "
                              f"{dst_desc.ndim} dims {dst_desc.shape}")
        if dst_desc.shape != src_desc.shape:
            raise InfiniError(Status.BAD_TENSOR_SHAPE,
                              f"operand 'src' has shape {src_desc.shape}, 'dst' has shape "
                              f"{dst_desc.shape}")
        check_writable_layout(dst_desc, "dst")
        self._dst, self._src = dst_desc, src_desc  # immutable: these are our own copies
        self.meta: RearrangeMeta = plan(dst_desc.shape, dst_desc.strides, src_desc.strides,
                                        dst_desc.dtype.itemsize)
        kernels = _backend_kernels(handle)
        try:  # GPU backends pick the vendor's launch table from the handle
            self._run = kernels.build(self.meta, handle=handle)
        except TypeError:
            self._run = kernels.build(self.meta)
        # fast path of calculate for NumPy arrays laid out exactly as the descriptors say (their
        # memory then holds every element the descriptors reach, so no bounds check is needed)
        isz = dst_desc.dtype.itemsize
        self._small_memcpy = (self.meta.kind == "memcpy" and dst_desc.strides == src_desc.strides
                              and dst_desc.numel * isz <= SMALL_COPY_BYTES)
        # the NumPy fast path hands host addresses to the kernel: only where the backend's
        # buffers are host memory (a GPU handle's arrays must pass the device check)
        self._npdt = dst_desc.dtype.numpy if handle.backend.MEMORY_KIND == "cpu" else None
        npdt = dst_desc.dtype.numpy
        self._uview = (None if npdt.kind in "biu" or npdt in (np.float32, np.float64)
                       else np.dtype(f"u{isz}"))
        self._address = None  # bound on the first fast-path call (dtype and rank are fixed)
        self._shape = dst_desc.shape
        self._dbs = tuple(x * isz for x in dst_desc.strides)
        self._sbs = tuple(x * isz for x in src_desc.strides)
        self._dreach = (dst_desc.reach[0] * isz, (dst_desc.reach[1] + 1) * isz)
        self._sreach = (src_desc.reach[0] * isz, (src_desc.reach[1] + 1) * isz)

    @property
    def dst_desc(self) -> TensorDescriptor:
        return self._dst

    @property
    def src_desc(self) -> TensorDescriptor:
        return self._src

    def calculate(self, dst=MISSING, src=MISSING, *extra, stream=None) -> None:
        """Copy ``src`` into ``dst`` (arrays, tensors, DLPack objects or raw int addresses).
        No workspace argument (as in the C API); ``stream`` is keyword-only."""
        if not self._alive:
            self._check_alive()
        npdt = self._npdt
        if (not extra and type(dst) is np.ndarray and type(src) is np.ndarray and dst.dtype is npdt
                and src.dtype is npdt and dst.strides == self._dbs and src.strides == self._sbs
                and dst.shape == self._shape and src.shape == self._shape and dst.flags.writeable):
            fast = True
            if self._uview is not None:  # Numba cannot type fp16/bf16/fp8 arrays
                dst, src = dst.view(self._uview), src.view(self._uview)
            address = self._address
            if address is None:
                address = self._address = _address_of(dst.dtype, dst.ndim)
            da, sa = address(dst), address(src)
        else:
            if extra or src is MISSING:
                hint = ("; rearrange takes no workspace (as in the C API): calculate(dst, src), "
                        "stream=... by keyword" if extra else "")
                raise self._arguments_error(("dst", "src"), (dst, src) + extra, hint)
            fast = False
            da = self._buffer(dst, self._dst, "dst", writable=True).address
            sa = self._buffer(src, self._src, "src", writable=False).address
        if self._run is None:
            return
        dlo, dhi = self._dreach
        slo, shi = self._sreach
        if da + dlo < sa + shi and sa + slo < da + dhi:  # the byte ranges intersect
            rel = overlap(da, self._dst, sa, self._src)
            if rel == "same":
                return
            if rel == "partial":
                raise InfiniError(Status.BAD_PARAM,
                                  "operand 'dst' partially overlaps 'src'; a copy onto itself "
                                  "needs identical layouts")
        if fast and self._small_memcpy:  # both dense, same layout, small: NumPy's memcpy call
            np.copyto(dst, src)  # costs less than ours (the copy itself is the same memcpy)
        elif stream is None:
            self._run(da, sa)
        else:
            self._run(da, sa, stream=stream)

    def __repr__(self) -> str:
        return (f"RearrangeDescriptor({self._dst.dtype}, shape={self._dst.shape}, "
                f"dst={self._dst.strides}, src={self._src.strides}: {self.meta.describe()})")


def create_rearrange_descriptor(handle, dst_desc, src_desc) -> RearrangeDescriptor:
    """Validate and plan ``dst = src`` once (``infiniopCreateRearrangeDescriptor``).

    Errors: BAD_TENSOR_DTYPE (dtypes differ), BAD_TENSOR_SHAPE (ndim or shape differ),
    BAD_TENSOR_STRIDES (dst broadcasts or overlaps itself); NULL_POINTER / BAD_PARAM for a
    missing or wrong handle or descriptor.
    """
    handle = check_handle(handle)
    dst_desc = check_descriptor(dst_desc, "dst")
    src_desc = check_descriptor(src_desc, "src")
    return RearrangeDescriptor(handle, dst_desc, src_desc)
