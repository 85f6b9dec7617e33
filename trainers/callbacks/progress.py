"""``ProgressBar``: one tqdm bar per epoch showing loss, accuracy, live graph nodes and memory."""
import sys

from .base import Callback


class ProgressBar(Callback):
    """A tqdm bar per epoch on stderr; its postfix shows the epoch's running loss and accuracy,
    the live graph nodes and the memory of live tensors after the latest step.

    The bar is redrawn every ``every`` steps, not every step: formatting a postfix costs far
    more than a small training step's bookkeeping should.

    Args:
        every: steps between updates of the bar and its postfix.
        file: where to draw (default: ``sys.stderr`` at the start of each epoch).

    Example:
        >>> ProgressBar(every=50).every
        50
    """

    def __init__(self, every=20, file=None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"ProgressBar every must be a positive int; got every={every!r}")
        self.every = every
        self.file = file
        self.bar = None
        self._reset_sums()

    def _reset_sums(self):
        self._samples = self._loss_sum = self._correct_sum = 0.0
        self._pending = 0

    def on_train_epoch_start(self, trainer, epoch):
        from tqdm import tqdm

        self._reset_sums()
        self.bar = tqdm(
            total=trainer.batches_per_epoch,
            desc=f"epoch {epoch}",
            unit="batch",
            file=self.file if self.file is not None else sys.stderr,
            dynamic_ncols=True,
            leave=True,
        )

    def on_train_batch_end(self, trainer, record):
        size = record["batch_size"]
        self._samples += size
        self._loss_sum += record["loss"] * size
        self._correct_sum += record["accuracy"] * size
        self._pending += 1
        if self._pending >= self.every:
            self._show(record)

    def _show(self, record):
        """Advance the bar by the pending steps and write the postfix."""
        samples = self._samples or 1.0
        self.bar.set_postfix_str(
            f"loss={self._loss_sum / samples:.4f} acc={self._correct_sum / samples:.2%} "
            f"nodes={record['live_nodes']} mem={record['memory_bytes'] / 2**20:.1f}MB",
            refresh=False,
        )
        self.bar.update(self._pending)
        self._pending = 0

    def on_train_epoch_end(self, trainer, epoch, metrics):
        if self.bar is None:
            return
        if self._pending and trainer.history.steps:
            self._show(trainer.history.steps[-1])
        if metrics.get("val_loss") is not None:
            self.bar.set_postfix_str(
                f"{self.bar.postfix}, val_loss={metrics['val_loss']:.4f} val_acc={metrics['val_accuracy']:.2%}",
                refresh=False,
            )
        self._close()

    def on_exception(self, trainer, error):
        self._close()

    def _close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
