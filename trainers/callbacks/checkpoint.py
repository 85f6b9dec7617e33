"""Checkpoint files: the trainer's state in one ``.npz``, written atomically, read without pickle.

The format is needle's own saved-state file (``needle.serialization``, what ``ndl.save`` writes):
arrays as ``.npy`` entries, everything else in a JSON manifest. Writing goes to a temporary file
``.<name>.<pid>.<random>.tmp`` in the same folder, is fsync'ed, then ``os.replace``d over the
target: a crash mid-write leaves the previous checkpoint whole, and the next successful save
removes temporary files that writers which died left behind. A replaced checkpoint keeps its
permission bits; a new one gets the umask's default.
"""
from needle import serialization

from .base import Callback


class CheckpointError(serialization.StateFileError):
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
    serialization.save(state, path, what="checkpoint")


def load_checkpoint(path):
    """Read the state that ``save_checkpoint`` wrote to ``path`` (arrays come back as numpy).

    Only the arrays the state refers to are read, each after checking that its declared size
    fits its header; nothing is unpickled.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is truncated, corrupt, or not a trainer checkpoint.
    """
    return serialization.load(
        path,
        what="trainer checkpoint",
        error=CheckpointError,
        missing=f"no checkpoint at {path}: check the path, or save one first with trainer.save_checkpoint({str(path)!r})",
    )


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
