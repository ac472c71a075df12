"""ElementwiseDescriptor: the descriptor contract for every elementwise operator."""

from __future__ import annotations

import numpy as np

from ..descriptor import MISSING, OperatorDescriptor, check_descriptor, check_handle
from ..dtype import DType
from ..layout import overlap
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from .plan import plan
from .spec import ElementwiseSpec

_HALF = (DType.F16, DType.BF16)
_U16 = np.dtype(np.uint16)


class ElementwiseDescriptor(OperatorDescriptor):
    """A planned elementwise call: ``calculate(workspace, out, *inputs, stream=None)``.

    >>> import numpy as np, infiniop
    >>> h = infiniop.create_handle("cpu")
    >>> f32 = infiniop.TensorDescriptor(infiniop.float32, (2, 3))
    >>> d = infiniop.create_sub_descriptor(h, f32, f32, f32)
    >>> a, b = np.ones((2, 3), np.float32), np.full((2, 3), 0.25, np.float32)
    >>> c = np.empty((2, 3), np.float32)
    >>> d.calculate(None, c, a, b)
    >>> c
    array([[0.75, 0.75, 0.75],
           [0.75, 0.75, 0.75]], dtype=float32)
    """

    def __init__(self, handle, spec: ElementwiseSpec, out_desc, in_descs):
        super().__init__(check_handle(handle))
        self.name = spec.name
        names = ("out",) + spec.inputs
        if len(in_descs) != spec.arity:  # before naming them: names[k + 1] must exist
            raise InfiniError(Status.BAD_PARAM, f"{spec.name} takes {spec.arity} inputs "
                              f"({', '.join(spec.inputs)}), got {len(in_descs)}")
        descs = [check_descriptor(out_desc, "out")]
        descs += [check_descriptor(d, names[k + 1]) for k, d in enumerate(in_descs)]
        self.info = info = plan(spec, descs[0], tuple(descs[1:]))
        self.workspace_size = 0
        self._names = names
        # Each input as seen through the output's shape: what in-place aliasing is compared with.
        from ..layout import broadcast_strides

        self._aligned = [descs[0]] + [
            TensorDescriptor(d.dtype, descs[0].shape, broadcast_strides(d, descs[0].shape, names[k + 1]))
            for k, d in enumerate(descs[1:])
        ]
        self._empty = info.numel == 0
        self._np_dtypes = tuple(d.dtype.numpy for d in descs)
        self._views = tuple(d.dtype in _HALF for d in descs)
        self._kernel = handle.backend.elementwise_kernel(info, handle=handle)
        launcher = getattr(self._kernel, "array_launcher", None)
        self._fast = None if launcher is None or self._empty else _fast_path(
            launcher, self._kernel.array_launcher_args, self._np_dtypes, self._views)

    def calculate(self, workspace=MISSING, out=MISSING, *inputs, stream=None) -> None:
        """Compute ``out = op(*inputs)``; buffers are arrays, tensors or raw addresses."""
        fast = self._fast
        if fast is not None and fast(out, inputs) == 0:
            return
        if not self._alive:
            self._check_alive()
        if out is MISSING or len(inputs) != len(self._names) - 1:
            given = (workspace, out) + inputs
            hint = ""
            if len([x for x in given if x is not MISSING]) == len(self._names) and workspace is not None:
                hint = ("; the first argument is the workspace (None when workspace_size is 0): "
                        f"calculate(None, out, {', '.join(self._names[1:])})")
            raise self._arguments_error(("workspace",) + self._names, given, hint)
        infos = self._check_buffers(workspace, out, inputs)
        if not self._empty:
            self._kernel.launch_pointers([i.address for i in infos], stream=stream)

    def destroy(self) -> None:
        self._fast = None
        super().destroy()

    def _check_buffers(self, workspace, out, inputs):
        self._check_workspace(workspace)
        descs = self.info.descs
        infos = [self._buffer(out, descs[0], "out", writable=True)]
        infos += [self._buffer(x, descs[k + 1], self._names[k + 1], writable=False)
                  for k, x in enumerate(inputs)]
        if not self._empty:
            o = infos[0]
            for k, i in enumerate(infos[1:]):
                rel = overlap(o.address, self._aligned[0], i.address, self._aligned[k + 1])
                if rel == "partial" or (rel == "same" and not self.info.aliasable[k]):
                    raise InfiniError(Status.BAD_PARAM,
                                      f"operand 'out' partially overlaps input "
                                      f"'{self._names[k + 1]}'; in-place needs identical layouts")
        return infos


def _fast_path(launcher, extra_args, np_dtypes, views):
    """A per-descriptor closure for the common call: all NumPy arrays of the right dtypes.
    Generated for the operator's arity so the check is a handful of identity tests (a small call
    must cost about what NumPy's own ufunc call costs). Returns the launcher's code (0 = done),
    or -1 when the arguments need the general path."""
    n = len(np_dtypes)
    args = ", ".join(f"x{j}" for j in range(n))
    checks = " and ".join(f"type(x{j}) is nd and x{j}.dtype is d{j}" for j in range(n))
    view = "".join(f"    x{j} = x{j}.view(u16)\n" for j in range(n) if views[j])
    src = (
        f"def fast(x0, inputs):\n"
        f"    if len(inputs) != {n - 1}:\n        return -1\n"
        f"    {', '.join(f'x{j}' for j in range(1, n))}{',' if n == 2 else ''} = inputs\n"
        f"    if not ({checks} and x0.flags.writeable):\n        return -1\n"
        f"{view}"
        f"    return launcher({args}, e0, e1, e2)\n"
    )
    env = {"nd": np.ndarray, "u16": _U16, "launcher": launcher}
    env.update({f"e{j}": v for j, v in enumerate(extra_args)})
    env.update({f"d{j}": dt for j, dt in enumerate(np_dtypes)})
    exec(src, env)
    return env["fast"]
