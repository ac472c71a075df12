"""The operator descriptor contract shared by every operator.

``create_<op>_descriptor(handle, out_desc, *in_descs)`` validates and plans once; the result
has ``workspace_size`` (bytes), ``calculate(workspace, out, *inputs, stream=None)``, ``destroy()``
and is a context manager. It keeps its own copy of everything it needs.
"""

from __future__ import annotations

from .device import Handle
from .dtype import DType
from .interop import BufferInfo, inspect_buffer
from .layout import overlap
from .status import InfiniError, Status
from .tensor import TensorDescriptor, contiguous_strides


def layout_mismatch(shape, strides, want_shape, want_strides) -> Status | None:
    """Why an array laid out as ``(shape, strides)`` is not the tensor ``(want_shape,
    want_strides)`` (strides in elements): ``BAD_TENSOR_SHAPE``, ``BAD_TENSOR_STRIDES``, or None
    when it is. The stride of an extent-1 dim, and every stride of an empty tensor, moves to no
    element and is not compared. The compiled fast path does the same comparison in
    ``backends/cpu/arrays.py:layout_end``."""
    if tuple(shape) != tuple(want_shape):
        return Status.BAD_TENSOR_SHAPE
    if 0 in want_shape:
        return None
    for n, s, w in zip(want_shape, strides, want_strides):
        if n != 1 and s != w:
            return Status.BAD_TENSOR_STRIDES
    return None


def check_fits(info: BufferInfo, desc: TensorDescriptor, name: str, *, writable: bool) -> None:
    """Refuse a buffer whose dtype, shape or element strides differ from the descriptor's, or
    that is read-only when written. An array laid out exactly as its descriptor holds every
    element the descriptor reaches, so this also keeps every access inside the array's memory."""
    if info.trusted:
        return
    # BYTE is stored as uint8 (NumPy and torch have no other byte type): a uint8 array holds it
    if info.dtype is not desc.dtype and not (desc.dtype is DType.BYTE and info.dtype is DType.U8):
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"operand '{name}': buffer holds {info.dtype}, descriptor says {desc.dtype}")
    if writable and info.readonly:
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': output buffer is read-only")
    status = layout_mismatch(info.shape, info.strides, desc.shape, desc.strides)
    if status is not None:
        what = "shapes" if status is Status.BAD_TENSOR_SHAPE else "strides"
        raise InfiniError(status, (
            f"operand '{name}': the array is shape {tuple(info.shape)} strides "
            f"{tuple(info.strides)}, the descriptor says shape {desc.shape} strides {desc.strides} "
            f"(strides in elements; the {what} differ). Pass an array laid out as the descriptor "
            "says (np.ascontiguousarray(x) or x.contiguous() for a row-major one), or describe "
            "the array you have: TensorDescriptor.from_array(x)"))


def check_handle(handle) -> Handle:
    if handle is None:
        raise InfiniError(Status.NULL_POINTER, "handle is None; create one with create_handle()")
    if not isinstance(handle, Handle):
        raise InfiniError(Status.BAD_PARAM, f"expected a Handle, got {type(handle).__name__}")
    return handle


def check_descriptor(desc, name: str) -> TensorDescriptor:
    if desc is None:
        raise InfiniError(Status.NULL_POINTER, f"operand '{name}': descriptor is None")
    if not isinstance(desc, TensorDescriptor):
        raise InfiniError(Status.BAD_PARAM,
                          f"operand '{name}': expected a TensorDescriptor, got {type(desc).__name__}")
    return desc


# calculate's default for an argument left out: any argument-count mistake is an InfiniError
MISSING = object()


class OperatorDescriptor:
    """Base of every operator descriptor: lifetime, workspace and buffer checks."""

    workspace_size: int = 0
    name: str = "operator"

    def __init__(self, handle: Handle):
        self.handle = handle
        self._alive = True

    @property
    def device(self):
        return self.handle.device

    def destroy(self) -> None:
        """Release the descriptor; later calls to ``calculate`` raise ``BAD_PARAM``."""
        self._alive = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def _check_alive(self) -> None:
        if not self._alive:
            raise InfiniError(Status.BAD_PARAM, f"{self.name} descriptor was destroyed")

    def _arguments_error(self, params: tuple[str, ...], given: tuple, hint: str = "") -> InfiniError:
        """BAD_PARAM for a wrong number of arguments, saying what ``calculate`` takes."""
        got = sum(x is not MISSING for x in given)
        return InfiniError(Status.BAD_PARAM, f"{self.name}.calculate({', '.join(params)}) takes "
                                             f"{len(params)} arguments, got {got}{hint}")

    def _check_workspace(self, workspace) -> None:
        need = self.workspace_size
        if need == 0:
            return
        if workspace is None:
            raise InfiniError(Status.INSUFFICIENT_WORKSPACE,
                              f"{self.name} needs a workspace of {need} bytes, got None")
        if isinstance(workspace, int):
            return  # raw address: trusted
        info = inspect_buffer(workspace, "workspace")
        if info.readonly:  # the kernel writes its scratch data there
            raise InfiniError(Status.BAD_PARAM, "operand 'workspace': buffer is read-only")
        if layout_mismatch(info.shape, info.strides, info.shape, contiguous_strides(info.shape)):
            # the kernel uses the bytes from the data pointer on: a strided view's gaps (or a
            # reversed view's bytes before it) are not the workspace's
            raise InfiniError(Status.BAD_PARAM,
                              f"operand 'workspace': a strided view (shape {info.shape}, strides "
                              f"{info.strides}); pass a contiguous buffer, e.g. "
                              f"np.empty({need}, np.uint8)")
        size = info.hi - info.lo
        if size < need:
            raise InfiniError(Status.INSUFFICIENT_WORKSPACE,
                              f"{self.name} needs a workspace of {need} bytes, got {size}")

    def _buffer(self, obj, desc: TensorDescriptor, name: str, *, writable: bool) -> BufferInfo:
        if obj is None:
            raise InfiniError(Status.NULL_POINTER, f"operand '{name}': buffer is None")
        info = inspect_buffer(obj, name)
        if info.device != self.handle.backend.MEMORY_KIND and not info.trusted:
            raise InfiniError(Status.BAD_PARAM,
                              f"operand '{name}': buffer lives on {info.device}, the descriptor "
                              f"runs on {self.handle.device.name.lower()}")
        check_fits(info, desc, name, writable=writable)
        return info


class OperandsDescriptor(OperatorDescriptor):
    """Base of the descriptors of operators with named operands (elementwise, rows):
    ``calculate(workspace, *buffers)`` in the operands' order, the overlap checks planned at
    create (``self.info.checks``) run on the buffers' addresses."""

    _names: tuple[str, ...] = ()
    IN_PLACE = "in-place needs identical layouts"  # what the overlap message says is allowed

    def _check_arguments(self, workspace, buffers: tuple) -> None:
        n = len(self._names)
        if workspace is MISSING or len(buffers) != n:
            hint = ""
            if len(buffers) == n - 1 and workspace is not None and workspace is not MISSING:
                hint = ("; the first argument is the workspace (None when workspace_size is 0): "
                        f"calculate(None, {', '.join(self._names)})")
            raise self._arguments_error(("workspace",) + self._names, (workspace,) + buffers, hint)

    def _check_buffers(self, workspace, buffers, *, overlaps: bool = True) -> list:
        """The buffers' infos (None for an operand left out at create), after the workspace,
        layout and overlap checks."""
        self._check_workspace(workspace)
        ops, descs = self.spec.operands, self.info.descs
        infos = []
        for o, d, b in zip(ops, descs, buffers):
            if d is None:
                if b is not None:
                    raise InfiniError(Status.BAD_PARAM, f"operand '{o.name}' was None at create; "
                                      "pass None for its buffer too")
                infos.append(None)
            else:
                infos.append(self._buffer(b, d, o.name, writable=o.writes))
        for c in self.info.checks if overlaps else ():
            rel = overlap(infos[c.w].address, c.descs[0], infos[c.k].address, c.descs[1])
            if rel == "partial" or (rel == "same" and not c.aliasable):
                w, k = self._names[c.w], self._names[c.k]
                if ops[c.k].writes:
                    msg = f"operands '{w}' and '{k}' share memory; outputs must not overlap"
                else:
                    msg = f"operand '{w}' overlaps input '{k}'; {self.IN_PLACE}"
                raise InfiniError(Status.BAD_PARAM, msg)
        return infos
