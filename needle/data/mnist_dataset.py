"""MNIST from its gzipped IDX files: ``parse_mnist`` and ``MNISTDataset``.

Bad files raise ``MNISTFormatError`` (a ``ValueError``) that names the file and
what was wrong, never a garbage array.
"""

import gzip
import os
import struct
import zlib

import numpy as np

from .dataset import Dataset

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
IMAGE_SIDE = 28
_REFETCH_HINT = "Replace it with the original file (delete it and call needle.data.mnist() to download)."


class MNISTFormatError(ValueError):
    """A file is not a valid gzipped MNIST IDX file, or the pair does not match."""


def _read_gzip(path):
    """Return the decompressed bytes of ``path``, raising MNISTFormatError on bad gzip."""
    try:
        with gzip.open(path, "rb") as stream:
            return stream.read()
    except gzip.BadGzipFile as error:
        raise MNISTFormatError(
            f"{path} is not gzip data ({error}); MNIST files must be the original gzipped "
            f"IDX files (*-ubyte.gz). {_REFETCH_HINT}"
        ) from error
    except (EOFError, zlib.error) as error:
        raise MNISTFormatError(
            f"{path}: the gzip stream is damaged or truncated ({error}). {_REFETCH_HINT}"
        ) from error


def _read_idx(path, expected_magic, dim_count):
    """Parse one IDX file into (dims, uint8 payload) after checking magic and size."""
    data = _read_gzip(path)
    kind = "image" if expected_magic == IMAGE_MAGIC else "label"
    header_size = 4 + 4 * dim_count
    if len(data) < 4:
        raise MNISTFormatError(
            f"{path}: truncated, expected at least {header_size} header bytes, found {len(data)}. {_REFETCH_HINT}"
        )
    magic = int.from_bytes(data[:4], "big")
    if magic != expected_magic:
        raise MNISTFormatError(
            f"{path}: magic number {magic}, expected {expected_magic} for an IDX {kind} file "
            f"(image files have 2051, label files 2049; are the two filenames swapped?)"
        )
    if len(data) < header_size:
        raise MNISTFormatError(
            f"{path}: truncated, expected {header_size} header bytes, found {len(data)}. {_REFETCH_HINT}"
        )
    dims = struct.unpack(">" + "I" * dim_count, data[4:header_size])
    expected_size = header_size + int(np.prod(dims))
    if len(data) != expected_size:
        state = "truncated" if len(data) < expected_size else "too long"
        raise MNISTFormatError(
            f"{path}: {state}, the header {dims} implies {expected_size} bytes, found {len(data)}. "
            f"{_REFETCH_HINT}"
        )
    return dims, np.frombuffer(data, dtype=np.uint8, offset=header_size)


def parse_mnist(image_filename, label_filename):
    """Read MNIST images and labels from gzipped IDX files (the course's hw0 function).

    Args:
        image_filename: path to an ``*-images-idx3-ubyte.gz`` file.
        label_filename: path to the matching ``*-labels-idx1-ubyte.gz`` file.

    Returns:
        ``(X, y)``: ``X`` float32 of shape (N, 784) with values in [0, 1]
        (pixel / 255), ``y`` uint8 of shape (N,).

    Raises:
        MNISTFormatError: wrong magic number, truncated or non-gzip file, wrong
            image size, or image and label counts that differ.

    Example:
        >>> from needle.data import mnist
        >>> X, y = parse_mnist(mnist().test_images, mnist().test_labels)
        >>> X.shape, X.dtype, y[:3]
        ((10000, 784), dtype('float32'), array([7, 2, 1], dtype=uint8))
    """
    (count, rows, cols), pixels = _read_idx(image_filename, IMAGE_MAGIC, 3)
    if (rows, cols) != (IMAGE_SIDE, IMAGE_SIDE):
        raise MNISTFormatError(
            f"{image_filename}: images are {rows}x{cols}, expected {IMAGE_SIDE}x{IMAGE_SIDE} for MNIST"
        )
    (label_count,), labels = _read_idx(label_filename, LABEL_MAGIC, 1)
    if label_count != count:
        raise MNISTFormatError(
            f"image and label counts differ: {image_filename} has {count} images but "
            f"{label_filename} has {label_count} labels; pass files from the same split (train or t10k)"
        )
    images = pixels.reshape(count, rows * cols).astype(np.float32)
    images /= 255.0
    return images, labels.copy()


class MNISTDataset(Dataset):
    """MNIST as ``(image, label)`` pairs: by default, as the course, each image a flat row of 784
    float32 values in [0, 1]; with ``flat=False``, a 28 x 28 x 1 image (height, width, channels).

    An int index gives one image and a uint8 label; a slice or integer index array gives a
    batch, (B, 784) or (B, 28, 28, 1), and (B,) labels, made by one reshape (a view). A flat
    row feeds ``nn.Linear(784, ...)`` as it is, so the course's ``epoch`` functions work
    unchanged; image-shaped items suit convolutional models (``examples/mnist_models.py``
    reshapes either layout to NCHW). Transforms, when set, run per sample and always see a
    28 x 28 x 1 image; with ``flat=True`` each result is flattened back to 784 values.

    Args:
        image_filename: gzipped IDX image file.
        label_filename: gzipped IDX label file.
        transforms: optional list of per-image transforms (see ``needle.data.transforms``).
        flat: True (default, the course's layout) for rows of 784 values; False for 28 x 28 x 1 images.

    Example:
        >>> from needle.data import mnist
        >>> files = mnist()
        >>> dataset = MNISTDataset(files.test_images, files.test_labels)
        >>> image, label = dataset[0]
        >>> image.shape, int(label), len(dataset)
        ((784,), 7, 10000)
        >>> dataset[0:4][0].shape
        (4, 784)
        >>> MNISTDataset(files.test_images, files.test_labels, flat=False)[0:4][0].shape
        (4, 28, 28, 1)
    """

    supports_array_index = True

    def __init__(self, image_filename, label_filename, transforms=None, flat=True):
        for name, value in (("image_filename", image_filename), ("label_filename", label_filename)):
            if not isinstance(value, (str, bytes, os.PathLike)):
                raise TypeError(
                    f"MNISTDataset {name} must be the path of a gzipped IDX file (e.g. "
                    f"needle.data.mnist().train_images); got {name}={value!r}"
                )
        if not isinstance(flat, bool):
            raise TypeError(
                f"MNISTDataset flat must be True (rows of 784 values, the course's layout) or False "
                f"(28 x 28 x 1 images); got flat={flat!r}"
            )
        super().__init__(transforms)
        self.flat = flat
        self.images, self.labels = parse_mnist(image_filename, label_filename)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        images, labels = self.images[index], self.labels[index]
        if images.ndim == 1:
            return self._item(images), labels
        if self.transforms:
            return np.stack([self._item(image) for image in images]), labels
        return self._layout(images), labels

    def _item(self, row):
        """One image from its row of 784 values, through the transforms, in this dataset's layout."""
        if not self.transforms:
            return row if self.flat else row.reshape(IMAGE_SIDE, IMAGE_SIDE, 1)
        image = self.apply_transforms(row.reshape(IMAGE_SIDE, IMAGE_SIDE, 1))
        return np.asarray(image).reshape(IMAGE_SIDE * IMAGE_SIDE) if self.flat else image

    def _layout(self, rows):
        return rows if self.flat else rows.reshape(-1, IMAGE_SIDE, IMAGE_SIDE, 1)

    def as_arrays(self):
        """``(images, labels)`` without transforms, images (N, 784) or, with ``flat=False``, (N, 28, 28, 1); else None."""
        if self.transforms:
            return None
        return self._layout(self.images), self.labels
