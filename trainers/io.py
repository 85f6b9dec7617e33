"""Files the trainers write: whole files replaced atomically, and the one row writer.

``atomic_write`` is needle's one atomic writer (``needle.atomic_file``): a crash, a full disk or
a Ctrl-C mid-write leaves the previous file whole. Every run log (``MetricsHistory.to_csv``, the
monitor's exports and step log, the CSV and JSON-lines loggers) goes through the row writer
below: ``RowFormat`` (``CSV_ROWS``, ``JSON_LINES``) turns rows into lines, ``write_rows`` writes
a whole file atomically, and ``RowStream`` appends row by row and, when a run resumes, first
trims the rows past the resumed step.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from needle.atomic_file import _naming_path, atomic_write

__all__ = ["CSV_ROWS", "JSON_LINES", "RowFormat", "RowStream", "atomic_write", "row_format_for", "write_rows"]


class RowFormat:
    """How rows (dicts) become lines of text, and back: the CSV and JSON-lines formats.

    Columns are fixed per file. In CSV a row has exactly those columns (extra keys are left
    out, a missing or None value is an empty cell). In JSON lines a row has every column (``null``
    where missing), then any extra keys of the row.

    Example:
        >>> CSV_ROWS.header(("step", "loss")) + CSV_ROWS.format_rows([{"step": 1, "loss": None}], ("step", "loss"))
        'step,loss\\n1,\\n'
        >>> JSON_LINES.format_rows([{"step": 1, "extra": 2}], ("step", "loss"))
        '{"step": 1, "loss": null, "extra": 2}\\n'
    """

    def __init__(self, name: str) -> None:
        if name not in ("csv", "jsonl"):
            raise ValueError(f"RowFormat name must be 'csv' or 'jsonl'; got name={name!r}")
        self.name = name

    def header(self, columns: Sequence[str]) -> str:
        """What a new file starts with: the column names for CSV, nothing for JSON lines."""
        return self.format_rows([dict(zip(columns, columns))], columns) if self.name == "csv" else ""

    def format_rows(self, rows: Iterable[dict], columns: Sequence[str]) -> str:
        """Whole lines of text for ``rows``, each ending in ``\\n``."""
        if self.name == "csv":
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
            writer.writerows(rows)  # NOTE: DictWriter writes a missing key and None alike, as ""
            return buffer.getvalue()
        lines = []
        for row in rows:
            ordered = {column: row.get(column) for column in columns}
            ordered.update((key, value) for key, value in row.items() if key not in ordered)
            lines.append(json.dumps(ordered) + "\n")
        return "".join(lines)

    def parse_rows(self, text: str) -> list:
        """The rows of a file's text (CSV values come back as strings, empty cells as ``""``)."""
        if self.name == "csv":
            return list(csv.DictReader(io.StringIO(text)))
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def __repr__(self) -> str:
        return f"RowFormat({self.name!r})"


CSV_ROWS = RowFormat("csv")
JSON_LINES = RowFormat("jsonl")
ROW_FORMATS = {".csv": CSV_ROWS, ".jsonl": JSON_LINES, ".json": JSON_LINES, ".ndjson": JSON_LINES}


def row_format_for(path: str | os.PathLike[str], argument: str = "path") -> RowFormat:
    """The format a file's suffix names: ``.csv``, or ``.jsonl`` (``.json``, ``.ndjson``) for JSON lines."""
    suffix = Path(path).suffix.lower()
    if suffix not in ROW_FORMATS:
        raise ValueError(
            f"{argument} must end in .csv or .jsonl (.json, .ndjson) to choose the format; got {argument}={os.fspath(path)!r}"
        )
    return ROW_FORMATS[suffix]


def write_rows(
    path: str | os.PathLike[str], rows: Iterable[dict], columns: Sequence[str], row_format: RowFormat,
    *, what: str = "file",
) -> None:
    """Write a whole file of rows (with the header for CSV), atomically: ``path`` is replaced
    whole or not at all, even if making a row fails halfway.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "rows.csv"
        >>> write_rows(path, [{"step": 1, "loss": 0.5}, {"step": 2}], ("step", "loss"), CSV_ROWS)
        >>> path.read_text()
        'step,loss\\n1,0.5\\n2,\\n'
    """
    with atomic_write(path, "w", what=what, newline="", encoding="utf-8") as stream:
        stream.write(row_format.header(columns))
        for row in rows:
            stream.write(row_format.format_rows([row], columns))


class RowStream:
    """A file of rows that grows one row at a time, safe to reopen when a run resumes.

    Nothing touches the file until ``start``. ``start()`` replaces it (atomically) with an empty
    one (the CSV header only); ``start(keep=...)`` keeps the rows that a resumed run still
    needs, those whose ``key`` column is at most ``keep``, replacing the file atomically only
    when something must go (later rows, a last line a killed writer left cut short, a CSV header
    that is not ``columns``), and then appends after them. Each ``append`` is one unbuffered
    ``write`` of whole lines, so a reader mid-run (``tail -f``, pandas) sees complete rows.

    Args:
        path: the file; its folder must exist when ``start`` runs.
        columns: the columns of every row.
        row_format: ``CSV_ROWS`` or ``JSON_LINES``.
        key: the column that orders rows (``"step"``, ``"epoch"``, ``"iteration"``), for ``keep``.
        what: what the file is, for error messages.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "steps.csv"
        >>> stream = RowStream(path, ("step", "loss"), CSV_ROWS)
        >>> stream.start(); stream.append([{"step": 1, "loss": 0.9}, {"step": 2, "loss": 0.7}]); stream.close()
        >>> stream.start(keep=1); stream.append([{"step": 2, "loss": 0.6}]); stream.close()
        >>> path.read_text()
        'step,loss\\n1,0.9\\n2,0.6\\n'
    """

    def __init__(
        self, path: str | os.PathLike[str], columns: Sequence[str], row_format: RowFormat, *, key: str = "step",
        what: str = "log",
    ) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self.row_format = row_format
        self.key = key
        self.what = what
        self._descriptor: int | None = None

    @property
    def is_open(self) -> bool:
        return self._descriptor is not None

    def start(self, keep: int | None = None) -> None:
        """Open for appending: a fresh file (``keep=None`` or no file yet), or the existing
        rows whose ``key`` is at most ``keep`` (the rest removed by an atomic replace)."""
        self.close()
        if keep is None or not self.path.exists():
            write_rows(self.path, [], self.columns, self.row_format, what=self.what)
        else:
            self._drop_rows_after(keep)
        self.reopen()

    def reopen(self) -> None:
        """Append after whatever the file holds now (after a ``close``); ``start`` first for a new run."""
        if self._descriptor is None:
            try:
                self._descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            except OSError as error:
                raise _naming_path(error, self.path, self.what) from error

    def append(self, rows: Iterable[dict]) -> None:
        """Write ``rows`` at the end of the file now (no buffering: the file holds them on return)."""
        if self._descriptor is None:
            raise RuntimeError(f"the {self.what} {self.path} is not open; call start() (or reopen()) first")
        data = self.row_format.format_rows(rows, self.columns).encode("utf-8")
        while data:  # one write of whole lines; loop only if the OS takes part of it
            data = data[os.write(self._descriptor, data):]

    def sync(self) -> None:
        """fsync what was appended (e.g. at the end of an epoch)."""
        if self._descriptor is not None:
            os.fsync(self._descriptor)

    def close(self) -> None:
        """fsync and close (safe to call twice)."""
        if self._descriptor is not None:
            descriptor, self._descriptor = self._descriptor, None
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    def _drop_rows_after(self, keep: int) -> None:
        data = self.path.read_bytes()
        # NOTE: a writer killed inside its one write() can leave the last line cut short; it is no
        # row (a cut "12,0.3" may read as step 1), so only whole lines count, and the file is rewritten.
        end_of_whole_lines = data.rfind(b"\n") + 1
        try:
            whole_lines = data[:end_of_whole_lines].decode("utf-8")
            rows = self.row_format.parse_rows(whole_lines)
        except (ValueError, csv.Error) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ValueError(
                f"cannot resume the {self.what} {self.path}: it is not a {self.row_format.name} file of rows "
                f"({error}); move it away (or delete it) and the run starts it afresh"
            ) from error
        kept = [row for row in rows if _ordinal(row.get(self.key)) is not None and _ordinal(row[self.key]) <= keep]
        torn = end_of_whole_lines != len(data)
        if len(kept) != len(rows) or torn or not whole_lines.startswith(self.row_format.header(self.columns)):
            write_rows(self.path, kept, self.columns, self.row_format, what=self.what)

    def __repr__(self) -> str:
        return f"RowStream({str(self.path)!r}, {self.row_format.name})"


def _ordinal(value: Any) -> int | None:
    """A row's step/epoch/iteration cell as an int, or None when it is empty or not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
