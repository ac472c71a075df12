"""The operator descriptor contract shared by every operator.

``create_<op>_descriptor(handle, out_desc, *in_descs)`` validates and plans once; the result
has ``workspace_size`` (bytes), ``calculate(workspace, out, *inputs, stream=None)``, ``destroy()``
and is a context manager. It keeps its own copy of everything it needs.
"""

from __future__ import annotations

from .device import Handle
from .interop import BufferInfo, check_fits, inspect_buffer, layout_mismatch
from .status import InfiniError, Status
from .tensor import TensorDescriptor, contiguous_strides


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

    def _arguments_error(self, signature: str, given: tuple, extra: str = "") -> InfiniError:
        """BAD_PARAM for a wrong number of buffers, saying what ``calculate`` takes."""
        got = [x for x in given if x is not MISSING]
        return InfiniError(Status.BAD_PARAM, f"{self.name}.calculate({signature}) takes "
                                             f"{signature.count(',') + 1} arguments, got {len(got)}{extra}")

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
