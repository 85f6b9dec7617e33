"""Locate, verify and (if needed) download the four MNIST files: ``mnist()``.

Search order: the ``root`` argument, ``$NEEDLE_DATA``, the copy shipped inside
the package (``needle/_data/mnist/``, present in every install: checkout, editable
or wheel), then the user cache (``$XDG_CACHE_HOME/needle/mnist`` or
``~/.cache/needle/mnist``). The first two are tried as is and with a ``mnist/``
subfolder. A download (only when no place has the files) is all or nothing: a
failure removes what it fetched and the folders it made.
"""

import dataclasses
import gzip
import hashlib
import os
import sys
import tempfile
import urllib.request
from pathlib import Path

FILENAMES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
# NOTE: MD5 digests of the DECOMPRESSED files, so a re-gzipped copy still verifies.
CHECKSUMS = {
    "train-images-idx3-ubyte.gz": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte.gz": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte.gz": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte.gz": "27ae3e4e09519cfbb04c329615203637",
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
_FIX_HINT = (
    "Fix: set NEEDLE_DATA=/dir/with/the/four/files, or pass needle.data.mnist(root=...), "
    "or allow download=True on a machine with internet access."
)
_verified = {}  # (resolved path, mtime_ns, size) -> True once its MD5 matched


class MNISTChecksumError(ValueError):
    """A file's MD5 (of its decompressed bytes) differs from the published one."""


@dataclasses.dataclass(frozen=True)
class MNISTFiles:
    """Paths of the four MNIST files (``pathlib.Path`` each)."""

    train_images: Path
    train_labels: Path
    test_images: Path
    test_labels: Path


def _packaged_data_dir() -> Path:
    """The MNIST copy shipped inside the ``needle`` package (package data in the wheel)."""
    return Path(__file__).resolve().parents[1] / "_data" / "mnist"


def _cache_dir() -> Path:
    """The user cache folder for MNIST downloads."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "needle" / "mnist"


def _decompressed_md5(path):
    """MD5 hex digest of the gunzipped contents of ``path``."""
    digest = hashlib.md5()
    with gzip.open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_mnist_file(path: "str | os.PathLike[str]") -> None:
    """Check that an MNIST file's decompressed MD5 matches the published digest.

    The result is remembered per (path, modification time, size) for the
    life of the process, so re-checking an unchanged file is free.

    Args:
        path: one of the four MNIST files, named as published (the name picks
            the expected digest).

    Raises:
        MNISTChecksumError: the digest differs, or the file is not valid gzip.
        ValueError: the file name is not one of the four MNIST names.

    Example:
        >>> from needle.data import mnist
        >>> verify_mnist_file(mnist().test_labels)
    """
    path = Path(path)
    expected = CHECKSUMS.get(path.name)
    if expected is None:
        raise ValueError(f"{path}: not an MNIST file name; expected one of {sorted(CHECKSUMS)}")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _verified:
        return
    try:
        actual = _decompressed_md5(path)
    except (OSError, EOFError) as error:
        raise MNISTChecksumError(
            f"{path}: cannot be decompressed to check its MD5 ({error}); delete it and call "
            f"needle.data.mnist() to download a fresh copy"
        ) from error
    if actual != expected:
        raise MNISTChecksumError(
            f"{path}: MD5 of the decompressed data is {actual}, expected {expected}; the file is "
            f"corrupt or not the original MNIST file. Delete it and call needle.data.mnist() to "
            f"download a fresh copy"
        )
    _verified[key] = True


def _candidate_dirs(root):
    """(description, folder) pairs in search order; folder None for an unset $NEEDLE_DATA."""
    places = []
    if root is not None:
        places += [("root argument", Path(root)), ("root argument", Path(root) / "mnist")]
    env = os.environ.get("NEEDLE_DATA")
    if env:
        places += [("$NEEDLE_DATA", Path(env)), ("$NEEDLE_DATA", Path(env) / "mnist")]
    else:
        places.append(("$NEEDLE_DATA", None))
    places += [("package data", _packaged_data_dir()), ("user cache", _cache_dir())]
    return places


def _files_in(folder):
    """MNISTFiles for ``folder`` if all four files exist there, else None."""
    paths = {field: folder / name for field, name in FILENAMES.items()}
    if all(path.is_file() for path in paths.values()):
        return MNISTFiles(**paths)
    return None


def _download_file(name: str, folder: Path) -> "list[str]":
    """Fetch ``name`` into ``folder`` from the first mirror whose copy verifies; return failures."""
    failures = []
    for mirror in MIRRORS:
        url = mirror + name
        handle, temp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    out.write(chunk)
            actual = _decompressed_md5(temp_name)
            if actual != CHECKSUMS[name]:
                raise MNISTChecksumError(f"MD5 {actual}, expected {CHECKSUMS[name]}")
            os.replace(temp_name, folder / name)
            return []
        except (OSError, EOFError, ValueError) as error:  # URLError is an OSError
            failures.append(f"{url}: {error}")
        finally:
            if os.path.exists(temp_name):
                os.unlink(temp_name)
    return failures


def _download(folder):
    """Download every missing MNIST file into ``folder``; return failure lines.

    All or nothing: if any file fails, the files this call fetched and the folders it
    made are removed again, so a failed download leaves the disk as it found it.
    """
    made = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    fetched, failures = [], []
    for name in FILENAMES.values():
        if (folder / name).is_file():
            continue
        print(f"needle: downloading MNIST {name} into {folder}", file=sys.stderr)
        file_failures = _download_file(name, folder)
        failures += file_failures
        if file_failures:
            break
        fetched.append(folder / name)
    if failures:
        for path in fetched:
            path.unlink(missing_ok=True)
        for parent in made:  # innermost first
            try:
                parent.rmdir()
            except OSError:  # not empty: something else put files there meanwhile
                break
    return failures


def mnist(
    root: "str | os.PathLike[str] | None" = None, download: bool = True, verify: bool = True
) -> MNISTFiles:
    """Find the four MNIST files, downloading them into the user cache if needed.

    Args:
        root: optional folder to look in first (the files directly in it, or in
            ``root/mnist``).
        download: if no place has all four files, fetch them from public mirrors
            into the cache (checksummed before being renamed into place).
        verify: check each found file's MD5 (cached per file within the process).

    Returns:
        MNISTFiles with ``train_images``, ``train_labels``, ``test_images``,
        ``test_labels`` paths.

    Raises:
        FileNotFoundError: no place has the files and download is off or failed;
            the message lists every place looked in.
        MNISTChecksumError: a found file does not match its published MD5.

    Example:
        >>> files = mnist()
        >>> files.train_labels.name
        'train-labels-idx1-ubyte.gz'
    """
    places = _candidate_dirs(root)
    for _, folder in places:
        files = None if folder is None else _files_in(folder)
        if files is not None:
            if verify:
                for path in dataclasses.astuple(files):
                    verify_mnist_file(path)
            return files
    looked = "\n".join(
        f"  - {description}: {'(not set)' if folder is None else folder}" for description, folder in places
    )
    message = f"MNIST files {sorted(CHECKSUMS)} not found together in any of:\n{looked}\n"
    if not download:
        raise FileNotFoundError(message + f"Downloading is off (download=False).\n{_FIX_HINT}")
    cache = _cache_dir()
    failures = _download(cache)
    files = _files_in(cache)
    if files is None or failures:
        reasons = "\n".join(f"  - {line}" for line in failures)
        raise FileNotFoundError(
            message + f"Downloading into {cache} failed on every mirror:\n{reasons}\n{_FIX_HINT}"
        )
    return files
