"""``MetricsHistory``: the trainer's metrics (``trainer.history``), one dict per step and per epoch.

Not to be confused with the monitor's ``StepHistory`` (``trainer.monitor.history``): that one keeps
the graph and memory counters of each step (``StepRecord``), within a fixed memory bound; this one
keeps what ``fit`` measured (loss, accuracy, ...) for the whole run, and is saved in checkpoints.
``History`` is the same class under its earlier name (Keras's and Lightning's word), kept for
existing code: ``trainers.History`` and ``trainers.trainer.History`` still work.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

from .io import CSV_ROWS, atomic_write, write_rows

__all__ = ["History", "MetricsHistory"]


class MetricsHistory:
    """What ``fit`` measured, as lists of dicts of plain Python values (``trainer.history``).

    ``steps``: one dict of metrics per training batch (``step``, ``epoch``, ``loss``, ``accuracy``,
    ``batch_size``, ``live_nodes``, ``memory_bytes``, and any key a callback adds). ``epochs``: one
    per epoch (``epoch``, ``train_loss``, ``train_accuracy``, ``val_loss``, ``val_accuracy``,
    ``seconds``, ``steps``); ``val_*`` are None without a validation loader.

    Export with ``to_csv(path, per="epochs")`` / ``to_csv(path, per="steps")`` or
    ``to_json(path)`` (both atomic); ``MetricsHistory.from_json(path)`` reads the JSON back.
    ``trainers.History`` is this class under its earlier name.

    Example:
        >>> import tempfile, os
        >>> history = MetricsHistory([{"step": 1, "epoch": 1, "loss": 0.5}], [{"epoch": 1, "train_loss": 0.5}])
        >>> path = os.path.join(tempfile.mkdtemp(), "history.json")
        >>> history.to_json(path)
        >>> MetricsHistory.from_json(path).steps
        [{'step': 1, 'epoch': 1, 'loss': 0.5}]
        >>> History is MetricsHistory
        True
    """

    def __init__(self, steps: Iterable[dict] | None = None, epochs: Iterable[dict] | None = None) -> None:
        self.steps = list(steps or [])
        self.epochs = list(epochs or [])

    def column(self, key: str, per: str = "steps") -> list:
        """One key of every entry, e.g. ``history.column("loss")`` or ``column("val_accuracy", per="epochs")``."""
        return [entry.get(key) for entry in getattr(self, per)]

    def state_dict(self) -> dict:
        return {"steps": [dict(entry) for entry in self.steps], "epochs": [dict(entry) for entry in self.epochs]}

    def to_csv(self, path: str | os.PathLike[str], per: str = "epochs") -> None:
        """Write the ``per="epochs"`` (default) or ``per="steps"`` dicts as CSV rows, atomically.

        Columns are every key, in the order first seen; a missing or None value is an empty cell.
        """
        if per not in ("steps", "epochs"):
            raise ValueError(f"MetricsHistory.to_csv per must be 'steps' or 'epochs'; got per={per!r}")
        entries = getattr(self, per)
        columns = list(dict.fromkeys(key for entry in entries for key in entry))
        write_rows(path, entries, columns, CSV_ROWS, what="history")

    def to_json(self, path: str | os.PathLike[str]) -> None:
        """Write ``{"steps": [...], "epochs": [...]}`` as JSON, atomically."""
        with atomic_write(path, "w", what="history", encoding="utf-8") as stream:
            json.dump(self.state_dict(), stream, indent=1)
            stream.write("\n")

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> "MetricsHistory":
        """Read a history written by ``to_json``.

        Raises:
            ValueError naming ``path`` when it is not UTF-8 JSON (e.g. truncated) or not the
            ``{"steps": [...], "epochs": [...]}`` that ``to_json`` writes.
        """
        try:
            with open(path, encoding="utf-8") as stream:
                document = json.load(stream)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            where = f" at line {error.lineno}, column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
            raise ValueError(
                f"MetricsHistory.from_json: {os.fspath(path)} is not valid JSON ({error}){where}; a truncated file "
                "(e.g. copied while being written) reads so: write it again with history.to_json(path)"
            ) from error
        entries = (document.get("steps"), document.get("epochs")) if isinstance(document, dict) else (None, None)
        if not all(isinstance(part, list) and all(isinstance(entry, dict) for entry in part) for part in entries):
            raise ValueError(
                f"MetricsHistory.from_json: {os.fspath(path)} is JSON but not a history: expected "
                '{"steps": [dicts], "epochs": [dicts]}, as history.to_json(path) writes'
            )
        return cls(*entries)

    def __repr__(self) -> str:
        return f"MetricsHistory({len(self.epochs)} epochs, {len(self.steps)} steps)"


History = MetricsHistory  # the earlier name, kept for existing code
