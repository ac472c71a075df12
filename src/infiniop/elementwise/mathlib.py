"""Math functions written in the primitives of expr.py (placeholder until the library lands).

``FUNCTIONS`` maps a name (``exp``, ``tanh``...) to ``fn(m, *values)``; ``m.<name>`` looks here
first, then falls back to the backend's libm (expr.LIBM).
"""

from __future__ import annotations

FUNCTIONS: dict = {}
