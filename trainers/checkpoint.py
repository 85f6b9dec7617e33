"""Checkpoint files: nested state (dicts, lists, numbers, arrays) in one ``.npz``, written atomically.

Arrays go into the archive as ``array_0``, ``array_1``, ...; everything else goes into a JSON
blob (``__state__``) in which each array is a ``{"array": "array_<n>"}`` placeholder. Loading
needs no pickle, so a checkpoint cannot run code. Writing goes to a temporary file in the same
folder, is fsync'ed, then ``os.replace``d over the target: a crash mid-write leaves the previous
checkpoint whole.
"""
import json
import zipfile
from pathlib import Path

import numpy as np

from .atomic import atomic_write
from .callbacks import Callback

FORMAT = "needle-trainer-checkpoint"
VERSION = 1
_STATE_KEY = "__state__"


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be read (truncated, corrupt, or not a checkpoint)."""


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` atomically (temporary file, fsync, ``os.replace``).

    Args:
        path: the checkpoint file (any name; ``.npz`` is customary). Its folder must exist.
        state: nested dicts (any str/int keys), lists, tuples, None, bools, numbers, strings,
            and arrays (numpy arrays or scalars, or anything with ``.numpy()``: Tensor, NDArray).

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
    blob = json.dumps({"format": FORMAT, "version": VERSION, "state": _encode(state, arrays)})
    arrays[_STATE_KEY] = np.frombuffer(blob.encode("utf-8"), dtype=np.uint8)
    with atomic_write(path, "wb") as stream:
        np.savez(stream, **arrays)


def load_checkpoint(path):
    """Read the state that ``save_checkpoint`` wrote to ``path`` (arrays come back as numpy).

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
        with open(path, "rb") as stream, np.load(stream, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        document = json.loads(arrays.pop(_STATE_KEY).tobytes().decode("utf-8"))
        if document.get("format") != FORMAT:
            raise ValueError(f"format {document.get('format')!r}, expected {FORMAT!r}")
        if document.get("version") != VERSION:
            raise ValueError(f"version {document.get('version')!r}, this code reads version {VERSION}")
        return _decode(document["state"], arrays)
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise CheckpointError(
            f"{path} is not a readable trainer checkpoint ({type(error).__name__}: {error}); it may be "
            f"truncated or written by another program. Load an earlier checkpoint or delete it and train again."
        ) from error


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
        return np.dtype(value["dtype"]).type(value["scalar"])
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
