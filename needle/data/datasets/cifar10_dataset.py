"""CIFAR-10 from the standard ``cifar-10-batches-py`` folder, read without letting a file run code.

The batch files are Python pickles. ``pickle.load`` would call whatever a file names, so they are
read by :class:`RestrictedUnpickler`, which knows only what the format holds (dicts, lists, bytes,
str, ints and numpy arrays of numbers) and refuses everything else before it is called.
"""
import os
import pickle
from typing import List, Optional

import numpy as np

from ..dataset import Dataset

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
IMAGE_SHAPE = (3, 32, 32)
CLASSES = 10
_DOWNLOAD = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


class CIFAR10FormatError(ValueError):
    """A CIFAR-10 batch file is missing, malformed, or asks the unpickler for something it refuses."""


def _array_of_numbers(array, source):
    if not isinstance(array, np.ndarray) or type(array) is not np.ndarray or array.dtype.hasobject:
        raise CIFAR10FormatError(f"{source}: holds a numpy array of Python objects, which a CIFAR-10 batch never does")
    return array


# numpy's own array-unpickling function (numpy.core or numpy._core, whichever this numpy has).
_NUMPY_RECONSTRUCT = np.zeros(0).__reduce__()[0]


def _reconstruct(subtype, shape, dtype):
    """numpy's array unpickling entry point, for plain ndarrays only."""
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError(f"array subtype {subtype!r} refused: only numpy.ndarray is allowed")
    return _NUMPY_RECONSTRUCT(np.ndarray, shape, dtype)


def _frombuffer(buffer, dtype, shape, order):
    """numpy's protocol-5 array entry point, for arrays of numbers only."""
    dtype = _dtype(dtype)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _dtype(spec, align=False, copy=False):
    dtype = np.dtype(spec, align, copy)
    if dtype.hasobject:
        raise pickle.UnpicklingError(f"dtype {dtype} refused: it holds Python objects")
    return dtype


def _scalar(dtype, data=None):
    """A numpy scalar of numbers (labels saved as numpy ints)."""
    dtype = _dtype(dtype)
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _encode(text, encoding):
    """Python 3's protocol-2 spelling of bytes: ``_codecs.encode(text, 'latin1')``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode{(type(text).__name__, encoding)!r} refused: only latin1 text")
    return text.encode("latin1")


# What a CIFAR-10 pickle may name, mapped to safe versions. Python 2's files name numpy.core;
# numpy 2 writes numpy._core; protocol 5 writes _frombuffer; Python 3's protocol 2 uses _codecs.
_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _encode,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only the containers and numpy arrays of a CIFAR-10 batch.

    Any other global (a function, a class) is refused with :class:`CIFAR10FormatError` before
    anything is called, so a crafted file cannot run code.
    """

    def __init__(self, file, source: str):
        super().__init__(file, encoding="bytes")
        self.source = source

    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise CIFAR10FormatError(
                f"{self.source}: the file asks to load {module}.{name}, which a CIFAR-10 batch never holds; "
                "refused (a pickle can run code: only dicts, lists, bytes, str, ints and numpy arrays of "
                "numbers are loaded). Replace the file with one from the original archive."
            ) from None


def load_batch(path: str):
    """``(images uint8 (N, 3072), labels int (N,))`` from one CIFAR-10 batch file, read safely.

    Raises:
        CIFAR10FormatError: the file is not a CIFAR-10 batch, or names anything outside the format.
    """
    try:
        with open(path, "rb") as stream:
            batch = RestrictedUnpickler(stream, source=path).load()
    except CIFAR10FormatError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as error:
        reason = f"{type(error).__name__}: {error}"
        raise CIFAR10FormatError(f"{path}: not a readable CIFAR-10 batch pickle ({reason})") from error
    if not isinstance(batch, dict):
        raise CIFAR10FormatError(f"{path}: a CIFAR-10 batch is a dict, this file holds a {type(batch).__name__}")
    fields = {key.decode("latin1") if isinstance(key, bytes) else key: value for key, value in batch.items()}
    missing = [key for key in ("data", "labels") if key not in fields]
    if missing:
        raise CIFAR10FormatError(f"{path}: the batch has no {missing} entry (keys: {sorted(map(str, fields))})")
    data = _array_of_numbers(fields["data"], path)
    labels = fields["labels"]
    labels = np.asarray(labels if not isinstance(labels, np.ndarray) else _array_of_numbers(labels, path))
    pixels = int(np.prod(IMAGE_SHAPE))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != pixels:
        raise CIFAR10FormatError(f"{path}: data must be uint8 of shape (N, {pixels}), got {data.dtype} {data.shape}")
    if labels.shape != (len(data),) or labels.dtype.kind not in "iu" or np.any((labels < 0) | (labels >= CLASSES)):
        raise CIFAR10FormatError(
            f"{path}: labels must be {len(data)} ints in [0, {CLASSES}), got {labels.dtype} of shape {labels.shape}"
        )
    return data, labels


def _locate(base_folder: str, names) -> List[str]:
    paths = [os.path.join(base_folder, name) for name in names]
    missing = [name for name, path in zip(names, paths) if not os.path.isfile(path)]
    if missing:
        hint = ""
        nested = os.path.join(base_folder, "cifar-10-batches-py")
        if os.path.isdir(nested):
            hint = f" It holds a cifar-10-batches-py folder: pass base_folder={nested!r}."
        raise FileNotFoundError(
            f"CIFAR-10 files {missing} not found in {base_folder!r}. base_folder must be the extracted "
            f"cifar-10-batches-py folder, holding data_batch_1 ... data_batch_5 and test_batch "
            f"(from {_DOWNLOAD}; needle does not download it).{hint}"
        )
    return paths


class CIFAR10Dataset(Dataset):
    """CIFAR-10 as ``(image, label)`` pairs, images (3, 32, 32) float32 in [0, 1] (course semantics).

    ``X`` holds every image, shape (N, 3, 32, 32) (pixel / 255); ``y`` the labels, uint8 (N,).
    An int index gives one image and its label; a slice or an integer array gives a batch
    (B, 3, 32, 32). Transforms take and return one H x W x C image (as
    ``needle.data.transforms`` do), so each image is moved to (32, 32, 3) for them and back.

    Args:
        base_folder: the ``cifar-10-batches-py`` folder.
        train: the five training batches (50,000 images) if True, else ``test_batch`` (10,000).
        p: kept for the course's signature; unused there as here (transforms carry their own
            probabilities, e.g. ``RandomFlipHorizontal(p)``).
        transforms: optional list of per-image transforms.

    Raises:
        FileNotFoundError: a batch file is missing (the message names the expected layout).
        CIFAR10FormatError: a file is not a CIFAR-10 batch, or names anything a batch never holds.

    Example:
        >>> import tempfile, pickle, numpy as np
        >>> folder = tempfile.mkdtemp()
        >>> batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 7]}
        >>> with open(f"{folder}/test_batch", "wb") as f:
        ...     pickle.dump(batch, f)
        >>> test = CIFAR10Dataset(folder, train=False)
        >>> image, label = test[1]
        >>> len(test), image.shape, image.dtype, int(label)
        (2, (3, 32, 32), dtype('float32'), 7)
    """

    supports_array_index = True

    def __init__(self, base_folder: str, train: bool, p: Optional[float] = 0.5, transforms: Optional[List] = None):
        super().__init__(transforms)
        self.p = p
        batches = [load_batch(path) for path in _locate(base_folder, TRAIN_FILES if train else TEST_FILES)]
        images = np.concatenate([data for data, _ in batches])
        self.X = images.reshape((-1,) + IMAGE_SHAPE).astype(np.float32)
        self.X /= 255.0
        self.y = np.concatenate([labels for _, labels in batches]).astype(np.uint8)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index):
        images, labels = self.X[index], self.y[index]
        if not self.transforms:
            return images, labels
        if images.ndim == 3:
            return self._transformed(images), labels
        return np.stack([self._transformed(image) for image in images]), labels

    def _transformed(self, image):
        return np.ascontiguousarray(self.apply_transforms(image.transpose(1, 2, 0)).transpose(2, 0, 1))

    def as_arrays(self):
        """``(X, y)`` when there are no transforms (see ``Dataset.as_arrays``), else None."""
        return None if self.transforms else (self.X, self.y)
