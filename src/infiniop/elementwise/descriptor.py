"""ElementwiseDescriptor: the descriptor contract for every elementwise operator."""

from __future__ import annotations

import numpy as np

from ..descriptor import MISSING, OperandsDescriptor, check_descriptor, check_handle
from ..status import InfiniError, Status
from .plan import plan


class ElementwiseDescriptor(OperandsDescriptor):
    """A planned elementwise call: ``calculate(workspace, *buffers, stream=None)``, the buffers
    in the order of the tensors given to create (the C API's order: outputs first for most
    operators; BLAS-style operators update some of theirs in place).

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

    def __init__(self, handle, spec, descs: tuple, params: dict):
        super().__init__(check_handle(handle))
        self.spec = spec
        self.name = spec.name
        ops = spec.operands
        self._names = tuple(o.name for o in ops)
        if len(descs) != len(ops):
            raise InfiniError(Status.BAD_PARAM, f"{spec.name} takes {len(ops)} tensor "
                              f"descriptors ({', '.join(self._names)}), got {len(descs)}")
        checked = tuple(None if d is None and o.optional else check_descriptor(d, o.name)
                        for o, d in zip(ops, descs))
        self.info = info = plan(spec, checked, params)
        self.workspace_size = 0
        self._empty = info.numel == 0
        self._kernel = handle.backend.elementwise_kernel(info, handle=handle)
        launcher = getattr(self._kernel, "array_launcher", None)
        self._fast = None if launcher is None or self._empty else _fast_path(
            self._kernel, info, ops)
        self._fast_device = None if self._empty else device_fast_path(handle, self._kernel,
                                                                      info, ops)

    @property
    def params(self) -> dict:
        """The scalar parameters fixed at create, by name (as the kernel receives them)."""
        return {p.name: v for p, v in zip(self.spec.params, self.info.params)}

    def calculate(self, workspace=MISSING, *buffers, stream=None) -> None:
        """Run the operator; buffers are arrays, tensors or raw addresses (None for an absent
        optional operand)."""
        fast = self._fast
        if fast is not None and fast(buffers) == 0:
            return
        fast = self._fast_device
        if fast is not None and workspace is None and fast(buffers, stream):
            return
        if not self._alive:
            self._check_alive()
        self._check_arguments(workspace, buffers)
        infos = self._check_buffers(workspace, buffers, overlaps=not self._empty)
        if not self._empty:
            self._kernel.launch_pointers([None if i is None else i.address for i in infos],
                                         stream=stream)

    def destroy(self) -> None:
        self._fast = self._fast_device = None
        super().destroy()


def _fast_path(kernel, info, ops):
    """A per-descriptor closure for the common call: all NumPy arrays of the right dtypes.
    Generated for the operator's operands so that what Python checks is a handful of identity
    tests (a small call must cost about what NumPy's own ufunc call costs): the kernel's
    ``array_launcher`` checks the rest in compiled code (rank and writability on entry, see
    ``checked_arrays``; dtype, shape, strides and overlaps in the launcher), or, where it cannot
    (``array_launcher_checked`` false), Python checks the dtype, rank and writability first.
    fp16/bf16 arrays go in as they are (the launcher types them as their uint16 storage).
    Returns the launcher's code (0 = done), or -1 when the arguments need the general path."""
    n = len(ops)
    checked = getattr(kernel, "array_launcher_checked", False)
    present = [d is not None for d in info.descs]
    checks = []
    for j, o in enumerate(ops):
        if not present[j]:
            checks.append(f"x{j} is None")
            continue
        checks.append(f"type(x{j}) is nd")
        if not checked:  # the launcher is compiled for this dtype and ndim: types not checked
            checks.append(f"x{j}.dtype is d{j} and x{j}.ndim == {info.descs[j].ndim}")
            if o.writes:
                checks.append(f"x{j}.flags.writeable")
    extra = kernel.array_launcher_args
    params = getattr(kernel, "params", info.params)  # what the kernel takes (a table's address)
    args = [f"x{j}" for j in range(n) if present[j]] + [f"p{k}" for k in range(len(params))]
    args += [f"e{k}" for k in range(len(extra))]
    src = (
        f"def fast(bufs):\n"
        f"    if len(bufs) != {n}:\n        return -1\n"
        f"    {', '.join(f'x{j}' for j in range(n))}{',' if n == 1 else ''} = bufs\n"
        f"    if not ({' and '.join(checks)}):\n        return -1\n"
        f"    try:\n"
        f"        return launcher({', '.join(args)})\n"
        f"    except TypeError:  # refused on entry (rank, read-only): the general path says why\n"
        f"        return -1\n"
    )
    env = {"nd": np.ndarray, "launcher": kernel.array_launcher}
    env.update({f"e{k}": v for k, v in enumerate(extra)})
    env.update({f"p{k}": v for k, v in enumerate(params)})
    env.update({f"d{j}": d.dtype.numpy for j, d in enumerate(info.descs) if d is not None})
    exec(src, env)
    return env["fast"]


def device_fast_path(handle, kernel, info, ops):
    """A descriptor's ``_device_fast_path`` where its backend's buffers are device memory (the
    Triton backend on a GPU; None elsewhere). Elementwise, row and rope descriptors share it."""
    if handle.backend.MEMORY_KIND != "cuda" or kernel is None:
        return None
    return _device_fast_path(kernel.launch_pointers, info, ops, handle.device_id,
                             getattr(kernel, "fast_launcher", None))


def _device_fast_path(launch, info, ops, device_id: int, fast_launcher=None):
    """The per-descriptor check for the common GPU call: torch CUDA tensors with exactly the
    descriptors' dtypes, shapes and strides on the handle's device, written operands' byte
    ranges disjoint from the operands they are checked against. Then the addresses go straight
    to the launch; anything else (in-place, raw addresses, other objects) returns False and
    takes the general path. Reading a tensor through ``inspect_buffer`` costs ~10 us; this
    ~1 us per operand. ``fast.fresh`` is the same for an operand 0 its caller allocated."""
    import torch

    from ..dtype import to_torch

    n = len(ops)
    go = fast_launcher() if fast_launcher is not None else None
    checks, env = [], {"T": torch.Tensor, "launch": launch, "go": go}
    for j, d in enumerate(info.descs):
        if d is None:
            checks.append(f"x{j} is None")
            continue
        env[f"d{j}"], env[f"s{j}"], env[f"t{j}"] = to_torch(d.dtype), d.shape, d.strides
        checks.append(f"type(x{j}) is T and x{j}.dtype is d{j} and x{j}.shape == s{j} and "
                      f"x{j}.stride() == t{j} and x{j}.get_device() == {device_id} and "
                      f"not x{j}.is_neg()")
    disjoint = []
    for c in info.checks:
        (wl, wh), (kl, kh) = c.descs[0].reach, c.descs[1].reach
        wi, ki = c.descs[0].dtype.itemsize, c.descs[1].dtype.itemsize
        disjoint.append(f"(a{c.w} + {(wh + 1) * wi} <= a{c.k} + {kl * ki} or "
                        f"a{c.k} + {(kh + 1) * ki} <= a{c.w} + {wl * wi})")
    present = [j for j, d in enumerate(info.descs) if d is not None]
    addrs = "".join(f"    a{j} = x{j}.data_ptr()\n" for j in present)

    def source(name: str, fresh: bool) -> str:
        """``fresh``: operand 0 is an output the caller just allocated like the descriptor's
        (the functional front end's): its checks and its overlap checks are left out."""
        want = [c for j, c in enumerate(checks) if not (fresh and j == 0)]
        apart = [c for c, chk in zip(disjoint, info.checks) if not (fresh and 0 in (chk.w, chk.k))]
        return (
            f"def {name}(bufs, stream):\n"
            f"    if len(bufs) != {n}:\n        return False\n"
            f"    {', '.join(f'x{j}' for j in range(n))}{',' if n == 1 else ''} = bufs\n"
            + (f"    if not ({' and '.join(want)}):\n        return False\n" if want else "")
            + addrs
            + (f"    if not ({' and '.join(apart)}):\n        return False\n" if apart else "")
            + f"    addrs = ({', '.join(f'a{j}' if j in present else 'None' for j in range(n))},)\n"
            + ("    if go(addrs, stream):\n        return True\n" if go is not None else "")
            + "    launch(addrs, stream=stream)\n    return True\n")

    exec(source("fast", False) + source("fresh", True), env)
    env["fast"].fresh = env["fresh"]
    return env["fast"]
