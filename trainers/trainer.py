"""``Trainer``: fit a needle model; progress, memory monitoring and checkpoints hang on hooks."""
import math
import time

import numpy as np

import needle
from needle import autograd

from .callbacks import HOOKS, Callback
from .checkpoint import load_checkpoint, save_checkpoint
from .clipping import GradientClipping


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the optimizer step for that batch was not applied."""

    def __init__(self, message, epoch, step, loss):
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.loss = loss


class History:
    """What ``fit`` recorded, as lists of dicts of plain Python values.

    ``steps``: one entry per training batch (``step``, ``epoch``, ``loss``, ``accuracy``,
    ``batch_size``, ``live_nodes``, ``memory_bytes``). ``epochs``: one entry per epoch
    (``epoch``, ``train_loss``, ``train_accuracy``, ``val_loss``, ``val_accuracy``, ``seconds``,
    ``steps``); ``val_*`` are None without a validation loader.
    """

    def __init__(self, steps=None, epochs=None):
        self.steps = list(steps or [])
        self.epochs = list(epochs or [])

    def column(self, key, per="steps"):
        """One key of every entry, e.g. ``history.column("loss")`` or ``column("val_accuracy", per="epochs")``."""
        return [entry.get(key) for entry in getattr(self, per)]

    def state_dict(self):
        return {"steps": [dict(entry) for entry in self.steps], "epochs": [dict(entry) for entry in self.epochs]}

    def __repr__(self):
        return f"History({len(self.epochs)} epochs, {len(self.steps)} steps)"


class Trainer:
    """Train a needle model with an optimizer; ``fit`` runs the loop, callbacks add the rest.

    Args:
        model: a ``needle.nn.Module`` mapping a batch ``X`` to logits.
        optimizer: a ``needle.optim`` optimizer over ``model.parameters()``.
        loss_fn: ``loss_fn(logits, y)`` -> scalar Tensor; None means ``needle.nn.SoftmaxLoss()``.
        device: a needle device (or "cpu"/"cuda") to move batches to; None keeps them where the
            loader put them.
        monitor: True adds a ``trainers.MemoryMonitor()`` callback; a MemoryMonitor is added as
            is; False or None adds none (live nodes and bytes are still recorded).
        progress: True draws a ``ProgressBar`` per epoch on stderr; a ProgressBar is used as is.
        callbacks: ``Callback`` objects, called in this order after the progress bar and monitor.
        gradient_clip_val: if set, a ``GradientClipping(gradient_clip_val)`` callback is added
            last: before each optimizer step the gradients' joint 2-norm is clipped to it.

    Attributes:
        history: a ``History`` (``history.steps``, ``history.epochs``).
        epoch: epochs completed; global_step: optimizer steps taken (both survive checkpoints).
        should_stop: set it to True (e.g. from a callback) to end ``fit`` early.

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
        model,
        optimizer,
        loss_fn=None,
        device=None,
        monitor=True,
        progress=True,
        callbacks=(),
        gradient_clip_val=None,
    ):
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
        self.history = History()
        self.epoch = 0
        self.global_step = 0
        self.should_stop = False
        self.batches_per_epoch = None

    # ---- the loop -----------------------------------------------------------------------------
    def fit(self, train_loader, epochs=1, val_loader=None):
        """Train for ``epochs`` more epochs (continuing the epoch and step counts).

        Args:
            train_loader: an iterable of ``(X, y)`` batches (e.g. a ``needle.data.DataLoader``),
                iterated once per epoch.
            epochs: how many epochs to add (0 runs only ``on_fit_start``/``on_fit_end``).
            val_loader: optional ``(X, y)`` batches evaluated at the end of every epoch.

        Returns:
            ``self.history``.

        Raises:
            NonFiniteLossError (a FloatingPointError): the loss became NaN or infinite; the
                message names the epoch and global step, and that step was not applied.
        """
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"fit epochs must be a non-negative int; got epochs={epochs!r}")
        self.should_stop = False
        self.batches_per_epoch = _length(train_loader)
        try:
            self.dispatch("on_fit_start")
            for epoch in range(self.epoch + 1, self.epoch + epochs + 1):
                self.dispatch("on_train_epoch_start", epoch)
                started, first_step = time.perf_counter(), len(self.history.steps)
                for batch_index, (X, y) in enumerate(train_loader):
                    self.dispatch("on_train_batch_start", (X, y), batch_index)
                    self._record_step(epoch, *self.train_step(X, y), batch_size=y.shape[0])
                    if self.should_stop:
                        break
                self._end_epoch(epoch, self.history.steps[first_step:], time.perf_counter() - started, val_loader)
                if self.should_stop:
                    break
            self.dispatch("on_fit_end")
        except BaseException as error:
            self.dispatch("on_exception", error)
            raise
        return self.history

    def train_step(self, X, y):
        """One optimizer step on a batch; returns ``(loss, accuracy)`` as floats and keeps no graph.

        Calls the ``on_after_backward`` and ``on_before_optimizer_step`` hooks between the
        backward pass and the optimizer step.
        """
        X, y = self._to_device(X), self._to_device(y)
        self.optimizer.reset_grad()
        logits = self.model(X)
        loss = self.loss_fn(logits, y)
        loss_value = float(loss.numpy())
        if not math.isfinite(loss_value):
            raise self._non_finite(loss_value)
        loss.backward(create_graph=False)
        self.dispatch("on_after_backward")
        self.dispatch("on_before_optimizer_step", self.optimizer)
        self.optimizer.step()
        return loss_value, _accuracy(logits, y)

    def evaluate(self, loader):
        """Mean loss and accuracy over ``loader``, under ``needle.no_grad()`` and ``model.eval()``.

        The model's previous training mode is restored afterwards, even on error.

        Returns:
            ``{"loss": float, "accuracy": float}``, each weighted by batch size.
        """
        was_training = getattr(self.model, "training", True)
        self.model.eval()
        samples = loss_sum = correct_sum = 0.0
        try:
            with needle.no_grad():
                for X, y in loader:
                    X, y = self._to_device(X), self._to_device(y)
                    logits = self.model(X)
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
    def dispatch(self, hook, *args):
        """Call ``hook`` (e.g. ``"on_fit_start"``) on every callback, in registration order."""
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def add_callback(self, callback):
        """Register ``callback`` after the existing ones; returns it."""
        self.callbacks.append(callback)
        return callback

    # ---- checkpoints --------------------------------------------------------------------------
    def state_dict(self):
        """Everything needed to resume: model, optimizer, counters, history, numpy's RNG state."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "history": self.history.state_dict(),
            "numpy_random_state": np.random.get_state(),
        }

    def load_state_dict(self, state):
        """Restore what ``state_dict`` returned (the model and optimizer must match the saved ones)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.history = History(state["history"]["steps"], state["history"]["epochs"])
        np.random.set_state(state["numpy_random_state"])

    def save_checkpoint(self, path):
        """Write ``state_dict()`` to ``path`` atomically (see ``trainers.checkpoint``)."""
        save_checkpoint(path, self.state_dict())

    def load_checkpoint(self, path):
        """Resume from a checkpoint written by ``save_checkpoint``: the next ``fit`` continues
        exactly where the saved run stopped (same shuffles, same optimizer state)."""
        self.load_state_dict(load_checkpoint(path))
        return self

    # ---- internals ----------------------------------------------------------------------------
    def _record_step(self, epoch, loss, accuracy, batch_size):
        """Count the step, read the graph counters, store and announce the record."""
        self.global_step += 1
        stats = autograd.snapshot()
        record = {
            "step": self.global_step,
            "epoch": epoch,
            "loss": loss,
            "accuracy": accuracy,
            "batch_size": int(batch_size),
            "live_nodes": stats.live_nodes,
            "memory_bytes": sum(stats.bytes_by_device.values()),
        }
        self.history.steps.append(record)
        self.dispatch("on_train_batch_end", record)

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
        self.history.epochs.append(metrics)
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
    if isinstance(device, str):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"Trainer device must be 'cpu', 'cuda' or a needle device; got device={device!r}")
        return needle.cpu() if device == "cpu" else needle.cuda()
    return device


def _make_monitor(monitor, device):
    from .monitor import MemoryMonitor

    if monitor is True:
        return MemoryMonitor() if device is None else MemoryMonitor(device=device)
    if monitor is False or monitor is None:
        return None
    if not isinstance(monitor, MemoryMonitor):
        raise TypeError(f"Trainer monitor must be True, False or a MemoryMonitor; got {monitor!r}")
    return monitor


def _progress_callbacks(progress):
    if progress is True:
        from .progress import ProgressBar

        return [ProgressBar()]
    if progress is False or progress is None:
        return []
    if not isinstance(progress, Callback):
        raise TypeError(f"Trainer progress must be True, False or a ProgressBar; got {progress!r}")
    return [progress]
