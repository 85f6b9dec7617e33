"""``Callback``: the hooks a ``Trainer`` calls, each a documented no-op to override.

During ``Trainer.fit`` the hooks fire in this order::

    on_fit_start
      on_train_epoch_start            (once per epoch)
        on_train_batch_start          (once per training batch, before its forward)
          on_after_backward           (the gradients are in .grad)
          on_before_optimizer_step    (last chance to read or change them: clipping goes here)
        on_train_batch_end            (once per training batch, after the optimizer step)
      on_validation_end               (only with a val_loader)
      on_train_epoch_end
    on_fit_end                        (when fit returns normally)
    on_exception                      (instead of on_fit_end, when fit raises)

A callback extends the trainer without subclassing it; ``trainer.should_stop = True`` from any
hook ends ``fit`` after the current batch (from ``on_train_batch_end``) or epoch.
"""


class Callback:
    """Base class of trainer callbacks: override only the hooks you need.

    Every hook receives the trainer first, so a callback can read ``trainer.model``,
    ``trainer.optimizer``, ``trainer.history`` (a ``MetricsHistory``), ``trainer.epoch`` and
    ``trainer.global_step``.

    Example:
        >>> class StopAfter(Callback):
        ...     def __init__(self, steps):
        ...         self.steps = steps
        ...     def on_train_batch_end(self, trainer, metrics):
        ...         if metrics["step"] >= self.steps:
        ...             trainer.should_stop = True
        >>> StopAfter(3).on_fit_start(None)  # hooks not overridden do nothing
    """

    def on_fit_start(self, trainer):
        """Called once when ``fit`` begins, before the first epoch."""

    def on_train_epoch_start(self, trainer, epoch):
        """Called before the first batch of ``epoch`` (epochs count from 1 over the trainer's life)."""

    def on_train_batch_start(self, trainer, batch, batch_index):
        """Called before each training batch's forward pass.

        Args:
            trainer: the Trainer.
            batch: the ``(X, y)`` pair the loader gave (before moving to the trainer's device).
            batch_index: the batch's position in this epoch, from 0.
        """

    def on_after_backward(self, trainer):
        """Called after ``loss.backward()``, before the optimizer step: every parameter's ``.grad`` is set."""

    def on_before_optimizer_step(self, trainer, optimizer):
        """Called just before ``optimizer.step()`` (after ``on_after_backward``): clip or inspect gradients here."""

    def on_train_batch_end(self, trainer, metrics):
        """Called after each training batch's optimizer step.

        Args:
            trainer: the Trainer.
            metrics: the step's metrics, a dict of plain Python values: ``step`` (global
                step, from 1), ``epoch``, ``loss``, ``accuracy``, ``batch_size``, ``live_nodes``
                (live graph nodes after the step) and ``memory_bytes`` (bytes of live tensors).
                Keys added here are kept in ``trainer.history.steps``.
        """

    def on_validation_end(self, trainer, epoch, metrics):
        """Called after validating at the end of ``epoch``; ``metrics`` is ``{"loss", "accuracy"}``."""

    def on_train_epoch_end(self, trainer, epoch, metrics):
        """Called when ``epoch`` is complete (after its validation, if any).

        ``metrics`` is the epoch's metrics (``epoch``, ``train_loss``, ``train_accuracy``,
        ``val_loss``, ``val_accuracy``, ``seconds``, ``steps``); by now ``trainer.epoch`` counts
        this epoch, so saving a checkpoint here resumes at the next one.
        """

    def on_fit_end(self, trainer):
        """Called once when ``fit`` finishes normally (also after an early stop)."""

    def on_exception(self, trainer, error):
        """Called when ``fit`` is about to re-raise ``error``; release resources here."""


HOOKS = (
    "on_fit_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_validation_end",
    "on_train_epoch_end",
    "on_fit_end",
    "on_exception",
)
