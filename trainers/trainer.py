"""``Trainer``: fit a needle model; progress, memory monitoring and checkpoints hang on hooks."""
from __future__ import annotations

import math
import os
import time
from typing import Any, Iterable

import numpy as np

import needle
from needle import autograd

from .earlier_graphs import note_earlier_graphs
from .callbacks.base import HOOKS, Callback
from .callbacks.checkpoint import load_checkpoint, save_checkpoint
from .resume import DeferredInterrupt, EpochPosition, checked_trainer_state, empty_loader_message
from .callbacks.clipping import GradientClipping
from .fit_checks import FitRollback, check_loader, check_logits, check_loss, checked_batch
from .metrics_history import History, MetricsHistory

__all__ = ["History", "MetricsHistory", "NonFiniteLossError", "Trainer"]  # History: the earlier name


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the optimizer step for that batch was not applied."""

    def __init__(self, message: str, epoch: int, step: int, loss: float) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.loss = loss


class Trainer:
    """Train a needle model with an optimizer; ``fit`` runs the loop, callbacks add the rest.

    Args:
        model: a ``needle.nn.Module`` mapping a batch ``X`` to logits.
        optimizer: a ``needle.optim`` optimizer over ``model.parameters()``.
        loss_fn: ``loss_fn(logits, y)`` -> scalar Tensor; None means ``needle.nn.SoftmaxLoss()``.
        device: a needle device (or "cpu"/"cuda") to move batches to; None keeps them where the
            loader put them.
        monitor: True adds a ``trainers.MemoryMonitor()`` callback; a MemoryMonitor is added as
            is; False or None adds none (``history.steps`` still logs live nodes and bytes).
        progress: True draws a ``ProgressBar`` per epoch on stderr; a ProgressBar is used as is.
        callbacks: ``Callback`` objects, called in this order after the progress bar and monitor.
        gradient_clip_val: if set, a ``GradientClipping(gradient_clip_val)`` callback is added
            last: before each optimizer step the gradients' joint 2-norm is clipped to it.
        max_epochs: the total number of epochs ``fit(loader)`` trains to (Lightning's habit);
            without it ``fit`` adds ``epochs`` (default 1). A resumed trainer trains only the rest.
        lr_scheduler: a ``needle.optim.lr_scheduler`` scheduler over ``optimizer``, stepped after
            every epoch (before ``on_train_epoch_end``, so checkpoints hold its new position).
        compile: True wraps the step's forward and backward in ``needle.compile``: captured once
            per batch shape, replayed afterwards (no graph is built, so none can leak). The loss
            check, the hooks and the optimizer step still run every step, as without it.

    Attributes:
        history: a ``MetricsHistory`` of what ``fit`` measured (``history.steps``, ``history.epochs``);
            the monitor's own per-step counters are ``trainer.monitor.history``, a ``StepHistory``.
        epoch: epochs completed; global_step: optimizer steps taken (both survive checkpoints).
        should_stop: set it to True (e.g. from a callback) to end ``fit`` early.
        interrupted: True after a ``fit`` that Ctrl-C (``KeyboardInterrupt``) stopped.

    Example:
        >>> import numpy as np, needle as ndl
        >>> from needle.data import DataLoader, NDArrayDataset
        >>> np.random.seed(0)
        >>> X = np.random.randn(64, 2).astype(np.float32)
        >>> y = (X[:, 0] > 0).astype(np.uint8)
        >>> loader = DataLoader(NDArrayDataset(X, y), batch_size=16, shuffle=True)
        >>> model = ndl.nn.Linear(2, 2)
        >>> trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.5), monitor=False, progress=False)
        >>> history = trainer.fit(loader, epochs=3)
        >>> len(history.steps), trainer.global_step, trainer.evaluate(loader)["accuracy"] > 0.9
        (12, 12, True)
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        loss_fn: Any = None,
        device: Any = None,
        monitor: Any = True,
        progress: Any = True,
        callbacks: Iterable[Callback] = (),
        gradient_clip_val: float | None = None,
        max_epochs: int | None = None,
        lr_scheduler: Any = None,
        compile: bool = False,
    ) -> None:
        if max_epochs is not None and (isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < 0):
            raise ValueError(f"Trainer max_epochs must be a non-negative int or None; got max_epochs={max_epochs!r}")
        if lr_scheduler is not None:
            if not all(callable(getattr(lr_scheduler, name, None)) for name in ("step", "state_dict", "load_state_dict")):
                raise TypeError(
                    f"Trainer lr_scheduler must be a needle.optim.lr_scheduler scheduler (step, state_dict, "
                    f"load_state_dict); got {lr_scheduler!r}"
                )
            if getattr(lr_scheduler, "optimizer", optimizer) is not optimizer:
                raise ValueError("Trainer lr_scheduler schedules another optimizer: build it over the trainer's optimizer")
        if loss_fn is None:
            import needle.nn

            loss_fn = needle.nn.SoftmaxLoss()
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.device = _resolve_device(device)
        self.monitor = _make_monitor(monitor, self.device)
        clipping = [GradientClipping(gradient_clip_val)] if gradient_clip_val is not None else []
        monitors = [self.monitor] if self.monitor is not None else []
        self.callbacks = _progress_callbacks(progress) + monitors + list(callbacks) + clipping
        for callback in self.callbacks:
            if not all(hasattr(callback, hook) for hook in HOOKS):
                raise TypeError(
                    f"callback {callback!r} lacks some trainer hooks; subclass trainers.Callback "
                    f"(its hooks are no-ops) and override the ones you need"
                )
        self.max_epochs = max_epochs
        self.lr_scheduler = lr_scheduler
        self.history = MetricsHistory()
        self.epoch = 0
        self.global_step = 0
        self.should_stop = False
        self.interrupted = False
        self.batches_per_epoch = None
        self._noted_earlier_graphs = False  # graphs alive before the first fit are said once
        self._position = None  # the EpochPosition of an epoch started but not finished
        if compile:
            from needle.compiler.compiled import require_supported_numpy

            require_supported_numpy()  # refused here, before anything trains, not at the first step
        self._forward_backward = needle.compile(self._forward_backward_eager) if compile else self._forward_backward_eager

    # ---- the loop -----------------------------------------------------------------------------
    def fit(
        self, train_loader: Iterable, epochs: int | None = None, val_loader: Iterable | None = None
    ) -> MetricsHistory:
        """Train for ``epochs`` more epochs (continuing the epoch and step counts), or up to the
        trainer's ``max_epochs`` in all.

        Args:
            train_loader: an iterable of ``(X, y)`` batches (e.g. a ``needle.data.DataLoader``),
                iterated once per epoch.
            epochs: how many epochs to add (0 runs only ``on_fit_start``/``on_fit_end``). None
                means up to ``max_epochs`` when the trainer has one, else 1 more.
            val_loader: optional ``(X, y)`` batches evaluated at the end of every epoch.

        Returns:
            ``self.history``.

        An epoch that was interrupted (an exception, or a checkpoint saved mid-epoch and loaded
        with ``load_checkpoint``) is finished first, from the batch after the last one applied
        and, with a ``DataLoader``, in the same sample order: the result equals an uninterrupted
        run. ``should_stop`` set mid-epoch ends that epoch early (it is summarised and counted).

        Ctrl-C (``KeyboardInterrupt``) stops ``fit`` cleanly: a SIGINT that arrives during a
        training step (forward, backward, optimizer update, logging its metrics) takes effect when that
        step is complete, so the parameters, the optimizer state and ``global_step`` agree and
        ``save_checkpoint`` afterwards is consistent. ``on_exception`` then ``on_fit_end`` are
        called, ``interrupted`` is set, and ``fit`` returns the history instead of raising.

        Raises:
            NonFiniteLossError (a FloatingPointError): the loss became NaN or infinite; the
                message names the epoch and global step, and that step was not applied.
            ValueError: ``train_loader`` yields no batches.
            FitContractError (a TypeError): the loader is not iterable or yields something other
                than ``(X, y)`` pairs of Tensors, the model's forward does not return one Tensor,
                or the loss is not a scalar Tensor that depends on the parameters. Raised before
                the fit's first step, it leaves the trainer, model, optimizer, history and numpy's
                random state as they were (see ``trainers.fit_checks``).
        """
        if epochs is None:
            epochs = 1 if self.max_epochs is None else max(0, self.max_epochs - self.epoch)
        elif self.max_epochs is not None:
            raise ValueError(
                f"fit(epochs={epochs!r}) on a Trainer(max_epochs={self.max_epochs}): give one of them. "
                f"Call fit(loader) to train up to max_epochs, or build the Trainer without max_epochs"
            )
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"fit epochs must be a non-negative int; got epochs={epochs!r}")
        check_loader(train_loader)
        if val_loader is not None:
            check_loader(val_loader, "val_loader")
        if epochs and _length(train_loader) == 0:
            raise ValueError(empty_loader_message(train_loader))
        self.should_stop = False
        self.interrupted = False
        self.batches_per_epoch = _length(train_loader)
        if not self._noted_earlier_graphs:
            self._noted_earlier_graphs = True
            note_earlier_graphs(stacklevel=3)
        guard = DeferredInterrupt()
        rollback = FitRollback(self)
        try:
            with guard:
                self.dispatch("on_fit_start")
                for epoch in range(self.epoch + 1, self.epoch + epochs + 1):
                    self.dispatch("on_train_epoch_start", epoch)
                    batches = self._epoch_batches(train_loader, epoch)
                    position = self._position
                    started, first_step = time.perf_counter(), len(self.history.steps) - position.batches_done
                    for batch in batches:
                        X, y = checked_batch(batch, position.batches_done)
                        with guard.critical():
                            self.dispatch("on_train_batch_start", (X, y), position.batches_done)
                            loss, accuracy = self.train_step(X, y)
                            position.batches_done += 1
                            self._log_step(epoch, loss, accuracy, batch_size=y.shape[0])
                        if self.should_stop:
                            break
                    if not position.batches_done:
                        raise ValueError(empty_loader_message(train_loader))
                    with guard.critical():
                        seconds = time.perf_counter() - started
                        self._end_epoch(epoch, self.history.steps[first_step:], seconds, val_loader)
                    if self.should_stop:
                        break
                self.dispatch("on_fit_end")
        except KeyboardInterrupt as interrupt:
            self.interrupted = True
            self.dispatch("on_exception", interrupt)
            self.dispatch("on_fit_end")
        except BaseException as error:
            rollback.undo(error)  # a FitContractError before the first step: the fit changed nothing
            self.dispatch("on_exception", error)
            raise
        return self.history

    def train_step(self, X: needle.Tensor, y: needle.Tensor) -> tuple[float, float]:
        """One optimizer step on a batch; returns ``(loss, accuracy)`` as floats and keeps no graph.

        Calls the ``on_after_backward`` and ``on_before_optimizer_step`` hooks between the
        backward pass and the optimizer step.
        """
        X, y = self._to_device(X), self._to_device(y)
        loss, logits = self._forward_backward(X, y)
        loss_value = float(loss.numpy())
        if not math.isfinite(loss_value):
            raise self._non_finite(loss_value)
        self.dispatch("on_after_backward")
        self.dispatch("on_before_optimizer_step", self.optimizer)
        self.optimizer.step()
        return loss_value, _accuracy(logits, y)

    def _forward_backward_eager(self, X, y):
        self.optimizer.reset_grad()
        logits = self.model(X)
        check_logits(logits)
        loss = self.loss_fn(logits, y)
        check_loss(loss)
        # NOTE: backward before the loss check: a non-finite loss still raises before the update.
        loss.backward(create_graph=False)
        return loss, logits

    def plot(self, path: str | os.PathLike[str] | None = None) -> Any:
        """Loss and accuracy curves (train and validation) beside graph nodes and memory (the
        monitor's panel). Needs matplotlib: ``pip install 'needle-dl[plot]'``.

        Returns the ``matplotlib.figure.Figure``: a notebook cell ending in ``trainer.plot()``
        shows it inline. With ``path`` it is also written there as a PNG.
        """
        from .monitor.plot import plot_training

        step_history = getattr(self.monitor, "history", None)
        # NOTE: only the recent window: its records are consecutive steps, so they line up one to one
        # with the last training steps (the long-run samples before it are every stride-th step).
        return plot_training(self.history, list(step_history.recent) if step_history else [], path)

    def evaluate(self, loader: Iterable) -> dict:
        """Mean loss and accuracy over ``loader``, under ``needle.no_grad()`` and ``model.eval()``.

        The model's previous training mode is restored afterwards, even on error.

        Returns:
            ``{"loss": float, "accuracy": float}``, each weighted by batch size.
        """
        check_loader(loader, "loader")
        was_training = getattr(self.model, "training", True)
        self.model.eval()
        samples = loss_sum = correct_sum = 0.0
        try:
            with needle.no_grad():
                for index, batch in enumerate(loader):
                    X, y = checked_batch(batch, index, "loader")
                    X, y = self._to_device(X), self._to_device(y)
                    logits = self.model(X)
                    check_logits(logits)
                    size = y.shape[0]
                    samples += size
                    loss_sum += float(self.loss_fn(logits, y).numpy()) * size
                    correct_sum += _accuracy(logits, y) * size
        finally:
            if was_training:
                self.model.train()
            else:
                self.model.eval()
        if not samples:
            raise ValueError("evaluate() got a loader that yielded no batches; pass a non-empty loader")
        return {"loss": loss_sum / samples, "accuracy": correct_sum / samples}

    # ---- callbacks ----------------------------------------------------------------------------
    def dispatch(self, hook: str, *args: Any) -> None:
        """Call ``hook`` (e.g. ``"on_fit_start"``) on every callback, in registration order."""
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def add_callback(self, callback: Callback) -> Callback:
        """Register ``callback`` after the existing ones; returns it."""
        self.callbacks.append(callback)
        return callback

    # ---- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: model, optimizer, counters, history, numpy's RNG state,
        and, mid-epoch, the epoch's position (batches applied, the loader's sample order)."""
        position = self._position
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "history": self.history.state_dict(),
            "numpy_random_state": np.random.get_state(),
            "epoch_in_progress": None if position is None else position.state_dict(),
            "lr_scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (the model and optimizer must match the saved ones).

        All or nothing: everything is checked before anything changes, and if the model or the
        optimizer refuses its part, the trainer, model and optimizer are left as they were.

        Raises:
            TypeError, ValueError (a StateDictError for the model): naming what does not fit.
        """
        epoch, global_step, (steps, epochs), random_state, position = checked_trainer_state(state, self.optimizer)
        model_before = self.model.state_dict()
        self.model.load_state_dict(state["model"])
        optimizer_before = self.optimizer.state_dict()
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            schedule = state.get("lr_scheduler")
            if self.lr_scheduler is not None and schedule is not None:
                self.lr_scheduler.load_state_dict(schedule)
        except BaseException:
            self.model.load_state_dict(model_before)  # the model is all-or-nothing too
            self.optimizer.load_state_dict(optimizer_before)
            raise
        self.epoch, self.global_step, self.history = epoch, global_step, MetricsHistory(steps, epochs)
        self._position = position
        np.random.set_state(random_state)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` atomically (see ``trainers.callbacks.checkpoint``)."""
        save_checkpoint(path, self.state_dict())

    def load_checkpoint(self, path: str | os.PathLike[str]) -> Trainer:
        """Resume from a checkpoint written by ``save_checkpoint``: the next ``fit`` continues
        exactly where the saved run stopped (same shuffles, same optimizer state)."""
        self.load_state_dict(load_checkpoint(path))
        return self

    # ---- internals ----------------------------------------------------------------------------
    def _log_step(self, epoch, loss, accuracy, batch_size):
        """Count the step, read the graph counters, log the step's metrics and announce them."""
        self.global_step += 1
        stats = autograd.snapshot()
        metrics = {
            "step": self.global_step,
            "epoch": epoch,
            "loss": loss,
            "accuracy": accuracy,
            "batch_size": int(batch_size),
            "live_nodes": stats.live_nodes,
            "memory_bytes": sum(stats.bytes_by_device.values()),
        }
        self.history.steps.append(metrics)
        self.dispatch("on_train_batch_end", metrics)

    def _end_epoch(self, epoch, steps, seconds, val_loader):
        """Summarise the epoch, validate, then announce it."""
        samples = sum(step["batch_size"] for step in steps) or 1
        metrics = {
            "epoch": epoch,
            "train_loss": sum(step["loss"] * step["batch_size"] for step in steps) / samples,
            "train_accuracy": sum(step["accuracy"] * step["batch_size"] for step in steps) / samples,
            "val_loss": None,
            "val_accuracy": None,
            "seconds": seconds,
            "steps": len(steps),
        }
        if val_loader is not None:
            validation = self.evaluate(val_loader)
            metrics["val_loss"], metrics["val_accuracy"] = validation["loss"], validation["accuracy"]
            self.dispatch("on_validation_end", epoch, validation)
        self.epoch = epoch
        self._position = None  # the epoch is over (a failed validation above leaves it to finish)
        self.history.epochs.append(metrics)
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.dispatch("on_train_epoch_end", epoch, metrics)

    def _non_finite(self, loss_value):
        step, epoch = self.global_step + 1, self.epoch + 1
        lr = getattr(self.optimizer, "lr", None)
        hint = f"lower the learning rate (now lr={lr})" if lr is not None else "lower the learning rate"
        return NonFiniteLossError(
            f"the loss is {loss_value} at epoch {epoch}, step {step} (global); the optimizer step was "
            f"not applied. Fix: {hint}, or check the batch for NaN/inf inputs and labels out of range.",
            epoch=epoch,
            step=step,
            loss=loss_value,
        )

    def _epoch_batches(self, loader, epoch):
        """An iterator over the batches of ``epoch`` still to train; ``self._position`` counts them."""
        if self._position is None or self._position.epoch != epoch:
            self._position, batches = EpochPosition.start(loader, epoch)
            return batches
        return self._position.remaining_batches(loader)

    def _to_device(self, tensor):
        return tensor if self.device is None else tensor.to(self.device)


def _accuracy(logits, y):
    """Fraction of rows whose largest logit is at the label, as a float."""
    return float((logits.numpy().argmax(axis=1) == y.numpy()).mean())


def _length(loader):
    try:
        return len(loader)
    except TypeError:
        return None


def _resolve_device(device):
    return None if device is None else needle.backend_ndarray.as_device(device)


def _make_monitor(monitor, device):
    from .monitor.monitor import MemoryMonitor

    if monitor is True:
        return MemoryMonitor() if device is None else MemoryMonitor(device=device)
    if monitor is False or monitor is None:
        return None
    if not isinstance(monitor, MemoryMonitor):
        raise TypeError(f"Trainer monitor must be True, False or a MemoryMonitor; got {monitor!r}")
    return monitor


def _progress_callbacks(progress):
    if progress is True:
        from .callbacks.progress import ProgressBar

        return [ProgressBar()]
    if progress is False or progress is None:
        return []
    if not isinstance(progress, Callback):
        raise TypeError(f"Trainer progress must be True, False or a ProgressBar; got {progress!r}")
    return [progress]
