"""``StepLog``: every StepRecord as a row of a CSV or JSON-lines file, streamed as the run goes.

Nothing is kept in memory; the rows go through ``trainers.io.RowStream``.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from ..io import CSV_ROWS, RowStream, row_format_for
from .records import FIELDS, StepRecord, csv_columns, csv_row


class StepLog:
    """Appends one row per step to ``path``: CSV for ``.csv``, JSON lines for ``.jsonl``/``.json``.

    The file is not touched until the first row (or ``resume``): making a monitor never destroys
    a file that a resumed run still needs. A run's first row starts the file afresh (atomically);
    in a ``Trainer`` that loaded a checkpoint at step N, ``resume(N, ...)`` keeps the rows of
    iterations ``0 .. N-1`` and the log goes on at iteration N, so the file equals an
    uninterrupted run's. Every row is written through at once (one unbuffered ``write`` of a
    whole line), so the file is complete up to the last step while the run goes on.

    Example:
        >>> import os, tempfile
        >>> from trainers.monitor.records import StepRecord
        >>> path = os.path.join(tempfile.mkdtemp(), "steps.jsonl")
        >>> log = StepLog(path)
        >>> log.write(StepRecord(0, 1, 1, 0, 1, 0, 0, {"cpu": 4}, 0, 0, 0, 0.5))
        >>> log.close()
        >>> with open(path) as handle:
        ...     len(handle.readlines())
        1
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        row_format = row_format_for(path, "log_path")
        folder = Path(path).parent
        if not folder.is_dir():  # refused now, not at the first step of a run
            raise FileNotFoundError(
                errno.ENOENT,
                f"log_path {os.fspath(path)}: the folder {folder} does not exist; create it first "
                f"(os.makedirs({str(folder)!r}, exist_ok=True))",
            )
        self.path = path
        self.format = row_format.name
        columns = csv_columns() if row_format is CSV_ROWS else FIELDS
        self._rows = RowStream(path, columns, row_format, key="iteration", what="step log")
        self._started = False
        self._iteration_offset = 0  # added to a StepRecord's iteration: the steps before this monitor's first

    def resume(self, global_step: int, records_seen: int) -> None:
        """Continue the log of a trainer at ``global_step`` whose monitor has ``records_seen``
        records: keep the rows before iteration ``global_step`` (a fresh file at step 0 when
        this log has written nothing yet), and number the next record ``global_step``."""
        if global_step == 0 and not self._started:
            self._rows.start()
        else:
            self._rows.start(keep=global_step - 1)
        self._started = True
        self._iteration_offset = global_step - records_seen

    def write(self, record: StepRecord) -> None:
        if not self._started:
            self._rows.start()
            self._started = True
        else:
            self._rows.reopen()  # closed at the end of a fit: a later run appends
        row = csv_row(record) if self.format == "csv" else record.as_dict()
        if self._iteration_offset:
            row["iteration"] += self._iteration_offset
        self._rows.append([row])

    def close(self) -> None:
        self._rows.close()
