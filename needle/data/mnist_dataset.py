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
    """MNIST as ``(image, label)`` pairs, images 28 x 28 x 1 float32 in [0, 1].

    An int index gives an image of shape (28, 28, 1) and a uint8 label; a slice
    or integer index array gives a batch of shape (B, 28, 28, 1) and (B,)
    labels, made by one reshape. Transforms, when set, run per sample.

    Args:
        image_filename: gzipped IDX image file.
        label_filename: gzipped IDX label file.
        transforms: optional list of per-image transforms (see ``needle.data.transforms``).

    Example:
        >>> from needle.data import mnist
        >>> files = mnist()
        >>> dataset = MNISTDataset(files.test_images, files.test_labels)
        >>> image, label = dataset[0]
        >>> image.shape, int(label), len(dataset)
        ((28, 28, 1), 7, 10000)
        >>> dataset[0:4][0].shape
        (4, 28, 28, 1)
    """

    supports_array_index = True

    def __init__(self, image_filename, label_filename, transforms=None):
        for name, value in (("image_filename", image_filename), ("label_filename", label_filename)):
            if not isinstance(value, (str, bytes, os.PathLike)):
                raise TypeError(
                    f"MNISTDataset {name} must be the path of a gzipped IDX file (e.g. "
                    f"needle.data.mnist().train_images); got {name}={value!r}"
                )
        super().__init__(transforms)
        self.images, self.labels = parse_mnist(image_filename, label_filename)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        images, labels = self.images[index], self.labels[index]
        if images.ndim == 1:
            return self.apply_transforms(images.reshape(IMAGE_SIDE, IMAGE_SIDE, 1)), labels
        batch = images.reshape(-1, IMAGE_SIDE, IMAGE_SIDE, 1)
        if self.transforms:
            batch = np.stack([self.apply_transforms(image) for image in batch])
        return batch, labels

    def as_arrays(self):
        """``(images (N, 28, 28, 1), labels (N,))`` without transforms, else None."""
        if self.transforms:
            return None
        return self.images.reshape(-1, IMAGE_SIDE, IMAGE_SIDE, 1), self.labels
