"""``ProgressBar``: one tqdm bar per epoch showing loss, accuracy, live graph nodes and memory.

In a terminal it is tqdm's text bar on stderr. In a notebook kernel it is tqdm's widget where
ipywidgets is installed, else the same text as one display that updates in place; either way the
notebook's saved output holds the epoch's final bar once, and no stderr block.
"""
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
        self._display = None
        self._reset_sums()

    def _reset_sums(self):
        self._samples = self._loss_sum = self._correct_sum = 0.0
        self._pending = 0

    def on_train_epoch_start(self, trainer, epoch):
        self._reset_sums()
        options = dict(total=trainer.batches_per_epoch, desc=f"epoch {epoch}", unit="batch", leave=True)
        kernel = self.file is None and _in_notebook_kernel()
        if not kernel:
            from tqdm.std import tqdm

            self.bar = tqdm(file=self.file if self.file is not None else sys.stderr, dynamic_ncols=True, **options)
            self._display = None
            return
        from IPython.display import display

        from tqdm import notebook

        if notebook.IProgress is not None:  # ipywidgets is there (tqdm.notebook's own check)
            self.bar = notebook.tqdm(display=False, **options)
            self._display = display(self.bar.container, display_id=True)
            self._shown = lambda: self.bar.container
        else:  # no ipywidgets: tqdm's text, drawn into one display updated in place
            from tqdm.std import tqdm

            self.bar = tqdm(file=_Discard(), **options)
            self._shown = lambda: {"text/plain": str(self.bar)}
            self._display = display(self._shown(), raw=True, display_id=True)

    def on_train_batch_end(self, trainer, metrics):
        size = metrics["batch_size"]
        self._samples += size
        self._loss_sum += metrics["loss"] * size
        self._correct_sum += metrics["accuracy"] * size
        self._pending += 1
        if self._pending >= self.every:
            self._show(metrics)

    def _show(self, metrics):
        """Advance the bar by the pending steps and write the postfix."""
        samples = self._samples or 1.0
        self.bar.set_postfix_str(
            f"loss={self._loss_sum / samples:.4f} acc={self._correct_sum / samples:.2%} "
            f"nodes={metrics['live_nodes']} mem={metrics['memory_bytes'] / 2**20:.1f}MB",
            refresh=False,
        )
        self.bar.update(self._pending)
        self._pending = 0
        self._refresh_display()

    def _refresh_display(self):
        """In a notebook, re-send the display: its saved text is the bar as it stands now."""
        if getattr(self, "_display", None) is not None:
            shown = self._shown()
            if isinstance(shown, dict):
                self._display.update(shown, raw=True)
            else:
                self._display.update(shown)

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
            self._refresh_display()
            self.bar = None
            self._display = None


class _Discard:
    """A stream that drops what tqdm writes (the notebook's display shows the bar instead)."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _in_notebook_kernel():
    """True inside a Jupyter kernel (tqdm.autonotebook's own test: an IPKernelApp is configured)."""
    IPython = sys.modules.get("IPython")
    if IPython is None:
        return False
    shell = IPython.get_ipython()
    return shell is not None and "IPKernelApp" in shell.config
