"""``TensorBoardLogger``: a callback that writes the run as TensorBoard event files.

The files are written by TensorBoard's own ``EventFileWriter`` (``pip install
'needle-dl[tensorboard]'``; TensorFlow is not needed) and read by ``tensorboard --logdir DIR``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .base import Callback

INSTALL_HINT = "pip install 'needle-dl[tensorboard]'"

# Tags written at every training step (x axis: the trainer's global step).
STEP_TAGS = ("train/loss", "train/accuracy", "train/lr", "graph/live_nodes", "memory/live_bytes",
             "memory/host_rss")
# Tags written at the end of every epoch, at the epoch's last global step.
EPOCH_TAGS = ("epoch/train_loss", "epoch/train_accuracy", "epoch/val_loss", "epoch/val_accuracy", "epoch/epoch")


def _tensorboard():
    """TensorBoard's writer and protocol buffers, or an ImportError naming the extra to install."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as error:
        raise ImportError(
            f"TensorBoardLogger writes through the tensorboard package, which is not installed ({error}); "
            f"install it with: {INSTALL_HINT}"
        ) from error
    return EventFileWriter, Event, SessionLog, Summary


class TensorBoardLogger(Callback):
    """Write TensorBoard event files in ``log_dir`` as training goes (like ``CSVLogger``).

    Every ``every_n_steps``-th step writes ``train/loss``, ``train/accuracy``, ``train/lr``,
    ``graph/live_nodes`` (graph nodes alive after the step), ``memory/live_bytes`` (bytes of
    live tensors) and ``memory/host_rss`` (the process's resident memory); every epoch writes
    ``epoch/train_loss``, ``epoch/train_accuracy``, ``epoch/val_loss`` and ``epoch/val_accuracy``
    (the last two with a validation loader) and ``epoch/epoch``. The x axis of every tag is the
    trainer's global step, as in Lightning. Each ``fit`` adds one event file; it starts with
    TensorBoard's restart marker (``SessionLog.START`` at the next step), so after a
    ``load_checkpoint`` TensorBoard drops what an earlier run wrote past the checkpoint's step.

    Args:
        log_dir: the folder of event files (created if missing): ``tensorboard --logdir log_dir``.
        every_n_steps: write every n-th step's scalars (epoch scalars are always written).

    Raises:
        ImportError: without the ``tensorboard`` package, naming ``pip install 'needle-dl[tensorboard]'``.

    Example:
        >>> import tempfile, numpy as np, needle as ndl
        >>> from needle.data import DataLoader, NDArrayDataset
        >>> from trainers import Trainer
        >>> X = np.random.randn(32, 2).astype(np.float32); y = (X[:, 0] > 0).astype(np.uint8)
        >>> model = ndl.nn.Linear(2, 2)
        >>> logger = TensorBoardLogger(tempfile.mkdtemp())
        >>> trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=False,
        ...                   progress=False, callbacks=[logger])
        >>> _ = trainer.fit(DataLoader(NDArrayDataset(X, y), batch_size=8), epochs=2)
        >>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        >>> events = EventAccumulator(str(logger.log_dir)); _ = events.Reload()
        >>> [event.step for event in events.Scalars("epoch/train_loss")]
        [4, 8]
    """

    def __init__(self, log_dir: str | os.PathLike[str], every_n_steps: int = 1) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"TensorBoardLogger every_n_steps must be a positive int; got {every_n_steps!r}")
        self._writer_class, self._event, self._session_log, self._summary = _tensorboard()
        self.log_dir = Path(log_dir)
        self.every_n_steps = every_n_steps
        self._writer = None
        self._host = None

    # ---- hooks --------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any) -> None:
        self.close()
        from ..monitor.memory import HostMemory

        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = self._writer_class(str(self.log_dir))
        self._host = HostMemory()
        restart = self._session_log(status=self._session_log.START)
        self._writer.add_event(self._event(wall_time=time.time(), step=trainer.global_step + 1, session_log=restart))

    def on_train_batch_end(self, trainer: Any, metrics: dict) -> None:
        if metrics["step"] % self.every_n_steps:
            return
        self._scalars(metrics["step"], {
            "train/loss": metrics["loss"],
            "train/accuracy": metrics["accuracy"],
            "train/lr": _learning_rate(trainer),
            "graph/live_nodes": metrics["live_nodes"],
            "memory/live_bytes": metrics["memory_bytes"],
            "memory/host_rss": self._host.rss(),
        })

    def on_train_epoch_end(self, trainer: Any, epoch: int, metrics: dict) -> None:
        self._scalars(trainer.global_step, {
            "epoch/train_loss": metrics["train_loss"],
            "epoch/train_accuracy": metrics["train_accuracy"],
            "epoch/val_loss": metrics.get("val_loss"),
            "epoch/val_accuracy": metrics.get("val_accuracy"),
            "epoch/epoch": epoch,
        })
        self._writer.flush()

    def on_fit_end(self, trainer: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, error: BaseException) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the event file (safe to call twice)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
        if self._host is not None:
            self._host.close()
            self._host = None

    # ---- internals ----------------------------------------------------------------------------
    def _scalars(self, step, values):
        """One event holding every value that is not None, at ``step``."""
        if self._writer is None:
            raise RuntimeError("TensorBoardLogger writes only during fit (its event file is opened by on_fit_start)")
        summary = self._summary(value=[
            self._summary.Value(tag=tag, simple_value=float(value)) for tag, value in values.items() if value is not None
        ])
        self._writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def __repr__(self) -> str:
        return f"TensorBoardLogger({str(self.log_dir)!r})"


def _learning_rate(trainer):
    lr = getattr(trainer.optimizer, "lr", None)
    return float(lr) if isinstance(lr, (int, float)) else None
