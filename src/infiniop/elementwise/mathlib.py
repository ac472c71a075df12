"""Math functions written in the primitives of expr.py (placeholder until the library lands).

``FUNCTIONS`` maps a name (``exp``, ``tanh``...) to ``fn(m, *values)``; ``m.<name>`` looks here
first, then falls back to the backend's libm (expr.LIBM).
"""

from __future__ import annotations


def sigmoid(m, x):
    return 1.0 / (1.0 + m.exp(-x))


def erfinv(m, y):
    """Giles' single-precision approximation refined by two Newton steps on erf."""
    w = -m.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p = p * ws + c
    wl = m.sqrt(m.maximum(w, 5.0)) - 3.0
    q = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        q = q * wl + c
    x = m.where(small, p, q) * y
    for _ in range(2):
        x = x - (m.erf(x) - y) / (1.1283791670955126 * m.exp(-x * x))
    return m.where(m.abs(y) == 1.0, y * m.const(float("inf"), y.dtype), x)


FUNCTIONS: dict = {"sigmoid": sigmoid, "erfinv": erfinv}
