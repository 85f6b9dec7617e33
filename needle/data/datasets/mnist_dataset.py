"""The course's module path ``needle.data.datasets.mnist_dataset``: ``MNISTDataset``, ``parse_mnist``.

They are defined in :mod:`needle.data.mnist_dataset`.
"""
from ..mnist_dataset import MNISTDataset, parse_mnist

__all__ = ["MNISTDataset", "parse_mnist"]
