"""Checkpoint files: nested state (dicts, lists, numbers, arrays) in one ``.npz``, written atomically.

Arrays go into the archive as ``array_0``, ``array_1``, ...; everything else goes into a JSON
blob (``__state__``, the manifest) in which each array is a ``{"array": "array_<n>"}``
placeholder. Loading needs no pickle, so a checkpoint cannot run code, and reads only the
entries the manifest names, each checked against its declared size before it is read.

Writing goes to a temporary file ``.<name>.<pid>.<random>.tmp`` in the same folder, is
fsync'ed, then ``os.replace``d over the target: a crash mid-write leaves the previous checkpoint
whole, and the next successful save removes temporary files that writers which died left
behind. A replaced checkpoint keeps its permission bits; a new one gets the umask's default.
"""
import json
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from ..io import atomic_write
from .base import Callback

FORMAT = "needle-trainer-checkpoint"
VERSION = 1
_STATE_KEY = "__state__"
_MAX_DEFLATE_RATIO = 1100  # deflate cannot expand more than about 1032:1


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be read (truncated, corrupt, or not a checkpoint)."""


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` atomically (temporary file, fsync, ``os.replace``).

    Args:
        path: the checkpoint file (any name; ``.npz`` is customary). Its folder must exist.
        state: nested dicts (any str/int keys), lists, tuples, None, bools, numbers, strings,
            and arrays (numpy arrays or scalars, or anything with ``.numpy()``: Tensor, NDArray).

    Raises:
        TypeError: a value that cannot be saved (nothing is written).
        OSError (FileNotFoundError, PermissionError, ...): the file cannot be written; the
            message names ``path``.

    Example:
        >>> import tempfile, os, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "state.npz")
        >>> save_checkpoint(path, {"step": 3, "weights": np.ones(2, dtype=np.float32)})
        >>> loaded = load_checkpoint(path)
        >>> loaded["step"], loaded["weights"].tolist()
        (3, [1.0, 1.0])
    """
    path = Path(path)
    arrays = {}
    try:
        blob = json.dumps({"format": FORMAT, "version": VERSION, "state": _encode(state, arrays)})
    except RecursionError:
        raise ValueError("cannot checkpoint a state nested this deeply (or one that contains itself)") from None
    arrays[_STATE_KEY] = np.frombuffer(blob.encode("utf-8"), dtype=np.uint8)
    with atomic_write(path, "wb", what="checkpoint") as stream:
        np.savez(stream, **arrays)


def load_checkpoint(path):
    """Read the state that ``save_checkpoint`` wrote to ``path`` (arrays come back as numpy).

    Only the arrays the state refers to are read, each after checking that its declared size
    fits its header; nothing is unpickled.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is truncated, corrupt, or not a trainer checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}: check the path, or save one first with trainer.save_checkpoint({str(path)!r})"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            blob = _read_entry(archive, _STATE_KEY)
            if blob.dtype != np.uint8 or blob.ndim != 1:
                raise ValueError(f"{_STATE_KEY} is {blob.dtype} of shape {blob.shape}, not bytes")
            document = json.loads(blob.tobytes().decode("utf-8"))
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                found = document.get("format") if isinstance(document, dict) else None
                raise ValueError(f"format {found!r}, expected {FORMAT!r}")
            if document.get("version") != VERSION:
                raise ValueError(f"version {document.get('version')!r}, this code reads version {VERSION}")
            arrays = {name: _read_entry(archive, name) for name in _array_names(document["state"])}
        return _decode(document["state"], arrays)
    except RecursionError:
        raise CheckpointError(
            f"{path} is not a readable trainer checkpoint: its state is nested too deeply to be one "
            f"needle wrote. Load an earlier checkpoint or delete it and train again."
        ) from None
    except MemoryError:
        raise
    except Exception as error:
        raise CheckpointError(
            f"{path} is not a readable trainer checkpoint ({type(error).__name__}: {_without_pickle_advice(error)}); "
            f"it may be truncated or written by another program. Load an earlier checkpoint or delete it and train again."
        ) from error


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
            raise ValueError(f"entry {name!r} uses npy format {version}, which checkpoints never use")
        if dtype.hasobject:
            raise ValueError(f"entry {name!r} holds Python objects; a checkpoint holds numbers only")
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
            raise TypeError("cannot checkpoint an array of Python objects; use numeric arrays")
        name = f"array_{len(arrays)}"
        arrays[name] = value
        return {"array": name}
    raise TypeError(f"cannot checkpoint a value of type {type(value).__name__}: {str(value)[:80]}")


def _encode_key(key):
    if isinstance(key, (str, int)) and not isinstance(key, bool):
        return key
    if isinstance(key, np.integer):
        return int(key)
    raise TypeError(f"checkpoint dict keys must be str or int, got {type(key).__name__} {key!r}")


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


class Checkpoint(Callback):
    """Save the trainer to ``path`` at the end of every ``every``-th epoch (and when fit ends).

    Args:
        path: the checkpoint file, replaced atomically each time.
        every: save every this many epochs.

    Example:
        >>> callback = Checkpoint("model.npz", every=2)
        >>> callback.every
        2
    """

    def __init__(self, path, every=1):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"Checkpoint every must be a positive int; got every={every!r}")
        self.path = path
        self.every = every

    def on_train_epoch_end(self, trainer, epoch, metrics):
        if epoch % self.every == 0:
            trainer.save_checkpoint(self.path)

    def on_fit_end(self, trainer):
        if trainer.epoch % self.every != 0:
            trainer.save_checkpoint(self.path)
