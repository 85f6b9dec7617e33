"""needle.data: datasets, transforms, the DataLoader and MNIST (course names).

``needle.data.mnist()`` locates (or downloads) the MNIST files; the dataset and
parser live in ``mnist_dataset``, the locator in ``mnist_files`` (no module is
named ``mnist``, so ``needle.data.mnist`` is always the function).
"""

from .dataloader import DataLoader
from .dataset import Dataset, NDArrayDataset
from .datasets.cifar10_dataset import CIFAR10Dataset
from .mnist_dataset import MNISTDataset, MNISTFormatError, parse_mnist
from .mnist_files import MNISTChecksumError, MNISTFiles, mnist, verify_mnist_file
from .transforms import RandomCrop, RandomFlipHorizontal, Transform
from . import data_basic, data_transforms, datasets  # noqa: E402  (the course's module paths)
from .datasets import Corpus, Dictionary, batchify, get_batch  # noqa: F401

__all__ = [
    "CIFAR10Dataset",
    "DataLoader",
    "Dataset",
    "NDArrayDataset",
    "MNISTDataset",
    "MNISTFormatError",
    "parse_mnist",
    "MNISTChecksumError",
    "MNISTFiles",
    "mnist",
    "verify_mnist_file",
    "RandomCrop",
    "RandomFlipHorizontal",
    "Transform",
    "Corpus",
    "Dictionary",
    "batchify",
    "get_batch",
]
