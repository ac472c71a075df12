"""RowDescriptor: the descriptor contract for every row operator."""

from __future__ import annotations

from ..descriptor import MISSING, OperandsDescriptor, check_descriptor, check_handle
from ..elementwise.descriptor import _fast_path, device_fast_path
from ..status import InfiniError, Status
from .plan import plan


class RowDescriptor(OperandsDescriptor):
    """A planned row call: ``calculate(workspace, *buffers, stream=None)``, the buffers in the
    order of the tensors given to create (absent optional ones: None).

    >>> import numpy as np, infiniop
    >>> h = infiniop.create_handle("cpu")
    >>> d = infiniop.TensorDescriptor(infiniop.float32, (2, 3))
    >>> desc = infiniop.create_softmax_descriptor(h, d, d, axis=-1)
    >>> x = np.array([[0, 0, 0], [1, 2, 3]], np.float32)
    >>> y = np.empty_like(x)
    >>> desc.calculate(None, y, x)
    >>> y.round(4)
    array([[0.3333, 0.3333, 0.3333],
           [0.09  , 0.2447, 0.6652]], dtype=float32)
    """

    IN_PLACE = "in place needs the same layout (and a row input)"

    def __init__(self, handle, spec, descs: tuple, scalars: tuple):
        super().__init__(check_handle(handle))
        self.spec = spec
        self.name = spec.name
        ops = spec.operands
        self._names = tuple(o.name for o in ops)
        if any(not o.optional for o in ops[len(descs):]):
            raise InfiniError(Status.BAD_PARAM, f"{spec.name} takes {len(ops)} tensor "
                              f"descriptors ({', '.join(self._names)}), got {len(descs)}")
        descs = tuple(descs) + (None,) * (len(ops) - len(descs))  # trailing optional ones
        checked = tuple(None if d is None and o.optional else check_descriptor(d, o.name)
                        for o, d in zip(ops, descs))
        values, axis = scalars
        self.info = info = plan(spec, checked, values, axis)
        self.workspace_size = 0
        self._kernel = None if info.empty else handle.backend.row_kernel(info, handle=handle)
        launcher = getattr(self._kernel, "array_launcher", None)
        self._fast = None if launcher is None else _fast_path(self._kernel, info, ops)
        self._fast_device = device_fast_path(handle, self._kernel, info, ops)

    @property
    def params(self) -> dict:
        """The scalars fixed at create, by name."""
        out = {p.name: v for p, v in zip(self.spec.params, self.info.params)}
        if self.spec.axis:
            out[self.spec.axis] = self.info.axis
        return out

    def calculate(self, workspace=MISSING, *buffers, stream=None) -> None:
        fast = self._fast
        if fast is not None and fast(buffers) == 0:
            return
        fast = self._fast_device
        if fast is not None and workspace is None and fast(buffers, stream):
            return
        if not self._alive:
            self._check_alive()
        self._check_arguments(workspace, buffers)
        infos = self._check_buffers(workspace, buffers)
        if self._kernel is not None:
            self._kernel.launch_pointers([None if i is None else i.address for i in infos],
                                         stream=stream)

    def destroy(self) -> None:
        self._fast = self._fast_device = None
        super().destroy()
