"""Resuming a run.

What a Trainer checkpoint restores beyond the model and optimizer: the position of an epoch in
progress, and the check of a saved trainer state that runs before anything is loaded.

``DeferredInterrupt``: Ctrl-C waits for the current training step to finish.

A ``KeyboardInterrupt`` raised in the middle of the optimizer's update would leave some
parameters (or Adam's moments) updated and others not, and the step counter behind the
parameters: a checkpoint saved then could not be resumed faithfully. While a
``DeferredInterrupt`` is installed, a SIGINT that arrives inside a ``critical()`` block is held
and raised as ``KeyboardInterrupt`` when the block ends; outside such blocks (loading the next
batch, say) it is raised at once, as usual, because nothing is half done there.
"""
from __future__ import annotations

import contextlib
import itertools
import signal
import threading
from typing import Any, Iterator

import numpy as np

TRAINER_KEYS = ("model", "optimizer", "epoch", "global_step", "history", "numpy_random_state")


class EpochPosition:
    """How far an epoch got: ``batches_done`` batches applied, in the order ``loader_state``
    (a DataLoader's ``state_dict()`` taken when the epoch started; None for other loaders)."""

    __slots__ = ("epoch", "batches_done", "loader_state")

    def __init__(self, epoch, batches_done, loader_state):
        self.epoch = epoch
        self.batches_done = batches_done
        self.loader_state = loader_state

    @classmethod
    def start(cls, loader, epoch):
        """``(position, batches)`` for a fresh epoch: ``iter(loader)`` and the order it drew."""
        batches = iter(loader)
        state_dict = getattr(loader, "state_dict", None)
        return cls(epoch, 0, state_dict() if callable(state_dict) else None), batches

    def remaining_batches(self, loader):
        """The batches of this epoch after the ``batches_done`` already applied."""
        if self.loader_state is not None and callable(getattr(loader, "load_state_dict", None)):
            loader.load_state_dict({**self.loader_state, "next_batch": self.batches_done})
            return iter(loader)
        # NOTE: a loader without state (a list of batches, a custom iterable) resumes by skipping
        # the batches already applied: exact when it yields the same batches each epoch.
        return itertools.islice(iter(loader), self.batches_done, None)

    def state_dict(self):
        loader_state = None
        if self.loader_state is not None:
            loader_state = {**self.loader_state, "next_batch": self.batches_done}
        return {"epoch": self.epoch, "batches_done": self.batches_done, "loader": loader_state}


def checked_trainer_state(state, optimizer):
    """``(epoch, global_step, (history steps, history epochs), numpy random state, EpochPosition
    or None)`` from a saved trainer ``state``, or a TypeError/ValueError naming every malformed
    part. The model and optimizer entries are checked by their own ``load_state_dict``, except
    that the optimizer's type must be ``optimizer``'s."""
    if not isinstance(state, dict):
        raise TypeError(f"Trainer.load_state_dict needs the dict that trainer.state_dict() returned; got {type(state).__name__}")
    problems = []
    missing = [key for key in TRAINER_KEYS if key not in state]
    if missing:
        problems.append(f"missing entries {missing}")
    saved_optimizer = state.get("optimizer")
    saved_type = saved_optimizer.get("optimizer") if isinstance(saved_optimizer, dict) else None
    if saved_type is not None and saved_type != type(optimizer).__name__:
        problems.append(
            f"the checkpoint's optimizer is {saved_type}, this trainer's is {type(optimizer).__name__}: "
            f"build the trainer with the optimizer the checkpoint was saved from"
        )
    counters = {}
    for key in ("epoch", "global_step"):
        value = state.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            problems.append(f"{key} must be an int >= 0, got {value!r}")
            value = 0
        counters[key] = int(value)
    history = state.get("history", {})
    lists = []
    for key in ("steps", "epochs"):
        entries = history.get(key) if isinstance(history, dict) else None
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            problems.append(f"history[{key!r}] must be a list of dicts")
        lists.append(entries)
    random_state = state.get("numpy_random_state")
    try:
        np.random.RandomState().set_state(random_state)  # a throwaway generator checks it
    except Exception as error:  # numpy raises TypeError, ValueError or IndexError, by what is wrong
        problems.append(f"numpy_random_state is not a numpy.random.get_state() tuple ({type(error).__name__}: {error})")
    position = None
    try:
        position = _checked_position(state.get("epoch_in_progress"), counters["epoch"])
    except (TypeError, ValueError, KeyError) as error:
        problems.append(f"epoch_in_progress is malformed ({type(error).__name__}: {error})")
    if problems:
        raise ValueError("Trainer.load_state_dict: the state does not fit, nothing was loaded:\n  " + "\n  ".join(problems))
    return counters["epoch"], counters["global_step"], tuple(lists), random_state, position


def _checked_position(saved, completed_epochs):
    """The EpochPosition in a saved ``epoch_in_progress`` (None stays None)."""
    if saved is None:
        return None
    epoch, batches_done, loader_state = saved["epoch"], saved["batches_done"], saved["loader"]
    for name, value in (("epoch", epoch), ("batches_done", batches_done)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if epoch != completed_epochs + 1 or batches_done < 0:
        raise ValueError(f"epoch {epoch} after {completed_epochs} completed epochs, batches_done={batches_done}")
    if loader_state is not None and not isinstance(loader_state, dict):
        raise TypeError(f"loader must be a DataLoader state dict or None, got {type(loader_state).__name__}")
    return EpochPosition(int(epoch), int(batches_done), loader_state)


def empty_loader_message(loader):
    return (
        f"fit got a train_loader that yields no batches ({loader!r}); nothing was trained. Check that "
        f"its dataset is not empty (and, with drop_last=True, holds at least batch_size samples), and "
        f"pass a loader that can be iterated once per epoch (a generator is used up after one)"
    )


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
        """A block that a Ctrl-C does not cut short: the interrupt is raised when it ends.

        An interrupt raised outside these blocks that has not stopped the loop by the time the
        next one starts was lost: the signal landed inside a finalizer (a ``__del__``, such as a
        Value's freeing the last batch), where Python prints an exception and drops it. It is
        raised again here, so it stops the loop at the next step. (One that lands in a finalizer
        after the last step's block is still lost: that ``fit`` returns as if uninterrupted.)
        """
        if self._depth == 0 and self._pending:
            self._pending = False
            raise KeyboardInterrupt
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def _handle(self, signum: int, frame: Any) -> None:
        self._pending = True  # NOTE: until the loop has stopped, see critical()
        if self._depth:
            return
        raise KeyboardInterrupt
