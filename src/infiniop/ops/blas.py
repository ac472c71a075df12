"""BLAS level-1 operators, in BLAS order: they update their vectors in place. Scalars that are
tensors in the C API (alpha, c, s, param) stay tensors (0-d or shape-(1,) ones broadcast)."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import FLOATS, NUMERIC, Operand, entries

AXPY = elementwise("axpy", dtypes=FLOATS, operands="alpha, x, y:inout",
                   expr=lambda m, alpha, x, y: alpha * x + y, doc="y = alpha * x + y")
SCAL = elementwise("scal", dtypes=FLOATS, operands="alpha, x:inout",
                   expr=lambda m, alpha, x: alpha * x, doc="x = alpha * x")
ROT = elementwise("rot", dtypes=FLOATS, operands="x:inout, y:inout, c, s",
                  expr=lambda m, x, y, c, s: (c * x + s * y, c * y - s * x),
                  doc="(x, y) = (c x + s y, c y - s x)")
SWAP = elementwise("swap", dtypes=NUMERIC, operands="x:inout, y:inout",
                   expr=lambda m, x, y: (y, x), doc="x, y = y, x")
BLAS_COPY = elementwise("blas_copy", dtypes=NUMERIC, operands="x, y:out",
                        expr=lambda m, x: x, doc="y = x")


def _rotm(m, x, y, flag, h11, h21, h12, h22):
    """BLAS rotm: flag -2 identity; -1 full H; 0 unit diagonal; 1 h12 = 1, h21 = -1."""
    full = (h11 * x + h12 * y, h21 * x + h22 * y)
    unit_diag = (x + h12 * y, h21 * x + y)
    off_unit = (h11 * x + y, -x + h22 * y)
    out = []
    for k in range(2):
        v = m.where(flag < 0.0, full[k], m.where(m.eq(flag, 0.0), unit_diag[k], off_unit[k]))
        out.append(m.where(m.eq(flag, -2.0), (x, y)[k], v))
    return tuple(out)


ROTM = elementwise("rotm", dtypes=FLOATS, expr=_rotm,
                   operands=(Operand("x", "inout"), Operand("y", "inout"),
                             Operand("param", views=(entries, 5))),
                   doc="modified Givens rotation with param = (flag, h11, h21, h12, h22)")
