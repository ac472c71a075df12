"""Settings read from the environment: a malformed value names its variable (a bare
``int('abc')`` at import said only "invalid literal for int()")."""

from __future__ import annotations

import os


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """``$name`` as a whole number of at least ``minimum`` (``1e6``, ``1_000`` and ``0x10``
    accepted as Python reads them), or ``default`` where it is unset or empty.

    >>> env_int("INFINIOP_NOT_SET_ANYWHERE", 7)
    7
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 0)
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            value = None
        if value is not None and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise ValueError(f"{name}={raw!r} is below {minimum}")
    return value
