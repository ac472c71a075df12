"""Locks that a forked child gets back unlocked.

A thread of the parent that holds one of the library's locks at ``fork()`` (a compilation holds
``native._lock`` for seconds; a large output holds ``memory._pool_lock``) does not exist in the
child, which inherited the lock locked: its first call that needs the lock hung for ever
(multiprocessing's default start method on Linux is ``fork``). Each child starts with fresh
locks instead; what they guarded is left as the forking moment saw it.
"""

from __future__ import annotations

import os
import threading
import weakref


class _ForkSafe:
    __slots__ = ("_factory", "_lock", "__weakref__")

    def __init__(self, factory):
        self._factory = factory
        self._lock = factory()
        _all.add(self)

    def acquire(self, *args, **kwargs):
        return self._lock.acquire(*args, **kwargs)

    def release(self):
        self._lock.release()

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)

    def _reset(self):
        self._lock = self._factory()


_all: weakref.WeakSet = weakref.WeakSet()


def Lock() -> _ForkSafe:  # noqa: N802 (threading's name)
    return _ForkSafe(threading.Lock)


def RLock() -> _ForkSafe:  # noqa: N802
    return _ForkSafe(threading.RLock)


def _after_fork_in_child() -> None:
    for lock in list(_all):
        lock._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
