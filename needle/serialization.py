"""``save``/``load``: nested state (dicts, lists, numbers, arrays) in one ``.npz``, without pickle.

Arrays go into the archive as ``array_0``, ``array_1``, ...; everything else goes into a JSON
blob (``__state__``, the manifest) in which each array is a ``{"array": "array_<n>"}``
placeholder. Loading needs no pickle, so a file cannot run code, and reads only the entries the
manifest names, each checked against its declared size before it is read. Writing is atomic
(``needle.atomic_file``): a crash mid-write leaves the previous file whole. The trainers'
checkpoints are files of this format too.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from .atomic_file import atomic_write

FORMAT = "needle-state"
READABLE_FORMATS = (FORMAT, "needle-trainer-checkpoint")  # the second: checkpoints before ndl.save existed
VERSION = 1
_STATE_KEY = "__state__"
_MAX_DEFLATE_RATIO = 1100  # deflate cannot expand more than about 1032:1


class StateFileError(ValueError):
    """A file exists but cannot be read as saved state (truncated, corrupt, or another format)."""


def save(obj: Any, path: str | os.PathLike[str], *, what: str = "file") -> None:
    """Write ``obj`` (e.g. ``model.state_dict()``) to ``path`` atomically, without pickle.

    Args:
        obj: nested dicts (str/int keys), lists, tuples, None, bools, numbers, strings and
            arrays (numpy arrays or scalars, or anything with ``.numpy()``: Tensor, NDArray).
        path: the file (``.npz`` is customary); its folder must exist.
        what: what the file is, for error messages.

    Raises:
        TypeError: a value that cannot be saved (nothing is written).
        OSError: the file cannot be written; the message names ``path``.

    Example:
        >>> import os, tempfile, needle as ndl
        >>> model = ndl.nn.Linear(2, 1)
        >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
        >>> ndl.save(model.state_dict(), path)
        >>> copy = ndl.nn.Linear(2, 1)
        >>> copy.load_state_dict(ndl.load(path))
        >>> bool((copy.weight.numpy() == model.weight.numpy()).all())
        True
    """
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    try:
        blob = json.dumps({"format": FORMAT, "version": VERSION, "state": _encode(obj, arrays)})
    except RecursionError:
        raise ValueError(f"cannot save a state nested this deeply (or one that contains itself) to {path}") from None
    arrays[_STATE_KEY] = np.frombuffer(blob.encode("utf-8"), dtype=np.uint8)
    with atomic_write(path, "wb", what=what) as stream:
        np.savez(stream, **arrays)


def load(path: str | os.PathLike[str], *, what: str = "file", error: type[StateFileError] = StateFileError,
         missing: str | None = None) -> Any:
    """Read what ``save`` wrote to ``path``; arrays come back as numpy arrays.

    Only the arrays the state refers to are read, each after checking that its declared size
    fits its header; nothing is unpickled.

    Args:
        path: the file.
        what, error, missing: for callers with their own file kind (the trainers'
            checkpoints): the words for the file, the error class, and the message when it is missing.

    Raises:
        FileNotFoundError: no file at ``path``.
        StateFileError (a ValueError): the file is truncated, corrupt, or not one ``save`` wrote.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            missing or f"no {what} at {path}: check the path, or write one first with ndl.save(obj, {str(path)!r})"
        )
    unreadable = f"{path} is not a readable {what}"
    try:
        with zipfile.ZipFile(path) as archive:
            blob = _read_entry(archive, _STATE_KEY)
            if blob.dtype != np.uint8 or blob.ndim != 1:
                raise ValueError(f"{_STATE_KEY} is {blob.dtype} of shape {blob.shape}, not bytes")
            document = json.loads(blob.tobytes().decode("utf-8"))
            if not isinstance(document, dict) or document.get("format") not in READABLE_FORMATS:
                found = document.get("format") if isinstance(document, dict) else None
                raise ValueError(f"format {found!r}, expected {FORMAT!r}")
            if document.get("version") != VERSION:
                raise ValueError(f"version {document.get('version')!r}, this code reads version {VERSION}")
            arrays = {name: _read_entry(archive, name) for name in _array_names(document["state"])}
        return _decode(document["state"], arrays)
    except RecursionError:
        raise error(
            f"{unreadable}: its state is nested too deeply to be one needle wrote. "
            f"Load an earlier file, or delete it and save again."
        ) from None
    except MemoryError:
        raise
    except Exception as problem:
        raise error(
            f"{unreadable} ({type(problem).__name__}: {_without_pickle_advice(problem)}); "
            f"it may be truncated or written by another program. Load an earlier file, or delete it and save again."
        ) from problem


def _read_entry(archive, name):
    """The array stored as ``name`` in the zip ``archive``, after checking its declared sizes."""
    try:
        info = archive.getinfo(name + ".npy")
    except KeyError:
        raise ValueError(f"the archive has no entry {name!r}, which the state refers to") from None
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise ValueError(f"entry {name!r} declares {info.file_size} bytes but stores {info.compress_size}")
    if info.file_size > max(info.compress_size, 1) * _MAX_DEFLATE_RATIO:
        raise ValueError(f"entry {name!r} declares {info.file_size} bytes from {info.compress_size} compressed")
    with archive.open(info) as stream:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = npy_format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = npy_format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"entry {name!r} uses npy format {version}, which needle never writes")
        if dtype.hasobject:
            raise ValueError(f"entry {name!r} holds Python objects; saved state holds numbers only")
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if info.file_size != stream.tell() + size:
            raise ValueError(
                f"entry {name!r} declares {info.file_size} bytes, its header ({dtype}, shape {shape}) implies "
                f"{stream.tell() + size}"
            )
        array = np.empty(shape, dtype=dtype, order="F" if fortran_order else "C")
        view = memoryview(array.reshape(-1, order="A").view(np.uint8)) if size else memoryview(b"")
        done = 0
        while done < size:
            count = stream.readinto(view[done:])
            if not count:
                raise EOFError(f"entry {name!r} ends after {done} of {size} bytes")
            done += count
    return array


def _without_pickle_advice(error):
    """The error's message, unless it advises unpickling (never advice to give about a file)."""
    message = str(error)
    return "the archive holds Python objects" if "pickle" in message.lower() else message


def _array_names(value):
    """The array names the encoded ``value`` refers to (iteratively: the nesting may be deep)."""
    names, pending = [], [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            if "array" in item and len(item) == 1:
                if not isinstance(item["array"], str):
                    raise ValueError(f"an array placeholder names {item['array']!r}")
                names.append(item["array"])
            else:
                pending.extend(item.values())
    return names


def _encode(value, arrays):
    """``value`` as JSON-ready data, moving arrays into ``arrays`` under fresh names."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {"dict": [[_encode_key(key), _encode(item, arrays)] for key, item in value.items()]}
    if isinstance(value, list):
        return [_encode(item, arrays) for item in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode(item, arrays) for item in value]}
    if isinstance(value, np.generic):
        return {"scalar": _encode(value.item(), arrays), "dtype": value.dtype.str}
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()  # Tensor, NDArray
    elif hasattr(value, "get") and not isinstance(value, np.ndarray):
        value = value.get()  # a CuPy array
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("cannot save an array of Python objects; use numeric arrays")
        name = f"array_{len(arrays)}"
        arrays[name] = value
        return {"array": name}
    raise TypeError(f"cannot save a value of type {type(value).__name__}: {str(value)[:80]}")


def _encode_key(key):
    if isinstance(key, (str, int)) and not isinstance(key, bool):
        return key
    if isinstance(key, np.integer):
        return int(key)
    raise TypeError(f"saved dict keys must be str or int, got {type(key).__name__} {key!r}")


def _decode(value, arrays):
    """The inverse of ``_encode``."""
    if isinstance(value, list):
        return [_decode(item, arrays) for item in value]
    if not isinstance(value, dict):
        return value
    if "dict" in value:
        return {key: _decode(item, arrays) for key, item in value["dict"]}
    if "tuple" in value:
        return tuple(_decode(item, arrays) for item in value["tuple"])
    if "scalar" in value:
        dtype = np.dtype(value["dtype"])
        if dtype.hasobject:
            raise ValueError("a scalar of Python objects")
        return dtype.type(value["scalar"])
    return arrays[value["array"]]
