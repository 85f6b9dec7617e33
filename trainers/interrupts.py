"""``DeferredInterrupt``: Ctrl-C waits for the current training step to finish.

A ``KeyboardInterrupt`` raised in the middle of the optimizer's update would leave some
parameters (or Adam's moments) updated and others not, and the step counter behind the
parameters: a checkpoint saved then could not be resumed faithfully. While a
``DeferredInterrupt`` is installed, a SIGINT that arrives inside a ``critical()`` block is held
and raised as ``KeyboardInterrupt`` when the block ends; outside such blocks (loading the next
batch, say) it is raised at once, as usual, because nothing is half done there.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


class DeferredInterrupt:
    """Hold SIGINT during ``critical()`` blocks; a context manager that installs the handler.

    The handler is installed only in the main thread and only over Python's default SIGINT
    handler; a program that installed its own handler keeps it (and ``critical()`` then defers
    nothing).

    Example:
        >>> guard = DeferredInterrupt()
        >>> with guard:
        ...     with guard.critical():
        ...         done = "the whole step"
        >>> done
        'the whole step'
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exception: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        self._pending = False

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A block that a Ctrl-C does not cut short: the interrupt is raised when it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def _handle(self, signum: int, frame: Any) -> None:
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt
