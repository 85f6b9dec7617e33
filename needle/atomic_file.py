"""``atomic_write``: every file needle and the trainers write is replaced whole or not at all.

The data goes to a temporary file in the target's folder, is flushed and fsync'ed, then
``os.replace``-d over the target (atomic on POSIX and Windows). A crash, a full disk or a
Ctrl-C mid-write leaves the previous file whole. Temporary files are named
``.<name>.<pid>.<hex>.tmp``; a process killed mid-write (``kill -9``) cannot remove its own, so
the next successful write of the same file removes those whose writer no longer runs.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", *, what: str = "file", **open_options: Any
) -> Iterator[IO[Any]]:
    """Open a stream whose contents replace ``path`` only when the ``with`` block succeeds.

    Args:
        path: the file to write; its folder must exist.
        mode: ``"w"`` for text, ``"wb"`` for bytes.
        what: what the file is, for error messages ("checkpoint", "plot", ...).
        **open_options: passed to ``open`` (e.g. ``newline=""`` for the csv module).

    Raises:
        OSError: of the original type, naming ``path`` and the fix (a missing or read-only
            folder), never only the temporary file.

    A replaced file keeps its permission bits; a new one gets what ``open`` would give it.

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
    descriptor, temporary = _create_temporary(path, what)
    try:
        with os.fdopen(descriptor, mode, **open_options) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise _naming_path(error, path, what) from error
        raise
    fsync_folder(path.parent)
    remove_stale_temporaries(path)


def _create_temporary(path: Path, what: str):
    """``(descriptor, name)`` of a new temporary file beside ``path``, with the mode ``path`` will keep."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None  # a new file: 0o666 less the umask, as open() gives
    except OSError as error:
        raise _naming_path(error, path, what) from error
    while True:
        temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            descriptor = os.open(temporary, flags, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as error:
            raise _naming_path(error, path, what) from error
    if mode is not None:
        with contextlib.suppress(OSError):  # e.g. a file system without permission bits
            os.chmod(temporary, mode)
    return descriptor, temporary


def _naming_path(error: OSError, path: Path, what: str) -> OSError:
    """``error`` again, as the same type, with a message about the user's ``path``."""
    folder = path.parent
    if isinstance(error, FileNotFoundError) and not folder.is_dir():
        reason = f"the folder {folder} does not exist; create it first (os.makedirs({str(folder)!r}, exist_ok=True))"
    elif isinstance(error, PermissionError):
        reason = f"no permission to write in {folder} (choose a writable folder, or change its permissions)"
    else:
        reason = error.strerror or str(error)
    renamed = type(error)(error.errno, f"cannot save the {what} {path}: {reason}")
    renamed.filename = str(path)
    return renamed


def remove_stale_temporaries(path: str | os.PathLike[str]) -> None:
    """Delete temporary files of ``path`` whose writer process no longer runs (POSIX only)."""
    if os.name != "posix":
        return  # no cheap, safe liveness check for a process id
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or not _process_is_gone(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):  # another save removed it first: harmless
            os.unlink(path.parent / name)


def _process_is_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours: a save in another thread may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, owned by someone else
    return False


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
