"""rearrange: strided copies between any two layouts, and an einops-style front end.

- ``create_rearrange_descriptor(handle, dst_desc, src_desc)``: the descriptor API.
- ``rearrange(x, pattern, **axis_sizes)``: einops semantics, returns a new array.
- ``copy_(dst, src)``: ``dst[...] = src`` for arrays/tensors (``src`` broadcasts to ``dst``).

Every name loads its module on first use (PEP 562): a process that never rearranges does not
pay for the pattern parser and the planner (~4 ms of a first call's budget).
"""

from __future__ import annotations

_LAZY = {
    "RearrangeDescriptor": "descriptor", "create_rearrange_descriptor": "descriptor",
    "RearrangeMeta": "meta", "plan": "meta", "parse": "pattern",
    "copy_": "functional", "rearrange": "functional",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
