"""Loggers: callbacks that write a run's metrics to files as training goes (Lightning's idea).

``CSVLogger(log_dir)`` writes ``steps.csv`` and ``epochs.csv``; ``JSONLinesLogger(log_dir)``
writes ``steps.jsonl`` and ``epochs.jsonl``. A step row has the global ``step``, ``epoch``,
``loss``, ``accuracy``, ``lr``, ``batch_size``, ``live_nodes`` (graph nodes alive after the step),
``memory_bytes`` (bytes of live tensors), ``host_rss`` (the process's resident memory, when the
trainer has a MemoryMonitor) and ``time`` (seconds since ``fit`` began). An epoch row has the
trainer's epoch metrics (``train_loss``, ``train_accuracy``, ``val_loss``, ``val_accuracy``,
``seconds``, ``steps``) plus ``step``, ``lr`` and the epoch's ``peak_live_nodes`` and
``peak_memory_bytes``.

How the files are written: a fit that starts from step 0 creates each file afresh with an atomic
replace (the header only, for CSV), so a previous run's file is never half overwritten; a fit
that continues a trainer (after ``load_checkpoint``) appends to the files, first dropping (again
by an atomic replace) any rows past the trainer's step and epoch, which a run that went on after
that checkpoint had written: the files then match the resumed history. Each row is appended
with one ``write`` of whole lines, so a reader (``tail -f``, pandas) mid-run sees complete rows,
and the files are fsync'ed at the end of every epoch and of ``fit``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..io import CSV_ROWS, JSON_LINES, RowFormat, RowStream
from .base import Callback

STEP_COLUMNS = ("step", "epoch", "loss", "accuracy", "lr", "batch_size", "live_nodes", "memory_bytes",
                "host_rss", "time")
EPOCH_COLUMNS = ("epoch", "step", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr", "seconds",
                 "steps", "peak_live_nodes", "peak_memory_bytes")


class Logger(Callback):
    """Base class of loggers: turns the trainer's hooks into step and epoch rows in two files.

    A subclass names its two files (``step_file``, ``epoch_file``) and their ``row_format``
    (``trainers.io.CSV_ROWS`` or ``JSON_LINES``); ``trainers.io.RowStream`` writes the rows.

    Args:
        log_dir: folder for the files (created if missing).
        every_n_steps: write every n-th step row (epoch rows are always written).

    Attributes:
        step_path, epoch_path: the two files' paths.
    """

    step_file = "steps"
    epoch_file = "epochs"
    row_format: RowFormat = CSV_ROWS

    def __init__(self, log_dir: str | os.PathLike[str], every_n_steps: int = 1) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"{type(self).__name__} every_n_steps must be a positive int; got {every_n_steps!r}")
        self.log_dir = Path(log_dir)
        self.every_n_steps = every_n_steps
        self.step_path = self.log_dir / self.step_file
        self.epoch_path = self.log_dir / self.epoch_file
        self._steps = RowStream(self.step_path, STEP_COLUMNS, self.row_format, key="step", what="step log")
        self._epochs = RowStream(self.epoch_path, EPOCH_COLUMNS, self.row_format, key="epoch", what="epoch log")
        self._started = 0.0
        self._peaks = (0, 0)

    def header(self, columns: tuple) -> str:
        """The text a new file starts with (the column names for CSV)."""
        return self.row_format.header(columns)

    def format_rows(self, rows: list, columns: tuple) -> str:
        """Whole lines of text for ``rows`` (dicts), in the file's format."""
        return self.row_format.format_rows(rows, columns)

    def parse_rows(self, text: str) -> list:
        """The rows (dicts) of a file's text."""
        return self.row_format.parse_rows(text)

    # ---- hooks --------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any) -> None:
        self.close()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fresh = trainer.global_step == 0
        self._steps.start(keep=None if fresh else trainer.global_step)
        self._epochs.start(keep=None if fresh else trainer.epoch)
        self._started = time.perf_counter()
        self._peaks = (0, 0)

    def on_train_epoch_start(self, trainer: Any, epoch: int) -> None:
        self._peaks = (0, 0)

    def on_train_batch_end(self, trainer: Any, metrics: dict) -> None:
        self._peaks = (max(self._peaks[0], metrics["live_nodes"]), max(self._peaks[1], metrics["memory_bytes"]))
        if metrics["step"] % self.every_n_steps:
            return
        row = dict(metrics, lr=_learning_rate(trainer), host_rss=_host_rss(trainer),
                   time=time.perf_counter() - self._started)
        self._append(self._steps, row)

    def on_train_epoch_end(self, trainer: Any, epoch: int, metrics: dict) -> None:
        row = dict(metrics, step=trainer.global_step, lr=_learning_rate(trainer),
                   peak_live_nodes=self._peaks[0], peak_memory_bytes=self._peaks[1])
        self._append(self._epochs, row)
        self._steps.sync()
        self._epochs.sync()

    def on_fit_end(self, trainer: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, error: BaseException) -> None:
        self.close()

    def close(self) -> None:
        """fsync and close the files (safe to call twice)."""
        self._steps.close()
        self._epochs.close()

    def _append(self, rows, row):
        if not rows.is_open:
            raise RuntimeError(f"{type(self).__name__}: {rows.path} is not open; the logger writes only during fit")
        rows.append([row])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.log_dir)!r})"


class CSVLogger(Logger):
    """Write ``steps.csv`` and ``epochs.csv`` in ``log_dir``, one row per step and per epoch.

    Missing values (``val_loss`` without a validation loader, ``host_rss`` without a monitor)
    are empty cells. Columns are ``STEP_COLUMNS`` and ``EPOCH_COLUMNS``.

    Example:
        >>> import csv, tempfile, numpy as np, needle as ndl
        >>> from needle.data import DataLoader, NDArrayDataset
        >>> from trainers import Trainer
        >>> X = np.random.randn(32, 2).astype(np.float32); y = (X[:, 0] > 0).astype(np.uint8)
        >>> model = ndl.nn.Linear(2, 2)
        >>> logger = CSVLogger(tempfile.mkdtemp())
        >>> trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=False,
        ...                   progress=False, callbacks=[logger])
        >>> _ = trainer.fit(DataLoader(NDArrayDataset(X, y), batch_size=8), epochs=2)
        >>> with open(logger.step_path, newline="") as stream:
        ...     rows = list(csv.DictReader(stream))
        >>> len(rows), rows[-1]["step"], rows[-1]["epoch"], rows[-1]["lr"]
        (8, '8', '2', '0.1')
    """

    step_file = "steps.csv"
    epoch_file = "epochs.csv"
    row_format = CSV_ROWS


class JSONLinesLogger(Logger):
    """Write ``steps.jsonl`` and ``epochs.jsonl`` in ``log_dir``: one JSON object per line.

    Each object has every column (``null`` where missing) and also any keys other callbacks
    added to the step's metrics.

    Example:
        >>> import json, tempfile
        >>> logger = JSONLinesLogger(tempfile.mkdtemp())
        >>> logger.format_rows([{"step": 1, "loss": 0.5}], ("step", "loss", "lr"))
        '{"step": 1, "loss": 0.5, "lr": null}\\n'
    """

    step_file = "steps.jsonl"
    epoch_file = "epochs.jsonl"
    row_format = JSON_LINES


def _learning_rate(trainer):
    lr = getattr(trainer.optimizer, "lr", None)
    return float(lr) if isinstance(lr, (int, float)) else None


def _host_rss(trainer):
    monitor = getattr(trainer, "monitor", None)
    step_history = getattr(monitor, "history", None)
    return step_history[-1].host_rss if step_history else None
