"""Every step's record, streamed to a CSV or JSON-lines file as the run goes (nothing kept in memory)."""
import csv
import json
import os

from .records import StepRecord, csv_columns, csv_row

LOG_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


class StepLog:
    """Appends one line per step to ``path``: CSV for ``.csv``, JSON lines for ``.jsonl``/``.json``.

    Lines are written through Python's file buffer (a few KB at a time) and flushed on
    ``close()``; the file is readable while the run goes on, up to the last buffered lines.

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

    def __init__(self, path):
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        if suffix not in LOG_FORMATS:
            raise ValueError(
                f"log_path must end in .csv or .jsonl (.json, .ndjson) to choose the format; got log_path={path!r}"
            )
        self.path = path
        self.format = LOG_FORMATS[suffix]
        self._handle = open(path, "w", newline="" if self.format == "csv" else None)
        self._writer = None
        if self.format == "csv":
            self._writer = csv.DictWriter(self._handle, fieldnames=csv_columns())
            self._writer.writeheader()

    def write(self, record: StepRecord) -> None:
        if self._handle is None:  # closed at the end of a fit: a later run appends
            self._handle = open(self.path, "a", newline="" if self.format == "csv" else None)
            if self.format == "csv":
                self._writer = csv.DictWriter(self._handle, fieldnames=csv_columns())
        if self._writer is not None:
            self._writer.writerow(csv_row(record))
        else:
            self._handle.write(json.dumps(record.as_dict()) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
