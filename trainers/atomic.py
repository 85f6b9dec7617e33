"""``atomic_write``: every file the trainers write is replaced whole or not at all.

The data goes to a temporary file in the target's folder, is flushed and fsync'ed, then
``os.replace``-d over the target (atomic on POSIX and Windows). A crash, a full disk or a
Ctrl-C mid-write leaves the previous file whole and no temporary file behind.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w", **open_options: Any) -> Iterator[IO[Any]]:
    """Open a stream whose contents replace ``path`` only when the ``with`` block succeeds.

    Args:
        path: the file to write; its folder must exist.
        mode: ``"w"`` for text, ``"wb"`` for bytes.
        **open_options: passed to ``open`` (e.g. ``newline=""`` for the csv module).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "notes.txt"
        >>> with atomic_write(path) as stream:
        ...     _ = stream.write("whole or nothing")
        >>> path.read_text()
        'whole or nothing'
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb'; got mode={mode!r}")
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, _mode_for(path))  # mkstemp makes 0600; give the file its usual mode
        with os.fdopen(descriptor, mode, **open_options) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    fsync_folder(path.parent)


def _mode_for(path: Path) -> int:
    """The replaced file's permission bits, or what ``open`` would give a new file."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_UMASK


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # NOTE: read once at import; os.umask can only be read by setting it


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable where the platform allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
